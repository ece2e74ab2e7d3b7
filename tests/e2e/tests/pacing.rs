//! Pacing (crates/daemon/src/flow.rs): a sender that outruns a receiver is
//! paused once the receiver's queue passes `pacing_bytes`, so the queue
//! stays short while the receiver reads; a receiver that stops reading
//! stops pacing after `pacing_timeout`, and its sender goes on; monitors
//! pace nobody.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use quickbus_client::{Connection, Value};
use quickbus_e2e::{become_monitor, connection_stat, skip, Bus, Listen, TIMEOUT};
use quickbus_wire::MessageBuilder;

const PACING_BYTES: u64 = 256 * 1024;
const CHUNK: usize = 64 * 1024;
/// 4 MiB in all: sixteen times the pacing allowance.
const CHUNKS: u32 = 64;
/// A chunk's header, the string's length word and padding.
const FRAMING: u64 = 512;

fn start(pacing_timeout_ms: u64) -> Bus {
    start_with(PACING_BYTES, pacing_timeout_ms)
}

fn start_with(pacing_bytes: u64, pacing_timeout_ms: u64) -> Bus {
    Bus::start_with_config(
        Listen::UnixPath,
        &format!(
            r#"<limit name="pacing_bytes">{pacing_bytes}</limit>
               <limit name="pacing_timeout">{pacing_timeout_ms}</limit>"#
        ),
    )
}

fn connect(bus: &Bus) -> Connection {
    let mut conn = Connection::connect_with_timeout(bus.address(), TIMEOUT).expect("connect");
    conn.set_timeout(Some(TIMEOUT)).expect("timeout");
    conn
}

/// A receiver subscribed to the chunks, which reads nothing yet.
fn receiver(bus: &Bus) -> Connection {
    let mut receiver = connect(bus);
    receiver
        .add_match("type='signal',interface='org.example.Paced'")
        .expect("AddMatch");
    receiver
}

/// Sends the chunks from a thread, counting those the kernel took.
fn send_chunks(bus: &Bus) -> (thread::JoinHandle<Connection>, Arc<AtomicU32>) {
    let mut sender = connect(bus);
    let sent = Arc::new(AtomicU32::new(0));
    let counter = sent.clone();
    let thread = thread::spawn(move || {
        for i in 0..CHUNKS {
            let signal = MessageBuilder::signal("/paced", "org.example.Paced", "Chunk")
                .body(vec![Value::Uint32(i), Value::String("p".repeat(CHUNK))]);
            sender.send(signal, &[]).expect("send a chunk");
            counter.fetch_add(1, Ordering::SeqCst);
        }
        sender
    });
    (thread, sent)
}

/// The receiver's PeakQueuedBytes in Debug.Stats.
fn peak_queued(observer: &mut Connection, name: &str) -> u64 {
    connection_stat(observer, name, "PeakQueuedBytes")
}

/// Every chunk, in order.
fn read_all_chunks(receiver: &mut Connection) {
    let mut next = 0;
    while next < CHUNKS {
        let (message, _) = receiver.receive().expect("a chunk arrives");
        if message.member() != Some("Chunk") {
            continue; // NameAcquired
        }
        match message.body_values().expect("body").as_slice() {
            [Value::Uint32(i), Value::String(text)] => {
                assert_eq!(*i, next, "chunks arrive in order");
                assert_eq!(text.len(), CHUNK);
            }
            other => panic!("unexpected chunk body {other:?}"),
        }
        next += 1;
    }
}

#[test]
fn a_receiver_that_reads_never_has_much_more_than_pacing_bytes_queued() {
    if skip::quickbus_only("pacing") {
        return;
    }
    // A pause that never times out within the test.
    let bus = start(600_000);
    let mut receiver = receiver(&bus);
    let name = receiver.unique_name().to_owned();
    let mut observer = connect(&bus);
    let (sender, sent) = send_chunks(&bus);
    // The daemon reads the sender until the receiver's queue passes the
    // allowance...
    let deadline = Instant::now() + TIMEOUT;
    while peak_queued(&mut observer, &name) < PACING_BYTES {
        assert!(Instant::now() < deadline, "the receiver's queue never grew");
        thread::sleep(Duration::from_millis(10));
    }
    // ...and then no further: the sender is stuck in the kernel, where
    // without pacing all 4 MiB would have been read and queued.
    thread::sleep(Duration::from_millis(300));
    let bound = PACING_BYTES + CHUNK as u64 + FRAMING;
    let peak = peak_queued(&mut observer, &name);
    assert!(peak <= bound, "{peak} bytes queued, more than {bound}");
    assert!(
        sent.load(Ordering::SeqCst) < CHUNKS,
        "the sender was never paused"
    );
    // The receiver reads: the sender goes on, everything arrives in order,
    // and the queue never grew past the allowance and one chunk.
    read_all_chunks(&mut receiver);
    sender.join().expect("sender thread");
    let peak = peak_queued(&mut observer, &name);
    assert!(peak <= bound, "{peak} bytes queued, more than {bound}");
}

#[test]
fn a_receiver_that_stops_reading_holds_its_sender_only_for_pacing_timeout() {
    if skip::quickbus_only("pacing") {
        return;
    }
    let bus = start(200);
    let mut receiver = receiver(&bus);
    let name = receiver.unique_name().to_owned();
    let mut observer = connect(&bus);
    // The receiver reads nothing until the sender has sent everything: the
    // pause ends after 200 ms and the daemon queues the rest.
    let (sender, sent) = send_chunks(&bus);
    sender
        .join()
        .expect("the sender finishes while nobody reads");
    assert_eq!(sent.load(Ordering::SeqCst), CHUNKS);
    let peak = peak_queued(&mut observer, &name);
    assert!(
        peak > PACING_BYTES * 2,
        "only {peak} bytes were ever queued: was the sender released?"
    );
    read_all_chunks(&mut receiver);
}

#[test]
fn a_monitor_that_does_not_read_paces_nobody() {
    if skip::quickbus_only("pacing") {
        return;
    }
    // A pause would outlast the sender's write time-out: only the monitor
    // exemption lets the sender finish.
    let bus = start(600_000);
    let mut monitor = connect(&bus);
    become_monitor(
        &mut monitor,
        &["type='signal',interface='org.example.Paced'"],
    );
    let (sender, sent) = send_chunks(&bus);
    sender
        .join()
        .expect("the sender finishes while the monitor reads nothing");
    assert_eq!(sent.load(Ordering::SeqCst), CHUNKS);
    read_all_chunks(&mut monitor);
}

#[test]
fn pacing_bytes_zero_turns_pacing_off() {
    if skip::quickbus_only("pacing") {
        return;
    }
    // The same long pause as above, but no allowance: nobody is paused.
    let bus = start_with(0, 600_000);
    let mut receiver = receiver(&bus);
    let (sender, sent) = send_chunks(&bus);
    sender
        .join()
        .expect("the sender finishes while the receiver reads nothing");
    assert_eq!(sent.load(Ordering::SeqCst), CHUNKS);
    read_all_chunks(&mut receiver);
}
