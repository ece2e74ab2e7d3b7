//! Rate limiting of repeated warnings: a peer that makes the daemon warn
//! once per connection (or per message) must not flood the log. Each kind
//! of warning may be logged [`BURST`] times per [`INTERVAL`]; beyond that
//! the lines are counted, and when the interval ends one line says how
//! many of that kind were left out (as journald's rate limit would, but
//! per kind, so that one flood does not hide other warnings).

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use tracing::warn;

/// Lines of one kind logged per interval before the rest is counted.
pub const BURST: u32 = 5;
/// The length of one interval.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Whether to log one line.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    Log,
    Suppress,
}

/// The sans-I/O part: when a kind of line may be logged, and the counts of
/// those that were not.
#[derive(Debug, Default)]
pub struct RateLimit {
    kinds: HashMap<&'static str, Window>,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    logged: u32,
    suppressed: u64,
}

impl RateLimit {
    /// A line of kind `kind` is to be logged at `now`.
    pub fn admit(&mut self, kind: &'static str, now: Instant) -> Admit {
        let window = self.kinds.entry(kind).or_insert(Window {
            started: now,
            logged: 0,
            suppressed: 0,
        });
        if window.logged < BURST {
            window.logged += 1;
            Admit::Log
        } else {
            window.suppressed += 1;
            Admit::Suppress
        }
    }

    /// Ends the intervals that are over at `now`; returns, for each kind
    /// that had lines left out, how many. The kinds with nothing to report
    /// are forgotten, so the map only holds kinds seen lately.
    pub fn end_intervals(&mut self, now: Instant) -> Vec<(&'static str, u64)> {
        let mut summaries = Vec::new();
        self.kinds.retain(|kind, window| {
            if now.saturating_duration_since(window.started) < INTERVAL {
                return true;
            }
            if window.suppressed == 0 {
                return false;
            }
            summaries.push((*kind, window.suppressed));
            // Still flooding: the next interval starts suppressed, so a
            // steady flood gives one summary line per interval.
            *window = Window {
                started: now,
                logged: BURST,
                suppressed: 0,
            };
            true
        });
        summaries.sort_unstable();
        summaries
    }

    /// When the earliest interval ends, if any kind is being counted.
    pub fn next_end(&self) -> Option<Instant> {
        self.kinds.values().map(|w| w.started + INTERVAL).min()
    }
}

/// [`RateLimit`] writing to the log.
#[derive(Debug, Default)]
pub struct Limiter {
    limit: RateLimit,
}

impl Limiter {
    /// `warn!("{line}")`, unless too many lines of `kind` came lately
    /// (`kind` names them in the summary).
    pub fn warn(&mut self, kind: &'static str, line: fmt::Arguments<'_>) {
        if self.admits(kind) {
            warn!("{line}");
        }
    }

    /// Whether a line of `kind` may be logged now (counted as logged if
    /// so), for lines that carry structured fields and so cannot go
    /// through [`Limiter::warn`].
    pub fn admits(&mut self, kind: &'static str) -> bool {
        self.limit.admit(kind, Instant::now()) == Admit::Log
    }

    /// Log the summaries of the intervals that ended.
    pub fn summarize(&mut self, now: Instant) {
        if self.limit.kinds.is_empty() {
            return;
        }
        for (kind, count) in self.limit.end_intervals(now) {
            warn!(
                "{count} more lines of the kind \"{kind}\" in the last {}s were not logged",
                INTERVAL.as_secs()
            );
        }
    }

    /// When [`Limiter::summarize`] next has something to do.
    pub fn next_summary(&self) -> Option<Instant> {
        self.limit.next_end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_logged_then_counted_and_summed_up_once() {
        let mut limit = RateLimit::default();
        let t0 = Instant::now();
        for _ in 0..BURST {
            assert_eq!(limit.admit("refusing connection", t0), Admit::Log);
        }
        for _ in 0..1000 {
            assert_eq!(limit.admit("refusing connection", t0), Admit::Suppress);
        }
        // Before the interval ends: nothing to say yet.
        assert!(limit.end_intervals(t0 + INTERVAL / 2).is_empty());
        let end = t0 + INTERVAL;
        assert_eq!(limit.next_end(), Some(end));
        assert_eq!(
            limit.end_intervals(end),
            vec![("refusing connection", 1000)]
        );
        // A flood that goes on: one summary per interval, no new burst.
        assert_eq!(limit.admit("refusing connection", end), Admit::Suppress);
        assert_eq!(
            limit.end_intervals(end + INTERVAL),
            vec![("refusing connection", 1)]
        );
        // Quiet for a whole interval: forgotten, and a new burst is logged.
        assert!(limit.end_intervals(end + INTERVAL * 2).is_empty());
        assert_eq!(limit.next_end(), None);
        assert_eq!(
            limit.admit("refusing connection", end + INTERVAL * 2),
            Admit::Log
        );
    }

    #[test]
    fn kinds_are_limited_apart() {
        let mut limit = RateLimit::default();
        let t0 = Instant::now();
        for _ in 0..BURST + 3 {
            limit.admit("a", t0);
        }
        // "a" flooding does not keep "b" out.
        assert_eq!(limit.admit("b", t0), Admit::Log);
        assert_eq!(limit.end_intervals(t0 + INTERVAL), vec![("a", 3)]);
    }

    #[test]
    fn a_kind_under_its_burst_is_never_summed_up() {
        let mut limit = RateLimit::default();
        let t0 = Instant::now();
        for _ in 0..BURST {
            assert_eq!(limit.admit("a", t0), Admit::Log);
        }
        assert!(limit.end_intervals(t0 + INTERVAL).is_empty());
        assert!(limit.kinds.is_empty());
    }
}
