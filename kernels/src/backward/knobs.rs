//! The row backward's knobs (their text form, validation and the GPU heuristic).

use super::*;

/// The launch choices of the row backward, which the bench sweeps
/// (`cargo bench --bench rmsnorm -- backward`). Each lane keeps four arrays of
/// `max_vectors_per_lane` vectors in registers (x, dy, gamma and its dgamma sums, in f32), so
/// the cap trades registers (occupancy) against lanes per row (reduction steps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardKnobs {
    /// The sigmoid in SiLU' through PTX `ex2.approx` + `rcp.approx` (CUDA only).
    pub fast_math: bool,
    /// Most vectors of a row per lane; lanes per row are the next power of two that fits C.
    /// Raised for rows wider than a cube's lanes allow, up to the register cache's limit (8
    /// vectors per lane on a GPU, 64 on the CPU runtime); wider rows are refused.
    pub max_vectors_per_lane: usize,
    /// Units per cube on a GPU (a power of two); the CPU runtime takes its maximum.
    pub units_per_cube: usize,
    /// The next row group's x and dy loaded while the current one is computed, staged through
    /// shared memory as 32-bit words (the forward's prefetch). On by default on a GPU
    /// ([`Self::for_shape`]); needs vectors of whole words and the shared memory to stage them.
    pub prefetch: bool,
    /// Cubes of the persistent grid per SM: `None` as many as the SM's resident threads hold (`device::threads_per_sm`) (at
    /// most 16), `Some(0)` one cube per row group (no persistent grid), `Some(n)` n per SM (at
    /// most what `None` gives).
    /// Fewer cubes mean fewer dgamma partials; a grid larger than what is resident at once
    /// leaves a tail. Without an SM count (the CPU runtime) at most 64 cubes unless `Some(0)`.
    /// Written `.s<n>`.
    pub cubes_per_sm: Option<u32>,
    /// At most this many elements per vector (a power of two; 0: the widest the layout
    /// allows). Narrower vectors fill the lanes of rows whose vector count is not a power of
    /// two: C = 384 in bf16 is 48 vectors of 8 (32 lanes x 2, a quarter of the slots idle) or
    /// 96 of 4 (32 lanes x 3, none idle). Written `.v<n>` when set.
    pub max_vector: usize,
}

impl BackwardKnobs {
    /// The device defaults: the PTX SiLU' where the device has it (13-25% faster on the H200,
    /// 2026-11-30), one vector per lane and 256 units per cube on a GPU; 64 vectors per lane on
    /// the CPU runtime, where a row has two units at most. [`Self::for_shape`] refines them.
    pub fn for_device(client: &Client) -> Self {
        let gpu = is_gpu(client);
        Self {
            fast_math: has_ptx_math(client),
            max_vectors_per_lane: if gpu { 1 } else { 64 },
            units_per_cube: 256,
            prefetch: false,
            cubes_per_sm: None,
            max_vector: 0,
        }
    }

    /// The defaults for a `[rows, channels]` backward: on a GPU the winners of the `backward`
    /// bench's sweep on the H200 (C = 96, 192, 384, 1024 x T = 6240, 24960, 99840, 399360):
    /// prefetch everywhere (dropped by [`launch_backward`] where it cannot run); one vector per
    /// lane and 256 units per cube for rows up to C = 256 (3 cubes per SM from T = 12480, their
    /// prefetch kernel taking 72-74 registers, 2 below; 4 from T = 65536), 128 units above.
    /// C = 257..512: 2 vectors per lane on 4 cubes per SM below T = 65536, 4 vectors per lane
    /// above (2 cubes per SM below T = 200000, then the full grid). Wider rows: one vector per
    /// lane on 8 cubes per SM below T = 65536, 2 vectors per lane on 4 cubes per SM above.
    /// C = 129..256 at T = 12480..65536: 4 vectors per lane on 3 cubes per SM. From
    /// T = 200000 (except C = 257..512) 2 vectors per lane on 4 cubes per SM. The T boundaries
    /// are the H200's; they are held in rows per SM, so they scale with the device's SM count.
    ///
    /// Vectors of 4 elements (`max_vector`), 4 per lane, for C = 257..512 below T = 65536 (4 cubes
    /// per SM below T = 12480, else 6) and C = 129..256 at T = 12480..65536 (6 per SM): C = 384
    /// is then 32 lanes x 3 vectors of 4 (no idle slot; 94 registers) rather than 32 x 2 of 8.
    ///
    /// Changes measured on 2026-12-01 (the dgamma kernel then loading its partial
    /// rows in one round): C = 1024 T = 6240 22.2 -> 20.4 us and T = 24960 54.4 -> 49.9 us (8
    /// cubes per SM), T = 399360 636 -> 616 us; C = 96 T = 399360 78.7 -> 75.0 us (two calls
    /// each); vectors of 4: C = 384 T = 6240 14.6 -> 12.9 us, T = 24960 27.8 -> 25.0 us, C = 192
    /// T = 24960 18.2 -> 16.8 us. What was tried: docs/performance.md.
    pub fn for_shape(client: &Client, channels: usize, rows: usize) -> Self {
        let knobs = Self::for_device(client);
        if !is_gpu(client) {
            return knobs;
        }
        let sms = client.properties().hardware.num_streaming_multiprocessors;
        let shape = GpuBackwardShape::for_shape(channels, rows, sms.unwrap_or(1) as usize);
        Self {
            prefetch: true,
            max_vectors_per_lane: shape.max_vectors_per_lane,
            units_per_cube: shape.units_per_cube,
            cubes_per_sm: shape.cubes_per_sm,
            max_vector: shape.max_vector,
            ..knobs
        }
    }
}

/// The shape part of [`BackwardKnobs::for_shape`] on a GPU, a pure function of C, T and the
/// SM count (so that the table it encodes is unit-tested without a GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuBackwardShape {
    pub max_vectors_per_lane: usize,
    pub units_per_cube: usize,
    pub cubes_per_sm: Option<u32>,
    pub max_vector: usize,
}

/// The row counts where the measured winners change, in rows per multiprocessor (measured on
/// the H200's 132 SMs at T = 12480, 65536 and 200000): a device with fewer SMs fills them with
/// fewer rows.
const FEW_ROWS_PER_SM: usize = 94;
const MANY_ROWS_PER_SM: usize = 496;
const HUGE_ROWS_PER_SM: usize = 1515;

impl GpuBackwardShape {
    /// See [`BackwardKnobs::for_shape`] for the measurements behind each case.
    pub fn for_shape(channels: usize, rows: usize, sms: usize) -> Self {
        let shape = |cap, units, cubes_per_sm, max_vector| Self {
            max_vectors_per_lane: cap,
            units_per_cube: units,
            cubes_per_sm,
            max_vector,
        };
        let sms = sms.max(1);
        let (few, many, huge) = (
            rows < FEW_ROWS_PER_SM * sms,
            rows >= MANY_ROWS_PER_SM * sms,
            rows >= HUGE_ROWS_PER_SM * sms,
        );
        let mid_width = channels > 256 && channels <= 512;
        if mid_width && !many {
            // Vectors of 4: C = 384 is 32 lanes x 3 (of 8: 32 x 2, a quarter idle).
            shape(4, 128, Some(if few { 4 } else { 6 }), 4)
        } else if mid_width {
            shape(4, 128, (!huge).then_some(2), 0)
        } else if huge || (channels > 512 && many) {
            shape(2, 128, Some(4), 0)
        } else if channels > 512 {
            shape(1, 128, Some(8), 0)
        } else if channels > 128 && !few && !many {
            shape(4, 128, Some(6), 4)
        } else {
            // 256-unit cubes of one vector per lane: 2 per SM with few rows per SM, 3 below
            // many, then 4.
            let per_sm = if few {
                2
            } else if !many {
                3
            } else {
                4
            };
            shape(1, 256, Some(per_sm), 0)
        }
    }
}

impl crate::table::TextKnobs for BackwardKnobs {
    const KERNEL: &'static str = "backward";

    /// `c<vectors per lane>.u<units per cube>[.fast][.pf][.s<cubes per SM>][.v<vector>]`, the
    /// form `Display` writes.
    fn from_text(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "backward knobs `{text}`: expected c<vectors per lane>.u<units per cube>[.fast]\
                 [.pf][.s<cubes per SM>][.v<vector>]"
            )
        };
        let mut parts = text.trim().split('.');
        let mut number = |prefix: char| -> Result<usize, String> {
            parts
                .next()
                .and_then(|p| p.strip_prefix(prefix))
                .and_then(|n| n.parse().ok())
                .ok_or_else(bad)
        };
        let mut knobs = BackwardKnobs {
            max_vectors_per_lane: number('c')?,
            units_per_cube: number('u')?,
            fast_math: false,
            prefetch: false,
            cubes_per_sm: None,
            max_vector: 0,
        };
        // The optional parts in the order `Display` writes them (so each at most once).
        let mut order = 0;
        for part in parts {
            let number = |s: &str| s.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(bad);
            let rank = match part {
                "fast" => {
                    knobs.fast_math = true;
                    1
                }
                "pf" => {
                    knobs.prefetch = true;
                    2
                }
                s if s.starts_with('s') => {
                    knobs.cubes_per_sm = Some(s[1..].parse().map_err(|_| bad())?);
                    3
                }
                v if v.starts_with('v') => {
                    knobs.max_vector = number(&v[1..])?;
                    4
                }
                _ => return Err(bad()),
            };
            if rank <= order {
                return Err(bad());
            }
            order = rank;
        }
        Ok(knobs)
    }
}

impl core::fmt::Display for BackwardKnobs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "c{}.u{}{}{}",
            self.max_vectors_per_lane,
            self.units_per_cube,
            if self.fast_math { ".fast" } else { "" },
            if self.prefetch { ".pf" } else { "" }
        )?;
        if let Some(n) = self.cubes_per_sm {
            write!(f, ".s{n}")?;
        }
        match self.max_vector {
            0 => Ok(()),
            v => write!(f, ".v{v}"),
        }
    }
}
