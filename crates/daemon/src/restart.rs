//! Restarting in place (docs/restart.md): the daemon re-executes its
//! binary, the new one if a package upgrade replaced it, in the same
//! process, and hands the new image everything (sockets, connections,
//! names, match rules, queues, pending calls, configuration). Clients
//! notice nothing; the pid stays, so systemd does not either.
//!
//! The old image (`server::restarting`) checks the binary answers
//! `--handover-version` with [`HANDOVER_VERSION`], writes the state to a
//! sealed memfd (`format`), reads it back in a forked child as the new
//! image will (`check`), clears close-on-exec on every descriptor the
//! state names, and execs. The new image makes itself non-dumpable
//! (`dumpable`), finds [`HANDOVER_FD`] in its environment and resumes
//! (`resume`), then sets close-on-exec on everything again; if it cannot
//! resume, it execs the binary it came from, kept open since that one
//! started (`binary`), and that one resumes the same state.
//!
//! Owns: the handover's format and version, the environment variables
//! that carry it, and what of the start-up the restart keeps
//! ([`Setup`]). May touch: the server (through `server::restarting`),
//! start-up (to resume).

mod binary;
mod check;
pub mod dumpable;
mod format;
#[cfg(test)]
mod layout;
mod mapped;
mod resume;

use std::path::PathBuf;

pub use binary::{hold_handled_signals, unblock_handled_signals, Binary};
pub use check::{read_back, trying_the_state, CheckFailure};
pub use format::{
    clock_now, read_handover, since_ms, write_handover, HandedOver, Handover, Restored,
};
pub use resume::resume;

/// The handover format's version: a binary restarts into another only
/// when both print the same number for `--handover-version`. Bump it with
/// every change to any serialized type (the bus's or the daemon's state):
/// `layout`'s test traces them all and trips on a change.
pub const HANDOVER_VERSION: u32 = 8;

/// The number of the memfd holding the state, in the new image's
/// environment.
pub const HANDOVER_FD: &str = "QUICKBUS_HANDOVER_FD";
/// The number of the previous image's binary (an `O_PATH` descriptor), to
/// go back to if the new one cannot resume.
pub const PREVIOUS_BINARY_FD: &str = "QUICKBUS_HANDOVER_PREVIOUS_BINARY_FD";
/// Set when the image is that previous binary, going back: it does not
/// go back again.
pub const GOING_BACK: &str = "QUICKBUS_HANDOVER_GOING_BACK";
/// For tests of the way back: a new image with this set to `1` fails to
/// resume on purpose (the image going back ignores it).
pub const FAIL_RESTORE_FOR_TESTS: &str = "QUICKBUS_TEST_FAIL_RESTORE";
/// For tests of a state the new image would refuse: with this set to `1`,
/// every image that reads the handover finds that the state does not add
/// up (the old image's read-back, the new image, the previous binary going
/// back), as when both binaries have the same checks; with
/// `after-the-check`, only the new image, after its check in a child
/// passed (as if the two disagreed); with `corrupt`, the old image writes
/// a state whose last byte no reader takes; with `panic-in-the-check`,
/// reading the state in a child panics once it is read.
pub const REFUSE_STATE_FOR_TESTS: &str = "QUICKBUS_TEST_REFUSE_STATE";

/// What the restart keeps from the start-up: the configuration the
/// server's options came from, and the files to remove at exit.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Setup {
    /// The binary to execute: where the daemon was started from.
    pub exe: PathBuf,
    pub guid: String,
    /// The bus's full address: every listener's, with the guid (printed,
    /// and given to the services it starts; `listen::full_address`).
    pub address: String,
    /// Started with --fork: `READY=1` names this process (`MAINPID=`).
    pub forked: bool,
    /// The configuration as loaded at start-up (the addresses and the
    /// authentication mechanisms keep their start-up values across
    /// reloads too).
    pub config: crate::config::BusConfig,
    /// The configuration of the last reload, if any: the security modules'
    /// mediators and the limits are built from it.
    pub reloaded: Option<crate::config::BusConfig>,
    /// The pid file and socket files removed at exit.
    pub pidfile: Option<crate::startup::PidFile>,
    pub listeners: Vec<crate::listen::Listener>,
}

impl Setup {
    /// The configuration in force: the last reload's, or the start-up one.
    pub fn current_config(&self) -> &crate::config::BusConfig {
        self.reloaded.as_ref().unwrap_or(&self.config)
    }
}

/// `state`, one value as a restart writes it, read back as the new image
/// reads it, with `fds` as the handover's descriptor table: the value, or
/// why it was refused (the daemon's tests of what a state may hold).
#[cfg(test)]
pub fn read_value_back<T: serde::de::DeserializeOwned>(
    state: &[u8],
    fds: Vec<std::os::fd::OwnedFd>,
) -> Result<T, String> {
    check::read_state(clock_now(), fds, Vec::new(), state).0
}
