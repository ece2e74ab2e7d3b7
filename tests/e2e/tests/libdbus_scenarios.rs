//! The scenarios of dbus's libdbus-only tests, replayed against the bus.
//!
//! test-corrupt, test-relay, test-fdpass and test-loopback (Debian's
//! dbus-tests) drive a miniature server built from libdbus itself and never
//! start a bus, so the conformance runner cannot point them at quickbus.
//! Here each of their scenarios runs against the bus daemon instead; where
//! dbus's test relayed from one client to another through its own server,
//! the bus is that server.
//!
//! | dbus subtest | here |
//! |---|---|
//! | test-corrupt /corrupt/unix | `corrupt_bytes_after_a_working_exchange_cut_off_only_their_sender` |
//! | test-corrupt /corrupt/byte-order/unix | `a_claimed_byte_order_that_does_not_match_the_bytes_is_cut_off` |
//! | test-relay /connect/unix, /relay/unix | `relayed_signals_arrive_once_and_in_order` |
//! | test-relay /limit/unix | `eight_thousand_signals_to_a_receiver_that_reads_late_all_arrive` |
//! | test-fdpass /unsupported | hostile.rs `fds_to_a_peer_that_cannot_take_them_reach_nobody` |
//! | test-fdpass /relay | `a_passed_fd_arrives_as_the_same_open_file` |
//! | test-fdpass /limit, /odd-limit/{minus1,at} | `messages_at_or_under_the_fd_limit_arrive_whole` |
//! | test-fdpass /too-many/{plus1,plus2,plus17}, /odd-limit/{plus1,plus2} | `messages_over_the_fd_limit_cut_off_their_sender_and_reach_nobody` |
//! | test-fdpass /too-many/split | `too_many_fds_split_over_two_sendmsg_calls_cut_off_the_sender` |
//! | test-fdpass /flood/{1,half-limit,over-half-limit,limit} | `floods_of_messages_with_fds_all_arrive` |
//! | test-loopback /connect/unix/*, /message/unix/* | `signals_travel_over_every_unix_listening_address` |
//! | test-loopback /message/bad-guid/unix | `a_client_expecting_another_guid_refuses_the_bus` |
//!
//! TCP variants are left out: quickbus listens on Unix sockets only. The
//! test-loopback /builtin-filters subtest checks a libdbus client feature
//! with no bus side.

// The hostile tests' scene (a bus with a victim and a witness peer) fits
// these scenarios; not every helper of that module is used here.
#[allow(dead_code)]
#[path = "hostile/support.rs"]
mod support;

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::thread;

use quickbus_client::{Connection, MessageBuilder, Value};
use quickbus_e2e::{assert_guid_suffix, daemon_path, write_config, Background, Listen, TempDir};
use support::*;

/// dbus's test-fdpass runs its server with this many fds per message.
const MAX_MESSAGE_UNIX_FDS: usize = 20;
/// test-fdpass's SOME_MESSAGES.
const SOME_MESSAGES: usize = 20;

fn fd_limit(limit: usize) -> String {
    format!(r#"<limit name="max_message_unix_fds">{limit}</limit>"#)
}

/// A signal addressed to the victim, with `fds` fds as its body.
fn greeting_with_fds(fds: usize) -> MessageBuilder {
    MessageBuilder::signal("/com/example/Hello", "com.example.Hello", "Greeting")
        .destination(VICTIM_NAME)
        .body((0..fds as u32).map(Value::UnixFd).collect())
}

/// The victim's next message that is not from the bus itself.
fn next_from_a_peer(victim: &mut Connection) -> (quickbus_client::Message, Vec<OwnedFd>) {
    loop {
        let (message, fds) = victim.receive().expect("the victim receives");
        if message.sender() != Some(quickbus_client::BUS_NAME) {
            return (message, fds);
        }
    }
}

// ---- test-corrupt ----

#[test]
fn corrupt_bytes_after_a_working_exchange_cut_off_only_their_sender() {
    let mut scene = Scene::start();
    let mut hostile = scene.bus.connect();
    // First the connection works...
    assert_eq!(
        ping(&mut hostile, &mut scene.witness, "hello"),
        "pong: hello"
    );
    // ...then 1 KiB of zeros arrives where a message should start (version
    // 0 and byte order '\0' are both invalid).
    hostile.send_raw(&[0u8; 1024], &[]).expect("send zeros");
    expect_closed(&mut hostile);
    scene.assert_unharmed_and_untouched();
}

#[test]
fn a_claimed_byte_order_that_does_not_match_the_bytes_is_cut_off() {
    let mut scene = Scene::start();
    let mut hostile = scene.bus.connect();
    assert!(!hostile.get_id().expect("GetId").is_empty());
    // 255 bytes of 0xff: read big-endian, the array length of this
    // little-endian body becomes 0xff000000.
    let serial = hostile.next_serial();
    let mut bytes = MessageBuilder::signal("/", "a.b", "c")
        .destination(VICTIM_NAME)
        .body(vec![Value::Array {
            elem_sig: "y".into(),
            items: vec![Value::Byte(0xff); 255],
        }])
        .build(serial)
        .expect("build")
        .to_vec();
    assert_eq!(bytes[0], b'l');
    bytes[0] = b'B';
    hostile.send_raw(&bytes, &[]).expect("send");
    expect_closed(&mut hostile);
    scene.assert_unharmed_and_untouched();
}

// ---- test-relay ----

#[test]
fn relayed_signals_arrive_once_and_in_order() {
    let mut scene = Scene::start();
    let mut left = scene.bus.connect();
    for member in ["First", "Second"] {
        let signal = MessageBuilder::signal("/com/example/Hello", "com.example.Hello", member)
            .destination(VICTIM_NAME);
        left.send(signal, &[]).expect("send");
    }
    for member in ["First", "Second"] {
        let (message, _) = next_from_a_peer(&mut scene.victim);
        assert_eq!(message.member(), Some(member));
        assert_eq!(message.sender(), Some(left.unique_name()));
        assert_eq!(message.interface(), Some("com.example.Hello"));
    }
    scene.assert_unharmed();
    let unsolicited = scene.victim_unsolicited();
    assert!(
        unsolicited.is_empty(),
        "duplicates reached the victim: {unsolicited:?}"
    );
}

#[test]
fn eight_thousand_signals_to_a_receiver_that_reads_late_all_arrive() {
    const MANY: u32 = 8192;
    let mut scene = Scene::start();
    let mut left = scene.bus.connect();
    let unique = left.unique_name().to_owned();
    // The sender does not wait for the receiver: whatever the bus does to
    // hold it back, no signal may be lost.
    let sender = thread::spawn(move || {
        for i in 0..MANY {
            let signal = MessageBuilder::signal(
                "/com/example/Hello",
                "com.example.Hello",
                format!("Message{i}"),
            )
            .destination(VICTIM_NAME);
            left.send(signal, &[]).expect("send");
        }
        left
    });
    // The receiver starts reading only once the sender is well under way.
    thread::sleep(quickbus_e2e::POLL_INTERVAL);
    for i in 0..MANY {
        let (message, _) = next_from_a_peer(&mut scene.victim);
        assert_eq!(message.member(), Some(format!("Message{i}").as_str()));
        assert_eq!(message.sender(), Some(unique.as_str()));
    }
    let mut left = sender.join().expect("the sender finished");
    assert!(!left
        .get_id()
        .expect("the sender is still connected")
        .is_empty());
    scene.assert_unharmed();
}

// ---- test-fdpass ----

#[test]
fn a_passed_fd_arrives_as_the_same_open_file() {
    let mut scene = Scene::start();
    let dir = TempDir::new();
    let path = dir.path().join("passed");
    std::fs::write(&path, b"the same file").expect("write");
    let file = File::open(&path).expect("open");
    let before = file.metadata().expect("stat");
    let mut sender = scene.bus.connect();
    let serial = sender
        .send(greeting_with_fds(1), &[file.as_fd()])
        .expect("send an fd");
    let (message, mut fds) = next_from_a_peer(&mut scene.victim);
    assert_eq!(message.serial(), serial);
    assert_eq!(message.member(), Some("Greeting"));
    assert_eq!(message.signature(), "h");
    assert_eq!(fds.len(), 1);
    let after = File::from(fds.remove(0))
        .metadata()
        .expect("stat the passed fd");
    assert_eq!(
        (before.dev(), before.ino(), before.rdev()),
        (after.dev(), after.ino(), after.rdev())
    );
    assert!(!sender
        .get_id()
        .expect("the sender is still connected")
        .is_empty());
    scene.assert_unharmed();
}

/// Sends a Greeting with `count` fds to the victim, which must get it with
/// every fd; the sender stays connected.
fn assert_arrives_whole(scene: &mut Scene, count: usize) {
    let mut sender = scene.bus.connect();
    let null = dev_null();
    let fds: Vec<BorrowedFd<'_>> = vec![null.as_fd(); count];
    let serial = sender.send(greeting_with_fds(count), &fds).expect("send");
    let (message, got) = next_from_a_peer(&mut scene.victim);
    assert_eq!(message.serial(), serial);
    assert_eq!(got.len(), count, "a message with {count} fds lost some");
    assert!(!sender
        .get_id()
        .expect("the sender is still connected")
        .is_empty());
}

#[test]
fn messages_at_or_under_the_fd_limit_arrive_whole() {
    let mut scene = Scene::start_with(&fd_limit(MAX_MESSAGE_UNIX_FDS));
    assert_arrives_whole(&mut scene, MAX_MESSAGE_UNIX_FDS);
    let mut odd = Scene::start_with(&fd_limit(7));
    assert_arrives_whole(&mut odd, 6);
    assert_arrives_whole(&mut odd, 7);
    scene.assert_unharmed();
    odd.assert_unharmed();
}

/// A message with `count` fds, over the bus's limit, is refused (both
/// daemons cut the sender off) and reaches nobody.
fn assert_refused_with_fds(scene: &mut Scene, count: usize) {
    let mut hostile = scene.bus.connect();
    let null = dev_null();
    let fds: Vec<BorrowedFd<'_>> = vec![null.as_fd(); count];
    let serial = hostile.send(greeting_with_fds(count), &fds).expect("send");
    let refusal = expect_refused(&mut hostile, serial);
    eprintln!("{count} fds: {refusal:?}");
    scene.assert_unharmed_and_untouched();
}

#[test]
fn messages_over_the_fd_limit_cut_off_their_sender_and_reach_nobody() {
    let mut scene = Scene::start_with(&fd_limit(MAX_MESSAGE_UNIX_FDS));
    for over in [1, 2, 17] {
        assert_refused_with_fds(&mut scene, MAX_MESSAGE_UNIX_FDS + over);
    }
    let mut odd = Scene::start_with(&fd_limit(7));
    assert_refused_with_fds(&mut odd, 8);
    assert_refused_with_fds(&mut odd, 9);
}

/// One `sendmsg` of `bytes` carrying `fds`; true if all bytes went out.
fn sendmsg_with_fds(socket: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> bool {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space = vec![0u8; rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
    let sent = sendmsg(
        socket,
        &[std::io::IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    );
    matches!(sent, Ok(n) if n == bytes.len())
}

#[test]
fn too_many_fds_split_over_two_sendmsg_calls_cut_off_the_sender() {
    // 255 fds: more than Linux passes in one sendmsg, so a hostile sender
    // spreads them over two; the bus must still see one message with too
    // many fds.
    const TOO_MANY_FDS: usize = 255;
    let mut scene = Scene::start_with(&fd_limit(MAX_MESSAGE_UNIX_FDS));
    let before = scene.bus.fd_count();
    let mut hostile = scene.bus.connect();
    let null = dev_null();
    let fds: Vec<BorrowedFd<'_>> = vec![null.as_fd(); TOO_MANY_FDS];
    let serial = hostile.next_serial();
    let bytes = greeting_with_fds(TOO_MANY_FDS)
        .unix_fds(TOO_MANY_FDS as u32)
        .build(serial)
        .expect("build");
    let half = TOO_MANY_FDS / 2;
    let socket = hostile.as_fd();
    // The first byte with the first half of the fds, the rest with the
    // rest; the bus may hang up before the second call.
    assert!(sendmsg_with_fds(socket, &bytes[..1], &fds[..half]));
    let _ = sendmsg_with_fds(socket, &bytes[1..], &fds[half..]);
    let refusal = expect_refused(&mut hostile, serial);
    eprintln!("{TOO_MANY_FDS} fds in two sendmsg calls: {refusal:?}");
    drop(hostile);
    scene.assert_unharmed_and_untouched();
    scene.bus.wait_fds_at_most(before + 2);
}

#[test]
fn floods_of_messages_with_fds_all_arrive() {
    let mut scene = Scene::start_with(&fd_limit(MAX_MESSAGE_UNIX_FDS));
    let address_holder = scene.bus.connect();
    for per_message in [
        1,
        MAX_MESSAGE_UNIX_FDS / 2,
        3 * MAX_MESSAGE_UNIX_FDS / 4,
        MAX_MESSAGE_UNIX_FDS,
    ] {
        let mut sender = scene.bus.connect();
        // Sent as fast as possible from another thread, while the victim
        // reads: the fds of all the messages may be in flight at once.
        let flood = thread::spawn(move || {
            let null = dev_null();
            let fds: Vec<BorrowedFd<'_>> = vec![null.as_fd(); per_message];
            for _ in 0..SOME_MESSAGES {
                sender
                    .send(greeting_with_fds(per_message), &fds)
                    .expect("send");
            }
            sender
        });
        for j in 0..SOME_MESSAGES {
            let (message, fds) = next_from_a_peer(&mut scene.victim);
            assert_eq!(message.member(), Some("Greeting"));
            assert_eq!(
                fds.len(),
                per_message,
                "message {j} of the flood of {per_message}-fd messages lost fds"
            );
        }
        let mut sender = flood.join().expect("the flood was sent");
        assert!(!sender
            .get_id()
            .expect("the sender is still connected")
            .is_empty());
    }
    drop(address_holder);
    scene.assert_unharmed();
}

// ---- test-loopback ----

/// `sender` signals `receiver` (by unique name); the receiver gets it.
fn signal_between(sender: &mut Connection, receiver: &mut Connection) {
    let signal = MessageBuilder::signal("/com/example/Hello", "com.example.Hello", "Greeting")
        .destination(receiver.unique_name().to_owned());
    let serial = sender.send(signal, &[]).expect("send");
    loop {
        let (message, _) = receiver.receive().expect("receive");
        if message.member() == Some("Greeting") {
            assert_eq!(message.serial(), serial);
            assert_eq!(message.sender(), Some(sender.unique_name()));
            return;
        }
    }
}

#[test]
fn signals_travel_over_every_unix_listening_address() {
    let dir = TempDir::new();
    let config = write_config(dir.path(), Listen::UnixPath);
    let runtime = dir.path().join("runtime");
    let sockets = dir.path().join("sockets");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::create_dir_all(&sockets).unwrap();
    for address in [
        format!("unix:tmpdir={}", sockets.display()),
        format!("unix:dir={}", sockets.display()),
        "unix:runtime=yes".to_string(),
        format!("unix:path={}", sockets.join("by-path").display()),
    ] {
        let mut daemon = Background::spawn(
            Command::new(daemon_path())
                .env("XDG_RUNTIME_DIR", &runtime)
                .arg(format!("--config-file={}", config.display()))
                .arg(format!("--address={address}"))
                .args(["--nofork", "--print-address"]),
        );
        let printed = daemon.read_line();
        assert_guid_suffix(&printed);
        let mut a = connect(&printed);
        let mut b = connect(&printed);
        signal_between(&mut a, &mut b);
        signal_between(&mut b, &mut a);
        drop((a, b));
        daemon.kill();
    }
}

fn connect(address: &str) -> Connection {
    let mut conn = Connection::connect_with_timeout(address, quickbus_e2e::TIMEOUT)
        .unwrap_or_else(|e| panic!("connecting to {address}: {e}"));
    conn.set_timeout(Some(quickbus_e2e::TIMEOUT))
        .expect("set timeout");
    conn
}

#[test]
fn a_client_expecting_another_guid_refuses_the_bus() {
    let bus = quickbus_e2e::Bus::start();
    let address = bus.address().to_owned();
    let guid = bus.guid().to_owned();
    let other: String = guid
        .chars()
        .map(|c| if c == '0' { '1' } else { '0' })
        .collect();
    let wrong = address.replace(&guid, &other);
    let get_id = |address: &str| {
        bus.client("dbus-send")
            .args([
                // --bus registers (Hello) like any bus client would.
                &format!("--bus={address}"),
                "--dest=org.freedesktop.DBus",
                "--print-reply",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.GetId",
            ])
            .output()
            .expect("run dbus-send")
    };
    let refused = get_id(&wrong);
    assert!(
        !refused.status.success(),
        "libdbus accepted a bus with another guid"
    );
    let accepted = get_id(&address);
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
}
