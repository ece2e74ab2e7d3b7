//! When to free a connection's read buffer. A connection whose input is
//! all consumed and that then reads nothing for a few loop turns gives
//! its buffer back, so idle connections hold none (docs/scale.md); one
//! in a conversation keeps it instead of allocating a fresh buffer, and
//! promoting it to shared storage, for every message (three allocations
//! and about 1,000 instructions per message: docs/performance.md).

use std::collections::VecDeque;

use quickbus_bus::ConnId;

/// Loop turns a connection may go without reading before its emptied
/// buffer is freed: enough for a peer in a ping-pong (read every other
/// turn) or a small round-robin to keep its buffer; while the whole bus is
/// idle, only the connections read in the last few turns hold one.
pub const GRACE_TURNS: u64 = 4;

#[derive(Debug, Default)]
pub struct IdleBuffers {
    turn: u64,
    /// Connections whose buffer a read left empty, with the turn it was in
    /// (ascending).
    emptied: VecDeque<(ConnId, u64)>,
}

impl IdleBuffers {
    /// The current loop turn.
    pub fn turn(&self) -> u64 {
        self.turn
    }

    /// `id`'s read in this turn left its buffer empty.
    pub fn emptied(&mut self, id: ConnId) {
        self.emptied.push_back((id, self.turn));
    }

    /// End the turn: `release(id, turn)` for every connection emptied
    /// `GRACE_TURNS` turns ago; the caller frees the buffer unless the
    /// connection has read since that turn.
    pub fn end_turn(&mut self, mut release: impl FnMut(ConnId, u64)) {
        self.turn += 1;
        while let Some(&(id, at)) = self.emptied.front() {
            if at + GRACE_TURNS > self.turn {
                break;
            }
            self.emptied.pop_front();
            release(id, at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which connections a turn's end releases.
    fn end(idle: &mut IdleBuffers) -> Vec<(u64, u64)> {
        let mut released = Vec::new();
        idle.end_turn(|id, at| released.push((id.0, at)));
        released
    }

    #[test]
    fn an_emptied_buffer_is_offered_for_release_after_the_grace_turns() {
        let mut idle = IdleBuffers::default();
        idle.emptied(ConnId(7));
        for _ in 1..GRACE_TURNS {
            assert_eq!(end(&mut idle), []);
        }
        assert_eq!(end(&mut idle), [(7, 0)]);
        assert_eq!(end(&mut idle), [], "offered once");
    }

    #[test]
    fn each_emptying_is_offered_with_its_own_turn() {
        // A ping-pong peer read every other turn: the caller sees that it
        // read since, by comparing the turn it passes with its last read.
        let mut idle = IdleBuffers::default();
        let mut offered = Vec::new();
        for turn in 0..10 {
            if turn % 2 == 0 {
                idle.emptied(ConnId(1));
            }
            offered.extend(end(&mut idle));
        }
        let expected: Vec<(u64, u64)> = (0..=6).step_by(2).map(|t| (1, t)).collect();
        assert_eq!(offered, expected);
        assert_eq!(idle.turn(), 10);
    }
}
