//! Ticket counters: how the cubes of a persistent grid draw their work in order (the row
//! kernel's `.tk<k>` knob, and the copy-roof experiment's ticketed copy).
//!
//! Two u32 counters in device memory: `[0]` hands out tickets (work items in order), `[1]`
//! counts the cubes that are done. The last cube to finish sets both back to zero, so the
//! buffer is ready for the next launch without a host write or a memset launch. Launches that
//! share a buffer must not overlap: cubecl orders launches on one stream, and a launch on
//! another stream that binds the buffer waits for the first stream's use of it (its
//! multi-stream alignment); a buffer per client and thread keeps even that wait away.

use std::any::TypeId;
use std::cell::RefCell;

use cubecl::device::DeviceId;
use cubecl::prelude::*;
use cubecl::server::Handle;

/// Unit 0 of the cube draws the next ticket; every other unit gets 0. Unit 0 writes the value
/// where the cube reads it (shared memory, then a barrier), as late as it can, so the atomic's
/// latency hides behind the cube's work.
#[cube]
pub(crate) fn draw_ticket(counters: &mut [Atomic<u32>]) -> u32 {
    let mut ticket = 0u32;
    if UNIT_POS == 0 {
        ticket = counters[0].fetch_add(1u32);
    }
    ticket
}

/// Called by every cube once, after its last draw has returned: the last cube to get here
/// zeroes both counters for the next launch. (Each cube's draws have been performed by then,
/// because their values were read, so nothing draws after the reset.)
#[cube]
pub(crate) fn finish_tickets(counters: &mut [Atomic<u32>]) {
    if UNIT_POS == 0 {
        let done = counters[1].fetch_add(1u32);
        if done + 1 == CUBE_COUNT_X {
            counters[0].store(0u32);
            counters[1].store(0u32);
        }
    }
}

// The walk of a persistent grid over its work items ("groups"), as the row kernel takes it:
// `groups_per_ticket` k = 0 walks them `CUBE_COUNT` apart; k > 0 draws tickets in order, each
// worth k consecutive groups. The walk's state is a 4-word array:
//   [0] the position of the current group in its ticket, [1] the ticket after the current one,
//   [2] the ticket drawn during the current one (the one after that), [3] the shared slot
//   (0 or 1) the next publication goes to.
// Shared `drawn` (4 words): slots 0 and 1 alternate per ticket, slot 2 holds the first ticket,
// slot 3 takes the last pending draw at the end. A slot is written only after a barrier that
// follows every read of its previous value.

/// Words of the walk's state array and of its shared slots.
pub(crate) const WALK_WORDS: usize = 4;

/// Starts the walk: returns the cube's first group.
#[cube]
pub(crate) fn walk_start(
    tickets: &mut [Atomic<u32>],
    drawn: &mut Shared<[u32]>,
    walk: &mut Array<u32>,
    #[comptime] per_ticket: u32,
) -> usize {
    // The row kernels launch 1-D grids: the x position alone (CUBE_POS folds in y and z, a few
    // instructions ahead of the first loads).
    let mut group = CUBE_POS_X as usize;
    if comptime![per_ticket > 0] {
        let first = draw_ticket(tickets);
        let second = draw_ticket(tickets);
        if UNIT_POS == 0 {
            drawn[2] = first;
            drawn[1] = second;
        }
        sync_cube();
        group = drawn[2] as usize * comptime![per_ticket as usize];
        walk[0] = 0u32;
        walk[1] = drawn[1];
        walk[2] = 0u32;
        walk[3] = 0u32;
    }
    group
}

/// The group after `group`, known before `group` is worked on (the prefetch loads it).
#[cube]
pub(crate) fn walk_next(walk: &Array<u32>, group: usize, #[comptime] per_ticket: u32) -> usize {
    let mut next = group + CUBE_COUNT_X as usize;
    if comptime![per_ticket > 0] {
        if walk[0] + 1 < comptime![per_ticket] {
            next = group + 1;
        } else {
            next = walk[1] as usize * comptime![per_ticket as usize];
        }
    }
    next
}

/// At the first group of a ticket unit 0 draws the ticket after the next one; its value is
/// needed only when the ticket ends, so the atomic's latency hides behind the work.
#[cube]
#[allow(clippy::collapsible_if)] // a comptime branch holds a runtime one
pub(crate) fn walk_draw(
    tickets: &mut [Atomic<u32>],
    walk: &mut Array<u32>,
    #[comptime] per_ticket: u32,
) {
    if comptime![per_ticket > 0] {
        if walk[0] == 0 {
            walk[2] = draw_ticket(tickets);
        }
    }
}

/// After a group: at the end of a ticket unit 0 publishes the ticket it drew, one barrier, and
/// every unit takes it as the ticket after the next one. Uniform across the cube.
#[cube]
pub(crate) fn walk_advance(
    drawn: &mut Shared<[u32]>,
    walk: &mut Array<u32>,
    #[comptime] per_ticket: u32,
) {
    if comptime![per_ticket > 0] {
        walk[0] += 1u32;
        if walk[0] == comptime![per_ticket] {
            walk[0] = 0u32;
            let slot = walk[3] as usize;
            if UNIT_POS == 0 {
                drawn[slot] = walk[2];
            }
            sync_cube();
            walk[1] = drawn[slot];
            walk[3] = 1u32 - walk[3];
        }
    }
}

/// Ends the walk: unit 0's last draw is used (so performed) before the cube counts itself
/// done in [`finish_tickets`].
#[cube]
pub(crate) fn walk_finish(
    tickets: &mut [Atomic<u32>],
    drawn: &mut Shared<[u32]>,
    walk: &Array<u32>,
    #[comptime] per_ticket: u32,
) {
    if comptime![per_ticket > 0] {
        if UNIT_POS == 0 {
            drawn[3] = walk[2];
        }
        finish_tickets(tickets);
    }
}

thread_local! {
    /// One zeroed pair of counters per client (device and runtime) on this thread.
    static COUNTERS: RefCell<Vec<((DeviceId, TypeId), Handle)>> = const { RefCell::new(Vec::new()) };
}

/// The zeroed ticket counters of `client` for launches from this thread, created on first use
/// and kept for the thread's life (8 bytes).
pub fn ticket_counters(client: &Client) -> Handle {
    let id = client.service_id();
    let key = (id.device, id.service);
    COUNTERS.with(|counters| {
        let mut counters = counters.borrow_mut();
        if let Some((_, handle)) = counters.iter().find(|(k, _)| *k == key) {
            return handle.clone();
        }
        let handle = client.create_from_slice(&[0u8; 8]);
        counters.push((key, handle.clone()));
        handle
    })
}
