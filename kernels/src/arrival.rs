//! `dgamma` summed inside the backward kernel by the last cubes to arrive, instead of by a
//! second kernel.
//!
//! Each cube of a backward kernel leaves one row of `dgamma` partial sums. A second kernel over
//! those rows costs a launch and a ramp of its own, a third of the whole backward on a small
//! shape such as the Wan decoder's `[1, 384, 1, 60, 104]`. Here the cubes sum them in two
//! levels as they finish: the cubes are cut into groups of about `sqrt(cubes)`; the last cube
//! of a group to arrive (an atomic count) adds its group's rows in order into one group row;
//! the last group to finish adds the group rows in order into `dgamma`. The order of every
//! addition is fixed by the cube and group indices, never by which cube came last, so the
//! result is deterministic (it differs from the second kernel's order, not from run to run).
//!
//! It needs a runtime that makes one cube's writes visible to another within a dispatch
//! (`device_memory_scope`: CUDA, HIP, Metal; not the CPU runtime, which keeps the second
//! kernel). The counters are zero when a launch starts and left at zero when it ends (the last
//! cube of each level resets its own), so one zeroed buffer serves every launch that is ordered
//! after the previous one: a buffer per device and host thread (cubecl gives each host thread
//! its own stream).

use std::cell::RefCell;
use std::collections::HashMap;

use cubecl::prelude::*;
use cubecl::server::Handle;

/// Counters in the per-thread buffer: groups plus the final level's.
pub const MAX_ARRIVAL_COUNTERS: usize = 1024;

/// How a backward kernel's per-cube `dgamma` rows become `dgamma`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum DgammaReduce {
    /// A second kernel, one cube per column (every runtime).
    SecondKernel,
    /// The last cubes to arrive, inside the backward kernel (runtimes with device-scope
    /// memory ordering only).
    LastArrival,
}

impl DgammaReduce {
    /// [`Self::LastArrival`] where the runtime allows it, else [`Self::SecondKernel`].
    pub fn for_device(client: &Client) -> Self {
        if arrival_supported(client) {
            Self::LastArrival
        } else {
            Self::SecondKernel
        }
    }
}

/// Whether cubes of one dispatch can hand each other their writes (device-scope fences) and
/// count their arrivals with `u32` atomics.
pub fn arrival_supported(client: &Client) -> bool {
    let props = client.properties();
    props.features.device_memory_scope
        && props
            .atomic_type_usage(Type::atomic(u32::elem_type_native()))
            .contains(cubecl::ir::features::AtomicUsage::Add)
}

/// The group size for `cubes` cubes: about `sqrt(cubes)`, so that both levels read about as
/// many rows; `cubes.div_ceil(group) + 1` counters are used.
pub fn arrival_group_size(cubes: usize) -> usize {
    let cubes = cubes.max(1);
    let mut g = (cubes as f64).sqrt().ceil() as usize;
    while cubes.div_ceil(g) + 1 > MAX_ARRIVAL_COUNTERS {
        g += 1;
    }
    g.max(1)
}

/// Rows of scratch the last-arrival sum needs besides the cubes' own: one per group.
pub fn arrival_extra_rows(cubes: usize) -> usize {
    cubes.max(1).div_ceil(arrival_group_size(cubes))
}

thread_local! {
    /// Keyed by the device and the runtime's name (a service of its own per runtime).
    static COUNTERS: RefCell<HashMap<(cubecl::device::DeviceId, &'static str), Handle>> =
        RefCell::new(HashMap::new());
}

/// This host thread's zeroed counter buffer on `client`'s device (created on first use).
pub fn arrival_counters(client: &Client) -> Handle {
    COUNTERS.with(|cache| {
        cache
            .borrow_mut()
            .entry((client.service_id().device, client.name()))
            .or_insert_with(|| client.create_from_slice(&[0u8; 4 * MAX_ARRIVAL_COUNTERS]))
            .clone()
    })
}

/// Called by every unit of every cube after the cube wrote its row `CUBE_POS` of `partial`
/// (`cols` vectors a row; rows `CUBE_COUNT..` are the group rows): the last cube of each group
/// sums the group's rows, and the last group writes `dgamma` (`cols` vectors). Must be reached
/// uniformly (it holds cube barriers); `units` is the cube's unit count.
#[allow(clippy::manual_div_ceil)]
#[cube]
pub fn dgamma_by_arrival<G: Float, V: Size>(
    partial: &mut [Vector<f32, V>],
    dgamma: &mut [Vector<G, V>],
    counters: &mut [Atomic<u32>],
    cols: usize,
    group_size: usize,
    #[comptime] units: usize,
) {
    let cubes = CUBE_COUNT;
    let groups = (cubes + group_size - 1) / group_size;
    let group = CUBE_POS / group_size;
    let first = group * group_size;
    let members = select(first + group_size < cubes, group_size, cubes - first);
    let mut stripes = Shared::<[Vector<f32, V>]>::new_slice(units);
    let mut arrived = Shared::<u32>::new();
    // Release this cube's row, count it, and acquire the rows of the cubes counted before.
    sync_storage();
    if UNIT_POS == 0 {
        *arrived = counters[group].fetch_add(1u32);
    }
    sync_storage();
    if *arrived as usize + 1 == members {
        let single = groups == 1;
        let target = select(single, 0, (cubes + group) * cols);
        sum_rows::<G, V>(
            partial,
            dgamma,
            &mut stripes,
            first * cols,
            members,
            cols,
            target,
            single,
            units,
        );
        if UNIT_POS == 0 {
            counters[group].store(0u32);
        }
        if !single {
            sync_storage();
            if UNIT_POS == 0 {
                *arrived = counters[groups].fetch_add(1u32);
            }
            sync_storage();
            if *arrived as usize + 1 == groups {
                sum_rows::<G, V>(
                    partial,
                    dgamma,
                    &mut stripes,
                    cubes * cols,
                    groups,
                    cols,
                    0,
                    true,
                    units,
                );
                if UNIT_POS == 0 {
                    counters[groups].store(0u32);
                }
            }
        }
    }
}

/// `out[j] = sum_q partial[start + q cols + j]` over `count` rows of `cols` vectors, into
/// `dgamma` (cast) when `to_dgamma`, else into `partial[target + j]`. The whole cube reads at
/// once: each column's rows are split into `units / cols` stripes (unit `t` takes column
/// `t % cols` and rows `t / cols`, `t / cols + stripes`, ..., four running sums in turn) and
/// the stripes are added in order through shared memory, so the order is fixed. Columns beyond
/// the cube's units are taken a cube's worth at a time. Uniform (cube barriers).
#[allow(clippy::too_many_arguments, clippy::manual_div_ceil)]
#[cube]
fn sum_rows<G: Float, V: Size>(
    partial: &mut [Vector<f32, V>],
    dgamma: &mut [Vector<G, V>],
    stripes: &mut Shared<[Vector<f32, V>]>,
    start: usize,
    count: usize,
    cols: usize,
    target: usize,
    to_dgamma: bool,
    #[comptime] units: usize,
) {
    let t = UNIT_POS as usize;
    let width = select(cols < units, cols, units);
    let lanes = units / width;
    let column = t % width;
    let stripe = t / width;
    let mut base = 0usize;
    while base < cols {
        let j = base + column;
        let mut acc = Array::<Vector<f32, V>>::new(4usize);
        #[unroll]
        for k in 0..4 {
            acc[k] = Vector::<f32, V>::new(0.0f32);
        }
        if stripe < lanes && j < cols {
            let step = lanes;
            let mut q = stripe;
            while q + 3 * step < count {
                #[unroll]
                for k in 0..4 {
                    acc[k] += partial[start + (q + k * step) * cols + j];
                }
                q += 4 * step;
            }
            #[unroll]
            for k in 0..3 {
                let r = q + k * step;
                if r < count {
                    acc[k] += partial[start + r * cols + j];
                }
            }
        }
        stripes[t] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        sync_cube();
        if stripe == 0 && j < cols {
            let mut total = stripes[column];
            for s in 1..lanes {
                total += stripes[s * width + column];
            }
            if to_dgamma {
                dgamma[j] = Vector::<G, V>::cast_from(total);
            } else {
                partial[target + j] = total;
            }
        }
        sync_cube();
        base += width;
    }
}
