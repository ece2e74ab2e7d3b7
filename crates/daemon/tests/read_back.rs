//! The old image's read-back (docs/restart.md, "Failure paths") made for
//! real: a state written as a restart writes it, read back in a forked
//! child as the new image would read it, and refused there with the
//! child's reason when the loop's connections and the bus's disagree
//! (`LoopState::check_against`, which its unit test checks case by case).
//!
//! Without libtest's harness: the read-back forks only from a process of
//! one thread (`sys::fork_single_threaded`), and libtest runs each test on
//! a thread of its own beside its main thread.

use quickbus_bus::{Bus, BusOptions, Credentials};
use quickbus_daemon::activation::{Launcher, ServiceTable};
use quickbus_daemon::fd_limit::StartLimit;
use quickbus_daemon::restart::{read_back, write_handover, CheckFailure, Handover, Setup};
use quickbus_daemon::server::LoopState;

/// `bus` and `state` written as a restart writes them, then read back.
fn read_back_of(bus: &Bus, state: &LoopState) -> Result<(), CheckFailure> {
    let address = "unix:path=/nonexistent/quickbus-read-back-test".to_owned();
    let setup = Setup {
        exe: "/nonexistent/quickbus-daemon".into(),
        guid: "0".repeat(32),
        address: address.clone(),
        forked: false,
        config: Default::default(),
        reloaded: None,
        pidfile: None,
        listeners: Vec::new(),
    };
    let no_limit = StartLimit {
        soft: None,
        hard: None,
    };
    let launcher = Launcher::new(ServiceTable::default(), address, "session".into(), no_limit);
    let handover = Handover {
        began: 0,
        setup: &setup,
        launcher: &launcher,
        requesters: &[],
        state,
        bus,
        dumpable: false,
    };
    let (memfd, fds) = write_handover(&handover).expect("the state is written");
    assert!(
        fds.is_empty(),
        "a state without sockets names no descriptor"
    );
    read_back(&memfd)
}

/// A bus connection the loop has none for: the read-back refuses the
/// state, saying why, as the new image would.
fn a_loop_and_bus_that_disagree_are_refused_by_the_read_back() {
    let mut bus = Bus::new(BusOptions::default());
    let state = LoopState::default();
    if let Err(failure) = read_back_of(&bus, &state) {
        panic!("a loop and a bus that agree were refused: {failure}");
    }
    let creds = Credentials {
        uid: 1000,
        ..Default::default()
    };
    let conn = bus.add_connection(creds, false);
    match read_back_of(&bus, &state) {
        Err(CheckFailure::Refused(why)) => assert_eq!(
            why,
            format!(
                "the state does not add up: connection {} of the bus has no connection \
                 in the daemon",
                conn.0
            )
        ),
        Err(failure) => panic!("the read-back was not made: {failure}"),
        Ok(()) => panic!("the read-back took a bus connection the loop has none for"),
    }
}

fn main() {
    let tests: [(&str, fn()); 1] = [(
        "a_loop_and_bus_that_disagree_are_refused_by_the_read_back",
        a_loop_and_bus_that_disagree_are_refused_by_the_read_back,
    )];
    for (name, test) in tests {
        test();
        println!("test {name} ... ok");
    }
}
