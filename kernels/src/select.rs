//! Knob selection at launch, in this order:
//! 1. `RMSNORM_SILU_KNOBS=<knobs>` (the `Display` form of [`Knobs`]) forces a config for
//!    experiments, for every shape it is valid for (a malformed value panics);
//! 2. the device architecture's tuned table ([`crate::lut`]): exact entry, else nearest T for
//!    the same C;
//! 3. for a C the table lacks, [`table_derived_knobs`] (the nearest tuned entry adapted to C);
//! 4. [`heuristic_knobs`], valid for every device, C and row count.
//!
//! The choice and its source are logged at debug level, and remembered per device, problem,
//! element sizes, output kind and alignment: a repeated call neither reads the environment
//! (read once per process) nor scans the tables again.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use cubecl::prelude::*;

use crate::device::{device_sm, has_ptx_math, threads_per_sm};
use crate::knobs::{GammaIn, Knobs, LaneReduce};
use crate::lut;
use crate::problem::RowsProblem;
use crate::validate::validate_knobs;

/// Environment variable that forces a knob configuration.
pub const KNOBS_ENV: &str = "RMSNORM_SILU_KNOBS";

/// Parses the value of [`KNOBS_ENV`].
///
/// # Panics
/// When the value is not a knob string: a typo in an experiment must not silently measure the
/// default selection instead.
pub fn knobs_from_env(text: &str) -> Knobs {
    Knobs::parse(text).unwrap_or_else(|e| {
        panic!("{KNOBS_ENV}=`{text}` is not a knob configuration (e.g. `v8.l16.r8.u1.c3.plane.greg.m-`): {e}")
    })
}

/// Where the selected knobs came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KnobSource {
    Environment,
    Lut(lut::Match),
    /// [`table_derived_knobs`]: a C the table does not have, on a device that has a table.
    TableDerived,
    Heuristic,
}

/// The table key of an element size: tables are keyed by output kind (2-byte in and out is
/// `bf16`, which f16 shares).
pub fn out_kind(elem_size: usize) -> &'static str {
    match elem_size {
        1 => "fp8",
        2 => "bf16",
        4 => "f32",
        _ => "f64",
    }
}

fn valid(
    client: &Client,
    knobs: &Knobs,
    problem: RowsProblem,
    elem_size: usize,
    gamma_elem_size: usize,
    alignment_bytes: u64,
) -> bool {
    validate_knobs(
        client,
        knobs,
        problem,
        &[alignment_bytes; 3],
        &[elem_size, gamma_elem_size, elem_size],
    )
    .is_ok()
}

/// Chooses knobs for `problem` (see the module docs) and says where they came from.
/// `alignment_bytes` is the largest power of two that divides every buffer's byte offset.
pub fn select_knobs_with_source(
    client: &Client,
    problem: RowsProblem,
    elem_size: usize,
    gamma_elem_size: usize,
    alignment_bytes: u64,
) -> (Knobs, KnobSource) {
    select_output_knobs_with_source(
        client,
        problem,
        elem_size,
        gamma_elem_size,
        out_kind(elem_size),
        alignment_bytes,
    )
}

/// [`select_knobs_with_source`] for an output kind other than the input's (e.g. `"fp8"`): the
/// table's entries for that output first, then those for the input's kind, then the
/// table-derived knobs, then the heuristic.
pub fn select_output_knobs_with_source(
    client: &Client,
    problem: RowsProblem,
    elem_size: usize,
    gamma_elem_size: usize,
    out: &str,
    alignment_bytes: u64,
) -> (Knobs, KnobSource) {
    // A client's properties live as long as the client (one per device for the process), so
    // their address names the device.
    let device = std::ptr::from_ref(client.properties()) as usize;
    let key = SelectionKey {
        device,
        problem,
        elem_size,
        gamma_elem_size,
        alignment_bytes,
    };
    let cache = SELECTIONS.get_or_init(|| Mutex::new(HashMap::new()));
    let known = cache
        .lock()
        .expect("knob selection cache")
        .get(out)
        .and_then(|by_key| by_key.get(&key).copied());
    if let Some(chosen) = known {
        return chosen;
    }
    let chosen = choose_output_knobs(
        client,
        problem,
        elem_size,
        gamma_elem_size,
        out,
        alignment_bytes,
    );
    cache
        .lock()
        .expect("knob selection cache")
        .entry(out.to_string())
        .or_default()
        .insert(key, chosen);
    chosen
}

/// What a selection depends on besides the device's fixed properties and the output kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SelectionKey {
    device: usize,
    problem: RowsProblem,
    elem_size: usize,
    gamma_elem_size: usize,
    alignment_bytes: u64,
}

/// The selections made, by output kind (looked up by `&str`: no allocation on a repeated call).
type Selections = HashMap<String, HashMap<SelectionKey, (Knobs, KnobSource)>>;

static SELECTIONS: OnceLock<Mutex<Selections>> = OnceLock::new();

/// The configuration [`KNOBS_ENV`] forces, read once per process.
fn forced_knobs() -> Option<Knobs> {
    static FORCED: OnceLock<Option<Knobs>> = OnceLock::new();
    *FORCED.get_or_init(|| {
        std::env::var(KNOBS_ENV)
            .ok()
            .map(|text| knobs_from_env(&text))
    })
}

/// [`select_output_knobs_with_source`] without the memory.
fn choose_output_knobs(
    client: &Client,
    problem: RowsProblem,
    elem_size: usize,
    gamma_elem_size: usize,
    out: &str,
    alignment_bytes: u64,
) -> (Knobs, KnobSource) {
    let ok = |k: &Knobs| {
        valid(
            client,
            k,
            problem,
            elem_size,
            gamma_elem_size,
            alignment_bytes,
        )
    };
    let chosen = if let Some(k) = forced_knobs().and_then(|k| {
        if ok(&k) {
            Some(k)
        } else {
            // A forced config cannot fit every shape (e.g. 8-wide vectors for C = 3):
            // those shapes use the normal selection, and say so.
            log::warn!("{KNOBS_ENV}={k} is not valid for {problem:?}; not used for it");
            None
        }
    }) {
        (k, KnobSource::Environment)
    } else if let Some((k, how)) = device_sm(client).and_then(|sm| {
        let sms = client.properties().hardware.num_streaming_multiprocessors;
        lut::lookup(sm, problem.channels, problem.rows, out)
            .or_else(|| lut::lookup(sm, problem.channels, problem.rows, out_kind(elem_size)))
            .map(|(e, how)| (e.knobs_for(sms), how))
            .filter(|(k, _)| ok(k))
    }) {
        (k, KnobSource::Lut(how))
    } else if let Some(k) =
        table_derived_knobs(client, problem, elem_size, gamma_elem_size, alignment_bytes)
    {
        (k, KnobSource::TableDerived)
    } else {
        let k = heuristic_knobs(client, problem, elem_size, gamma_elem_size, alignment_bytes);
        (k, KnobSource::Heuristic)
    };
    log::debug!(
        "rms_norm_silu knobs for rows={} C={}: {} ({:?})",
        problem.rows,
        problem.channels,
        chosen.0,
        chosen.1
    );
    chosen
}

/// [`select_knobs_with_source`] without the source.
pub fn select_knobs(
    client: &Client,
    problem: RowsProblem,
    elem_size: usize,
    gamma_elem_size: usize,
    alignment_bytes: u64,
) -> Knobs {
    select_knobs_with_source(client, problem, elem_size, gamma_elem_size, alignment_bytes).0
}

/// Largest register cache per lane, in vectors. Beyond it the streaming variant is used.
pub const MAX_VECTORS_PER_LANE: usize = 8;

/// Row counts from which the heuristic keeps two rows in flight per unit.
const LONG_INPUT_ROWS: usize = 16_384;

/// Units per cube the heuristic aims for on a GPU.
const TARGET_UNITS_PER_CUBE: u32 = 128;

/// A candidate fallback for shapes outside the table, derived from the nearest tuned entry:
/// its lanes per row, cube shape, rows in flight, gamma placement and occupancy, with the
/// vector width and register cache recomputed for this C (lanes doubled until at most 16
/// vectors per lane, at most 2 for rows more than twice the entry's width; on long inputs
/// fewer lanes where they leave fewer lanes idle; shared-memory reduction above a plane).
/// `None` without a table for the device. [`select_knobs`] takes it before
/// [`heuristic_knobs`]: on the H200 (2026-11-30, the `fallback` benchmark, C = 48, 200, 768,
/// 1536 x T = 1000, 50000, 1597440) it was within 15% of the best configuration on 11 of 12
/// shapes (worst 1.28x, C = 200, T = 50000) against 7 of 12 for the heuristic (worst 1.48x);
/// with the later rules on all 18 shapes with C = 2048 and 4096 (2026-12-01).
pub fn table_derived_knobs(
    client: &Client,
    problem: RowsProblem,
    elem_size: usize,
    gamma_elem_size: usize,
    alignment_bytes: u64,
) -> Option<Knobs> {
    let sm = device_sm(client)?;
    let entry = lut::nearest(sm, problem.channels, problem.rows, out_kind(elem_size))?;
    let sms = client.properties().hardware.num_streaming_multiprocessors;
    let base = entry.knobs_for(sms);
    let vector_size =
        pick_vector_size(client, problem, elem_size, gamma_elem_size, alignment_bytes);
    let vecs = problem.channels / vector_size;
    // A packed entry's lane count (e.g. 6 lanes for the 12 vectors of C = 96) fits only its
    // own C: other widths start from the next power of two.
    let same_width = problem.channels == entry.channels && vector_size == base.vector_size;
    let (units, first_lanes) = if same_width {
        (base.units_per_cube(), base.lanes_per_row)
    } else {
        (
            base.units_per_cube().next_power_of_two(),
            base.lanes_per_row.next_power_of_two(),
        )
    };
    let mut lanes = first_lanes.min(vecs.next_power_of_two() as u32).max(1);
    // Rows more than twice as wide as the entry's take more lanes rather than more vectors per
    // lane: at most two (on the H200 the tuner's best for C = 4096 at T = 1000 and 50000 is
    // 256 lanes x 2 vectors; the C = 1024 entries' 4 vectors per lane became 16 there, 2.2x
    // slower, 2026-12-01).
    let most_vectors = if problem.channels > 2 * entry.channels {
        2
    } else {
        16
    };
    while vecs.div_ceil(lanes as usize) * base.rows_per_unit as usize > most_vectors && lanes < 1024
    {
        lanes *= 2;
    }
    // Long inputs of a width the table does not have: fewer lanes where they leave fewer idle
    // vector slots (at most 4 vectors per lane; the larger lane count on ties). The tuner's own
    // entries fit rows exactly from T = 24960 on (C = 96: 4 lanes x 3 vectors, 16 x 1 below;
    // 189 rows per SM on the H200's 132), and on the H200 C = 48 at T = 1597440 ran 1.17x
    // slower on the C = 64 entry's 8 lanes (6 vectors, 2 lanes idle) than on 2 lanes x 3
    // vectors.
    const LONG_ROWS_PER_SM: usize = 189;
    let long = problem.rows >= LONG_ROWS_PER_SM * sms.unwrap_or(1).max(1) as usize;
    if problem.channels != entry.channels && long {
        let idle = |l: u32| vecs.div_ceil(l as usize) * l as usize - vecs;
        let mut fewer = lanes;
        while fewer > 1 && vecs.div_ceil(fewer as usize / 2) <= 4 {
            fewer /= 2;
            if idle(fewer) < idle(lanes) {
                lanes = fewer;
            }
        }
    }
    let plane = client.properties().hardware.plane_size_min;
    let vectors_per_lane = vecs.div_ceil(lanes as usize);
    // Keep the entry's register budget (vectors per lane x rows in flight): a wider C gets
    // fewer rows per unit rather than more registers (on the H200 the tuner's best for C = 1536
    // and 2048 hold one row per unit where the C = 1024 entry holds two).
    let slots = base.vectors_per_lane.max(1) * base.rows_per_unit as usize;
    let rows_per_unit = (slots / vectors_per_lane).clamp(1, base.rows_per_unit as usize) as u32;
    let k = Knobs {
        vector_size,
        rows_per_unit,
        lanes_per_row: lanes,
        rows_per_cube: (units / lanes).max(1),
        vectors_per_lane,
        lane_reduce: if lanes <= plane {
            LaneReduce::Plane
        } else {
            LaneReduce::Shared
        },
        // The ticketed walk pays only for row groups of the sizes it was measured on (8-16 KB
        // at T = 399360; groups of a few KB and the shared-memory reduction lose up to 30% with
        // it, H200 2026-12-02): another width walks with the grid stride.
        groups_per_ticket: if problem.channels == entry.channels {
            base.groups_per_ticket
        } else {
            0
        },
        ..base
    };
    // The entry's prefetch carries over where it can run here (not, e.g., with the 2-byte
    // vectors of C = 33 in bf16: prefetch stages whole 32-bit words).
    [
        k,
        Knobs {
            prefetch: false,
            f32_cache: false,
            word_cache: false,
            ..k
        },
    ]
    .into_iter()
    .find(|k| {
        valid(
            client,
            k,
            problem,
            elem_size,
            gamma_elem_size,
            alignment_bytes,
        )
    })
}

/// The fallback: a valid, reasonable configuration for every device, C and row count.
pub fn heuristic_knobs(
    client: &Client,
    problem: RowsProblem,
    elem_size: usize,
    gamma_elem_size: usize,
    alignment_bytes: u64,
) -> Knobs {
    let hw = &client.properties().hardware;
    let vector_size =
        pick_vector_size(client, problem, elem_size, gamma_elem_size, alignment_bytes);
    let vecs = problem.channels / vector_size;
    let has_plane_ops = client
        .features()
        .plane
        .contains(cubecl::ir::features::Plane::Ops);
    let plane = if has_plane_ops { hw.plane_size_min } else { 1 };
    let max_units = hw.max_units_per_cube.max(1);

    // Lanes per row: enough that each lane holds at most MAX_VECTORS_PER_LANE vectors. On a
    // GPU, aim at ~2 vectors per lane and two rows in flight per unit on long inputs (what the
    // H200 tuner picks for most shapes); on the CPU runtime ~4 per lane, one row.
    let gpu = plane >= 32;
    let per_lane_target = if gpu { 2 } else { 4 };
    let wanted = vecs.div_ceil(per_lane_target).next_power_of_two() as u32;
    let largest_pow2_units = if max_units.is_power_of_two() {
        max_units
    } else {
        max_units.next_power_of_two() >> 1
    };
    let (lanes_per_row, lane_reduce) = if wanted <= plane {
        (wanted, LaneReduce::Plane)
    } else if plane >= 32 {
        // Rows wider than a plane's register budget: several planes per row, shared memory.
        let lanes = wanted.min(largest_pow2_units).min(1024);
        if lanes <= plane {
            (lanes, LaneReduce::Plane)
        } else {
            (lanes, LaneReduce::Shared)
        }
    } else {
        // No plane ops (CPU runtime): one unit per row, rows split over the cube's units.
        (1, LaneReduce::Plane)
    };
    let rows_per_cube = if plane >= 32 {
        (TARGET_UNITS_PER_CUBE / lanes_per_row).max(1)
    } else {
        (max_units / lanes_per_row).max(1)
    };
    let per_lane = vecs.div_ceil(lanes_per_row as usize);
    let vectors_per_lane = if per_lane <= MAX_VECTORS_PER_LANE {
        per_lane
    } else {
        0
    };
    // Persistent grid: a few cubes per multiprocessor on a GPU, none on a CPU.
    let max_cubes = hw.num_streaming_multiprocessors.map(|sms| {
        sms * (threads_per_sm(client) as u32 / (lanes_per_row * rows_per_cube)).clamp(1, 16)
    });
    Knobs {
        vector_size,
        lanes_per_row,
        rows_per_cube,
        rows_per_unit: if gpu && vectors_per_lane > 0 && problem.rows >= LONG_INPUT_ROWS {
            2
        } else {
            1
        },
        vectors_per_lane,
        lane_reduce,
        gamma: GammaIn::Registers,
        max_cubes,
        // The PTX approximations of the SiLU: chosen by the H200 tuner for most shapes.
        fast_math: has_ptx_math(client),
        prefetch: false,
        f32_cache: false,
        word_cache: false,
        groups_per_ticket: 0,
    }
}

/// Widest vector (at most 16 bytes) that divides C and both row strides, keeps every buffer
/// offset aligned, and that the device supports.
/// The widest vector (8, 4, 2 or 1 elements, at most 16 bytes of `elem_size` and the device's
/// maximum) that divides every length in `lengths` and whose byte size divides every buffer
/// offset: `offsets` are `(byte offset, element size)` pairs. For kernels without knobs (the
/// backward, the channels-first kernels).
pub fn widest_vector(
    client: &Client,
    elem_size: usize,
    lengths: &[usize],
    offsets: &[(u64, usize)],
) -> usize {
    let hw_max = client.properties().hardware.max_vector_size;
    [8usize, 4, 2, 1]
        .into_iter()
        .find(|&v| {
            v * elem_size <= 16
                && v <= hw_max
                && lengths.iter().all(|l| l.is_multiple_of(v))
                && offsets
                    .iter()
                    .all(|&(o, size)| o.is_multiple_of((v * size) as u64))
        })
        .unwrap_or(1)
}

pub fn pick_vector_size(
    client: &Client,
    problem: RowsProblem,
    elem_size: usize,
    gamma_elem_size: usize,
    alignment_bytes: u64,
) -> usize {
    let hw_max = client.properties().hardware.max_vector_size;
    let mut v = (16 / elem_size.max(1)).max(1);
    while v > 1 {
        let aligned = alignment_bytes.is_multiple_of((v * elem_size) as u64)
            && alignment_bytes.is_multiple_of((v * gamma_elem_size) as u64);
        let divides = problem.channels.is_multiple_of(v)
            && problem.x_row_stride.is_multiple_of(v)
            && problem.out_row_stride.is_multiple_of(v);
        if divides && v <= hw_max && aligned {
            break;
        }
        v /= 2;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_knobs_parse() {
        let k = knobs_from_env("v8.l16.r8.u1.c3.plane.greg.m-");
        assert_eq!(k.to_string(), "v8.l16.r8.u1.c3.plane.greg.m-");
    }

    #[test]
    #[should_panic(expected = "RMSNORM_SILU_KNOBS=`v8.l16` is not a knob configuration")]
    fn malformed_environment_knobs_panic_with_the_value() {
        knobs_from_env("v8.l16");
    }
}
