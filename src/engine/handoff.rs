//! Buffer switches and hand-off: what happens when a rolling buffer fills (oneshot full mark,
//! circular reuse with pins, streaming retirement and its grace periods), when the durable
//! buffer fills, and the delivery of save requests to the [`BufferHandler`](super::BufferHandler). The protocol is
//! described in the [`context`](super) module docs ("Hand-off").

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use super::{Inner, State, TraceState};
use crate::buffer::header::{BufferingMode, FLAG_DURABLE_BUFFER_FULL};
use crate::engine::allocator::{
    hold_region, make_gate, packed_offset, packed_wrapped, GATE_DURABLE_FULL, GATE_STARTED,
    HOLD_ALLOCATING, PIN_CAPACITY, WRAPPED_MASK,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BufferState {
    /// Being written.
    Current,
    /// Left by a switch; waiting for its writers (and, streaming, for durable writers).
    Retiring,
    /// Streaming: handed to the handler, not saved yet.
    AwaitingSave { wrapped_count: u32 },
    /// Can become current.
    Ready,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum RetireStep {
    /// Grace period for the writers that were in the buffer.
    Writers,
    /// Streaming: grace period for durable records below `durable_data_end`.
    Durable { durable_data_end: u64 },
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Retirement {
    pub(super) wrapped_count: u32,
    pub(super) buffer: usize,
    pub(super) step: RetireStep,
}

/// Holds to pin at a circular switch (fixed capacity: no allocation on the switch path).
#[derive(Debug, Default)]
struct Pins {
    holds: [u64; PIN_CAPACITY],
    len: usize,
}

impl Pins {
    fn push(&mut self, hold: u64) -> bool {
        if self.holds[..self.len].contains(&hold) {
            return true;
        }
        if self.len == PIN_CAPACITY {
            return false;
        }
        self.holds[self.len] = hold;
        self.len += 1;
        true
    }

    fn as_slice(&self) -> &[u64] {
        &self.holds[..self.len]
    }
}

/// A pending handler call, made after the mutex is released.
pub(super) type Notification = Option<(u32, u64)>;

// === impl Inner: buffer switches and hand-off ===

impl Inner {
    /// The hand-off delivery turn (see `delivering`); call with `state` held.
    pub(super) fn delivery_turn(&self) -> MutexGuard<'_, ()> {
        self.delivering
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// End of durable data right now (the full mark once the buffer filled).
    pub(super) fn durable_data_end(&self, st: &State) -> u64 {
        if self.mode == BufferingMode::Oneshot {
            return 0;
        }
        let end = st
            .durable_full_at
            .unwrap_or_else(|| self.durable.allocated());
        end.min(self.durable.size())
    }

    pub(super) fn rolling_data_end_now(&self) -> u64 {
        packed_offset(self.rolling.load()).min(self.rolling.rolling_size())
    }

    /// Called by a writer whose reservation found the buffer of (20-bit) wrapped count
    /// `wrapped` full. Returns true if the caller should try again (a switch happened).
    pub(crate) fn on_rolling_full(&self, wrapped: u32) -> bool {
        let current = (wrapped & 1) as usize;
        match self.mode {
            BufferingMode::Oneshot => {
                let mut st = self.lock();
                if !st.oneshot_full {
                    st.oneshot_full = true;
                    let end = self.rolling_data_end_now();
                    // ATOMICS: `Release`, for the manager (`MarkOneshotBufferFull`).
                    self.header().rolling_data_end[0].store(end, Ordering::Release);
                }
                return false;
            }
            BufferingMode::Circular | BufferingMode::Streaming => {}
        }
        // Streaming quick check without the mutex: the other buffer is not saved yet.
        // ATOMICS: `Acquire` hint, re-checked under the mutex. A switch stores `ready[next] =
        // false` after resetting the allocator word, so if the `false` we read is that store,
        // the word we read next is the reset one and we retry rather than drop.
        if self.mode == BufferingMode::Streaming && !self.ready[current ^ 1].load(Ordering::Acquire)
        {
            // Someone may already have switched away from `wrapped`: then retry.
            return packed_wrapped(self.rolling.load()) != wrapped;
        }
        let notification;
        let turn;
        {
            let mut st = self.lock();
            if st.phase != TraceState::Started || st.durable_full_at.is_some() {
                return false;
            }
            if st.wrapped_count & WRAPPED_MASK != wrapped {
                return true; // someone else switched while we waited for the lock
            }
            let current = (st.wrapped_count & 1) as usize;
            let next = current ^ 1;
            let mut pins = Pins::default();
            let reusable = match self.mode {
                BufferingMode::Streaming => st.buffers[next] == BufferState::Ready,
                _ => self.circular_pins(&mut st, next, &mut pins),
            };
            if !reusable {
                return false;
            }
            self.switch_locked(&mut st, current, next, pins.as_slice());
            notification = self.service_locked(&mut st);
            turn = notification.is_some().then(|| self.delivery_turn());
        }
        self.deliver(notification);
        drop(turn);
        true
    }

    /// Circular reuse of `next`: the holds in `next` of every writer that has been in flight
    /// since `next` was retired, to be pinned in the new lap. False if one of them is between
    /// its `fetch_add` and its hold store (its run is unknown) or there are too many holds.
    fn circular_pins(&self, st: &mut State, next: usize, pins: &mut Pins) -> bool {
        let Some(retirement) = st.retirement else {
            return true;
        };
        if retirement.buffer != next || self.slots.is_grace_complete(&mut st.grace) {
            return true;
        }
        for slot in self.slots.outstanding(&st.grace) {
            // ATOMICS: `Acquire`: see `WriterSlot::chunk_hold` / `run_hold`.
            let holds = [
                slot.run_hold.load(Ordering::Acquire),
                slot.chunk_hold.load(Ordering::Acquire),
            ];
            for hold in holds {
                if hold == HOLD_ALLOCATING {
                    return false;
                }
                if let Some((buffer, _, _)) = hold_region(hold) {
                    if buffer == next && !pins.push(hold) {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// `SwitchRollingBufferLocked`, plus the header updates of the 2025 engine (wrapped count
    /// and drop count on every switch) and the start of the retirement grace period.
    fn switch_locked(&self, st: &mut State, current: usize, next: usize, pins: &[u64]) {
        let header = self.header();
        let end = self.rolling_data_end_now();
        let retired_count = st.wrapped_count;
        st.wrapped_count = retired_count.wrapping_add(1);
        st.buffers[current] = BufferState::Retiring;
        st.buffers[next] = BufferState::Current;
        // ATOMICS (all header stores): `Release`, for a manager reading after a save request,
        // stop or crash.
        header.rolling_data_end[current].store(end, Ordering::Release);
        header.rolling_data_end[next].store(0, Ordering::Release);
        header
            .wrapped_count
            .store(st.wrapped_count, Ordering::Release);
        self.store_drop_counts(st);
        // ATOMICS: `Release`: see `ready`.
        self.ready[current].store(false, Ordering::Release);
        // Pins for the new lap, then the gate, then the allocator word (which opens the lap;
        // see `RollingAllocator::word`).
        self.rolling.set_pins(st.wrapped_count, pins);
        let gate = make_gate(st.generation, st.wrapped_count, GATE_STARTED);
        // ATOMICS: `Release`: see `gate`.
        self.gate.store(gate, Ordering::Release);
        self.rolling.reset(st.wrapped_count);
        // Only now: a writer that finds `ready[next]` false with `Acquire` then also sees the
        // reset word, so it retries in the new lap instead of dropping (see `on_rolling_full`).
        self.ready[next].store(false, Ordering::Release);
        st.retirement = Some(Retirement {
            wrapped_count: retired_count,
            buffer: current,
            step: RetireStep::Writers,
        });
        // Streaming waits for the retired buffer's writers (the manager needs complete data)
        // and asks them to report; circular only keeps the snapshot for the next reuse.
        let ask_report = self.mode == BufferingMode::Streaming;
        let State {
            grace,
            last_fence_error,
            ..
        } = st;
        if let Err(error) = self.slots.begin_grace(self.fences, grace, ask_report) {
            *last_fence_error = Some(error.to_string());
        }
    }

    /// The durable buffer did not fit a reservation at `offset`: record the full mark, flag the
    /// header, and stop tracing (every later reservation is dropped and counted).
    pub(crate) fn on_durable_full(&self, offset: u64) {
        let mut st = self.lock();
        let mark = st.durable_full_at.map_or(offset, |m| m.min(offset));
        st.durable_full_at = Some(mark);
        let header = self.header();
        // ATOMICS: `Release`, for the manager; `fetch_or` because only this bit is ours here.
        header
            .durable_data_end
            .store(mark.min(self.durable.size()), Ordering::Release);
        header
            .fxtrace_flags
            .fetch_or(FLAG_DURABLE_BUFFER_FULL, Ordering::Release);
        if st.phase == TraceState::Started {
            let gate = make_gate(
                st.generation,
                st.wrapped_count,
                GATE_STARTED | GATE_DURABLE_FULL,
            );
            // ATOMICS: `Release`; writers see it at their next section or refill.
            self.gate.store(gate, Ordering::Release);
        }
    }

    /// Run the service routine: complete the pending retirement if its writers are done.
    pub(crate) fn service(&self) -> bool {
        let (notification, pending, turn) = {
            let mut st = self.lock();
            let notification = self.service_locked(&mut st);
            let turn = notification.is_some().then(|| self.delivery_turn());
            (notification, st.retirement.is_some(), turn)
        };
        self.deliver(notification);
        drop(turn);
        pending
    }

    pub(super) fn service_locked(&self, st: &mut State) -> Notification {
        loop {
            let retirement = st.retirement?;
            if !self.slots.is_grace_complete(&mut st.grace) {
                return None;
            }
            match (self.mode, retirement.step) {
                (BufferingMode::Streaming, RetireStep::Writers) => {
                    // Durable records below this end may still be in flight: wait for them too.
                    let durable_data_end = self.durable_data_end(st);
                    st.retirement = Some(Retirement {
                        step: RetireStep::Durable { durable_data_end },
                        ..retirement
                    });
                    let State {
                        grace,
                        last_fence_error,
                        ..
                    } = st;
                    if let Err(error) = self.slots.begin_grace(self.fences, grace, true) {
                        *last_fence_error = Some(error.to_string());
                        // Retry the whole step later.
                        st.retirement = Some(retirement);
                        return None;
                    }
                }
                (BufferingMode::Streaming, RetireStep::Durable { durable_data_end }) => {
                    st.retirement = None;
                    st.buffers[retirement.buffer] = BufferState::AwaitingSave {
                        wrapped_count: retirement.wrapped_count,
                    };
                    return Some((retirement.wrapped_count, durable_data_end));
                }
                _ => {
                    // Circular: the buffer may be entered again.
                    st.retirement = None;
                    st.buffers[retirement.buffer] = BufferState::Ready;
                    // ATOMICS: `Release`: see `ready`.
                    self.ready[retirement.buffer].store(true, Ordering::Release);
                    return None;
                }
            }
        }
    }

    pub(super) fn deliver(&self, notification: Notification) {
        if let Some((wrapped_count, durable_data_end)) = notification {
            self.handler
                .notify_buffer_full(wrapped_count, durable_data_end);
        }
    }
}
