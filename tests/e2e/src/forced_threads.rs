//! `QUICKBUS_E2E_THREADS=N`: every quickbus daemon whose configuration the
//! harness writes ([`crate::write_config_with`]) runs with a pool of `N`
//! threads, and every daemon a [`crate::Bus`] starts hands even one
//! connection's reads and writes to it.
//!
//! Why: the daemon's default is one thread (no pool) below eight cores, so
//! on the 2-core CI machine the tests would otherwise only ever check the
//! loop without its pool, which no many-core machine runs. And the pool
//! only takes a turn with eight connections or more to read or write
//! (`LEAST_PARALLEL` in crates/daemon/src/server/workers.rs), which few
//! tests have; the daemon's test hook `QUICKBUS_TEST_LEAST_PARALLEL=1`
//! lowers that to one, so every turn reads, parses and writes ahead.
//!
//! A test that sets `threads` itself keeps its own; a daemon other than
//! quickbus (the reference run) gets neither, since dbus-daemon refuses a
//! configuration with an unknown limit. The harness says once per test
//! process (each test binary is one), on its standard error, that it
//! forced threads.

use std::ffi::OsStr;
use std::io::Write;
use std::process::Command;
use std::sync::{Once, OnceLock};

use crate::locate::testing_quickbus;

/// The environment variable that forces a thread count.
pub const THREADS_ENV: &str = "QUICKBUS_E2E_THREADS";
/// The daemon's test hook for its pool's threshold
/// (`server::LEAST_PARALLEL_FOR_TESTS` in quickbus-daemon), set for the
/// daemons a [`crate::Bus`] starts when threads are forced, unless the test
/// run's own environment sets it (then every daemon inherits that).
pub const LEAST_PARALLEL_HOOK: &str = "QUICKBUS_TEST_LEAST_PARALLEL";
/// The threshold the harness asks for: every turn goes through the pool.
const LEAST_PARALLEL: &str = "1";

/// The pool threshold the daemons a [`crate::Bus`] starts run with when
/// threads are forced: the test run's own [`LEAST_PARALLEL_HOOK`] (which
/// they inherit), or [`LEAST_PARALLEL`] (which the harness sets).
pub fn least_parallel() -> String {
    std::env::var(LEAST_PARALLEL_HOOK).unwrap_or_else(|_| LEAST_PARALLEL.into())
}

/// The forced thread count, or `None` when [`THREADS_ENV`] is unset or the
/// daemon under test is not quickbus. Panics on a value that is not a
/// number.
pub fn forced_threads() -> Option<u32> {
    static FORCED: OnceLock<Option<u32>> = OnceLock::new();
    *FORCED.get_or_init(|| {
        let forced =
            parse(std::env::var_os(THREADS_ENV).as_deref()).unwrap_or_else(|why| panic!("{why}"));
        forced.filter(|_| testing_quickbus())
    })
}

/// The pure reading of [`THREADS_ENV`]'s value (empty: unset).
fn parse(value: Option<&OsStr>) -> Result<Option<u32>, String> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    value
        .to_str()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .map(Some)
        .ok_or_else(|| {
            format!(
                "{THREADS_ENV}={} is not a thread count",
                value.to_string_lossy()
            )
        })
}

/// The `threads` limit to add to a generated configuration whose other
/// elements are `extra`: none unless threads are forced, or when `extra`
/// sets `threads` itself.
pub(crate) fn threads_limit(extra: &str) -> Option<String> {
    let limit = limit_for(forced_threads(), extra)?;
    announce();
    Some(limit)
}

fn limit_for(forced: Option<u32>, extra: &str) -> Option<String> {
    let threads = forced?;
    let set_by_test = extra.contains(r#"name="threads""#) || extra.contains("name='threads'");
    (!set_by_test).then(|| format!(r#"<limit name="threads">{threads}</limit>"#))
}

/// Gives a daemon that [`crate::Bus`] starts the pool's test threshold,
/// when threads are forced and the run's environment does not choose one.
pub(crate) fn lower_threshold(daemon: &mut Command) {
    if forced_threads().is_some() && std::env::var_os(LEAST_PARALLEL_HOOK).is_none() {
        daemon.env(LEAST_PARALLEL_HOOK, LEAST_PARALLEL);
    }
}

/// Says once per test process that threads are forced: straight to the
/// process's stderr, since libtest captures a passing test's `eprintln!`.
fn announce() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let threshold = least_parallel();
        let _ = writeln!(
            std::io::stderr(),
            "quickbus-e2e: {THREADS_ENV}={}: the harness's bus configurations get \
             <limit name=\"threads\">{0}</limit> unless a test sets threads, and its \
             daemons {LEAST_PARALLEL_HOOK}={threshold} (the pool takes turns of \
             {threshold} connection(s) or more)",
            forced_threads().unwrap_or_default()
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_read_and_anything_else_refused() {
        assert_eq!(parse(None), Ok(None));
        assert_eq!(parse(Some(OsStr::new(""))), Ok(None));
        assert_eq!(parse(Some(OsStr::new("4"))), Ok(Some(4)));
        assert_eq!(parse(Some(OsStr::new(" 2\n"))), Ok(Some(2)));
        for bad in [" ", "four", "-1", "4x"] {
            assert!(parse(Some(OsStr::new(bad))).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_limit_is_added_unless_the_test_sets_threads() {
        assert_eq!(limit_for(None, ""), None);
        assert_eq!(
            limit_for(
                Some(4),
                r#"<limit name="max_match_rules_per_connection">9</limit>"#
            ),
            Some(r#"<limit name="threads">4</limit>"#.to_owned())
        );
        assert_eq!(
            limit_for(Some(4), r#"<limit name="threads">1</limit>"#),
            None
        );
        assert_eq!(limit_for(Some(4), "<limit name='threads'>2</limit>"), None);
    }
}
