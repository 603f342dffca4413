//! Small pieces for quantised outputs: the scale word a quantised tensor carries next to its
//! values is written on the device (no host round trip).

use cubecl::prelude::*;
use cubecl::server::Handle;

#[cube(launch_unchecked)]
fn rms_norm_fill_scalar(out: &mut [f32], value: f32) {
    if ABSOLUTE_POS == 0 {
        out[0] = value;
    }
}

/// Writes `value` into the first f32 of `handle` (e.g. the per-tensor scale of a quantised
/// tensor).
pub fn write_f32(client: &Client, handle: Handle, value: f32) {
    unsafe {
        rms_norm_fill_scalar::launch_unchecked(
            client,
            CubeCount::new_1d(1),
            CubeDim::new_1d(1),
            BufferArg::from_raw_parts(handle, 1),
            value,
        );
    }
}

#[cube(launch_unchecked)]
fn rms_norm_reciprocal(scale: &[f32], out: &mut [f32]) {
    if ABSOLUTE_POS == 0 {
        out[0] = 1.0f32 / scale[0];
    }
}

/// Writes `1 / scale[0]` into the first f32 of `out`, both on the device (the decode scale of a
/// quantised tensor whose quantisation scale is a device value).
pub fn launch_reciprocal(client: &Client, scale: Handle, out: Handle) {
    unsafe {
        rms_norm_reciprocal::launch_unchecked(
            client,
            CubeCount::new_1d(1),
            CubeDim::new_1d(1),
            BufferArg::from_raw_parts(scale, 1),
            BufferArg::from_raw_parts(out, 1),
        );
    }
}
