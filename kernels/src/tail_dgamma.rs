//! The dgamma reduction at the end of a backward kernel (`.fd`), instead of a second launch.
//!
//! The backward kernels write one column-major partial per cube and column
//! (`partial[j * parts + cube]`); a second kernel used to sum them. On narrow shapes that
//! second launch is most of what separates the backward from its copy roof: an empty launch
//! after the main kernel costs 2-3 us on the H200 (BENCHMARKS.md, twenty-first session).
//! Earlier in-kernel sums lost because one cube (the last to arrive) did all the reading, one
//! dependent load after another (sixteenth and seventeenth sessions).
//!
//! Here the **last `reducers` cubes to arrive** do it, in parallel: every cube publishes its
//! partials (`sync_storage`, a device-scope release), then takes an arrival ticket; a cube
//! whose ticket is among the last `reducers` waits (unit 0 polls the counter) until every cube
//! has arrived, and then sums the columns `r, r + reducers, ...` (`r` its rank among the
//! reducers), each column's parts in a fixed order. The result does not depend on which cubes
//! came last, so dgamma stays deterministic.
//!
//! Why waiting cannot hang: a waiting cube waits only for cubes that have not arrived yet, and
//! there are fewer of those than reducers. They need a slot on an SM; the waiting cubes hold at
//! most `reducers` slots, and the launch keeps `reducers` at most half the SM count, so at
//! least half the SMs have room once the non-reducing cubes (which never wait) have left. The
//! counters ([`crate::tickets::ticket_counters`]: `[0]` arrivals, `[1]` reducers done) are set
//! back to zero by the last reducer, after every reducer has seen the final arrival count.
//! Needs device-scope memory ordering and plane shuffles (CUDA); other runtimes keep the second
//! kernel ([`tail_reduction_possible`]).

use cubecl::ir::{ElemType, UIntKind};
use cubecl::prelude::*;

use crate::forward::is_gpu;

/// Sums `parts` column-major partials of `vecs` vector columns into `dgamma` in the last
/// `reducers` cubes to arrive (see the module's doc). Every unit of every cube calls it once,
/// after the cube's partials are written. `units` is the cube's unit count (a multiple of
/// `plane`, the plane width); the launch keeps `ceil(vecs / reducers)` within
/// [`max_columns_per_reducer`] ([`reducers_for`]).
#[allow(clippy::too_many_arguments)]
#[allow(clippy::manual_is_multiple_of)] // `is_multiple_of` is not a cube operation
#[cube]
pub(crate) fn reduce_dgamma_in_tail<G: Float, D: Size>(
    partial: &mut [Vector<f32, D>],
    dgamma: &mut [Vector<G, D>],
    counters: &mut [Atomic<u32>],
    parts: usize,
    vecs: usize,
    reducers: usize,
    #[comptime] units: usize,
    #[comptime] plane: usize,
) {
    let planes = comptime![units / plane];
    let mut ticket = Shared::<[u32]>::new_slice(1usize);
    let mut sums = Shared::<[Vector<f32, D>]>::new_slice(units);
    let u = UNIT_POS as usize;
    // Release: this cube's partials are visible to the reducers before its arrival counts.
    sync_storage();
    if u == 0 {
        ticket[0] = counters[0].fetch_add(1u32);
    }
    sync_cube();
    let arrived = ticket[0] as usize;
    let first = parts - reducers;
    if arrived >= first {
        let rank = arrived - first;
        if u == 0 {
            loop {
                if counters[0].load() as usize >= parts {
                    break;
                }
            }
        }
        // Acquire: every cube's partials are visible here.
        sync_storage();
        let mut column = rank;
        let mut slot = 0usize;
        while column < vecs {
            let base = column * parts;
            // Eight running sums per unit, their loads in flight together; parts `u`,
            // `u + units`, ... (a fixed assignment), then the eight in a fixed order.
            let mut acc = Array::<Vector<f32, D>>::new(8usize);
            #[unroll]
            for k in 0..8 {
                acc[k] = Vector::<f32, D>::new(0.0f32);
            }
            let mut p = u;
            while p < parts {
                #[unroll]
                for k in 0..8 {
                    let q = p + k * units;
                    if q < parts {
                        acc[k] += partial[base + q];
                    }
                }
                p += 8 * units;
            }
            let mut total =
                ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            #[unroll]
            for k in 0..comptime![(plane as u32).trailing_zeros()] {
                total += plane_shuffle_xor(total, ((plane as u32) >> 1) >> k);
            }
            if u % plane == 0 {
                sums[slot * planes + u / plane] = total;
            }
            column += reducers;
            slot += 1;
        }
        sync_cube();
        // Unit `s` finishes this reducer's `s`-th column: its planes' sums in plane order.
        let column = rank + u * reducers;
        if u < slot {
            let mut total = sums[u * planes];
            #[unroll]
            for w in 1..planes {
                total += sums[u * planes + w];
            }
            dgamma[column] = Vector::<G, D>::cast_from(total);
        }
        if u == 0 {
            let done = counters[1].fetch_add(1u32) as usize;
            if done + 1 == reducers {
                counters[0].store(0u32);
                counters[1].store(0u32);
            }
        }
    }
}

/// Whether this runtime can run [`reduce_dgamma_in_tail`]: a GPU whose `sync_storage` orders
/// storage across cubes, with 32-bit atomic adds, plane shuffles and a known SM count.
pub fn tail_reduction_possible(client: &Client) -> bool {
    let props = client.properties();
    is_gpu(client)
        && props.features.device_memory_scope
        && props.hardware.num_streaming_multiprocessors.is_some()
        && props
            .atomic_type_usage(cubecl::ir::Type::atomic(ElemType::UInt(UIntKind::U32)))
            .contains(cubecl::features::AtomicUsage::Add)
}

/// The most columns one reducer handles (its planes' sums of every column wait in its `units`
/// shared slots).
pub fn max_columns_per_reducer(units: usize, plane: usize) -> usize {
    plane.min(units)
}

/// How many cubes reduce: one per column where the SMs allow it, at most half the SMs (see the
/// module's doc for why that bound makes the wait safe) and at most `parts`; `None` where a
/// reducer would need more columns than its shared slots hold, or the cube is not a whole
/// number of planes.
pub fn reducers_for(
    client: &Client,
    parts: usize,
    vecs: usize,
    units: usize,
    plane: usize,
) -> Option<usize> {
    let sms = client.properties().hardware.num_streaming_multiprocessors? as usize;
    if plane < 2 || units % plane != 0 {
        return None;
    }
    let reducers = vecs.min(sms / 2).min(parts).max(1);
    (vecs.div_ceil(reducers) <= max_columns_per_reducer(units, plane)).then_some(reducers)
}
