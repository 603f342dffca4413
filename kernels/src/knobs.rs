//! Launch parameters ("knobs") of the row kernel.
//!
//! Each distinct [`RowConfig`] is a comptime value: the kernel is JIT-compiled once per config
//! (and element types, vector width and cube shape) and cached by cubecl. Shape values (rows,
//! C, strides) are run-time arguments, so a new shape does not cost a compilation.

use crate::params::{Activation, Output};

/// How the partial sums of squares of the lanes that share a row are combined.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum LaneReduce {
    /// Butterfly of plane (warp) shuffles; needs plane ops and `lanes_per_row <= plane size`.
    Plane,
    /// Tree in shared memory with cube barriers; works everywhere, including plane size 1.
    Shared,
}

/// Where the (fp32) gamma of a unit's columns lives while the unit walks its rows.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum GammaIn {
    /// Loaded once per unit into registers and reused for every row (needs the register cache).
    Registers,
    /// Staged once per cube in shared memory (needs the register cache).
    Shared,
    /// Read from global memory (L1/L2) for every row: fewest registers.
    Global,
}

/// Host-side knobs for one launch of the row kernel.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Knobs {
    /// Elements per vector load/store (bytes per load = `vector_size * elem size`).
    pub vector_size: usize,
    /// Units that cooperate on one row. Fewer than a plane puts several rows in one plane,
    /// which keeps enough bytes in flight for small C. A power of two, or with the plane
    /// reduction any count up to a plane (rows then packed into planes, see
    /// [`RowConfig::packs_rows`]; also any count with the shared reduction up to a plane or a
    /// multiple of it).
    pub lanes_per_row: u32,
    /// Unit rows of a cube (the cube is `lanes_per_row x rows_per_cube` units).
    pub rows_per_cube: u32,
    /// Rows each unit has in flight at once (their loads are issued before any reduction).
    pub rows_per_unit: u32,
    /// Vectors each lane keeps in registers per row. The row is read from memory once when
    /// `lanes_per_row * vectors_per_lane * vector_size >= C`; 0 selects the streaming variant
    /// that reads the row twice (for rows too long for registers).
    pub vectors_per_lane: usize,
    /// How lanes of one row combine their partial sums.
    pub lane_reduce: LaneReduce,
    /// Where gamma is kept (the streaming variant always reads it from global memory).
    pub gamma: GammaIn,
    /// Upper bound on the number of cubes; each cube loops over row groups with a grid stride
    /// (a persistent grid). `None`: one cube per row group.
    pub max_cubes: Option<u32>,
    /// SiLU through PTX `ex2.approx` and `rcp.approx` (two special-function instructions per
    /// element) instead of `expf` and a reciprocal square root. CUDA only. The tuner tries it
    /// per shape (the H200 table picks it for 31 of 55 shapes) and the heuristic uses it on
    /// CUDA devices. Changes the last bits of the SiLU (max relative error ~2^-21).
    pub fast_math: bool,
    /// Software pipelining for a persistent grid: while a cube reduces and writes one row group,
    /// the loads of its next group are already in flight, then wait as 32-bit words in the
    /// unit's own shared-memory slots. Why: with one buffer a unit's loads wait behind its own
    /// arithmetic, so the bytes in flight per SM drop between groups. Needs the register cache
    /// and vectors of whole words; pays off only with `max_cubes`.
    pub prefetch: bool,
    /// With `prefetch`: the register cache holds f32 values, converted once from the staged
    /// words (bf16 by integer shifts: `w << 16`, `w & 0xffff0000`), instead of the input dtype
    /// converted twice (sum of squares, then the output). Twice the registers for the cache,
    /// ~1.5 instructions per element fewer for bf16 in. Written `.f32`.
    pub f32_cache: bool,
    /// The register cache is loaded as 32-bit words and widened from them at each use (bf16:
    /// `w << 16` and `w & 0xffff0000`, one integer instruction per element) instead of by the
    /// compiler's bf16 cast. Why: the cast byte-permutes every high half into a register of
    /// its own, and with several vectors per lane those permuted copies stay live across the
    /// reduction next to the loaded words (SASS of the C = 160 entry: 10 extra registers and
    /// 10 instructions per row). Needs the register cache and vectors of whole words; not with
    /// `.f32`, which widens the words once. Written `.wd`.
    pub word_cache: bool,
    /// With a count `k > 0`, a persistent grid's cubes draw their row groups in order from a
    /// ticket counter, `k` consecutive groups per ticket, instead of walking them `CUBE_COUNT`
    /// apart (0). Why: with a fixed stride the cubes drift apart, so the groups in flight
    /// spread over an ever wider window of memory; drawn in order they stay one compact moving
    /// window and a cube on a busier SM simply takes fewer groups (a grid-stride copy is 6-7%
    /// slower than a full-grid one at 200-800 MB, a ticketed one about half of that). A cube
    /// draws the ticket after next while it works through the current one and publishes it
    /// with one barrier per ticket, so the prefetch always knows its next group; `k` spreads
    /// that barrier over `k` groups. The counters live in a zeroed device buffer per client and
    /// thread ([`crate::tickets`]); each launch's last cube sets them back to zero. Written
    /// `.tk<k>`.
    pub groups_per_ticket: u32,
}

/// The comptime part of [`Knobs`] plus the activation: what the kernel is specialised on.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct RowConfig {
    pub lanes_per_row: u32,
    pub rows_per_cube: u32,
    pub rows_per_unit: u32,
    pub vectors_per_lane: usize,
    pub lane_reduce: LaneReduce,
    pub gamma: GammaIn,
    pub activation: Activation,
    pub fast_math: bool,
    pub prefetch: bool,
    pub f32_cache: bool,
    pub word_cache: bool,
    pub groups_per_ticket: u32,
    /// `x` is bf16 (set at launch): the f32 cache converts its words with integer shifts.
    pub bf16_input: bool,
    /// `gamma` is bf16 and widened through its 32-bit words (`w << 16`, `w & 0xffff0000`: one
    /// integer instruction per value, where the compiler's cast byte-permutes each high half
    /// first, two). Set at launch where `x` is bf16 too (the kernel's word type `W` is then
    /// half a vector) and vectors hold whole words.
    pub bf16_gamma: bool,
    pub output: Output,
    /// The device's cast to FP8 E4M3 saturates (CUDA converts with `__NV_SATFINITE`: ±448 for
    /// out-of-range values and infinities, NaN stays NaN), so the kernel leaves out its own
    /// clamp (two instructions per element). Set at launch; `false` elsewhere (the CPU
    /// runtime's cast is not specified to saturate).
    pub saturating_cast: bool,
    /// FP8 codes converted in pairs by PTX `cvt.rn.satfinite.e4m3x2.f32` into whole words
    /// (CUDA sm_89+, 4 or 8 elements per vector). Set at launch; same codes as the scalar cast.
    pub packed_fp8: bool,
    /// The FP8 scale may be folded into the PTX SiLU's constant `k = -log2(e) / scale`: set at
    /// launch for scales up to [`RowConfig::MAX_FOLDED_SCALE`], where `k` stays a normal float
    /// (a larger scale would make `k` subnormal, flushed to zero, and `0 * inf` a NaN code).
    pub scale_foldable: bool,
    /// Units of a plane the shared-memory lane reduction may shuffle across (set at launch from
    /// [`crate::device::reduction_plane_width`]; 1 = no plane operations, as on the CPU
    /// runtime). Rows wider than a plane then add each plane's lanes by shuffles and only the
    /// planes' sums through shared memory (2 barriers instead of `log2(lanes) + 2`).
    pub plane_width: u32,
    /// Set at launch where every cube has one row group (cubes >= groups, a fixed stride) and
    /// gamma is held in registers without prefetch: gamma is loaded after the group's x, in
    /// the loop that then runs once. Loaded before the loop (as a persistent cube does, once
    /// for all its groups), its conversion held the x loads back by one memory round trip
    /// (SASS of the full-grid entries).
    pub gamma_after_x: bool,
    /// The lanes' vectors cover the row exactly (`lanes_per_row * vectors_per_lane` vectors of
    /// `C`): no vector index needs clamping or a test against the row's length, so the first
    /// loads are a few instructions nearer the kernel's start and each row writes under one
    /// condition instead of one per vector. After an L2 flush an SM fetches the kernel's code
    /// from DRAM; the H200 timed a one-wave kernel 0.3 us faster when its code was already in
    /// the L2 (`bench ab` with `RMSNORM_AB_CODE_WARM=1`). Not set for
    /// prefetching kernels, whose loads sit in their loop: there it changed ptxas' register
    /// allocation (FP8 C = 96 with prefetch: 72 -> 96 registers, one cube per SM less, 1.15 ->
    /// 1.41x at T = 399360).
    pub fills_lanes: bool,
}

impl Knobs {
    /// Whether the row stays in registers (read once) for rows of `channels` elements.
    pub fn caches_row(&self, channels: usize) -> bool {
        self.vectors_per_lane > 0
            && self.lanes_per_row as usize * self.vectors_per_lane * self.vector_size >= channels
    }

    /// Units per cube.
    pub fn units_per_cube(&self) -> u32 {
        self.lanes_per_row * self.rows_per_cube
    }

    /// Rows one cube covers per grid-stride step.
    pub fn rows_per_step(&self) -> usize {
        self.rows_per_cube as usize * self.rows_per_unit as usize
    }

    /// The launch's row groups and cubes for `rows` rows: one cube per group, at most
    /// `max_cubes` and the device's `max_grid`.
    pub fn groups_and_cubes(&self, rows: usize, max_grid: usize) -> (usize, usize) {
        let groups = rows.div_ceil(self.rows_per_step().max(1));
        let cubes = groups
            .min(self.max_cubes.map_or(usize::MAX, |m| m as usize))
            .min(max_grid);
        (groups, cubes)
    }

    /// The comptime configuration for rows of `channels` elements: settings that cannot apply
    /// are normalised (no register cache means streaming with gamma from global memory; one
    /// lane means no lane reduction), so equivalent knobs share one compiled kernel.
    pub fn row_config(&self, channels: usize, activation: Activation) -> RowConfig {
        self.row_config_for(channels, activation, Output::Input)
    }

    /// [`Knobs::row_config`] for an output kind.
    pub fn row_config_for(
        &self,
        channels: usize,
        activation: Activation,
        output: Output,
    ) -> RowConfig {
        let cached = self.caches_row(channels);
        RowConfig {
            lanes_per_row: self.lanes_per_row,
            rows_per_cube: self.rows_per_cube,
            rows_per_unit: self.rows_per_unit,
            vectors_per_lane: if cached { self.vectors_per_lane } else { 0 },
            lane_reduce: if self.lanes_per_row == 1 {
                LaneReduce::Plane
            } else {
                self.lane_reduce
            },
            gamma: if cached { self.gamma } else { GammaIn::Global },
            activation,
            fast_math: self.fast_math && activation == Activation::Silu,
            prefetch: self.prefetch && cached,
            f32_cache: self.f32_cache && self.prefetch && cached,
            word_cache: self.word_cache && cached && !(self.f32_cache && self.prefetch),
            groups_per_ticket: self.groups_per_ticket,
            bf16_input: false,
            bf16_gamma: false,
            output,
            saturating_cast: false,
            packed_fp8: false,
            scale_foldable: false,
            plane_width: 1,
            gamma_after_x: false,
            fills_lanes: cached
                && !self.prefetch
                && self.lanes_per_row as usize * self.vectors_per_lane * self.vector_size
                    == channels,
        }
    }
}

impl RowConfig {
    /// Whether a launch of this configuration whose cubes each have one row group
    /// (`one_group_per_cube`) loads gamma after x ([`RowConfig::gamma_after_x`]): gamma in
    /// registers, no prefetch, a fixed stride.
    pub fn loads_gamma_after_x(&self, one_group_per_cube: bool) -> bool {
        one_group_per_cube
            && self.gamma == GammaIn::Registers
            && !self.prefetch
            && self.groups_per_ticket == 0
    }

    /// Whether rows are packed side by side into planes: a plane reduction over a lane count
    /// that is not a power of two (the butterfly needs aligned power-of-two groups; packing
    /// keeps every row inside one plane and leaves only `plane % lanes` units of it idle, e.g.
    /// 6 lanes for the 12 vectors of C = 96: 5 rows per plane of 32, 2 units idle, where 16
    /// power-of-two lanes would leave 4 of every 16 idle).
    pub fn packs_rows(&self) -> bool {
        self.lane_reduce == LaneReduce::Plane
            && self.lanes_per_row > 1
            && !self.lanes_per_row.is_power_of_two()
    }

    /// Rows side by side in one plane when [`Self::packs_rows`].
    pub fn rows_per_plane(&self) -> u32 {
        (self.plane_width / self.lanes_per_row.max(1)).max(1)
    }

    /// Units of a cube: `lanes x rows_per_cube`, or whole planes when [`Self::packs_rows`]
    /// (the cube is then `plane_width x rows_per_cube / rows_per_plane`).
    pub fn units_per_cube(&self) -> u32 {
        if self.packs_rows() {
            self.plane_width * self.rows_per_cube / self.rows_per_plane()
        } else {
            self.lanes_per_row * self.rows_per_cube
        }
    }

    /// The PTX SiLU works on `t = -y log2(e)` (the row scale carries the `-log2(e)`), see
    /// `activation::output_value`.
    pub fn exponent_domain(&self) -> bool {
        self.fast_math && self.activation == Activation::Silu
    }

    /// `2^100`: the largest FP8 scale folded into the SiLU's constant.
    pub const MAX_FOLDED_SCALE: f32 = 1.267_650_6e30;

    /// The FP8 scale is folded into the PTX SiLU's constant (not with amax, which needs `y`,
    /// nor for scales above [`Self::MAX_FOLDED_SCALE`]).
    pub fn folds_out_scale(&self) -> bool {
        self.exponent_domain() && self.output == Output::Fp8E4M3 && self.scale_foldable
    }
}

impl core::fmt::Display for Knobs {
    /// Compact form, also accepted by [`Knobs::parse`]:
    /// `v8.l16.r8.u2.c3.plane.greg.m2112` (`m-` for no cube cap; `.fast` appended for
    /// `fast_math`, then `.pf` for `prefetch`, then `.f32` for `f32_cache` or `.wd` for
    /// `word_cache`, then `.tk<k>` for `groups_per_ticket` k > 0).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let reduce = match self.lane_reduce {
            LaneReduce::Plane => "plane",
            LaneReduce::Shared => "shared",
        };
        let gamma = match self.gamma {
            GammaIn::Registers => "greg",
            GammaIn::Shared => "gsh",
            GammaIn::Global => "gglob",
        };
        write!(
            f,
            "v{}.l{}.r{}.u{}.c{}.{reduce}.{gamma}.",
            self.vector_size,
            self.lanes_per_row,
            self.rows_per_cube,
            self.rows_per_unit,
            self.vectors_per_lane
        )?;
        match self.max_cubes {
            Some(m) => write!(f, "m{m}")?,
            None => write!(f, "m-")?,
        }
        if self.fast_math {
            write!(f, ".fast")?;
        }
        if self.prefetch {
            write!(f, ".pf")?;
        }
        if self.f32_cache {
            write!(f, ".f32")?;
        }
        if self.word_cache {
            write!(f, ".wd")?;
        }
        if self.groups_per_ticket > 0 {
            write!(f, ".tk{}", self.groups_per_ticket)?;
        }
        Ok(())
    }
}

impl Knobs {
    /// Parses the form written by `Display` (used by the `RMSNORM_SILU_KNOBS` override).
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.trim().split('.').collect();
        let bad = || {
            format!(
                "knobs `{text}`: expected v<vector>.l<lanes>.r<rows>.u<rows per unit>.c<vectors per \
                 lane>.<plane|shared>.<greg|gsh|gglob>.m<max cubes|->, e.g. v8.l16.r8.u1.c3.plane.greg.m-"
            )
        };
        let (fields, groups_per_ticket) = match parts.as_slice() {
            [fields @ .., tk] if fields.len() >= 8 && tk.starts_with("tk") => {
                match tk[2..].parse::<u32>() {
                    Ok(k) if k > 0 => (fields, k),
                    _ => return Err(bad()),
                }
            }
            fields => (fields, 0),
        };
        let (fields, f32_cache, word_cache) = match fields {
            [fields @ .., "f32"] if fields.len() >= 8 => (fields, true, false),
            [fields @ .., "wd"] if fields.len() >= 8 => (fields, false, true),
            fields => (fields, false, false),
        };
        let (fields, prefetch) = match fields {
            [fields @ .., "pf"] if fields.len() >= 8 => (fields, true),
            fields => (fields, false),
        };
        let (fields, fast_math) = match fields {
            [fields @ .., "fast"] if fields.len() == 8 => (fields, true),
            fields => (fields, false),
        };
        let [v, l, r, u, c, reduce, gamma, m] = fields else {
            return Err(bad());
        };
        let num = |s: &str, prefix: char| -> Result<u64, String> {
            s.strip_prefix(prefix)
                .and_then(|n| n.parse().ok())
                .ok_or_else(bad)
        };
        Ok(Knobs {
            vector_size: num(v, 'v')? as usize,
            lanes_per_row: num(l, 'l')? as u32,
            rows_per_cube: num(r, 'r')? as u32,
            rows_per_unit: num(u, 'u')? as u32,
            vectors_per_lane: num(c, 'c')? as usize,
            lane_reduce: match *reduce {
                "plane" => LaneReduce::Plane,
                "shared" => LaneReduce::Shared,
                _ => return Err(bad()),
            },
            gamma: match *gamma {
                "greg" => GammaIn::Registers,
                "gsh" => GammaIn::Shared,
                "gglob" => GammaIn::Global,
                _ => return Err(bad()),
            },
            max_cubes: match *m {
                "m-" => None,
                m => Some(num(m, 'm')? as u32),
            },
            fast_math,
            prefetch,
            f32_cache,
            word_cache,
            groups_per_ticket,
        })
    }
}

impl crate::table::TextKnobs for Knobs {
    const KERNEL: &'static str = "row";
    fn from_text(text: &str) -> Result<Self, String> {
        Self::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_lanes_only_where_the_lanes_cover_the_row_exactly() {
        let k = Knobs::parse("v8.l4.r32.u1.c3.plane.greg.m-.fast").unwrap();
        let fills = |c| k.row_config(c, Activation::Silu).fills_lanes;
        // 4 lanes x 3 vectors x 8 = 96; narrower rows leave vectors past the row, and rows
        // wider than the lanes' vectors are not cached (streamed).
        assert!(fills(96));
        assert!(!fills(88));
        assert!(!fills(8));
        assert!(!fills(104));
        // Prefetching kernels keep their run-time tests (see `RowConfig::fills_lanes`).
        let pf = Knobs::parse("v8.l4.r32.u1.c3.plane.greg.m792.fast.pf").unwrap();
        assert!(!pf.row_config(96, Activation::Silu).fills_lanes);
    }

    #[test]
    fn display_and_parse_round_trip() {
        let k = Knobs {
            vector_size: 8,
            lanes_per_row: 16,
            rows_per_cube: 8,
            rows_per_unit: 2,
            vectors_per_lane: 3,
            lane_reduce: LaneReduce::Shared,
            gamma: GammaIn::Shared,
            max_cubes: Some(2112),
            fast_math: false,
            prefetch: false,
            f32_cache: false,
            word_cache: false,
            groups_per_ticket: 0,
        };
        assert_eq!(k.to_string(), "v8.l16.r8.u2.c3.shared.gsh.m2112");
        assert_eq!(Knobs::parse(&k.to_string()), Ok(k));
        let k = Knobs {
            max_cubes: None,
            gamma: GammaIn::Global,
            ..k
        };
        assert_eq!(Knobs::parse(&k.to_string()), Ok(k));
        for (fast_math, prefetch, f32_cache, tail) in [
            (true, false, false, ".fast"),
            (false, true, false, ".pf"),
            (true, true, false, ".fast.pf"),
            (false, true, true, ".pf.f32"),
            (true, true, true, ".fast.pf.f32"),
        ] {
            let k = Knobs {
                fast_math,
                prefetch,
                f32_cache,
                ..k
            };
            assert!(k.to_string().ends_with(&format!("m-{tail}")));
            assert_eq!(Knobs::parse(&k.to_string()), Ok(k));
        }
        let w = Knobs {
            word_cache: true,
            fast_math: true,
            ..k
        };
        assert!(w.to_string().ends_with("m-.fast.wd"));
        assert_eq!(Knobs::parse(&w.to_string()), Ok(w));
        let k = Knobs {
            max_cubes: Some(1056),
            prefetch: true,
            groups_per_ticket: 4,
            ..k
        };
        assert!(k.to_string().ends_with("m1056.pf.tk4"));
        assert_eq!(Knobs::parse(&k.to_string()), Ok(k));
        assert!(Knobs::parse("v8.l16.r8.u2.c3.plane.greg.m-.tk1.pf").is_err());
        assert!(Knobs::parse("v8.l16.r8.u2.c3.plane.greg.m-.tk0").is_err());
        assert!(Knobs::parse("v8.l16.r8.u2.c3.plane.greg.m-.tk").is_err());
        assert!(Knobs::parse("v8.l16.r8.u2.c3.plane.greg.m-.pf.fast").is_err());
        assert!(Knobs::parse("v8.l16.r8.u2.c3.plane.greg.m-.f32.pf").is_err());
        assert!(Knobs::parse("v8.l16.r8.u2.c3.plane.greg.m-.pf.f32.wd").is_err());
        assert!(Knobs::parse("v8.l16.r8.u2.c3.plane.greg.m-.wd.fast").is_err());
        assert!(Knobs::parse("v8.l16").unwrap_err().contains("expected"));
        assert!(Knobs::parse("v8.l16.r8.u2.c3.warp.greg.m-").is_err());
    }
}
