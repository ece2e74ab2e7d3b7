//! The lines on their way to the log's thread: a bounded queue, in the
//! order they were logged, each with the sinks it was logged under (the
//! sinks may change before the thread writes it). A line that finds the
//! queue full is not kept but counted, where it would have been: the
//! log's thread then writes, at that place and to that line's sinks, one
//! line saying how many were lost, and of what kinds
//! ([`Record::lost_lines`]), so whoever reads the log is told, and told
//! where.

use std::collections::VecDeque;
use std::sync::Arc;

use super::record::{LostLines, Record};

/// The lines the queue holds at most (a burst of lines larger than a
/// pipe's 64 KiB or journald's queue can take, at around 100 bytes a
/// line). Beyond it, lines are counted as lost: the thread that logs
/// never waits for the log. A quarter of it is kept for warnings and
/// errors: a peer can make the bus log a line at info per message it
/// sends (a policy denial, as dbus-daemon logs it), and such a flood must
/// not push out the bus's warnings too.
pub const BOUND: usize = 1024;

enum Entry<S> {
    Line(Record, Arc<S>),
    /// The lines, logged here to these sinks, that found the queue full.
    Lost(LostLines, Arc<S>),
}

/// Lines for the sinks `S` (the log's `Sinks`; anything in the tests).
pub struct Queue<S> {
    entries: VecDeque<Entry<S>>,
    /// The [`Entry::Line`]s among `entries`.
    lines: usize,
    bound: usize,
}

impl<S> Queue<S> {
    pub const fn new(bound: usize) -> Queue<S> {
        Queue {
            entries: VecDeque::new(),
            lines: 0,
            bound,
        }
    }

    /// Queue `record` for `sinks`; false if the queue was full for it
    /// (lines below warnings fill three quarters of it) and it was counted
    /// as lost instead. (A count takes no line's place: after one, a line
    /// is taken again once the queue is below its bound.)
    pub fn push(&mut self, record: Record, sinks: &Arc<S>) -> bool {
        let bound = if record.level <= tracing::Level::WARN {
            self.bound
        } else {
            self.bound - self.bound / 4
        };
        if self.lines < bound {
            self.entries
                .push_back(Entry::Line(record, Arc::clone(sinks)));
            self.lines += 1;
            return true;
        }
        match self.entries.back_mut() {
            Some(Entry::Lost(lost, lost_to)) if Arc::ptr_eq(lost_to, sinks) => lost.add(&record),
            _ => {
                let mut lost = LostLines::default();
                lost.add(&record);
                self.entries.push_back(Entry::Lost(lost, Arc::clone(sinks)));
            }
        }
        false
    }

    /// The next line to write and its sinks: a queued one, or the one
    /// saying how many were lost at this place.
    pub fn pop(&mut self) -> Option<(Record, Arc<S>)> {
        match self.entries.pop_front()? {
            Entry::Line(record, sinks) => {
                self.lines -= 1;
                Some((record, sinks))
            }
            Entry::Lost(lost, sinks) => Some((Record::lost_lines(&lost), sinks)),
        }
    }

    /// The lines logged and not written: those queued and those already
    /// counted as lost.
    pub fn unwritten(&self) -> u64 {
        let lost: u64 = self
            .entries
            .iter()
            .map(|entry| match entry {
                Entry::Lost(lost, _) => lost.total(),
                Entry::Line(..) => 0,
            })
            .sum();
        self.lines as u64 + lost
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

    fn drain(queue: &mut Queue<&str>) -> Vec<String> {
        std::iter::from_fn(|| queue.pop())
            .map(|(r, _)| r.text())
            .collect()
    }

    fn warning(n: usize) -> Record {
        let mut record = line(n);
        record.level = tracing::Level::WARN;
        record
    }

    #[test]
    fn a_flood_of_lines_below_warnings_leaves_a_quarter_for_warnings_and_errors() {
        let a = Arc::new("a");
        let mut queue = Queue::new(8);
        let kept = (0..100).filter(|&n| queue.push(line(n), &a)).count();
        assert_eq!(kept, 6, "three quarters for lines below warnings");
        assert!(queue.push(warning(100), &a));
        assert!(queue.push(warning(101), &a));
        assert!(!queue.push(warning(102), &a), "the whole bound is full");
        let out = drain(&mut queue);
        assert_eq!(
            out[..6],
            (0..6).map(|n| format!("line {n}")).collect::<Vec<_>>()
        );
        assert!(out[6].starts_with("94 log lines were lost"), "{out:?}");
        assert_eq!(out[7..9], ["line 100", "line 101"]);
        assert!(out[9].starts_with("1 log line was lost"), "{out:?}");
    }

    fn denial(n: usize) -> Record {
        let mut record = line(n);
        record.security = true;
        record.target = super::super::SECURITY;
        record
    }

    /// The count says how many of the lost lines were warnings or
    /// errors, policy denials, and other lines; in the journal, as fields
    /// too. A security line is a denial whatever its level.
    #[test]
    fn lost_lines_are_counted_by_kind() {
        let a = Arc::new("a");
        let mut queue = Queue::new(4);
        let kept = (0..10).filter(|&n| queue.push(denial(n), &a)).count();
        assert_eq!(kept, 3, "three quarters for lines below warnings");
        assert!(!queue.push(line(10), &a));
        assert!(!queue.push(line(11), &a));
        assert!(queue.push(warning(12), &a), "the warnings' quarter");
        let mut error = warning(13);
        error.level = tracing::Level::ERROR;
        assert!(!queue.push(error, &a));
        let mut security_warning = denial(14);
        security_warning.level = tracing::Level::WARN;
        assert!(!queue.push(security_warning, &a));
        assert_eq!(queue.unwritten(), 4 + 7 + 2 + 1 + 1);

        let out: Vec<Record> = std::iter::from_fn(|| queue.pop()).map(|(r, _)| r).collect();
        let texts: Vec<String> = out.iter().map(Record::text).collect();
        let lost = "log lines were lost: the log did not take them in time";
        assert_eq!(
            texts[3..],
            [
                format!("9 {lost} (7 policy denials, 2 other lines)"),
                "line 12".to_owned(),
                format!("2 {lost} (1 warning or error, 1 policy denial)"),
            ]
        );
        let field = |record: &Record, name: &str| {
            record
                .fields
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, value)| value.clone())
        };
        let counts = |record: &Record| {
            ["lines", "warnings", "denials", "other"]
                .map(|kind| field(record, &format!("log_lost_{kind}")).unwrap())
        };
        assert_eq!(counts(&out[3]), ["9", "0", "7", "2"]);
        assert_eq!(counts(&out[5]), ["2", "1", "1", "0"]);
        let entry = String::from_utf8(super::super::journal::entry(&out[3])).unwrap();
        assert!(
            entry.contains(
                "\nLOG_LOST_LINES=9\nLOG_LOST_WARNINGS=0\nLOG_LOST_DENIALS=7\nLOG_LOST_OTHER=2\n"
            ),
            "{entry}"
        );
    }

    #[test]
    fn lines_come_out_in_order() {
        let a = Arc::new("a");
        let mut queue = Queue::new(3);
        assert!(queue.pop().is_none());
        assert!(queue.push(line(1), &a) && queue.push(line(2), &a));
        assert_eq!(drain(&mut queue), ["line 1", "line 2"]);
        assert!(queue.pop().is_none());
    }

    #[test]
    fn a_full_queue_counts_lines_and_says_so_where_they_were_lost() {
        let a = Arc::new("a");
        let mut queue = Queue::new(2);
        assert!(queue.push(line(1), &a));
        assert!(queue.push(line(2), &a));
        // Full: these three are counted, not kept.
        for n in 3..=5 {
            assert!(!queue.push(line(n), &a));
        }
        assert_eq!(queue.pop().unwrap().0.text(), "line 1");
        // Room again: the next line comes after the count.
        assert!(queue.push(line(6), &a));
        assert!(!queue.push(line(7), &a));
        let lost = "lines were lost: the log did not take them in time";
        assert_eq!(
            drain(&mut queue),
            [
                "line 2".to_owned(),
                format!("3 log {lost} (3 other lines)"),
                "line 6".to_owned(),
                "1 log line was lost: the log did not take it in time (1 other line)".to_owned(),
            ]
        );
    }

    #[test]
    fn the_count_is_a_warning_right_after_the_last_line_kept() {
        let a = Arc::new("a");
        let mut queue = Queue::new(1);
        assert!(queue.push(line(1), &a));
        assert!(!queue.push(line(2), &a));
        assert_eq!(queue.pop().unwrap().0.text(), "line 1");
        let (count, _) = queue.pop().unwrap();
        assert_eq!(count.level, tracing::Level::WARN);
        assert!(count.text().starts_with("1 log line was lost"));
        assert!(queue.pop().is_none());
    }

    #[test]
    fn the_bound_holds_however_many_lines_come() {
        let a = Arc::new("a");
        let mut queue = Queue::new(BOUND);
        let kept = (0..10 * BOUND)
            .filter(|&n| queue.push(warning(n), &a))
            .count();
        assert_eq!(kept, BOUND);
        let out = drain(&mut queue);
        assert_eq!(out.len(), BOUND + 1);
        assert_eq!(out[BOUND - 1], format!("line {}", BOUND - 1));
        assert!(out[BOUND].starts_with(&format!("{} log lines were lost", 9 * BOUND)));
    }

    #[test]
    fn each_line_keeps_its_sinks_and_lost_lines_are_counted_per_sinks() {
        let (a, b) = (Arc::new("a"), Arc::new("b"));
        let mut queue = Queue::new(1);
        assert!(queue.push(line(1), &a));
        assert!(!queue.push(line(2), &a));
        assert!(!queue.push(line(3), &b));
        assert!(!queue.push(line(4), &b));
        assert_eq!(queue.unwritten(), 4);
        let out: Vec<(String, &str)> = std::iter::from_fn(|| queue.pop())
            .map(|(r, sinks)| (r.text(), *sinks))
            .collect();
        assert_eq!(
            out,
            [
                ("line 1".to_owned(), "a"),
                (
                    "1 log line was lost: the log did not take it in time (1 other line)"
                        .to_owned(),
                    "a"
                ),
                (
                    "2 log lines were lost: the log did not take them in time (2 other lines)"
                        .to_owned(),
                    "b"
                ),
            ]
        );
        assert_eq!(queue.unwritten(), 0);
    }
}
