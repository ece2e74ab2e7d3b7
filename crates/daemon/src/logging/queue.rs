//! The lines on their way to the log's thread: a bounded queue, in the
//! order they were logged. A line that finds it full is not kept but
//! counted, where it would have been: the log's thread then writes, at
//! that place, one line saying how many were lost ([`Record::lost`]), so
//! whoever reads the log is told, and told where.

use std::collections::VecDeque;

use super::record::Record;

/// The lines the queue holds at most (a burst of lines larger than a
/// pipe's 64 KiB or journald's queue can take, at around 100 bytes a
/// line). Beyond it, lines are counted as lost: the thread that logs
/// never waits for the log.
pub const BOUND: usize = 1024;

enum Entry {
    Line(Record),
    /// So many lines, logged here, that found the queue full.
    Lost(u64),
}

pub struct Queue {
    entries: VecDeque<Entry>,
    /// The [`Entry::Line`]s among `entries`.
    lines: usize,
    bound: usize,
}

impl Queue {
    pub const fn new(bound: usize) -> Queue {
        Queue {
            entries: VecDeque::new(),
            lines: 0,
            bound,
        }
    }

    /// Queue `record`; false if the queue was full and it was counted as
    /// lost instead. (A count takes no line's place: after one, a line is
    /// taken again once the queue is below its bound.)
    pub fn push(&mut self, record: Record) -> bool {
        if self.lines < self.bound {
            self.entries.push_back(Entry::Line(record));
            self.lines += 1;
            return true;
        }
        match self.entries.back_mut() {
            Some(Entry::Lost(count)) => *count += 1,
            _ => self.entries.push_back(Entry::Lost(1)),
        }
        false
    }

    /// The next line to write: a queued one, or the one saying how many
    /// were lost at this place.
    pub fn pop(&mut self) -> Option<Record> {
        match self.entries.pop_front()? {
            Entry::Line(record) => {
                self.lines -= 1;
                Some(record)
            }
            Entry::Lost(count) => Some(Record::lost(count)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: usize) -> Record {
        let mut record = Record::lost(0);
        record.level = tracing::Level::INFO;
        record.message = format!("line {n}");
        record
    }

    fn drain(queue: &mut Queue) -> Vec<String> {
        std::iter::from_fn(|| queue.pop())
            .map(|r| r.text())
            .collect()
    }

    #[test]
    fn lines_come_out_in_order() {
        let mut queue = Queue::new(3);
        assert!(queue.pop().is_none());
        assert!(queue.push(line(1)) && queue.push(line(2)));
        assert_eq!(drain(&mut queue), ["line 1", "line 2"]);
        assert!(queue.pop().is_none());
    }

    #[test]
    fn a_full_queue_counts_lines_and_says_so_where_they_were_lost() {
        let mut queue = Queue::new(2);
        assert!(queue.push(line(1)));
        assert!(queue.push(line(2)));
        // Full: these three are counted, not kept.
        for n in 3..=5 {
            assert!(!queue.push(line(n)));
        }
        assert_eq!(queue.pop().unwrap().text(), "line 1");
        // Room again: the next line comes after the count.
        assert!(queue.push(line(6)));
        assert!(!queue.push(line(7)));
        let lost = "lines were lost: the log did not take them in time";
        assert_eq!(
            drain(&mut queue),
            [
                "line 2".to_owned(),
                format!("3 log {lost}"),
                "line 6".to_owned(),
                "1 log line was lost: the log did not take it in time".to_owned(),
            ]
        );
    }

    #[test]
    fn the_count_is_a_warning_right_after_the_last_line_kept() {
        let mut queue = Queue::new(1);
        assert!(queue.push(line(1)));
        assert!(!queue.push(line(2)));
        assert_eq!(queue.pop().unwrap().text(), "line 1");
        let count = queue.pop().unwrap();
        assert_eq!(count.level, tracing::Level::WARN);
        assert!(count.text().starts_with("1 log line was lost"));
        assert!(queue.pop().is_none());
    }

    #[test]
    fn the_bound_holds_however_many_lines_come() {
        let mut queue = Queue::new(BOUND);
        let kept = (0..10 * BOUND).filter(|&n| queue.push(line(n))).count();
        assert_eq!(kept, BOUND);
        let out = drain(&mut queue);
        assert_eq!(out.len(), BOUND + 1);
        assert_eq!(out[BOUND - 1], format!("line {}", BOUND - 1));
        assert!(out[BOUND].starts_with(&format!("{} log lines were lost", 9 * BOUND)));
    }
}
