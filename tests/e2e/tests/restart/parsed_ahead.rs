//! Messages that worker threads read and parsed ahead of routing, and
//! that were not routed yet when a restart came (their senders held back
//! for a full receiver), cross the restart and are routed afterwards:
//! whole, once, in order (issue 27, docs/architecture.md "Threads";
//! crates/daemon/src/transport.rs `parsed_ahead`). Deterministic: the
//! restart is asked for while the daemon is stopped, so it comes at the
//! end of the turn that held the senders (threads/held_senders.rs).

use quickbus_e2e::skip;

use super::held_senders::{HeldSenders, LONG_BURST};
use super::support::{restarts_logged, signal_restart, wait_for_log, RESTARTED};

#[test]
fn messages_parsed_ahead_and_held_back_cross_a_restart_whole_and_in_order() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let mut held = HeldSenders::start();
    let before = restarts_logged(&held.bus);
    held.burst_into_the_stopped_daemon(0, LONG_BURST, signal_restart);
    wait_for_log(&held.bus, RESTARTED, before + 1);
    held.receive_all(LONG_BURST);
}
