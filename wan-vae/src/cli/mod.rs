//! The `wan-vae` binary's helpers (not part of the library): its files and its timed decode.

pub mod io;
pub mod timing;
