//! The NVFP4 kernel's launch choices: its knobs, the measured H200 table
//! (`lut/sm90_nvfp4.txt`, by C and nearest T) and the heuristic for every other device and C.

use cubecl::prelude::*;

use super::{BLOCK, GAMMA_AFTER_X_BLOCKS, GAMMA_REGISTER_BLOCKS};
use crate::device::{device_sm, has_ptx_math};
use crate::knobs::LaneReduce;
use crate::table::{self, TextKnobs};

/// Launch parameters of the NVFP4 kernel.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Fp4Knobs {
    /// Elements per load (divides 16).
    pub vector_size: usize,
    /// Units per row: a power of two, or any count up to a plane (rows then packed side by
    /// side into planes, see `Fp4Config::packs_rows`) or, with the shared-memory reduction,
    /// any count up to a plane's width and multiples of it.
    pub lanes_per_row: u32,
    /// Rows per cube.
    pub rows_per_cube: u32,
    /// Rows each unit handles per step (independent rows for the scheduler to interleave; the
    /// per-row work that is not per element, and gamma, shared between them).
    pub rows_per_unit: u32,
    /// Blocks each lane keeps in registers; 0 streams the row (reads it twice).
    pub blocks_per_lane: usize,
    /// How the lanes of a row add their sums of squares.
    pub lane_reduce: LaneReduce,
    /// PTX SiLU (CUDA only), as in [`crate::Knobs::fast_math`].
    pub fast_math: bool,
    /// Cap on the number of cubes (persistent grid); `None`: one cube per row group.
    pub max_cubes: Option<u32>,
    /// Keep the register cache as the input's raw vectors (bf16: half the registers of f32)
    /// and widen each value where it is used (once for its square, once for `y`): one more
    /// integer instruction per element for fewer registers, which pays where the f32 cache
    /// holds occupancy down (several blocks per lane). Only with the
    /// register cache (`blocks_per_lane` covering the row).
    pub raw_cache: bool,
    /// Gamma widened to f32 once per cube into shared memory (each unit reads its blocks'
    /// vectors there) instead of being loaded from global memory and widened for every row
    /// (one integer instruction per element and the loads' address arithmetic, against a
    /// quarter of a shared load per element and one cube barrier). Only with the register
    /// cache; takes the place of gamma in registers. Written `.gs`.
    pub gamma_shared: bool,
}

impl core::fmt::Display for Fp4Knobs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let reduce = match self.lane_reduce {
            LaneReduce::Plane => "plane",
            LaneReduce::Shared => "shared",
        };
        write!(
            f,
            "v{}.l{}.r{}.b{}.{reduce}",
            self.vector_size, self.lanes_per_row, self.rows_per_cube, self.blocks_per_lane
        )?;
        match self.max_cubes {
            Some(m) => write!(f, ".m{m}")?,
            None => write!(f, ".m-")?,
        }
        if self.rows_per_unit != 1 {
            write!(f, ".u{}", self.rows_per_unit)?;
        }
        if self.fast_math {
            write!(f, ".fast")?;
        }
        if self.raw_cache {
            write!(f, ".raw")?;
        }
        if self.gamma_shared {
            write!(f, ".gs")?;
        }
        Ok(())
    }
}

impl Fp4Knobs {
    /// Whether the lanes' register cache holds every block of a row of `channels` elements
    /// (read once); otherwise the kernel streams the row (reads it twice).
    pub fn caches_row(&self, channels: usize) -> bool {
        self.blocks_per_lane > 0
            && self.lanes_per_row as usize * self.blocks_per_lane >= channels.div_ceil(BLOCK)
    }

    /// Whether the kernel keeps gamma in registers for rows of `channels` elements (see
    /// `Fp4Config::gamma_registers`).
    pub fn holds_gamma_in_registers(&self, channels: usize) -> bool {
        self.caches_row(channels)
            && !self.gamma_shared
            && self.blocks_per_lane <= GAMMA_REGISTER_BLOCKS
            && self.max_cubes.is_some()
    }

    /// Whether a launch of these knobs whose cubes each have one row group (`one_group_per_cube`)
    /// loads gamma into registers right after x (`Fp4Config::gamma_after_x`).
    pub fn loads_gamma_after_x(&self, channels: usize, one_group_per_cube: bool) -> bool {
        one_group_per_cube
            && !self.gamma_shared
            && self.caches_row(channels)
            && self.blocks_per_lane <= GAMMA_AFTER_X_BLOCKS
    }

    /// Whether a launch of these knobs whose cubes each have one row group (`one_group_per_cube`)
    /// fills gamma's shared copy right after the x loads (`Fp4Config::gamma_shared_after_x`).
    pub fn fills_gamma_shared_after_x(&self, channels: usize, one_group_per_cube: bool) -> bool {
        self.gamma_shared && one_group_per_cube && self.caches_row(channels)
    }

    /// Whether a launch of these knobs keeps gamma in registers
    /// (`Fp4Config::gamma_registers`): a persistent grid's small cache, or gamma loaded with x
    /// on a grid of one row group per cube.
    pub fn gamma_in_registers(&self, channels: usize, one_group_per_cube: bool) -> bool {
        self.holds_gamma_in_registers(channels)
            || self.loads_gamma_after_x(channels, one_group_per_cube)
    }

    /// Parses the form written by `Display` (`v8.l4.r32.b1.plane.m-.u2.fast.raw.gs`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "NVFP4 knobs `{text}`: expected v<vector>.l<lanes>.r<rows>.b<blocks per lane>.\
                 <plane|shared>.m<max cubes|->[.u<rows per unit>][.fast][.raw][.gs]"
            )
        };
        let parts: Vec<&str> = text.trim().split('.').collect();
        let (fields, gamma_shared) = match parts.as_slice() {
            [fields @ .., "gs"] => (fields, true),
            fields => (fields, false),
        };
        let (fields, raw_cache) = match fields {
            [fields @ .., "raw"] => (fields, true),
            fields => (fields, false),
        };
        let (fields, fast_math) = match fields {
            [fields @ .., "fast"] => (fields, true),
            fields => (fields, false),
        };
        let (fields, rows_per_unit) = match fields {
            [fields @ .., u] if u.starts_with('u') => {
                (fields, u[1..].parse::<u32>().map_err(|_| bad())?)
            }
            fields => (fields, 1),
        };
        let [v, l, r, b, reduce, m] = fields else {
            return Err(bad());
        };
        let num = |s: &str, prefix: char| -> Result<u64, String> {
            s.strip_prefix(prefix)
                .and_then(|n| n.parse().ok())
                .ok_or_else(bad)
        };
        Ok(Fp4Knobs {
            vector_size: num(v, 'v')? as usize,
            lanes_per_row: num(l, 'l')? as u32,
            rows_per_cube: num(r, 'r')? as u32,
            rows_per_unit,
            blocks_per_lane: num(b, 'b')? as usize,
            lane_reduce: match *reduce {
                "plane" => LaneReduce::Plane,
                "shared" => LaneReduce::Shared,
                _ => return Err(bad()),
            },
            fast_math,
            max_cubes: match *m {
                "m-" => None,
                m => Some(num(m, 'm')? as u32),
            },
            raw_cache,
            gamma_shared,
        })
    }
}

/// The measured H200 NVFP4 table: `(C, T, knobs)`.
const SM90_NVFP4: &str = include_str!("../../lut/sm90_nvfp4.txt");

/// The parsed sm_90 NVFP4 table (parsed once; columns `C T knobs best_us heuristic_us
/// copy_us`, the times for the record); panics on a malformed line (compiled in, caught by
/// tests).
pub fn sm90_table() -> &'static [(usize, usize, Fp4Knobs)] {
    static TABLE: std::sync::OnceLock<Vec<(usize, usize, Fp4Knobs)>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        table::compiled_in(
            "NVFP4 LUT",
            SM90_NVFP4,
            "C T knobs best_us heuristic_us copy_us",
            |l| Ok((l.count(0, "C")?, l.count(1, "T")?, l.knobs(2)?)),
        )
    })
}

impl TextKnobs for Fp4Knobs {
    const KERNEL: &'static str = "NVFP4";
    fn from_text(text: &str) -> Result<Self, String> {
        Self::parse(text)
    }
}

/// The NVFP4 knobs for `rows x channels` of `elem_size`-byte inputs: on an sm_90 device with
/// 2-byte inputs, the table entry of the same C with the nearest T (log scale); otherwise, or
/// when the entry cannot run here, [`heuristic_fp4_knobs`].
pub fn select_fp4_knobs(
    client: &Client,
    channels: usize,
    rows: usize,
    elem_size: usize,
) -> Fp4Knobs {
    let heuristic = || heuristic_fp4_knobs(client, channels, elem_size);
    let sm = device_sm(client);
    if sm != Some(90) || elem_size != 2 {
        return heuristic();
    }
    let same_c = sm90_table().iter().filter(|(c, _, _)| *c == channels);
    table::nearest_rows(same_c, |e| e.1, rows)
        .map(|&(_, _, k)| k)
        .filter(|k| {
            let hw = &client.properties().hardware;
            k.vector_size <= hw.max_vector_size
                && k.lanes_per_row * k.rows_per_cube <= hw.max_units_per_cube
                && (k.lane_reduce == LaneReduce::Shared
                    || k.lanes_per_row == 1
                    || k.lanes_per_row <= hw.plane_size_min)
        })
        .unwrap_or_else(heuristic)
}

/// The heuristic NVFP4 knobs for rows of `channels` elements of `elem_size` bytes: rows packed
/// into planes where [`packed_lanes`] finds a lane count that fits the row; else ~2 blocks
/// per lane in registers, a plane-sized or smaller row group on devices with plane ops, a
/// shared-memory reduction over up to 256 lanes for wide rows, streaming beyond that; one lane
/// per row on devices without plane ops (the CPU runtime).
pub fn heuristic_fp4_knobs(client: &Client, channels: usize, elem_size: usize) -> Fp4Knobs {
    let props = client.properties();
    let hw = &props.hardware;
    let plane_ops = client
        .features()
        .plane
        .contains(cubecl::ir::features::Plane::Ops);
    let blocks = channels.div_ceil(BLOCK).max(1);
    let vector_size = (16 / elem_size.max(1))
        .clamp(1, BLOCK)
        .min(hw.max_vector_size.max(1));
    let vector_size = if BLOCK.is_multiple_of(vector_size) {
        vector_size
    } else {
        1
    };
    let fast_math = has_ptx_math(client);
    if !plane_ops || hw.plane_size_min <= 1 {
        return Fp4Knobs {
            vector_size,
            lanes_per_row: 1,
            rows_per_cube: 2.min(hw.max_units_per_cube).max(1),
            rows_per_unit: 1,
            blocks_per_lane: if blocks <= 16 { blocks } else { 0 },
            lane_reduce: LaneReduce::Shared,
            fast_math,
            max_cubes: None,
            raw_cache: false,
            gamma_shared: false,
        };
    }
    let plane = hw.plane_size_min.max(1);
    if let Some(lanes) = packed_lanes(blocks, plane) {
        // Rows packed into planes, four planes per cube (the sweep's winners for C = 96, 160,
        // 192 and 320 on the H200).
        return Fp4Knobs {
            vector_size,
            lanes_per_row: lanes,
            rows_per_cube: plane / lanes * 4,
            rows_per_unit: 1,
            blocks_per_lane: blocks / lanes as usize,
            lane_reduce: LaneReduce::Plane,
            fast_math,
            max_cubes: None,
            raw_cache: false,
            gamma_shared: false,
        };
    }
    let lanes = (blocks.div_ceil(2).next_power_of_two() as u32).min(256);
    let lane_reduce = if lanes <= plane {
        LaneReduce::Plane
    } else {
        LaneReduce::Shared
    };
    let bpl = blocks.div_ceil(lanes as usize);
    let units = 256u32.min(hw.max_units_per_cube);
    Fp4Knobs {
        vector_size,
        lanes_per_row: lanes,
        rows_per_cube: (units / lanes).max(1),
        rows_per_unit: 1,
        blocks_per_lane: if bpl <= 8 { bpl } else { 0 },
        lane_reduce,
        fast_math,
        max_cubes: None,
        raw_cache: false,
        gamma_shared: false,
    }
}

/// The lane count of a packed layout (`Fp4Config::packs_rows`) for rows of `blocks` blocks on
/// planes of `plane` units, where one exists that fits the row exactly with one or two blocks
/// per lane (the fewest), packs at least two rows per plane and leaves at most 2 units of it
/// idle: 3, 5, 6, 10 lanes on planes of 32 (C = 48, 80, 96, 160, 192, 320, ...). Power-of-two
/// counts are the unpacked layouts' business.
pub fn packed_lanes(blocks: usize, plane: u32) -> Option<u32> {
    [1usize, 2]
        .into_iter()
        .filter(|per_lane| blocks.is_multiple_of(*per_lane))
        .map(|per_lane| (blocks / per_lane) as u32)
        .find(|&lanes| {
            lanes >= 3 && !lanes.is_power_of_two() && 2 * lanes <= plane && plane % lanes <= 2
        })
}
