//! A state the new image would refuse is refused by the old image, which
//! reads it back in a forked child before the exec: the restart is
//! refused and the bus serves on (docs/restart.md, "Failure paths").
//! Without that read-back, a previous binary with the same checks (a
//! restart into the same version) refuses the state too when the new
//! image goes back to it, and the bus is lost.
//!
//! `QUICKBUS_TEST_REFUSE_STATE=1` makes every image that reads the state
//! find that it does not add up (crates/daemon/src/restart/check.rs).

use std::process::Command;

use quickbus_e2e::{quickbus_daemon_path, skip, write_config_with, Bus, Listen, TempDir};

use super::support::{quickbus_restart, restart_by_signal, signal_restart, wait_for_log};
use super::{emit, owner_by_dbus_send, KEEP, SIGNALS};

pub(super) const REFUSED: &str = "restart refused: the new image would refuse the state";

/// A bus started with `QUICKBUS_TEST_REFUSE_STATE=refusal`.
pub(super) fn bus_whose_state_is_refused(refusal: &str, extra_config: &str) -> Bus {
    let dir = TempDir::new();
    let config = write_config_with(dir.path(), Listen::UnixPath, extra_config);
    let mut daemon = Command::new(quickbus_daemon_path());
    daemon.env("QUICKBUS_TEST_REFUSE_STATE", refusal);
    Bus::start_command(
        dir,
        daemon,
        &[format!("--config-file={}", config.display())],
    )
}

/// Refuse a restart by call (the caller hears `why`) and one by signal,
/// then check the bus is as it was.
fn refused_restarts_leave_the_bus_serving(bus: &Bus, why: &str) {
    let mut keeper = Keeper::connect(bus);
    let refused = quickbus_restart(bus).failure();
    assert!(
        refused
            .stderr
            .contains("Restart refused: the new image would refuse the state")
            && refused.stderr.contains(why),
        "{refused:#?}\nlog:\n{}",
        bus.log()
    );
    signal_restart(bus);
    wait_for_log(bus, REFUSED, 2);
    let log = bus.log();
    for never in ["restoring failed", "going back", "the bus is lost"] {
        assert!(!log.contains(never), "{never:?} in the log:\n{log}");
    }
    keeper.finds_the_bus_as_it_was(bus);
}

/// A client with a name and a match rule, from before the restarts.
struct Keeper {
    peer: quickbus_e2e::Peer,
    rule: String,
}

impl Keeper {
    fn connect(bus: &Bus) -> Keeper {
        let mut peer = bus.peer();
        assert_eq!(peer.request_name(KEEP, 0), 1);
        let rule = format!("type='signal',interface='{SIGNALS}'");
        peer.add_match(&rule);
        Keeper { peer, rule }
    }

    /// The keeper still has its name and its rule, and a new client
    /// connects (the socket file is still there) and hears it.
    fn finds_the_bus_as_it_was(&mut self, bus: &Bus) {
        assert_eq!(owner_by_dbus_send(bus, KEEP), self.peer.unique_name());
        let mut newcomer = bus.peer();
        newcomer.add_match(&self.rule);
        emit(&mut self.peer, "/x", "StillServing", "[]");
        let event = |e: &str| e.contains(&format!("{SIGNALS}.StillServing"));
        self.peer.wait_event(event);
        newcomer.wait_event(event);
    }
}

#[test]
fn a_state_the_new_image_would_refuse_is_refused_before_the_exec_and_the_bus_serves_on() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = bus_whose_state_is_refused("1", "");
    refused_restarts_leave_the_bus_serving(&bus, "QUICKBUS_TEST_REFUSE_STATE=1");
    // The hook is named in the log from the start.
    bus.assert_names_test_hook("QUICKBUS_TEST_REFUSE_STATE=1");
}

/// The restart tests' helper for a restart by signal fails at the refusal,
/// naming it, rather than waiting out its bound for a restart that will
/// not come (so a test of states that must cross needs no check of its own
/// that none was refused).
#[test]
fn restarting_by_signal_fails_at_a_refusal_and_names_it() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = bus_whose_state_is_refused("1", "");
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| restart_by_signal(&bus)))
        .expect_err("a refused restart by signal fails");
    let message = failed
        .downcast_ref::<String>()
        .expect("the failure's message");
    assert!(
        message.contains("the restart by signal was refused") && message.contains(REFUSED),
        "{message}"
    );
}

/// A state that cannot be read to its end: the child reading it back
/// drops all it read before the bad byte, the listeners among it, and the
/// bus's socket file must stay.
#[test]
fn a_state_that_cannot_be_read_is_refused_before_the_exec_and_the_socket_file_stays() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = bus_whose_state_is_refused("corrupt", "");
    refused_restarts_leave_the_bus_serving(&bus, "cannot read the state");
}

/// A child whose reading panics ends there, saying so, and the bus
/// serves on (none of its destructors up the stack run in the child).
#[test]
fn a_state_whose_reading_panics_in_the_child_is_refused_and_the_bus_serves_on() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = bus_whose_state_is_refused("panic-in-the-check", "");
    refused_restarts_leave_the_bus_serving(&bus, "reading the state panicked");
}

/// The same with worker threads: the read-back's fork needs them stopped,
/// and they start again after the refusal.
#[test]
fn a_state_refused_before_the_exec_with_worker_threads_leaves_the_bus_serving() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = bus_whose_state_is_refused("1", r#"<limit name="threads">4</limit>"#);
    refused_restarts_leave_the_bus_serving(&bus, "QUICKBUS_TEST_REFUSE_STATE=1");
    // Started at start-up, and again after each refusal.
    wait_for_log(&bus, "4 threads read and write the connections", 3);
}

/// A new image that refuses the state after its check in a child passed
/// (the two disagreeing) keeps what it read, unclosed and unremoved: the
/// previous binary takes the bus back whole, its socket file included.
#[test]
fn a_new_image_refusing_the_state_after_its_check_hands_the_whole_bus_back() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = bus_whose_state_is_refused("after-the-check", "");
    let mut keeper = Keeper::connect(&bus);
    let failed = quickbus_restart(&bus).failure();
    assert!(
        failed
            .stderr
            .contains("the previous binary serves it again"),
        "{failed:#?}\nlog:\n{}",
        bus.log()
    );
    let log = bus.log();
    assert!(
        log.contains("restoring failed: the state does not add up: QUICKBUS_TEST_REFUSE_STATE=after-the-check"),
        "{log}"
    );
    assert!(!log.contains("the bus is lost"), "{log}");
    keeper.finds_the_bus_as_it_was(&bus);
}
