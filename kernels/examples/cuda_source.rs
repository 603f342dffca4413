//! Prints the CUDA C++ that cubecl's NVRTC path generates for the row kernel with given knobs,
//! without a GPU (to read what the compiler will see: vector widths, the math, the loops).
//!
//! `cargo run --release -p rmsnorm-silu-kernels --example cuda_source -- v8.l16.r8.u1.c3.plane.greg.m- [C] [fp8]`
//! `cargo run --release -p rmsnorm-silu-kernels --example cuda_source -- nvfp4 v8.l4.r32.b3.plane.m-.fast [C]`
//! `cargo run --release -p rmsnorm-silu-kernels --example cuda_source -- channels p128.g1.k96.v2[.pf][.one] [backward]`
//! (channels-first: position units, channel groups, channels cached per unit, positions per
//! vector, backward prefetch, one tile per cube; PTX SiLU)
//! `cargo run --release -p rmsnorm-silu-kernels --example cuda_source -- backward l16.r16.k1[.pf]`
//! (the row backward, bf16, vectors of 8: lanes per row, rows per cube, vectors per lane,
//! prefetch; PTX SiLU')
//! `cargo run --release -p rmsnorm-silu-kernels --example cuda_source -- conv_e4m3 [C_in] [kT]`
//! (the E4M3 implicit-GEMM convolution with the default knobs, kT x 3 x 3, bf16 out)
//! `cargo run --release -p rmsnorm-silu-kernels --example cuda_source -- wgmma_probe`
//! (one warpgroup's E4M3 `wgmma` m64n64k32 from shared memory; compile for sm_90a)
//! `cargo run --release -p rmsnorm-silu-kernels --example cuda_source -- conv_wgmma [knobs] [C_in] [kT] [norm]`
//! (the bf16 `wgmma` implicit-GEMM convolution, kT x 3 x 3; compile for sm_90a)

use std::sync::Arc;

use cubecl::ir::{
    DeviceIdentity, ElemType, FloatKind, HardwareProperties, MemoryDeviceProperties,
    features::Features,
};
use cubecl::prelude::*;
use cubecl_cpp::{shared::CompilationOptions, shared::CppCompiler, target::Cuda};
use cubecl_runtime::compiler::Compiler;
use rmsnorm_silu_kernels::channels::{
    ChannelsConfig, rms_norm_channels, rms_norm_channels_backward,
};
use rmsnorm_silu_kernels::forward::rms_norm_rows;
use rmsnorm_silu_kernels::knobs::LaneReduce;
use rmsnorm_silu_kernels::nvfp4::{
    Fp4Config, Fp4Knobs, Fp4Recipe, ScaleLayout, rms_norm_nvfp4_rows,
};
use rmsnorm_silu_kernels::params::Output;
use rmsnorm_silu_kernels::{Activation, Knobs};

fn properties() -> Arc<DeviceProperties> {
    Arc::new(DeviceProperties::new(
        Features::default(),
        MemoryDeviceProperties::new(u64::MAX, 256),
        HardwareProperties {
            load_width: 128,
            vector_register_count: None,
            plane_size_min: 32,
            plane_size_max: 32,
            max_bindings: 32,
            max_shared_memory_size: 232448,
            max_cube_count: (u32::MAX, u16::MAX as u32, u16::MAX as u32),
            max_units_per_cube: 1024,
            max_cube_dim: (1024, 1024, 64),
            num_streaming_multiprocessors: Some(132),
            num_tensor_cores: None,
            min_tensor_cores_dim: None,
            num_cpu_cores: None,
            last_level_cache_size: None,
            max_vector_size: VectorSize::MAX,
            cube_mma_reserved_shared_memory: 0,
        },
        cubecl::profile::TimingMethod::Device,
        DeviceIdentity {
            name: "offline".to_string(),
            fingerprint: "ptx_sm90".to_string(),
            physical: None,
        },
    ))
}

/// A `lanes x rows` cube, unchecked, 32-bit addresses.
fn cube_settings(lanes: u32, rows: u32) -> KernelSettings {
    KernelSettings::new(
        *CubeDim::new_2d(lanes, rows),
        ExecutionMode::Unchecked,
        AddressType::U32,
    )
}

/// Prints the CUDA C++ that cubecl generates for `definition`.
fn print_cuda(definition: KernelDefinition) {
    // The features cubecl's CUDA runtime turns on for sm_90 (scalars as a `__grid_constant__`
    // parameter, not a global buffer: the SASS reads them from the constant bank as on the
    // device).
    let mut options = CompilationOptions::default();
    options.supports_features.grid_constants = true;
    options.supports_features.fast_tanh = true;
    options.supports_features.clusters = true;
    options.supports_features.elect_sync = true;
    let source = CppCompiler::<Cuda>::default()
        .compile(definition, &options)
        .expect("compile")
        .source;
    println!("{source}");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "nvfp4") {
        nvfp4(&args[1..]);
        return;
    }
    if args.first().is_some_and(|a| a == "channels") {
        channels(&args[1..]);
        return;
    }
    if args.first().is_some_and(|a| a == "backward") {
        backward(&args[1..]);
        return;
    }
    if args.first().is_some_and(|a| a == "conv_e4m3") {
        conv_e4m3(&args[1..]);
        return;
    }
    if args.first().is_some_and(|a| a == "wgmma_probe") {
        wgmma_probe_source();
        return;
    }
    if args.first().is_some_and(|a| a == "conv_wgmma") {
        conv_wgmma(&args[1..]);
        return;
    }
    let knobs = Knobs::parse(args.first().map_or("v8.l16.r8.u1.c3.plane.greg.m-", |s| s))
        .unwrap_or_else(|e| panic!("{e}"));
    let channels: usize = args.get(1).map_or(384, |c| c.parse().expect("C"));
    let fp8 = args.get(2).is_some_and(|a| a == "fp8");
    let output = if fp8 { Output::Fp8E4M3 } else { Output::Input };
    let mut cfg = knobs.row_config_for(channels, Activation::Silu, output);
    // As `launch_forward_to` sets it for a CUDA device.
    cfg.saturating_cast = fp8;
    cfg.packed_fp8 = fp8;
    cfg.bf16_input = true;
    cfg.bf16_gamma = knobs.vector_size.is_multiple_of(2);
    cfg.scale_foldable = fp8;
    cfg.plane_width = 32;
    // As the launch sets it for a full grid (`m-`: one row group per cube).
    cfg.gamma_after_x = cfg.loads_gamma_after_x(knobs.max_cubes.is_none());
    let settings = cube_settings(knobs.lanes_per_row, knobs.rows_per_cube);
    let bf16 = ElemType::Float(FloatKind::BF16);
    let kernel = rms_norm_rows::RmsNormRows::new(
        settings,
        properties(),
        Arc::new(TargetProperties::default()),
        BufferCompilationArg { inplace: None },
        BufferCompilationArg { inplace: None },
        BufferCompilationArg { inplace: None },
        BufferCompilationArg { inplace: None },
        BufferCompilationArg { inplace: None },
        BufferCompilationArg { inplace: None },
        BufferCompilationArg { inplace: None },
        ComptimeOptionCompilationArg::None,
        ComptimeOptionCompilationArg::None,
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        knobs.vector_size,
        if cfg.prefetch || cfg.word_cache || cfg.bf16_gamma {
            knobs.vector_size / 2
        } else {
            1
        },
        if cfg.packed_fp8 {
            knobs.vector_size / 4
        } else {
            1
        },
        cfg,
        [
            bf16,
            bf16,
            if fp8 {
                ElemType::Float(FloatKind::E4M3)
            } else {
                bf16
            },
        ],
    );
    print_cuda(kernel.define());
}

/// The NVFP4 row kernel (TransformerEngine recipe, row-major scales, bf16 in) for given knobs.
fn nvfp4(args: &[String]) {
    let knobs = Fp4Knobs::parse(args.first().map_or("v8.l4.r32.b3.plane.m-.fast", |s| s))
        .unwrap_or_else(|e| panic!("{e}"));
    let channels: usize = args.get(1).map_or(384, |c| c.parse().expect("C"));
    let cached = knobs.caches_row(channels);
    let cfg = Fp4Config {
        vector_size: knobs.vector_size,
        lanes_per_row: knobs.lanes_per_row,
        rows_per_cube: knobs.rows_per_cube,
        rows_per_unit: knobs.rows_per_unit,
        blocks_per_lane: if cached { knobs.blocks_per_lane } else { 0 },
        lane_reduce: knobs.lane_reduce,
        activation: Activation::Silu,
        fast_math: knobs.fast_math,
        recipe: Fp4Recipe::TransformerEngine,
        layout: ScaleLayout::RowMajor,
        // As `launch_forward_nvfp4` sets them for bf16 on a CUDA device.
        // A full grid (`m-`) has one row group per cube.
        gamma_registers: knobs.gamma_in_registers(channels, knobs.max_cubes.is_none()),
        x_words: knobs.vector_size.is_multiple_of(2),
        gamma_words: knobs.vector_size.is_multiple_of(2),
        plane_width: 32,
        gamma_after_x: knobs.loads_gamma_after_x(channels, knobs.max_cubes.is_none()),
        raw_cache: knobs.raw_cache && cached,
        moderate_global_scale: true,
        // sm_90 with the PTX math (`RMSNORM_FP32_ENCODER=1`: the fp32 encoder, for comparison).
        pair_encoder: knobs.fast_math && std::env::var("RMSNORM_FP32_ENCODER").is_err(),
        gamma_shared: knobs.gamma_shared && cached,
        gamma_shared_after_x: knobs.fills_gamma_shared_after_x(channels, knobs.max_cubes.is_none()),
    };
    // Rows packed into planes: a plane along x, the planes along y (as the launch does).
    let settings = if cfg.packs_rows() {
        cube_settings(cfg.plane_width, knobs.rows_per_cube / cfg.rows_per_plane())
    } else {
        cube_settings(knobs.lanes_per_row, knobs.rows_per_cube)
    };
    let bf16 = ElemType::Float(FloatKind::BF16);
    let kernel = rms_norm_nvfp4_rows::RmsNormNvfp4Rows::new(
        settings,
        properties(),
        Arc::new(TargetProperties::default()),
        BufferCompilationArg { inplace: None },
        BufferCompilationArg { inplace: None },
        BufferCompilationArg { inplace: None },
        BufferCompilationArg { inplace: None },
        BufferCompilationArg { inplace: None },
        BufferCompilationArg { inplace: None },
        ComptimeOptionCompilationArg::None,
        ComptimeOptionCompilationArg::None,
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        (),
        knobs.vector_size,
        if cfg.x_words {
            knobs.vector_size / 2
        } else {
            1
        },
        cfg,
        [bf16, bf16, ElemType::Float(FloatKind::E4M3)],
    );
    print_cuda(kernel.define());
}

/// The number of a launch label's `<prefix><number>` part (`p128` in `p128.g1.k96.v2`).
fn label_field(label: &str, prefix: char) -> usize {
    label
        .split('.')
        .find_map(|part| part.strip_prefix(prefix)?.parse().ok())
        .unwrap_or_else(|| panic!("`{label}` needs a `{prefix}<number>` part"))
}

/// Whether a launch label has the part `name` (`pf` in `l16.r16.k1.pf`).
fn label_flag(label: &str, name: &str) -> bool {
    label.split('.').any(|part| part == name)
}

/// The row backward (bf16, vectors of 8 or `vN`) for a launch shape `lX.rY.kZ[.pf][.vN]`.
fn backward(args: &[String]) {
    use rmsnorm_silu_kernels::backward::{BackwardConfig, rms_norm_backward_rows};
    let label = args.first().map_or("l16.r16.k1.pf", |s| s);
    let field = |prefix| label_field(label, prefix);
    let flag = |name| label_flag(label, name);
    let (lanes, rows) = (field('l') as u32, field('r') as u32);
    // Elements per vector: `v<n>` in the label, else 8.
    let vector = label
        .split('.')
        .find_map(|part| part.strip_prefix('v')?.parse().ok())
        .unwrap_or(8usize);
    let cfg = BackwardConfig {
        lanes_per_row: lanes,
        rows_per_cube: rows,
        vectors_per_lane: field('k'),
        lane_reduce: if lanes <= 32 {
            LaneReduce::Plane
        } else {
            LaneReduce::Shared
        },
        activation: Activation::Silu,
        fast_math: true,
        prefetch: flag("pf"),
        plane_width: 32,
    };
    let bf16 = ElemType::Float(FloatKind::BF16);
    let buffer = || BufferCompilationArg { inplace: None };
    let kernel = rms_norm_backward_rows::RmsNormBackwardRows::new(
        cube_settings(lanes, rows),
        properties(),
        Arc::new(TargetProperties::default()),
        buffer(),
        buffer(),
        buffer(),
        buffer(),
        buffer(),
        buffer(),
        buffer(),
        (),
        (),
        (),
        (),
        (),
        vector,
        vector / 2,
        cfg,
        [bf16, bf16],
    );
    print_cuda(kernel.define());
}

/// The channels-first forward or backward (bf16) for a launch shape `pX.gY.kZ.vW`.
fn channels(args: &[String]) {
    let label = args.first().map_or("p128.g1.k96.v2", |s| s);
    let field = |prefix| label_field(label, prefix);
    let cfg = ChannelsConfig {
        position_units: field('p') as u32,
        channel_groups: field('g') as u32,
        channels_per_unit: field('k'),
        max_vector: field('v'),
        plane_groups: field('g').min(32 / field('p').clamp(1, 32)) as u32,
        prefetch: label_flag(label, "pf"),
        bf16_input: true,
        single_tile: label_flag(label, "one"),
        activation: Activation::Silu,
        fast_math: true,
    };
    let settings = cube_settings(cfg.position_units, cfg.channel_groups);
    let bf16 = ElemType::Float(FloatKind::BF16);
    let buffer = || BufferCompilationArg { inplace: None };
    let definition = if args.get(1).is_some_and(|a| a == "backward") {
        rms_norm_channels_backward::RmsNormChannelsBackward::new(
            settings,
            properties(),
            Arc::new(TargetProperties::default()),
            buffer(),
            buffer(),
            buffer(),
            buffer(),
            buffer(),
            buffer(),
            buffer(),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            cfg.max_vector,
            if cfg.prefetch { cfg.max_vector / 2 } else { 1 },
            cfg,
            [bf16, bf16],
        )
        .define()
    } else {
        rms_norm_channels::RmsNormChannels::new(
            settings,
            properties(),
            Arc::new(TargetProperties::default()),
            buffer(),
            buffer(),
            buffer(),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            (),
            cfg.max_vector,
            cfg,
            [bf16, bf16],
        )
        .define()
    };
    print_cuda(definition);
}

/// The E4M3 convolution on tensor cores, default knobs, bf16 output.
fn conv_e4m3(args: &[String]) {
    use rmsnorm_silu_kernels::conv::fp8::{
        Fp8ConvConfig, Fp8ConvGeometryCompilationArg, Fp8ConvKnobs, conv_e4m3,
    };
    let c_in: usize = args.first().map_or(96, |c| c.parse().expect("C_in"));
    let kt: usize = args.get(1).map_or(3, |k| k.parse().expect("kT"));
    let knobs = Fp8ConvKnobs::default();
    let warps = [knobs.warps[0] as usize, knobs.warps[1] as usize];
    let cfg = Fp8ConvConfig {
        kernel: [kt, 3, 3],
        c_in,
        warps,
        tiles: [knobs.tiles[0] as usize, knobs.tiles[1] as usize],
        tensor_cores: true,
        units: 32 * warps[0] * warps[1],
    };
    let settings = KernelSettings::new(
        *CubeDim::new_1d(cfg.units as u32),
        ExecutionMode::Unchecked,
        AddressType::U32,
    );
    let buffer = || BufferCompilationArg { inplace: None };
    let kernel = conv_e4m3::ConvE4m3::new(
        settings,
        properties(),
        Arc::new(TargetProperties::default()),
        buffer(),
        buffer(),
        buffer(),
        buffer(),
        buffer(),
        buffer(),
        Fp8ConvGeometryCompilationArg {
            rows: (),
            c_out: (),
            in_t: (),
            in_h: (),
            in_w: (),
            pad_t: (),
            pad_h: (),
            pad_w: (),
            out_t: (),
            out_h: (),
            out_w: (),
        },
        4,
        cfg,
        ElemType::Float(FloatKind::BF16),
    );
    print_cuda(kernel.define());
}

/// The CUDA of `fp8::wgmma_probe` (one warpgroup).
fn wgmma_probe_source() {
    let settings = KernelSettings::new(
        *CubeDim::new_1d(128),
        ExecutionMode::Unchecked,
        AddressType::U32,
    );
    let buffer = || BufferCompilationArg { inplace: None };
    use rmsnorm_silu_kernels::conv::fp8::wgmma_probe;
    let kernel = wgmma_probe::WgmmaProbe::new(
        settings,
        properties(),
        Arc::new(TargetProperties::default()),
        buffer(),
        buffer(),
        buffer(),
        false,
    );
    print_cuda(kernel.define());
}

/// The bf16 `wgmma` convolution on tensor cores (default knobs unless given).
fn conv_wgmma(args: &[String]) {
    use rmsnorm_silu_kernels::conv::wgmma::{
        WgmmaConfig, WgmmaGeometryCompilationArg, WgmmaKnobs, conv_wgmma,
    };
    let knobs = args.first().map_or_else(WgmmaKnobs::default, |k| {
        WgmmaKnobs::parse(k).expect("knobs")
    });
    let c_in: usize = args.get(1).map_or(384, |c| c.parse().expect("C_in"));
    let kt: usize = args.get(2).map_or(3, |k| k.parse().expect("kT"));
    let cfg = WgmmaConfig {
        kernel: [kt, 3, 3],
        c_in,
        groups: knobs.groups as usize,
        n: knobs.n as usize,
        k: knobs.k as usize,
        stages: knobs.stages as usize,
        tensor_cores: true,
        units: 128 * knobs.groups as usize,
        f16: false,
        accumulate: false,
        norm: args.get(3).is_some_and(|a| a == "norm"),
    };
    let settings = KernelSettings::new(
        *CubeDim::new_1d(cfg.units as u32),
        ExecutionMode::Unchecked,
        AddressType::U32,
    );
    let buffer = || BufferCompilationArg { inplace: None };
    let kernel = conv_wgmma::ConvWgmma::new(
        settings,
        properties(),
        Arc::new(TargetProperties::default()),
        buffer(),
        buffer(),
        buffer(),
        buffer(),
        buffer(),
        buffer(),
        buffer(),
        WgmmaGeometryCompilationArg {
            rows: (),
            c_out: (),
            in_t: (),
            in_h: (),
            in_w: (),
            pad_t: (),
            pad_h: (),
            pad_w: (),
            x_b: (),
            x_t: (),
            x_h: (),
            x_w: (),
            tail_t: (),
            tail_b: (),
            tail_ft: (),
            tail_h: (),
            tail_w: (),
            out_t: (),
            out_h: (),
            out_w: (),
            y_b: (),
            y_t: (),
            y_h: (),
            y_w: (),
        },
        8,
        cfg,
        ElemType::Float(FloatKind::BF16),
    );
    print_cuda(kernel.define());
}
