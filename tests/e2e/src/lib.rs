//! End-to-end test support: start a bus daemon with a throw-away
//! configuration, run real D-Bus clients (dbus-send, busctl, gdbus,
//! dbus-python) against it, and never hang.
//!
//! It is also the one test bus of the workspace: quickbus-client's and the
//! quickbus tool's tests start their daemons with [`Bus`] and connect with
//! [`Bus::connect`]; the bench's smoke tests measure
//! [`quickbus_daemon_path`].
//!
//! The daemon under test is `$QUICKBUS_TEST_DAEMON` when set (for example
//! `/usr/bin/dbus-daemon`, the reference), else the workspace's
//! `quickbus-daemon`, which the first test of a run builds (`cargo build
//! -p quickbus-daemon` in the test's own profile), so a test never runs
//! against a missing or stale daemon.
//!
//! Every wait is bounded by [`TIMEOUT`]; time is only ever used to give up,
//! never as the thing a test asserts.
//!
//! A test that cannot run here (not root, a missing program, or a promise
//! only quickbus makes while the daemon under test is another) fails,
//! unless `QUICKBUS_ALLOW_SKIP=1` is set; then it prints
//! `SKIPPED: <test>: <reason>` and passes (see [`skip`]). So the reference
//! run sets both:
//!
//! ```text
//! QUICKBUS_TEST_DAEMON=/usr/bin/dbus-daemon QUICKBUS_ALLOW_SKIP=1 cargo test -p quickbus-e2e
//! ```
//!
//! `QUICKBUS_E2E_THREADS=N` runs every quickbus daemon whose configuration
//! the harness writes with `<limit name="threads">N</limit>` (unless the
//! test sets `threads`), and the pool serving even one connection (the
//! daemon's hook `QUICKBUS_TEST_LEAST_PARALLEL=1`): the test command's
//! second pass of these tests (scripts/test.sh) runs them so, see
//! [`forced_threads`].

pub mod containers1;
mod daemon;
pub mod forced_threads;
pub mod lingering;
mod locate;
pub mod namespace;
mod peer;
mod process;
mod raw;
mod shared;
pub mod skip;
mod stats;
mod users;

use std::time::Duration;

pub use daemon::{
    assert_guid_suffix, driver_call, write_config, write_config_with, write_reference_config, Bus,
    Listen,
};
pub use locate::{
    daemon_path, python_path, python_script, quickbus_daemon_path, testing_quickbus, TempDir,
};
pub use peer::{flags, json_string_list, Peer};
pub use process::{
    copy_executable, process_state, run_bounded, running, status_kib, terminate_and_wait,
    write_executable, Background, Finished, Stopped,
};
pub use raw::read_raw_message;
pub use shared::shared_copy;
pub use stats::{become_monitor, connection_stat};
pub use users::{as_user, can_change_user, NOBODY};

/// The longest any single wait (a command, a line, an exit) may take before
/// the test fails. Generous: the machines are small and shared.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// How often bounded waits look again at what they wait for.
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);
