//! A reader of another user that keeps overflowing (issue 17, item 3):
//! subscribed to every signal, it stops reading until its queue
//! overflows, drains, and starts again. The well-behaved sender must be
//! held back at most during the first episode, and every signal the
//! reader misses must be counted and told (MessagesLost).
//!
//! quickbus's own rule (holds, pacing, MessagesLost and the Holds/Pauses
//! counters of Debug.Stats do not exist in dbus-daemon, which drops such
//! signals silently): the tests return early against another daemon.
//! Needs root, to run the reader as nobody.

#[allow(dead_code)]
#[path = "hostile/support.rs"]
mod support;

use quickbus_client::{Connection, Message, MessageBuilder, Value};
use quickbus_e2e::{as_user, can_change_user, connection_stat, skip, NOBODY, TIMEOUT};
use support::*;

const INTERFACE: &str = "org.example.Neighbour";
/// Signals per episode, and their payload: 1 MiB, past any socket buffer
/// plus the 64 KiB queue bound, so every episode overflows the reader.
const SIGNALS: u64 = 256;
const PAYLOAD: usize = 4096;

fn config(extra: &str) -> String {
    format!(
        r#"<limit name="max_outgoing_bytes">65536</limit>
           <limit name="pacing_bytes">16384</limit>
           {extra}"#
    )
}

/// Whether this test can run here (else it is skipped or fails, see
/// [`skip`]).
fn usable() -> bool {
    !skip::quickbus_only("the overflow rule's hold budget")
        && !skip::unless(can_change_user(), "needs root, to run the reader as nobody")
}

/// A connection of nobody's that receives every signal.
fn reader(bus: &TestDaemon) -> Connection {
    let address = bus.address().to_owned();
    let mut reader = as_user(NOBODY, move || {
        Connection::connect_with_timeout(&address, TIMEOUT).expect("nobody connects")
    });
    reader.add_match("type='signal'").expect("AddMatch");
    reader
}

fn messages_lost_count(message: &Message) -> Option<u64> {
    if message.interface() != Some("org.quickbus.Bus") || message.member() != Some("MessagesLost") {
        return None;
    }
    match message.body_values().ok()?.as_slice() {
        [Value::Uint32(n)] => Some(u64::from(*n)),
        _ => None,
    }
}

/// How often the daemon stopped reading `name`: holds for full receivers
/// plus pacing pauses.
fn holds_of(observer: &mut Connection, name: &str) -> u64 {
    connection_stat(observer, name, "Holds") + connection_stat(observer, name, "Pauses")
}

/// One episode: the sender emits SIGNALS while the reader does not read;
/// then the reader reads until every signal either arrived or was told
/// lost by MessagesLost (more than one may come: the queue may drain to
/// half its bound while the episode goes on). A signal lost silently
/// leaves it waiting until TIMEOUT, which fails the test. Returns
/// (signals received, total of the MessagesLost counts).
fn episode(sender: &mut Connection, reader: &mut Connection) -> (u64, u64) {
    send_signals(sender);
    read_until_accounted(reader)
}

/// The sender emits SIGNALS, whoever reads them.
fn send_signals(sender: &mut Connection) {
    let text = "n".repeat(PAYLOAD);
    for _ in 0..SIGNALS {
        let signal = MessageBuilder::signal("/org/example/Neighbour", INTERFACE, "Tick")
            .body(vec![Value::String(text.clone())]);
        sender.send(signal, &[]).expect("send a signal");
    }
}

/// Read until every one of SIGNALS either arrived or was told lost;
/// returns (received, told lost).
fn read_until_accounted(reader: &mut Connection) -> (u64, u64) {
    let (mut received, mut lost) = (0, 0);
    while received + lost < SIGNALS {
        let (message, _) = reader
            .receive()
            .unwrap_or_else(|e| panic!("{received} signals received, {lost} told lost, then: {e}"));
        if message.interface() == Some(INTERFACE) {
            received += 1;
        } else if let Some(n) = messages_lost_count(&message) {
            lost += n;
        }
    }
    assert_eq!(received + lost, SIGNALS, "told more lost than were sent");
    (received, lost)
}

#[test]
fn a_reader_that_keeps_overflowing_holds_the_sender_in_its_first_episode_only() {
    if !usable() {
        return;
    }
    let scene = Scene::start_with(&config(""));
    let Scene {
        bus,
        victim: mut sender,
        witness: mut observer,
    } = scene;
    let mut reader = reader(&bus);
    let sender_name = sender.unique_name().to_owned();
    let reader_name = reader.unique_name().to_owned();
    let mut told = 0;
    let mut after_first = None;
    for n in 1..=5 {
        let (received, lost) = episode(&mut sender, &mut reader);
        assert!(lost > 0, "episode {n} did not overflow the reader");
        told += lost;
        let holds = holds_of(&mut observer, &sender_name);
        eprintln!(
            "episode {n}: {received} received, {lost} lost, sender held {} times and paced {} \
             times, for {} µs in all",
            connection_stat(&mut observer, &sender_name, "Holds"),
            connection_stat(&mut observer, &sender_name, "Pauses"),
            connection_stat(&mut observer, &sender_name, "HeldMicroseconds")
        );
        match after_first {
            None => after_first = Some(holds),
            Some(first) => assert_eq!(
                holds, first,
                "episode {n} held the sender again: an overflowing reader holds nobody"
            ),
        }
    }
    assert_eq!(
        connection_stat(&mut observer, &reader_name, "Dropped"),
        told,
        "Debug.Stats counts exactly what MessagesLost told"
    );
    let log = bus.log();
    assert!(
        log.contains("is not reading"),
        "no warning names the reader: {log}"
    );
}

#[test]
fn with_no_hold_budget_another_users_reader_never_holds_the_sender() {
    if !usable() {
        return;
    }
    let scene = Scene::start_with(&config(
        r#"<limit name="max_hold_per_user_per_minute">0</limit>"#,
    ));
    let Scene {
        bus,
        victim: mut sender,
        witness: mut observer,
    } = scene;
    let mut reader = reader(&bus);
    let sender_name = sender.unique_name().to_owned();
    let (_, lost) = episode(&mut sender, &mut reader);
    assert!(lost > 0, "the episode did not overflow the reader");
    assert_eq!(holds_of(&mut observer, &sender_name), 0);
}

#[test]
fn lossy_receivers_of_one_user_that_drain_in_turn_are_each_told_without_another_signal() {
    // Issue 24, item 7: the first receivers of a user to drain heard of
    // their losses only when a later signal reached them. Here no signal
    // follows: each must be told as it drains (a receiver left waiting
    // fails at the read's time-out).
    if !usable() {
        return;
    }
    let mut scene = Scene::start_with(&config(""));
    let mut readers: Vec<Connection> = (0..4).map(|_| reader(&scene.bus)).collect();
    send_signals(&mut scene.victim);
    for (n, reader) in readers.iter_mut().enumerate() {
        let name = reader.unique_name().to_owned();
        let (received, lost) = read_until_accounted(reader);
        eprintln!("receiver {n}: {received} received, {lost} told lost");
        assert!(
            lost > 0,
            "receiver {n} lost nothing: the test overflowed nobody"
        );
        assert_eq!(
            connection_stat(&mut scene.witness, &name, "Dropped"),
            lost,
            "receiver {n} was told exactly what it lost"
        );
    }
}
