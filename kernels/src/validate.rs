//! Whether a row-kernel configuration can run a problem on a device: the checks the row and
//! NVFP4 kernels share (lane layout, cube shape) and the row kernel's knob validation, used by
//! the launchers, the selection and the tuner.

use cubecl::prelude::*;

use crate::device::{has_ptx_math, reduction_plane_width};
use crate::knobs::{GammaIn, Knobs, LaneReduce, RowConfig};
use crate::params::Activation;
use crate::problem::{KernelError, RowsProblem};

/// Why the lane layout of `cfg` (lanes per row, rows per cube, lane reduction; `plane_width`
/// set) cannot run on `client`'s device, if it cannot: the checks the row and NVFP4 kernels
/// share. A plane reduction needs plane operations and at most a plane of lanes; lane counts
/// that are not powers of two pack rows into planes there (rows per cube a multiple of the rows
/// per plane), and with the shared reduction need a multiple of the plane above a plane.
pub(crate) fn lane_layout_error(client: &Client, cfg: &RowConfig) -> Option<String> {
    let hw = &client.properties().hardware;
    let lanes = cfg.lanes_per_row;
    let plane_width = cfg.plane_width;
    if lanes == 0 || cfg.rows_per_cube == 0 {
        return Some(format!(
            "lanes_per_row {lanes} and rows_per_cube {} must be at least 1",
            cfg.rows_per_cube
        ));
    }
    if lanes > 1 && cfg.lane_reduce == LaneReduce::Plane {
        let has_plane_ops = client
            .features()
            .plane
            .contains(cubecl::ir::features::Plane::Ops);
        if !has_plane_ops || lanes > hw.plane_size_min {
            return Some(format!(
                "plane reduction over {lanes} lanes needs plane ops and a plane of at least that \
                 many units (this device: plane ops {has_plane_ops}, plane size {})",
                hw.plane_size_min
            ));
        }
    }
    // (Powers of two above a plane are multiples of it.)
    if cfg.lane_reduce == LaneReduce::Shared
        && plane_width > 1
        && lanes > plane_width
        && !lanes.is_multiple_of(plane_width)
    {
        return Some(format!(
            "lanes_per_row {lanes}: a shared-memory reduction over more lanes than a plane of \
             {plane_width} needs a power of two or a multiple of the plane"
        ));
    }
    // (Packing lays rows along planes of `plane_width` units; a device whose planes are not
    // used for reductions, `plane_width` 1, cannot pack.)
    if cfg.packs_rows() && plane_width < lanes {
        return Some(format!(
            "lanes_per_row {lanes} (not a power of two) packs rows into planes and needs planes \
             of at least {lanes} units used for reductions (this device: {plane_width})"
        ));
    }
    if cfg.packs_rows() && !cfg.rows_per_cube.is_multiple_of(cfg.rows_per_plane()) {
        let per_plane = cfg.rows_per_plane();
        return Some(format!(
            "lanes_per_row {lanes} packs {per_plane} rows into each plane of {plane_width}: \
             rows_per_cube {} must be a multiple of {per_plane}",
            cfg.rows_per_cube
        ));
    }
    if cfg.units_per_cube() > hw.max_units_per_cube {
        return Some(format!(
            "a cube of {lanes} lanes x {} rows exceeds the device's {} units per cube",
            cfg.rows_per_cube, hw.max_units_per_cube
        ));
    }
    None
}

/// The cube of `cfg`: `lanes x rows_per_cube` units, or with rows packed into planes
/// ([`RowConfig::packs_rows`]) one plane along x and the planes along y.
pub(crate) fn cube_dim(cfg: &RowConfig) -> CubeDim {
    if cfg.packs_rows() {
        CubeDim::new_2d(cfg.plane_width, cfg.units_per_cube() / cfg.plane_width)
    } else {
        CubeDim::new_2d(cfg.lanes_per_row, cfg.rows_per_cube)
    }
}

/// Checks that `knobs` can run `problem` on `client`'s device with buffers at these offsets.
pub fn validate_knobs(
    client: &Client,
    knobs: &Knobs,
    problem: RowsProblem,
    byte_offsets: &[u64],
    elem_sizes: &[usize],
) -> Result<(), KernelError> {
    let bad = |why: String| Err(KernelError::InvalidKnobs(why));
    let props = client.properties();
    let hw = &props.hardware;
    if knobs.vector_size == 0 || !problem.channels.is_multiple_of(knobs.vector_size) {
        return bad(format!(
            "vector_size {} must divide C = {}",
            knobs.vector_size, problem.channels
        ));
    }
    for (name, stride) in [
        ("x row stride", problem.x_row_stride),
        ("output row stride", problem.out_row_stride),
    ] {
        if stride < problem.channels || !stride.is_multiple_of(knobs.vector_size) {
            return bad(format!(
                "the {name} {stride} must be >= C = {} and a multiple of vector_size {}",
                problem.channels, knobs.vector_size
            ));
        }
    }
    for (&offset, &size) in byte_offsets.iter().zip(elem_sizes) {
        if !offset.is_multiple_of((knobs.vector_size * size) as u64) {
            return bad(format!(
                "vector_size {} is not aligned with a buffer offset of {offset} bytes",
                knobs.vector_size
            ));
        }
    }
    if knobs.vector_size > hw.max_vector_size {
        return bad(format!(
            "vector_size {} exceeds the device maximum {}",
            knobs.vector_size, hw.max_vector_size
        ));
    }
    let mut cfg = knobs.row_config(problem.channels, Activation::Silu);
    cfg.plane_width = reduction_plane_width(client);
    if let Some(why) = lane_layout_error(client, &cfg) {
        return bad(why);
    }
    if knobs.rows_per_unit == 0 || knobs.rows_per_unit > 8 {
        return bad(format!(
            "rows_per_unit {} must be in 1..=8",
            knobs.rows_per_unit
        ));
    }
    if knobs.fast_math && !has_ptx_math(client) {
        return bad(format!(
            "fast_math uses PTX instructions and needs a CUDA device (this one: {})",
            props.identity.fingerprint
        ));
    }
    let shared_bytes = match cfg.lane_reduce {
        LaneReduce::Shared => knobs.units_per_cube() as usize * knobs.rows_per_unit as usize * 4,
        LaneReduce::Plane => 0,
    } + match cfg.gamma {
        GammaIn::Shared => {
            knobs.lanes_per_row as usize * knobs.vectors_per_lane * knobs.vector_size * 4
        }
        _ => 0,
    };
    if shared_bytes > hw.max_shared_memory_size {
        return bad(format!(
            "the knobs need {shared_bytes} bytes of shared memory, the device has {}",
            hw.max_shared_memory_size
        ));
    }
    if knobs.max_cubes == Some(0) {
        return bad("max_cubes must be at least 1".into());
    }
    // A ticketed walk draws a ticket per `groups_per_ticket` groups and then at most two more
    // per cube (u32 tickets).
    let (groups, cubes) = knobs.groups_and_cubes(problem.rows, hw.max_cube_count.0 as usize);
    let per_ticket = knobs.groups_per_ticket as usize;
    if per_ticket > 0 && groups.div_ceil(per_ticket) + 2 * cubes >= u32::MAX as usize {
        return bad(format!(
            "the ticketed walk (`.tk{per_ticket}`) counts tickets in 32 bits: {groups} groups \
             of {} rows are too many; use more groups per ticket or a fixed stride",
            knobs.rows_per_step()
        ));
    }
    if knobs.f32_cache && !knobs.prefetch {
        return bad(
            "f32_cache (`.f32`) converts the words staged by prefetch: it needs prefetch (`.pf`)"
                .into(),
        );
    }
    if knobs.word_cache && knobs.f32_cache {
        return bad(
            "word_cache (`.wd`) and f32_cache (`.f32`) are two forms of the register cache: \
             choose one"
                .into(),
        );
    }
    let x_bytes = elem_sizes.first().copied().unwrap_or(0) * knobs.vector_size;
    if knobs.word_cache && (!knobs.caches_row(problem.channels) || !x_bytes.is_multiple_of(4)) {
        return bad(format!(
            "word_cache (`.wd`) needs the register cache (vectors_per_lane {} x lanes_per_row {} \
             x vector_size {} >= C = {}) and vectors of whole 32-bit words (this x: {x_bytes} \
             bytes)",
            knobs.vectors_per_lane, knobs.lanes_per_row, knobs.vector_size, problem.channels
        ));
    }
    if knobs.prefetch {
        if !knobs.caches_row(problem.channels) || !x_bytes.is_multiple_of(4) {
            return bad(format!(
                "prefetch needs the register cache (vectors_per_lane {} x lanes_per_row {} x \
                 vector_size {} >= C = {}) and vectors of whole 32-bit words (this x: {x_bytes} \
                 bytes)",
                knobs.vectors_per_lane, knobs.lanes_per_row, knobs.vector_size, problem.channels
            ));
        }
        let staged = cfg.units_per_cube() as usize
            * knobs.rows_per_unit as usize
            * knobs.vectors_per_lane
            * x_bytes;
        if shared_bytes + staged > hw.max_shared_memory_size {
            return bad(format!(
                "prefetch stages {staged} bytes per cube in shared memory (plus {shared_bytes}); \
                 the device has {}",
                hw.max_shared_memory_size
            ));
        }
    }
    Ok(())
}
