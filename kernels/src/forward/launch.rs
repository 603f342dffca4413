//! The row kernel's launches: knobs checked, grid sized, the output target (input dtype, FP8 with a host or device amax).

use super::*;

/// Launches the row kernel on `client`: `out` receives `rows` rows of `x`'s element type at
/// [`RowsProblem::out_row_stride`]. Does nothing for zero rows.
pub fn launch_forward(
    client: &Client,
    operands: RowOperands,
    out: Handle,
    problem: RowsProblem,
    norm: NormParams,
    activation: Activation,
    knobs: &Knobs,
) -> Result<(), KernelError> {
    let target = OutputTarget {
        handle: out,
        kind: Output::Input,
        elem: operands.x_type,
        scale: 1.0,
        device_scale: None,
        amax: None,
    };
    launch_forward_to(client, operands, target, problem, norm, activation, knobs)
}

/// Where and how the row kernel writes.
#[derive(Clone, Debug)]
pub struct OutputTarget {
    pub handle: Handle,
    pub kind: Output,
    /// The output element type (`x`'s for [`Output::Input`], `e4m3` for FP8).
    pub elem: ElemType,
    /// The FP8 quantisation scale (`q = sat(y * scale)`); ignored for [`Output::Input`] and
    /// when [`Self::device_scale`] is given.
    pub scale: f32,
    /// FP8 with the scale on the device (delayed scaling without a host round trip).
    pub device_scale: Option<DeviceScale>,
    /// Where [`Output::Fp8E4M3WithAmax`] writes `max |y|` (one f32).
    pub amax: Option<Handle>,
}

/// An FP8 scale that stays on the device: the kernel reads `scale[0]` and writes `1 / scale[0]`
/// into `decode` (a quantised tensor's per-tensor scale word), both f32.
#[derive(Clone, Debug)]
pub struct DeviceScale {
    pub scale: Handle,
    pub decode: Handle,
}

impl OutputTarget {
    /// FP8 E4M3 codes `sat_RN_e4m3(y * scale)` into `handle`, and `max |y|` into `amax` if
    /// given.
    pub fn fp8(handle: Handle, scale: f32, amax: Option<Handle>) -> Self {
        Self {
            handle,
            kind: if amax.is_some() {
                Output::Fp8E4M3WithAmax
            } else {
                Output::Fp8E4M3
            },
            elem: ElemType::Float(cubecl::ir::FloatKind::E4M3),
            scale,
            device_scale: None,
            amax,
        }
    }

    /// What the kernel writes besides the elements, for an output with none (where it does
    /// not run): amax 0 and a device scale's decode word.
    pub fn write_empty(self, client: &Client) {
        if let Some(amax) = self.amax {
            crate::quant::write_f32(client, amax, 0.0);
        }
        if let Some(scale) = self.device_scale {
            crate::quant::launch_reciprocal(client, scale.scale, scale.decode);
        }
    }

    /// [`Self::fp8`] with the scale read on the device (see [`DeviceScale`]).
    pub fn fp8_device_scale(handle: Handle, scale: DeviceScale, amax: Option<Handle>) -> Self {
        Self {
            device_scale: Some(scale),
            ..Self::fp8(handle, 1.0, amax)
        }
    }
}

/// Launches the row kernel writing to `target`: the input dtype ([`launch_forward`]), or FP8
/// E4M3 codes `q = sat_RN_e4m3(y * scale)` with, given an amax buffer, `max |y|` over the whole
/// tensor (before scaling; NaN if any `y` is NaN) in its first f32: each unit keeps its maximum
/// in a register, a second small kernel reduces them (no atomics). See [`OutputTarget::fp8`].
pub fn launch_forward_to(
    client: &Client,
    operands: RowOperands,
    target: OutputTarget,
    problem: RowsProblem,
    norm: NormParams,
    activation: Activation,
    knobs: &Knobs,
) -> Result<(), KernelError> {
    let RowOperands {
        x,
        gamma,
        x_type,
        gamma_type,
    } = operands;
    let RowsProblem {
        rows,
        channels,
        x_row_stride,
        out_row_stride,
    } = problem;
    if rows == 0 || channels == 0 {
        target.write_empty(client);
        return Ok(());
    }
    let out = target.handle;
    let offsets = [
        x.offset_start.unwrap_or(0),
        gamma.offset_start.unwrap_or(0),
        out.offset_start.unwrap_or(0),
    ];
    let sizes = [x_type.size(), gamma_type.size(), target.elem.size()];
    validate_knobs(client, knobs, problem, &offsets, &sizes)?;

    let vector_size = knobs.vector_size;
    let mut cfg = knobs.row_config_for(channels, activation, target.kind);
    cfg.saturating_cast = target.kind.is_fp8() && has_ptx_math(client);
    cfg.bf16_input = x_type == ElemType::Float(cubecl::ir::FloatKind::BF16);
    cfg.bf16_gamma = cfg.bf16_input
        && gamma_type == ElemType::Float(cubecl::ir::FloatKind::BF16)
        && vector_size.is_multiple_of(2);
    cfg.scale_foldable =
        target.device_scale.is_none() && target.scale <= RowConfig::MAX_FOLDED_SCALE;
    cfg.plane_width = reduction_plane_width(client);
    cfg.packed_fp8 = cfg.saturating_cast
        && vector_size.is_multiple_of(4)
        && crate::device::device_sm(client).is_some_and(|sm| sm >= 89);
    let vecs_per_row = channels / vector_size;
    let max_grid = client.properties().hardware.max_cube_count.0 as usize;
    let (groups, cubes) = knobs.groups_and_cubes(rows, max_grid);
    cfg.gamma_after_x = cfg.loads_gamma_after_x(cubes >= groups);
    let x_len = (rows - 1) * x_row_stride / vector_size + vecs_per_row;
    let out_len = (rows - 1) * out_row_stride / vector_size + vecs_per_row;
    let address_type = AddressType::from_len(x_len.max(out_len) * vector_size);
    // The output seen as 32-bit words, one vector of words per output vector (packed FP8 only;
    // the unused view is a 1-element placeholder of the same buffer).
    let (out_words_per_vector, out_words_len, out_len_typed) = if cfg.packed_fp8 {
        (vector_size / 4, out_len, 1)
    } else {
        (1, 1, out_len)
    };

    // `x` seen as vectors of 32-bit words, one per vector of `x` (prefetch and `word_cache`
    // only; validated).
    // (The word type is also gamma's with `bf16_gamma`; the buffer stays a placeholder then.)
    let (words_per_vector, words_len) = if cfg.prefetch || cfg.word_cache {
        (vector_size * x_type.size() / 4, x_len)
    } else if cfg.bf16_gamma {
        (vector_size / 2, 1)
    } else {
        (1, 1)
    };
    log::debug!(
        "rms_norm_rows: rows={rows} C={channels} {x_type:?}/{gamma_type:?} knobs={knobs:?} \
         cubes={cubes}"
    );
    // One max per unit for amax; a 1-word placeholder otherwise (never written).
    let units = cfg.units_per_cube() as usize;
    let partial_len = if target.amax.is_some() {
        cubes * units
    } else {
        1
    };
    let partial = client.empty(partial_len * 4);
    // The ticket counters (a 1-word placeholder when the walk has a fixed stride; never read).
    let (tickets, tickets_len) = if cfg.groups_per_ticket > 0 {
        (crate::tickets::ticket_counters(client), 2)
    } else {
        (partial.clone(), 1)
    };
    unsafe {
        rms_norm_rows::launch_unchecked(
            client,
            CubeCount::new_1d(cubes as u32),
            cube_dim(&cfg),
            address_type,
            vector_size,
            words_per_vector,
            out_words_per_vector,
            BufferArg::from_raw_parts(x.clone(), x_len),
            BufferArg::from_raw_parts(x, words_len),
            BufferArg::from_raw_parts(gamma, vecs_per_row),
            BufferArg::from_raw_parts(out.clone(), out_len_typed),
            BufferArg::from_raw_parts(out, out_words_len),
            BufferArg::from_raw_parts(partial.clone(), partial_len),
            BufferArg::from_raw_parts(tickets, tickets_len),
            target
                .device_scale
                .as_ref()
                .map(|s| BufferArg::from_raw_parts(s.scale.clone(), 1))
                .into(),
            target
                .device_scale
                .map(|s| BufferArg::from_raw_parts(s.decode, 1))
                .into(),
            rows,
            vecs_per_row,
            x_row_stride / vector_size,
            out_row_stride / vector_size,
            (1.0f64 / channels as f64) as f32,
            norm.eps,
            norm.floor,
            target.scale,
            silu_constant(target.scale, &cfg),
            cfg,
            [x_type, gamma_type, target.elem],
        );
        if let Some(amax) = target.amax {
            let max_units = client.properties().hardware.max_units_per_cube.max(1);
            let threads = if max_units >= 256 {
                256
            } else {
                1 << max_units.ilog2()
            };
            rms_norm_reduce_amax::launch_unchecked(
                client,
                CubeCount::new_1d(1),
                CubeDim::new_1d(threads),
                BufferArg::from_raw_parts(partial, partial_len),
                BufferArg::from_raw_parts(amax, 1),
                partial_len,
                threads,
            );
        }
    }
    Ok(())
}
