//! Unix fds travelling with messages.

use super::*;

#[test]
fn fds_travel_with_the_message() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    h.send_with_fds(
        a,
        MessageBuilder::method_call("/", "TakeFd")
            .destination(name_b)
            .unix_fds(2)
            .body(vec![Value::UnixFd(0), Value::UnixFd(1)]),
        some_fds(2),
    );
    match h.out.as_slice() {
        [Action::Queued { to, msg, .. }] => {
            assert_eq!(*to, b);
            assert_eq!(msg.fd_count(), 2);
            assert_eq!(parse_out(msg).unix_fds(), 2);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn monitors_get_the_fds_of_a_call_to_the_driver() {
    let mut h = Harness::new();
    let (m, _) = h.client();
    let (a, _) = h.client();
    h.send(m, become_monitor(&[]));
    h.take();
    h.send_with_fds(a, call_bus("GetId", vec![]).unix_fds(1), some_fds(1));
    let fds_seen: Vec<(ConnId, usize)> = std::mem::take(&mut h.out)
        .into_iter()
        .filter_map(|action| match action {
            Action::Queued { to, msg, .. } => Some((to, msg.fd_count())),
            _ => None,
        })
        .collect();
    // The monitor's copy of the call carries the fd (as dbus-daemon
    // passes it on); the reply to the caller and its copy carry none.
    assert_eq!(fds_seen, vec![(m, 1), (m, 0), (a, 0)]);
}

#[test]
fn monitors_see_that_a_listener_without_fd_support_missed_a_broadcast() {
    let mut h = Harness::new();
    let (m, _) = h.client();
    let (a, _) = h.client();
    let b = h.connect(false);
    h.driver(b, "Hello", vec![]);
    h.add_match(b, "member='WithFd'");
    h.send(m, become_monitor(&[]));
    h.take();
    let signal = MessageBuilder::signal("/", "org.example.T", "WithFd")
        .unix_fds(1)
        .body(vec![Value::UnixFd(0)]);
    h.send_with_fds(a, signal, some_fds(1));
    let name_b = h.bus.unique_name(b).unwrap().to_owned();
    // b gets nothing and a is told nothing, as in dbus-daemon; the
    // monitor sees the signal and the error a would have got.
    assert_eq!(
        summary(&h.take()),
        vec![
            (m, "WithFd".into(), vec![]),
            (
                m,
                errors::NOT_SUPPORTED.into(),
                vec![format!(
                    "broadcast cannot be delivered to {name_b} (uid=1000 pid=100 comm=\"\") because it does not support receiving Unix fds"
                )]
            ),
        ]
    );
}

#[test]
fn fds_to_a_peer_without_fd_support_is_an_error() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let b = h.connect(false);
    h.driver(b, "Hello", vec![]);
    h.take();
    let builder = MessageBuilder::method_call("/", "TakeFd")
        .destination(h.bus.unique_name(b).unwrap().to_owned())
        .unix_fds(1)
        .body(vec![Value::UnixFd(0)]);
    let serial = h.send_with_fds(a, builder, some_fds(1));
    let got = h.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, a);
    assert_eq!(got[0].1.error_name(), Some(errors::NOT_SUPPORTED));
    assert_eq!(got[0].1.reply_serial(), Some(serial));
    assert!(h.bus.replies.is_empty());
}

#[test]
fn broadcast_with_fds_skips_peers_without_fd_support() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, _) = h.client();
    let c = h.connect(false);
    h.driver(c, "Hello", vec![]);
    h.add_match(b, "type='signal'");
    h.add_match(c, "type='signal'");
    h.take();
    h.send_with_fds(
        a,
        MessageBuilder::signal("/", "org.example.I", "S")
            .unix_fds(1)
            .body(vec![Value::UnixFd(0)]),
        some_fds(1),
    );
    let to: Vec<ConnId> = h.take().into_iter().map(|(to, _)| to).collect();
    assert_eq!(to, vec![b]);
}
