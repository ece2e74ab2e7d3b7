//! The new image's side of a restart in place: read the handover, take
//! over its descriptors, rebuild the loop, serve. If that fails, execute
//! the previous binary (its descriptor crossed too) with the same
//! handover, which resumes it instead: the bus comes back as it was.
//!
//! Owns: the order of resuming. May touch: start-up's helpers (the
//! server's options), the server.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use tracing::{error, info};

use super::{
    check, clock_now, read_handover, since_ms, Binary, Restored, FAIL_RESTORE_FOR_TESTS,
    GOING_BACK, HANDOVER_FD, PREVIOUS_BINARY_FD,
};
use crate::cli::Options;
use crate::server::Server;

/// Run the bus handed over in the environment; the returned value is the
/// process exit code.
pub fn resume(opts: &Options) -> i32 {
    crate::logging::init();
    let going_back = std::env::var_os(GOING_BACK).is_some();
    let memfd = inherited(HANDOVER_FD);
    let previous = inherited(PREVIOUS_BINARY_FD);
    // Not for the services this bus starts.
    for var in [HANDOVER_FD, PREVIOUS_BINARY_FD, GOING_BACK] {
        std::env::remove_var(var);
    }
    let memfd = match memfd {
        Ok(fd) => fd,
        Err(e) => return lost(&format!("the handover is unreadable: {e}")),
    };
    match restore(opts, &memfd, going_back) {
        Ok(mut server) => {
            drop(memfd);
            drop(previous);
            // The bus is ours now: no exec passes any of it on (the
            // previous image cleared the flag on what it handed over). The
            // services the bus starts are kept clean either way
            // (`sys::start_as_service`).
            if let Err(e) = crate::sys::close_on_exec_above_stdio() {
                error!("cannot mark the bus's descriptors close-on-exec: {e}");
            }
            match server.run() {
                Ok(_) => 0,
                Err(e) => {
                    error!("Failed to run message bus: {e}");
                    1
                }
            }
        }
        Err(why) => {
            error!("restoring failed: {why}");
            match (going_back, previous) {
                (false, Ok(previous)) => go_back(&memfd, &previous),
                (true, _) => lost("the previous binary cannot resume either"),
                (false, Err(e)) => lost(&format!("no previous binary to go back to: {e}")),
            }
        }
    }
}

fn lost(why: &str) -> i32 {
    error!("the bus is lost: {why}");
    1
}

/// The descriptor whose number is in environment variable `var`, ours
/// now (close-on-exec again).
fn inherited(var: &str) -> std::io::Result<OwnedFd> {
    let number: RawFd = std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("{var} is not a descriptor number")))?;
    let fd = OwnedFd::from(crate::sys::adopt_inherited_fd(number)?);
    crate::sys::set_close_on_exec(fd.as_raw_fd(), true)?;
    Ok(fd)
}

/// Execute the previous binary with the same handover. Returns only if
/// that failed.
fn go_back(memfd: &OwnedFd, previous: &OwnedFd) -> i32 {
    info!("going back to the previous binary");
    for fd in [memfd, previous] {
        if let Err(e) = crate::sys::set_close_on_exec(fd.as_raw_fd(), false) {
            return lost(&format!("cannot pass descriptor on: {e}"));
        }
    }
    let error = Binary::exec_running(
        previous,
        &[
            (HANDOVER_FD, memfd.as_raw_fd().to_string()),
            (PREVIOUS_BINARY_FD, previous.as_raw_fd().to_string()),
            (GOING_BACK, "1".to_owned()),
        ],
    );
    lost(&format!("cannot execute the previous binary: {error}"))
}

/// The server, from the handover.
///
/// The descriptors are taken over as they are (duplicating them all
/// would need twice the bus's descriptors for a moment, which a large bus
/// does not have under its limit), so nothing may close one before the
/// loop runs, or the previous binary could not take the bus back. Hence:
/// the state is first deserialized in a child process, whose closing of
/// its copies harms nothing; only if that succeeds is it deserialized
/// here; and if a later step fails, what was built is forgotten, not
/// dropped.
fn restore(opts: &Options, memfd: &OwnedFd, going_back: bool) -> Result<Server, String> {
    if !going_back && std::env::var(FAIL_RESTORE_FOR_TESTS).as_deref() == Ok("1") {
        return Err(format!(
            "{FAIL_RESTORE_FOR_TESTS}=1 (a test of the way back)"
        ));
    }
    let started = clock_now().monotonic_ns;
    let handed = read_handover(memfd).map_err(|e| e.to_string())?;
    let read = since_ms(started);
    // One clock for the child and for this image: an instant the child
    // could place, this image places too, so the two cannot disagree.
    let clock = clock_now();
    check::in_a_child(&handed, clock)?;
    let checked = since_ms(started) - read;
    let reader = match going_back {
        false => check::Reader::NewImage,
        true => check::Reader::GoingBack,
    };
    let (restored, recounted) = check::deserialize(&handed, clock, reader)?;
    if !recounted.is_empty() {
        tracing::warn!(
            "the queued bytes of uids {recounted:?} did not add up to their queues: counted again"
        );
    }
    tracing::debug!(
        "handover read: {} bytes of state, {} buffers of {} bytes, {} descriptors; read in {read:.1} ms, checked in a child in {checked:.1} ms, deserialized in {:.1} ms",
        handed.payload.len(),
        handed.buffers.len(),
        handed.buffers.iter().map(|b| b.len()).sum::<usize>(),
        handed.fds.len(),
        since_ms(started) - read - checked
    );
    let server = rebuild(opts, restored, going_back)?;
    handed.serving();
    Ok(server)
}

/// Everything built from the handover before the loop runs. If a step
/// fails it is forgotten, not dropped: its descriptors stay open for the
/// previous binary.
fn rebuild(opts: &Options, restored: Restored, going_back: bool) -> Result<Server, String> {
    let Restored {
        began,
        setup,
        launcher,
        requesters,
        state,
        mut bus,
        dumpable,
    } = restored;
    super::dumpable::restore(dumpable);
    crate::logging::configure(opts.syslog, setup.config.syslog);
    let fd_limit = crate::fd_limit::raise();
    tracing::debug!(?fd_limit, "open-file limit");
    // Not state: the security modules' handles, opened again.
    let mediator = crate::mac::start(&setup.config)
        .map_err(|e| e.to_string())
        .and_then(|()| crate::mac::mediator(setup.reloaded.as_ref().unwrap_or(&setup.config)));
    let mediator = match mediator {
        Ok(mediator) => mediator,
        Err(why) => {
            std::mem::forget((setup, launcher, state, bus));
            return Err(why);
        }
    };
    bus.restored(mediator);
    let binary = Binary::open(Some(setup.exe.clone()))
        .map_err(|e| tracing::warn!("cannot open the running binary, so no restart in place: {e}"))
        .ok();
    let server_opts = crate::startup::server_options(opts, setup, launcher, binary);
    // Back on the previous binary: the restart asked for did not happen.
    let outcome = match going_back {
        false => Ok(()),
        true => Err("the new binary could not resume the bus (see the log); the previous binary serves it again".to_owned()),
    };
    Server::resume(state, bus, server_opts, requesters, began, outcome).map_err(|unbuilt| {
        let why = unbuilt.error.to_string();
        unbuilt.forget();
        why
    })
}
