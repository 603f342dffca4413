//! The row backward's launches: the row kernel, then the deterministic dgamma reduction.

use super::*;

/// The backward's tensors: `x`, `dy` and `dx` (dense `[rows, C]`) of `x_type`, `gamma` and
/// `dgamma` (`[C]`) of `gamma_type`.
#[derive(Clone, Debug)]
pub struct BackwardOperands {
    pub x: Handle,
    pub gamma: Handle,
    pub dy: Handle,
    pub dx: Handle,
    pub dgamma: Handle,
    pub x_type: ElemType,
    pub gamma_type: ElemType,
}

/// Launches the backward on `operands`. Refuses (so the caller can use composed ops) rows too
/// wide for the register cache of this device.
pub fn launch_backward(
    client: &Client,
    operands: BackwardOperands,
    rows: usize,
    channels: usize,
    norm: NormParams,
    activation: Activation,
) -> Result<(), KernelError> {
    let knobs = BackwardKnobs::for_shape(client, channels, rows);
    let launch = |knobs| {
        launch_backward_with(
            client,
            operands.clone(),
            rows,
            channels,
            norm,
            activation,
            knobs,
        )
    };
    // Prefetch needs whole-word vectors (not odd C in 2-byte types) and the shared memory to
    // stage them; where the launch refuses it, the same knobs run without it.
    match launch(knobs) {
        Err(_) if knobs.prefetch => launch(BackwardKnobs {
            prefetch: false,
            ..knobs
        }),
        result => result,
    }
}

/// [`launch_backward`] with given [`BackwardKnobs`]; `fast_math` off CUDA, a zero cap or a
/// units count that is not a power of two are refused.
pub fn launch_backward_with(
    client: &Client,
    operands: BackwardOperands,
    rows: usize,
    channels: usize,
    norm: NormParams,
    activation: Activation,
    knobs: BackwardKnobs,
) -> Result<(), KernelError> {
    let BackwardOperands {
        x,
        gamma,
        dy,
        dx,
        dgamma,
        x_type,
        gamma_type,
    } = operands;
    let refuse = |why: String| Err(KernelError::InvalidKnobs(why));
    if knobs.fast_math && !has_ptx_math(client) {
        return refuse("backward: fast_math uses PTX instructions and needs a CUDA device".into());
    }
    if knobs.max_vectors_per_lane == 0
        || !knobs.units_per_cube.is_power_of_two()
        || !(knobs.max_vector == 0 || knobs.max_vector.is_power_of_two())
    {
        return refuse(format!(
            "backward knobs {knobs}: max_vectors_per_lane must be at least 1, units_per_cube \
             a power of two and max_vector 0 or a power of two"
        ));
    }
    if channels == 0 {
        return Ok(());
    }
    let props = client.properties();
    let hw = &props.hardware;
    let offsets = [
        (&x, x_type),
        (&dy, x_type),
        (&dx, x_type),
        (&gamma, gamma_type),
        (&dgamma, gamma_type),
    ]
    .map(|(h, t)| (h.offset_start.unwrap_or(0), t.size()));
    let widest = crate::select::widest_vector(client, x_type.size(), &[channels], &offsets);
    let vector_size = match knobs.max_vector {
        0 => widest,
        v => widest.min(v),
    };
    let vecs = channels / vector_size;
    let gpu = is_gpu(client);
    let plane = if gpu { hw.plane_size_min as usize } else { 1 };
    let max_units = hw.max_units_per_cube as usize;
    // Lanes per row: what the cap asks for, at most a cube's worth; the cap is raised (up to
    // the register cache's limit) for rows wider than that.
    let max_lanes = 1usize
        << (if gpu { max_units.min(1024) } else { max_units })
            .max(1)
            .ilog2();
    let lanes = vecs
        .div_ceil(knobs.max_vectors_per_lane)
        .next_power_of_two()
        .clamp(1, max_lanes);
    let cache_limit = if gpu { 8 } else { 64 };
    if vecs.div_ceil(lanes) > cache_limit {
        return refuse(format!(
            "backward: C = {channels} needs {} vectors per lane at {lanes} lanes per row (this \
             device's most); the register cache holds {cache_limit}",
            vecs.div_ceil(lanes)
        ));
    }
    let lane_reduce = if lanes <= plane {
        LaneReduce::Plane
    } else {
        LaneReduce::Shared
    };
    // A power of two (the dgamma tree over a cube's rows needs one).
    let rows_per_cube = if gpu {
        (knobs.units_per_cube.min(max_units) / lanes).max(1)
    } else {
        1usize << (max_units / lanes).max(1).ilog2()
    };
    let cfg = BackwardConfig {
        lanes_per_row: lanes as u32,
        rows_per_cube: rows_per_cube as u32,
        vectors_per_lane: vecs.div_ceil(lanes),
        lane_reduce,
        activation,
        fast_math: knobs.fast_math && activation == Activation::Silu,
        prefetch: knobs.prefetch,
        plane_width: reduction_plane_width(client),
    };
    let vector_bytes = vector_size * x_type.size();
    if knobs.prefetch {
        if !vector_bytes.is_multiple_of(4) {
            return refuse(format!(
                "backward knobs {knobs}: prefetch stages whole 32-bit words; C = {channels} \
                 gives vectors of {vector_bytes} bytes"
            ));
        }
        let staged = 2 * cfg.vectors_per_lane * lanes * rows_per_cube * vector_bytes;
        if staged + lanes * rows_per_cube * 4 * (1 + vector_size) > hw.max_shared_memory_size {
            return refuse(format!(
                "backward knobs {knobs}: prefetch stages {staged} bytes per cube in shared \
                 memory; the device has {}",
                hw.max_shared_memory_size
            ));
        }
    }
    let groups = rows.div_ceil(rows_per_cube).max(1);
    let resident = (threads_per_sm(client) / (lanes * rows_per_cube)).clamp(1, 16);
    let cubes = match (knobs.cubes_per_sm, hw.num_streaming_multiprocessors) {
        (Some(0), _) => groups.min(hw.max_cube_count.0 as usize),
        (per_sm, Some(sms)) if gpu => {
            groups.min(sms as usize * per_sm.map_or(resident, |n| resident.min(n as usize)))
        }
        _ => groups.min(64),
    };
    let parts = cubes;
    let partial = client.empty(parts * channels * 4);
    let len = rows * vecs;
    // `x` and `dy` seen as vectors of 32-bit words, one per vector (prefetch only).
    let (words_per_vector, words_len) = if knobs.prefetch {
        (vector_bytes / 4, len.max(1))
    } else {
        (1, 1)
    };
    log::debug!("rms_norm_backward_rows: rows={rows} C={channels} {cfg:?} cubes={cubes}");
    unsafe {
        rms_norm_backward_rows::launch_unchecked(
            client,
            CubeCount::new_1d(cubes as u32),
            CubeDim::new_2d(lanes as u32, rows_per_cube as u32),
            AddressType::from_len((len * vector_size).max(parts * channels)),
            vector_size,
            words_per_vector,
            BufferArg::from_raw_parts(x.clone(), len.max(1)),
            BufferArg::from_raw_parts(x, words_len),
            BufferArg::from_raw_parts(gamma, vecs),
            BufferArg::from_raw_parts(dy.clone(), len.max(1)),
            BufferArg::from_raw_parts(dy, words_len),
            BufferArg::from_raw_parts(dx, len.max(1)),
            BufferArg::from_raw_parts(partial.clone(), parts * vecs),
            rows,
            vecs,
            (1.0f64 / channels as f64) as f32,
            norm.eps,
            norm.floor,
            cfg,
            [x_type, gamma_type],
        );
    }
    launch_reduce_dgamma(
        client,
        partial,
        dgamma,
        gamma_type,
        parts,
        vecs,
        vector_size,
    );
    Ok(())
}

/// `dgamma = sum_p partial[p]` over `parts` partials of `vecs` vectors of `vector_size` f32,
/// stored column-major (vector column `j`'s partials at `j * parts ..`; one cube per column
/// vector, a fixed order), cast to `gamma_type`. (Public for the bench, which
/// times it alone.)
pub fn launch_reduce_dgamma(
    client: &Client,
    partial: Handle,
    dgamma: Handle,
    gamma_type: ElemType,
    parts: usize,
    vecs: usize,
    vector_size: usize,
) {
    let max_units = client.properties().hardware.max_units_per_cube as usize;
    // On a GPU enough units that each loads at most about four parts (all in flight at once:
    // a second round of loads showed at 2112 parts, C = 1024's full grid), 256 to 1024.
    let wanted = if is_gpu(client) {
        parts.div_ceil(4).next_power_of_two().clamp(256, 1024)
    } else {
        256
    };
    let threads = 1u32 << wanted.min(max_units.max(1)).ilog2();
    // The units' sums meet by plane shuffles where the row kernels' lane sums do (the kernel
    // falls back to its shared-memory tree for a plane wider than the cube).
    let plane = reduction_plane_width(client);
    unsafe {
        rms_norm_reduce_dgamma::launch_unchecked(
            client,
            CubeCount::new_1d(vecs as u32),
            CubeDim::new_1d(threads),
            vector_size,
            BufferArg::from_raw_parts(partial, parts * vecs),
            BufferArg::from_raw_parts(dgamma, vecs),
            parts,
            threads,
            plane,
            gamma_type,
        );
    }
}
