//! States real clients bring a bus to by legitimate means cross restarts
//! by signal and by call, none refused: a container whose creator left
//! with its app still there, header requesters (one left), names with
//! every flag, a monitor that held names and had calls pending, calls
//! pending to and from a contained app. The new image's checks
//! (crates/bus/src/bus/setup.rs `check_handed_over`) must accept what
//! the old one served; crates/bus/src/tests/handover/legitimate_states.rs
//! walks many more such states in the bus alone.

use quickbus_client::{Connection, MessageBuilder};
use quickbus_e2e::flags::{ALLOW_REPLACEMENT, DO_NOT_QUEUE, REPLACE_EXISTING};
use quickbus_e2e::{become_monitor, skip, Bus, TIMEOUT};

use super::container_support::{add_server, containers_call, empty_asv, Server};
use super::support::restart;

/// RequestName's replies.
const PRIMARY_OWNER: u32 = 1;
const IN_QUEUE: u32 = 2;
const EXISTS: u32 = 3;

fn request(conn: &mut Connection, name: &str, flags: u32) -> u32 {
    conn.request_name(name, flags).expect("RequestName")
}

/// A call from `from` to `to` that is never answered: it stays pending.
fn call_left_pending(from: &mut Connection, to: &str) {
    from.send(
        MessageBuilder::method_call("/", "Slow").destination(to.to_owned()),
        &[],
    )
    .expect("send a call");
    // The bus routed it before this reply.
    from.get_id().expect("GetId");
}

#[test]
fn legitimate_states_are_not_refused_at_restarts_by_signal_or_call() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start();
    // A container instance whose creator leaves with its app still there.
    let mut manager = bus.connect();
    let Server { address, .. } =
        add_server(&mut manager, "com.example.NotFlatpak", "app", empty_asv());
    let mut app = Connection::connect_with_timeout(&address, TIMEOUT).expect("the app connects");
    let app_name = app.unique_name().to_owned();
    drop(manager);
    // A header requester that left, and one that stays.
    let (mut left, mut observer) = (bus.connect(), bus.connect());
    for requester in [&mut left, &mut observer] {
        requester
            .call(containers_call("RequestHeader", vec![]))
            .expect("RequestHeader");
    }
    drop(left);
    // Names with every flag: a replaceable owner replaced, queued owners,
    // one that then asks not to queue.
    let (mut a, mut b, mut c, mut d) = (bus.connect(), bus.connect(), bus.connect(), bus.connect());
    let c_name = c.unique_name().to_owned();
    let n = "com.example.N";
    assert_eq!(
        request(&mut a, n, ALLOW_REPLACEMENT | DO_NOT_QUEUE),
        PRIMARY_OWNER
    );
    let replacing = ALLOW_REPLACEMENT | REPLACE_EXISTING | DO_NOT_QUEUE;
    assert_eq!(request(&mut b, n, replacing), PRIMARY_OWNER);
    assert_eq!(request(&mut c, n, 0), IN_QUEUE);
    assert_eq!(request(&mut d, n, 0), IN_QUEUE);
    assert_eq!(request(&mut d, n, DO_NOT_QUEUE), EXISTS);
    assert_eq!(
        request(&mut a, "com.example.M2", ALLOW_REPLACEMENT),
        PRIMARY_OWNER
    );
    assert_eq!(
        request(&mut c, "com.example.M2", REPLACE_EXISTING),
        PRIMARY_OWNER
    );
    // A monitor that held names and has calls out and owed.
    let mut monitor = bus.connect();
    let monitor_name = monitor.unique_name().to_owned();
    assert_eq!(
        request(&mut monitor, "com.example.ByMonitor", 0),
        PRIMARY_OWNER
    );
    assert_eq!(request(&mut monitor, n, 0), IN_QUEUE);
    call_left_pending(&mut monitor, &c_name);
    call_left_pending(&mut c, &monitor_name);
    become_monitor(&mut monitor, &[]);
    // Calls pending from and to the contained app.
    call_left_pending(&mut app, &c_name);
    call_left_pending(&mut c, &app_name);
    call_left_pending(&mut observer, &app_name);
    // By call first. Either way a refused restart fails the test at once,
    // with the reason: the call's reply, or the log line the signal's
    // helper watches for.
    for i in 1..=4 {
        restart(&bus, i);
    }
    app.get_id().expect("the app after the restarts");
}
