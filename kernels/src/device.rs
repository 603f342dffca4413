//! What the kernels ask of the device, in one place: whether it is a GPU with planes, whether it
//! takes PTX math, its compute capability, the plane width a lane reduction may use and how many
//! threads one multiprocessor holds.

use cubecl::prelude::*;

use crate::lut;

/// A GPU for the launch shapes of the kernels without knobs: plane ops and planes of at least
/// 32 units (the CPU runtime has neither).
pub fn is_gpu(client: &Client) -> bool {
    let has_plane_ops = client
        .features()
        .plane
        .contains(cubecl::ir::features::Plane::Ops);
    has_plane_ops && client.properties().hardware.plane_size_min >= 32
}

/// Whether the device takes the PTX math of the `fast_math` paths (a CUDA device; cubecl's
/// fingerprint of a CUDA device starts with `ptx_`). Elsewhere `fast_math` is refused.
pub fn has_ptx_math(client: &Client) -> bool {
    client.properties().identity.fingerprint.starts_with("ptx_")
}

/// The device's compute capability x 10, when it is a CUDA device.
pub fn device_sm(client: &Client) -> Option<u32> {
    lut::sm_from_fingerprint(&client.properties().identity.fingerprint)
}

/// The plane width the shared-memory lane reduction may shuffle across
/// ([`crate::knobs::RowConfig::plane_width`]): the plane size on a GPU, 1 (no plane operations)
/// elsewhere.
pub fn reduction_plane_width(client: &Client) -> u32 {
    if is_gpu(client) {
        client.properties().hardware.plane_size_min
    } else {
        1
    }
}

/// Resident threads per multiprocessor, which sizes persistent grids: 1536 on sm_86 and sm_89
/// (and sm_120), 2048 on sm_70-sm_80, sm_90 and sm_100. cubecl does not report it; devices
/// that are not CUDA get 2048 (the CPU runtime's grids are not resident anyway).
pub fn threads_per_sm(client: &Client) -> usize {
    match device_sm(client) {
        Some(86 | 87 | 89 | 120 | 121) => 1536,
        _ => 2048,
    }
}
