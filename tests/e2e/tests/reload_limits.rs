//! A reload (ReloadConfig, SIGHUP) applies every `<limit>` as the daemon's
//! limit table says (crates/daemon/src/config/limits/table.rs,
//! docs/quickbus-daemon-config.md), wherever in the daemon the limit is
//! enforced: in the bus core, in the outgoing queues' bounds, or in the
//! event loop itself (issue 24, item 8). Before, only the bus core's took
//! effect, so `max_outgoing_bytes`, `auth_timeout`, `max_message_size` and
//! the other limits of the loop kept their start-up values until a
//! restart.
//!
//! The first test runs against dbus-daemon too: it applies these limits
//! at once on reload. The second is quickbus's own: a raised
//! `max_message_size` reaches connections already open (dbus-daemon gives
//! each connection the value in force when it was accepted), a restart
//! in place keeps the reloaded limits, and the log names each changed
//! limit with how it took effect.

#[allow(dead_code)]
#[path = "restart/support.rs"]
mod restart_support;

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;

use quickbus_client::{bus_call, sasl, Connection, MessageBuilder, Value};
use quickbus_e2e::{skip, write_config_with, Bus, Listen, TIMEOUT};

const LIMITS_EXCEEDED: &str = "org.freedesktop.DBus.Error.LimitsExceeded";

/// A bus whose configuration file holds `limits`; [`rewrite`] changes it.
fn bus_with(limits: &str) -> Bus {
    Bus::start_with_config(Listen::UnixPath, limits)
}

/// Replaces the bus's configuration file with one holding `limits`.
fn rewrite(bus: &Bus, limits: &str) {
    write_config_with(bus.dir(), Listen::UnixPath, limits);
}

fn limit(name: &str, value: u64) -> String {
    format!(r#"<limit name="{name}">{value}</limit>"#)
}

/// ReloadConfig from `conn`; once a later call is answered, the reload
/// is in force.
fn reload(conn: &mut Connection) {
    conn.call(bus_call("ReloadConfig")).expect("ReloadConfig");
    conn.get_id().expect("GetId after the reload");
}

fn connect(bus: &Bus) -> Connection {
    let mut conn = bus.connect();
    conn.set_timeout(Some(TIMEOUT)).expect("set timeout");
    conn
}

/// A call from `conn` to `destination` that nobody answers.
fn call_to(destination: &str) -> MessageBuilder {
    MessageBuilder::method_call("/sink", "Take")
        .interface("org.example.Sink")
        .destination(destination)
}

/// Sends `call` from `conn`: the error the bus answered it with at once,
/// or None if the bus passed it on (the bus answers in order, so GetId's
/// reply comes after any refusal of the call).
fn refusal(conn: &mut Connection, call: MessageBuilder) -> Option<String> {
    let serial = conn.send(call, &[]).expect("send the call");
    let probe = conn.send(bus_call("GetId"), &[]).expect("send GetId");
    let mut refused = None;
    loop {
        let (message, _) = conn.receive().expect("the caller keeps receiving");
        if message.reply_serial() == Some(probe) {
            return refused;
        }
        if message.reply_serial() == Some(serial) {
            refused = message.error_name().map(str::to_owned);
        }
    }
}

/// A socket that passed SASL EXTERNAL and did not say Hello.
fn authenticated_without_hello(bus: &Bus) -> UnixStream {
    let mut stream = UnixStream::connect(bus.dir().join("bus")).expect("connect");
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    stream
        .write_all(&sasl::pipelined_external(sasl::current_uid(), false))
        .expect("send SASL");
    let mut ok = [0u8; 3];
    stream.read_exact(&mut ok).expect("the bus answered AUTH");
    assert_eq!(&ok, b"OK ");
    stream
}

/// Whether the bus closed `stream` within TIMEOUT (a read that times out
/// is a connection left open).
fn closed_by_the_bus(stream: &mut UnixStream) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn a_reload_applies_the_limits_dbus_daemon_applies_at_once() {
    // auth_timeout far past the test's waits: only the reload can make the
    // incomplete connection below expire in time.
    let auth_timeout_ms = 10 * TIMEOUT.as_millis() as u64;
    let bus = bus_with(&limit("auth_timeout", auth_timeout_ms));
    let mut rules = connect(&bus);
    let mut caller = connect(&bus);
    let callee = connect(&bus);
    let mut sink = connect(&bus);
    let mut sender = connect(&bus);
    let mut incomplete = authenticated_without_hello(&bus);
    sink.add_match("type='signal',interface='org.example.Flood'")
        .expect("AddMatch");

    // One of each place a limit lands: the bus core (rules, replies,
    // connections per user), the queue bounds (max_outgoing_bytes), the
    // loop (auth_timeout). This user has five connections past Hello.
    rewrite(
        &bus,
        &[
            limit("auth_timeout", 1000),
            limit("max_match_rules_per_connection", 2),
            limit("max_replies_per_connection", 1),
            limit("max_outgoing_bytes", 65536),
            limit("max_connections_per_user", 5),
        ]
        .concat(),
    );
    reload(&mut rules);

    // max_match_rules_per_connection, for a connection made before.
    for n in 0..2 {
        rules
            .add_match(&format!("type='signal',member='Rule{n}'"))
            .expect("AddMatch under the new limit");
    }
    let third = rules.add_match("type='signal',member='Rule2'").unwrap_err();
    assert_eq!(third.dbus_name(), Some(LIMITS_EXCEEDED), "{third:?}");

    // max_replies_per_connection: one call may wait for the callee.
    let callee_name = callee.unique_name().to_owned();
    assert_eq!(refusal(&mut caller, call_to(&callee_name)), None);
    assert_eq!(
        refusal(&mut caller, call_to(&callee_name)).as_deref(),
        Some(LIMITS_EXCEEDED),
        "a second pending call was let through"
    );

    // max_outgoing_bytes: signals fill the sink's queue past 64 KiB (far
    // below the 127 MiB in force before), then a call to it is refused.
    let chunk = MessageBuilder::signal("/f", "org.example.Flood", "Chunk")
        .body(vec![Value::String("f".repeat(16 * 1024))]);
    for _ in 0..200 {
        sender.send(chunk.clone(), &[]).expect("emit");
    }
    sender
        .get_id()
        .expect("the sender is served after its burst");
    let sink_name = sink.unique_name().to_owned();
    assert_eq!(
        refusal(&mut rules, call_to(&sink_name)).as_deref(),
        Some(LIMITS_EXCEEDED),
        "a call to a receiver past the reloaded max_outgoing_bytes was queued"
    );

    // max_connections_per_user: a sixth connection's Hello is refused.
    match bus.try_connect() {
        Err(quickbus_client::Error::Protocol(why)) => {
            assert!(why.contains(LIMITS_EXCEEDED), "{why}")
        }
        Err(other) => panic!("a sixth connection of the user: {other}"),
        Ok(_) => panic!("a sixth connection of the user was let in"),
    }

    // auth_timeout: the connection that was waiting before the reload is
    // measured against the new value.
    assert!(
        closed_by_the_bus(&mut incomplete),
        "a connection still without Hello {TIMEOUT:?} after auth_timeout became 1 s"
    );
    drop((callee, sink));
}

#[test]
fn a_reload_reaches_open_connections_survives_a_restart_and_is_logged() {
    if skip::quickbus_only("limits of the loop applied to open connections, restart in place") {
        return;
    }
    let bus = bus_with(&limit("max_message_size", 65536));
    let mut early = connect(&bus);
    let big = MessageBuilder::signal("/big", "org.example.Big", "Payload")
        .body(vec![Value::String("b".repeat(200 * 1024))]);

    rewrite(
        &bus,
        &[
            // Applied at once, by the loop (frames) and the bus core.
            limit("max_message_size", 1 << 20),
            // Applied to deadlines set from now on.
            limit("reply_timeout", 30_000),
            // Applied to connections accepted from now on.
            limit("socket_buffer_bytes", 65536),
            // Nothing in quickbus to bound.
            limit("max_incoming_bytes", 1000),
        ]
        .concat(),
    );
    reload(&mut early);
    early.send(big.clone(), &[]).expect("send 200 KiB");
    early
        .get_id()
        .expect("a 200 KiB message under the reloaded max_message_size closed the connection");

    let log = bus.log();
    let line = log
        .lines()
        .find(|l| l.contains("Limits changed by the reload"))
        .unwrap_or_else(|| panic!("no line names the changed limits; log:\n{log}"));
    for part in [
        "applied at once: max_message_size=1048576 (was 65536)",
        "applied to deadlines set from now on: reply_timeout=30000 (was none)",
        "applied to connections accepted from now on (the others keep theirs): \
         socket_buffer_bytes=65536 (was 0)",
        "without effect in quickbus: max_incoming_bytes=1000 (was 133169152)",
    ] {
        assert!(line.contains(part), "{part:?} missing from {line:?}");
    }
    assert_eq!(
        log.matches("Limits changed by the reload").count(),
        1,
        "one line per reload; log:\n{log}"
    );

    // A restart in place keeps the reloaded limits, not the start-up ones.
    restart_support::restart_by_signal(&bus);
    early
        .send(big, &[])
        .expect("send 200 KiB after the restart");
    early.get_id().expect(
        "a 200 KiB message after a restart closed the connection: the start-up limit came back",
    );
}
