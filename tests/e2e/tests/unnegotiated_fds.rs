//! File descriptors from a peer that did not negotiate fd passing
//! (issue 17, item 4). dbus-daemon reads such a connection without
//! SCM_RIGHTS, so the kernel closes whatever fds come with its bytes; a
//! message whose UNIX_FDS header then names fds it lacks is corrupt
//! (DBUS_INVALID_MISSING_UNIX_FDS) and the sender is disconnected, while a
//! message that declares none is delivered without them. Both daemons are
//! held to that here (QUICKBUS_TEST_DAEMON=/usr/bin/dbus-daemon).

#[allow(dead_code)] // the other tests of hostile/ use the rest
#[path = "hostile/support.rs"]
mod support;

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use quickbus_client::{bus_call, Value};
use quickbus_e2e::read_raw_message;
use support::*;

/// A raw connection that authenticated without NEGOTIATE_UNIX_FD and said
/// Hello (serial 1).
fn without_fd_passing(scene: &Scene) -> UnixStream {
    let mut raw = scene.bus.authenticated_raw_with(false);
    let hello = bus_call("Hello").build(1).expect("build");
    write_ignoring_hangup(&mut raw, &hello);
    let reply = read_raw_message(&mut raw);
    assert_eq!(reply.reply_serial(), Some(1), "{}", describe(&reply));
    raw
}

/// A pipe: the read end to pass, the write end to see whether anyone
/// still holds the read end.
fn pipe() -> (OwnedFd, OwnedFd) {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe")
}

/// Whether some process still holds the read end of the pipe.
fn read_end_held(write_end: &OwnedFd) -> bool {
    match rustix::io::write(write_end, b"x") {
        Ok(_) => true,
        Err(rustix::io::Errno::PIPE) => false,
        Err(e) => panic!("writing to the pipe: {e}"),
    }
}

/// Waits (bounded) until nobody holds the read end: the bus closes the
/// fds clients pass on a thread of its own (docs/reliability.md, "Fds
/// clients pass"), a moment after it dropped them.
fn wait_until_read_end_released(write_end: &OwnedFd) {
    let began = std::time::Instant::now();
    while read_end_held(write_end) {
        assert!(
            began.elapsed() < quickbus_e2e::TIMEOUT,
            "the bus kept the fd"
        );
        std::thread::sleep(quickbus_e2e::POLL_INTERVAL);
    }
}

#[test]
fn a_message_with_an_fd_from_a_sender_that_did_not_negotiate_cuts_it_off() {
    let mut scene = Scene::start();
    let mut raw = without_fd_passing(&scene);
    let (read_end, write_end) = pipe();
    let call = call_to_victim("TakeFd")
        .unix_fds(1)
        .body(vec![Value::UnixFd(0)])
        .build(2)
        .expect("build");
    send_with_many_fds(raw.as_fd(), &call, &[read_end.as_fd()]);
    drop(read_end);
    expect_raw_closed(&mut raw);
    // Neither the message nor its fd went anywhere.
    scene.assert_unharmed_and_untouched();
    wait_until_read_end_released(&write_end);
}

#[test]
fn a_message_declaring_fds_from_a_sender_that_did_not_negotiate_cuts_it_off() {
    let mut scene = Scene::start();
    let mut raw = without_fd_passing(&scene);
    let call = call_to_victim("TakeFd")
        .unix_fds(1)
        .body(vec![Value::UnixFd(0)])
        .build(2)
        .expect("build");
    write_ignoring_hangup(&mut raw, &call);
    expect_raw_closed(&mut raw);
    scene.assert_unharmed_and_untouched();
}

#[test]
fn an_fd_under_a_message_that_declares_none_is_closed_and_the_message_delivered() {
    let mut scene = Scene::start();
    let mut raw = without_fd_passing(&scene);
    let (read_end, write_end) = pipe();
    let call = call_to_victim("Plain").build(2).expect("build");
    send_with_many_fds(raw.as_fd(), &call, &[read_end.as_fd()]);
    drop(read_end);
    // The sender stays: its next call is answered.
    let get_id = bus_call("GetId").build(3).expect("build");
    write_ignoring_hangup(&mut raw, &get_id);
    loop {
        let message = read_raw_message(&mut raw);
        if message.reply_serial() == Some(3) {
            break;
        }
    }
    // The bus read the fd with the call before the GetId: by now it is
    // closed, or being closed (dbus-daemon never receives it).
    wait_until_read_end_released(&write_end);
    scene.assert_unharmed();
    let got = scene.victim_unsolicited();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].contains("member=Some(\"Plain\")"), "{got:?}");
}
