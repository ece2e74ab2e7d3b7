//! GetConnectionCredentials' ProcessFD and GetConnectionSELinuxSecurityContext,
//! with credentials injected as the daemon would fill them.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};

use crate::fds::PassedFd;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use quickbus_wire::{flags, Message, MessageType, Value};

use super::{call_bus, creds, parse_out, s, Harness};
use crate::*;

/// Any fd stands in for a pidfd: the core only passes it on.
fn stand_in_pidfd() -> OwnedFd {
    OwnedFd::from(File::open("/dev/null").unwrap())
}

/// A peer past Hello with `creds`, and its unique name.
fn peer(h: &mut Harness, creds: Credentials, unix_fds: bool) -> (ConnId, String) {
    let id = h.bus.add_connection(creds, unix_fds);
    let name = match &h.driver(id, "Hello", vec![])[0] {
        Value::String(n) => n.clone(),
        other => panic!("Hello returned {other:?}"),
    };
    h.take();
    (id, name)
}

/// The reply to GetConnectionCredentials(name) and the fds riding on it.
fn credentials_call(h: &mut Harness, from: ConnId, name: &str) -> (Message, Arc<Vec<PassedFd>>) {
    let serial = h.send(from, call_bus("GetConnectionCredentials", vec![s(name)]));
    let pos = h
        .out
        .iter()
        .position(|a| matches!(a, Action::Queued { to, msg, .. } if *to == from && parse_out(msg).reply_serial() == Some(serial)))
        .expect("no reply to GetConnectionCredentials");
    match h.out.remove(pos) {
        Action::Queued { msg, .. } => (parse_out(&msg), msg.fds.unwrap_or_default()),
        _ => unreachable!(),
    }
}

fn entry(reply: &Message, key: &str) -> Option<Value> {
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
    let Some(Value::Array { items, .. }) = reply.body_values().unwrap().into_iter().next() else {
        panic!("GetConnectionCredentials returned no a{{sv}}")
    };
    items.into_iter().find_map(|i| match i {
        Value::DictEntry(k, v) if *k == s(key) => match *v {
            Value::Variant(inner) => Some(*inner),
            other => panic!("{key} is not in a variant: {other:?}"),
        },
        _ => None,
    })
}

fn same_file(a: impl AsFd, b: impl AsFd) -> bool {
    let meta = |fd: std::os::fd::BorrowedFd<'_>| {
        let m = File::from(fd.try_clone_to_owned().unwrap())
            .metadata()
            .unwrap();
        (m.dev(), m.ino())
    };
    meta(a.as_fd()) == meta(b.as_fd())
}

/// Process 77, which started at tick 5555, with a pidfd the stand-in
/// daemon can open.
fn with_pidfd(h: &mut Harness) -> Credentials {
    h.pidfds.insert(77, stand_in_pidfd());
    Credentials {
        process_started: Some(5555),
        ..creds(1001, 77)
    }
}

#[test]
fn process_fd_rides_on_the_reply_to_a_caller_with_fd_passing() {
    let mut h = Harness::new();
    let creds = with_pidfd(&mut h);
    let (_, subject) = peer(&mut h, creds, false);
    let (caller, _) = h.client();
    let (reply, fds) = credentials_call(&mut h, caller, &subject);
    assert_eq!(h.pidfd_requests, [(77, 5555)], "the daemon opens it");
    assert_eq!(reply.unix_fds(), 1);
    assert_eq!(entry(&reply, "ProcessFD"), Some(Value::UnixFd(0)));
    assert_eq!(entry(&reply, "ProcessID"), Some(Value::Uint32(77)));
    assert_eq!(fds.len(), 1);
    assert!(
        same_file(&fds[0], &h.pidfds[&77]),
        "the reply carries the daemon's pidfd"
    );
}

#[test]
fn process_fd_is_left_out_for_a_caller_without_fd_passing() {
    let mut h = Harness::new();
    let creds = with_pidfd(&mut h);
    let (_, subject) = peer(&mut h, creds, true);
    let (caller, _) = peer(&mut h, super::creds(1000, 100), false);
    let (reply, fds) = credentials_call(&mut h, caller, &subject);
    assert_eq!(reply.unix_fds(), 0);
    assert_eq!(entry(&reply, "ProcessFD"), None);
    assert_eq!(entry(&reply, "ProcessID"), Some(Value::Uint32(77)));
    assert!(fds.is_empty());
    assert!(h.pidfd_requests.is_empty());
}

#[test]
fn process_fd_is_left_out_when_the_kernel_gave_none_or_the_peer_is_anonymous() {
    let mut h = Harness::new();
    let (_, plain) = peer(&mut h, creds(1001, 77), true);
    let anonymous_creds = Credentials {
        anonymous: true,
        ..with_pidfd(&mut h)
    };
    let (_, anonymous) = peer(&mut h, anonymous_creds, true);
    let (caller, _) = h.client();
    for name in [plain, anonymous] {
        let (reply, fds) = credentials_call(&mut h, caller, &name);
        assert_eq!(entry(&reply, "ProcessFD"), None, "{name}");
        assert!(fds.is_empty());
    }
    assert!(h.pidfd_requests.is_empty());
}

#[test]
fn process_fd_is_left_out_when_the_daemon_cannot_open_one() {
    let mut h = Harness::new();
    let creds = with_pidfd(&mut h);
    let (_, subject) = peer(&mut h, creds, true);
    // The process is gone (or its pid was reused).
    h.pidfds.clear();
    let (caller, _) = h.client();
    let (reply, fds) = credentials_call(&mut h, caller, &subject);
    assert_eq!(h.pidfd_requests, [(77, 5555)]);
    assert_eq!(reply.unix_fds(), 0);
    assert_eq!(entry(&reply, "ProcessFD"), None);
    assert_eq!(entry(&reply, "ProcessID"), Some(Value::Uint32(77)));
    assert!(fds.is_empty());
}

#[test]
fn the_bus_reports_its_own_process_fd() {
    let mut h = Harness::with_options(BusOptions {
        own_process_started: Some(999),
        ..super::options()
    });
    h.pidfds.insert(4242, stand_in_pidfd());
    let (caller, _) = h.client();
    let (reply, fds) = credentials_call(&mut h, caller, BUS_NAME);
    assert_eq!(h.pidfd_requests, [(4242, 999)]);
    assert_eq!(entry(&reply, "ProcessFD"), Some(Value::UnixFd(0)));
    assert_eq!(entry(&reply, "ProcessID"), Some(Value::Uint32(4242)));
    assert!(same_file(&fds[0], &h.pidfds[&4242]));
}

#[test]
fn eavesdroppers_see_the_call_after_its_reply() {
    let mut h = Harness::new();
    let creds = with_pidfd(&mut h);
    let (_, subject) = peer(&mut h, creds, true);
    let (caller, _) = h.client();
    let (spy, _) = h.client();
    h.add_match(spy, "eavesdrop=true,member=GetConnectionCredentials");
    h.send(
        caller,
        call_bus("GetConnectionCredentials", vec![s(&subject)]),
    );
    let order: Vec<(ConnId, MessageType)> =
        h.take().iter().map(|(to, m)| (*to, m.msg_type())).collect();
    assert_eq!(
        order,
        [
            (caller, MessageType::MethodReturn),
            (spy, MessageType::MethodCall)
        ]
    );
}

#[test]
fn no_reply_expected_asks_for_no_pidfd() {
    let mut h = Harness::new();
    let creds = with_pidfd(&mut h);
    let (_, subject) = peer(&mut h, creds, true);
    let (caller, _) = h.client();
    h.send(
        caller,
        call_bus("GetConnectionCredentials", vec![s(&subject)]).flags(flags::NO_REPLY_EXPECTED),
    );
    assert!(h.take().is_empty());
    assert!(h.pidfd_requests.is_empty());
}

fn selinux_context(h: &mut Harness, from: ConnId, name: &str) -> Result<Vec<Value>, String> {
    let reply = h.call(
        from,
        call_bus("GetConnectionSELinuxSecurityContext", vec![s(name)]),
    );
    match reply.msg_type() {
        MessageType::MethodReturn => Ok(reply.body_values().unwrap()),
        _ => Err(reply.error_name().unwrap().to_owned()),
    }
}

fn bytes(b: &[u8]) -> Vec<Value> {
    vec![Value::Array {
        elem_sig: "y".into(),
        items: b.iter().map(|&b| Value::Byte(b)).collect(),
    }]
}

#[test]
fn selinux_context_is_the_label_without_nul_when_selinux_is_enabled() {
    let mut h = Harness::new();
    h.bus
        .set_selinux(true, Some(b"system_u:system_r:system_dbusd_t:s0".to_vec()));
    let label = b"unconfined_u:unconfined_r:unconfined_t:s0".to_vec();
    let (_, labelled) = peer(
        &mut h,
        Credentials {
            security_label: Some(label.clone()),
            ..creds(1001, 77)
        },
        false,
    );
    let (_, unlabelled) = peer(&mut h, creds(1002, 78), false);
    let (caller, _) = h.client();
    assert_eq!(
        selinux_context(&mut h, caller, &labelled),
        Ok(bytes(&label))
    );
    assert_eq!(
        selinux_context(&mut h, caller, BUS_NAME),
        Ok(bytes(b"system_u:system_r:system_dbusd_t:s0"))
    );
    assert_eq!(
        selinux_context(&mut h, caller, &unlabelled),
        Err(errors::SELINUX_SECURITY_CONTEXT_UNKNOWN.into())
    );
    assert_eq!(
        selinux_context(&mut h, caller, ":1.99"),
        Err(errors::NAME_HAS_NO_OWNER.into())
    );
}

#[test]
fn selinux_context_is_unknown_without_selinux_even_with_a_label() {
    let mut h = Harness::new();
    let (_, labelled) = peer(
        &mut h,
        Credentials {
            security_label: Some(b"unconfined".to_vec()),
            ..creds(1001, 77)
        },
        false,
    );
    let (caller, _) = h.client();
    assert_eq!(
        selinux_context(&mut h, caller, &labelled),
        Err(errors::SELINUX_SECURITY_CONTEXT_UNKNOWN.into())
    );
}
