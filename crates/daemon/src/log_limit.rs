//! Rate limiting of repeated warnings: a peer that makes the daemon warn
//! once per connection (or per message) must not flood the log. Each kind
//! of warning may be logged [`BURST`] times per [`INTERVAL`]; beyond that
//! the lines are counted, and when the interval ends one line says how
//! many of that kind were left out (as journald's rate limit would, but
//! per kind, so that one flood does not hide other warnings).
//!
//! One count for the whole process ([`SHARED`]): the daemon's own
//! warnings ask it through [`Limiter`], and the warnings and errors the
//! bus core logs itself (`quickbus_bus`, which a peer can trigger too: a
//! forged ActivationFailure, for one) are asked about by the log's router
//! ([`admits_core_event`]), each call site of the core a kind of its own.
//! So there is one rate-limited path, and one summary line per kind.

use std::collections::HashMap;
use std::fmt;
use std::sync::{LazyLock, Mutex};
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

/// The process's one count. Logging is process-wide, and so is its limit:
/// the core's lines reach it from the log's router, which has no server.
static SHARED: LazyLock<Mutex<RateLimit>> = LazyLock::new(Mutex::default);

fn admit(kind: &'static str, now: Instant) -> bool {
    // A panic elsewhere while holding the lock leaves a usable count.
    let mut limit = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    limit.admit(kind, now) == Admit::Log
}

/// The crate whose own warnings are limited here (its target prefix).
const CORE: &str = "quickbus_bus";

/// The kind a line of the bus core is counted as, if it is rate-limited:
/// warnings and errors (the lines a peer can repeat at will), each call
/// site a kind (`crates/bus/src/bus/activating.rs:499`). The core's info
/// lines (activations, policy denials) are dbus-daemon's and stay whole.
pub fn core_kind(metadata: &tracing::Metadata<'static>) -> Option<&'static str> {
    let target = metadata.target();
    let from_core = target == CORE || target.starts_with("quickbus_bus::");
    let limited = *metadata.level() <= tracing::Level::WARN;
    (from_core && limited).then(|| {
        let name = metadata.name();
        name.strip_prefix("event ").unwrap_or(name)
    })
}

/// Whether the log's router may write this event now: always, unless it
/// is one of the core's limited lines and too many of its kind came lately
/// ([`core_kind`]).
pub fn admits_core_event(metadata: &tracing::Metadata<'static>) -> bool {
    core_kind(metadata).is_none_or(|kind| admit(kind, Instant::now()))
}

/// The daemon's handle on the process's count ([`SHARED`]), writing to
/// the log.
#[derive(Debug, Default)]
pub struct Limiter;

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
        admit(kind, Instant::now())
    }

    /// Log the summaries of the intervals that ended.
    pub fn summarize(&mut self, now: Instant) {
        let summaries = {
            let mut limit = SHARED.lock().unwrap_or_else(|e| e.into_inner());
            if limit.kinds.is_empty() {
                return;
            }
            limit.end_intervals(now)
        };
        // Logged with the lock released: the router takes it too.
        for (kind, count) in summaries {
            warn!(
                "{count} more lines of the kind \"{kind}\" in the last {}s were not logged",
                INTERVAL.as_secs()
            );
        }
    }

    /// When [`Limiter::summarize`] next has something to do.
    pub fn next_summary(&self) -> Option<Instant> {
        SHARED.lock().unwrap_or_else(|e| e.into_inner()).next_end()
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
