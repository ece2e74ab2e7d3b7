//! A bus serialized for a restart in place and restored (docs/restart.md)
//! behaves exactly as the bus it came from: the same script of events
//! after the handover gives the same deliveries on both, names, rules,
//! queues, pending calls, an activation with its parked message and fd,
//! monitors, counters and the unique-name counter included.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use quickbus_wire::{MessageBuilder, MessageType, Value};

use super::{become_monitor, call_bus, options, parse_out, s, Harness};
use crate::handover::{restoring, saving, Clock};
use crate::{Action, Bus, ConnId};

const ACTIVATABLE: &str = "org.example.Activatable";

/// The machine's monotonic clock as the stand-in daemon reads it: the
/// harness's `now` is this many nanoseconds.
const MONOTONIC_NS: u64 = 5_000_000_000_000;

/// Serialize `h`'s bus as the daemon does before exec (`fds`: a copy of
/// every descriptor the bus may hold, with the number it holds it by), and restore it as
/// the new image does, `later` after `h.now` by its own `Instant`s.
fn hand_over(h: &Harness, fds: &[(RawFd, OwnedFd)], later: Duration) -> Bus {
    let before = Clock {
        instant: h.now,
        monotonic_ns: MONOTONIC_NS,
    };
    let (bytes, numbers) = saving(before, || postcard::to_stdvec(&h.bus));
    let bytes = bytes.expect("the bus serializes");
    let table = numbers
        .iter()
        .map(|n| {
            fds.iter()
                .find(|(number, _)| number == n)
                .unwrap_or_else(|| panic!("the bus named fd {n}, which the test did not give"))
                .1
                .try_clone()
                .unwrap()
        })
        .collect();
    // The other side of the exec: the same monotonic reading is another
    // `Instant`, as far from this one as the restart took.
    let after = Clock {
        instant: h.now + later,
        monotonic_ns: MONOTONIC_NS,
    };
    let (restored, unused) = restoring(after, table, || postcard::from_bytes::<Bus>(&bytes));
    assert_eq!(unused, 0, "every fd handed over is taken");
    let mut bus = restored.expect("the bus deserializes");
    bus.restored(None);
    bus
}

/// Calls time out (the harness's default options have no reply timeout).
fn with_reply_timeout() -> crate::BusOptions {
    let mut opts = options();
    opts.limits.reply_timeout = Some(Duration::from_secs(25));
    opts
}

/// One action as a comparable line: who gets what (a delivery's type,
/// member, sender, destination, serials, body, fd count).
fn describe(action: &Action) -> String {
    match action {
        Action::Deliver { to, msg } => {
            let m = parse_out(msg);
            format!(
                "{to:?} {:?} {:?} {:?}->{:?} serial={} reply={:?} error={:?} fds={} {:?}",
                m.msg_type(),
                m.member(),
                m.sender(),
                m.destination(),
                m.serial(),
                m.reply_serial(),
                m.error_name(),
                msg.fds.len(),
                m.body_values().unwrap()
            )
        }
        other => format!("{other:?}"),
    }
}

/// The same steps on the original bus and on its restored copy.
struct Twins {
    original: Harness,
    restored: Harness,
}

impl Twins {
    /// `step` on both; what each emitted must be the same.
    fn both(&mut self, what: &str, mut step: impl FnMut(&mut Harness)) {
        let mut seen = Vec::new();
        for h in [&mut self.original, &mut self.restored] {
            step(h);
            let mut lines: Vec<String> = h.out.drain(..).map(|a| describe(&a)).collect();
            // Between receivers the order is a map's; each receiver's own
            // order is what must match (a stable sort keeps it).
            lines.sort_by(|a, b| a.split(' ').next().cmp(&b.split(' ').next()));
            seen.push(lines);
        }
        assert_eq!(seen[0], seen[1], "{what}: the restored bus did otherwise");
        assert!(
            !seen[0].is_empty() || what.starts_with("quiet"),
            "{what}: nothing happened"
        );
    }
}

fn sorted_strings(values: Vec<Value>) -> Vec<String> {
    let Some(Value::Array { items, .. }) = values.into_iter().next() else {
        panic!("not an array");
    };
    let mut strings: Vec<String> = items
        .into_iter()
        .map(|v| match v {
            Value::String(s) => s,
            other => format!("{other:?}"),
        })
        .collect();
    strings.sort();
    strings
}

#[test]
fn a_restored_bus_does_what_the_original_would_have_done() {
    let mut h = Harness::with_options(with_reply_timeout());
    let (a, a_name) = h.client();
    let (b, b_name) = h.client();
    let (c, _) = h.client();
    let (monitor, _) = h.client();
    // Names: a owns, b waits in the queue.
    assert_eq!(h.request_name(a, "com.example.Shared", 0), 1);
    assert_eq!(h.request_name(b, "com.example.Shared", 0), 2);
    h.request_name(c, "com.example.C", 0);
    // Rules: c's signal rule (twice: counted), a's sender rule.
    h.add_match(c, "type='signal',interface='com.example.I'");
    h.add_match(c, "type='signal',interface='com.example.I'");
    h.add_match(a, "type='signal',sender='com.example.C'");
    // A monitor.
    h.send(monitor, become_monitor(&["type='signal'"]));
    h.take();
    // A call from a to b, not yet answered: its deadline is pending.
    let call = h.send(
        a,
        MessageBuilder::method_call("/obj", "Slow")
            .interface("com.example.I")
            .destination(b_name.clone()),
    );
    h.take();
    // An activation: a's message for a name nobody owns yet, with an fd.
    let (pipe, _other_end) = std::os::unix::net::UnixStream::pair().unwrap();
    let pipe: OwnedFd = pipe.into();
    let fds = vec![(pipe.as_raw_fd(), pipe.try_clone().unwrap())];
    h.send_with_fds(
        a,
        MessageBuilder::method_call("/svc", "Start")
            .interface("com.example.Svc")
            .destination(ACTIVATABLE)
            .unix_fds(1),
        vec![pipe],
    );
    assert!(
        h.out
            .iter()
            .any(|x| matches!(x, Action::Activate { name, .. } if name == ACTIVATABLE)),
        "{:?}",
        h.out
    );
    h.out.clear();

    let later = Duration::from_millis(700);
    let bus = hand_over(&h, &fds, later);
    let mut restored = Harness::with_options(with_reply_timeout());
    restored.bus = bus;
    restored.now = h.now + later;
    // The clients' own serials go on from where they were.
    restored.next_serial = h.next_serial;
    h.now += later;
    let mut twins = Twins {
        original: h,
        restored,
    };

    twins.both("GetAllMatchRules", |h| {
        h.send(
            a,
            MessageBuilder::method_call(crate::BUS_PATH, "GetAllMatchRules")
                .interface("org.freedesktop.DBus.Debug.Stats")
                .destination(crate::BUS_NAME),
        );
    });
    twins.both("GetStats", |h| {
        h.send(
            a,
            MessageBuilder::method_call(crate::BUS_PATH, "GetStats")
                .interface("org.freedesktop.DBus.Debug.Stats")
                .destination(crate::BUS_NAME),
        );
    });
    // A new connection gets the next unique name, never an old one.
    twins.both("Hello", |h| {
        let id = h.connect(true);
        h.send(id, call_bus("Hello", vec![]));
    });
    // c's signal reaches c's rule (twice), a's sender rule, the monitor.
    twins.both("a signal", |h| {
        h.send(
            c,
            MessageBuilder::signal("/sig", "com.example.I", "Happened").body(vec![s("x")]),
        );
    });
    // b answers a's call, which is still expected.
    twins.both("the reply", |h| {
        h.send(
            b,
            MessageBuilder::method_return(call).destination(a_name.clone()),
        );
    });
    // a leaves: b gets the name.
    twins.both("a leaves", |h| {
        let mut out = Vec::new();
        h.bus.remove_connection(a, &mut out);
        h.out.extend(out);
    });
    // The activated service arrives and takes its name: the parked
    // message goes to it, with its fd.
    twins.both("the service arrives", |h| {
        let service: ConnId = h.connect(true);
        h.send(service, call_bus("Hello", vec![]));
        h.send(
            service,
            call_bus("RequestName", vec![s(ACTIVATABLE), Value::Uint32(0)]),
        );
    });
    // The driver's lists (last: their order is a map's, and with it the
    // bytes of the reply that BytesOut counts).
    for (member, args) in [
        ("ListNames", vec![]),
        ("ListQueuedOwners", vec![s("com.example.Shared")]),
    ] {
        let mut lists = Vec::new();
        for h in [&mut twins.original, &mut twins.restored] {
            lists.push(sorted_strings(h.driver(b, member, args.clone())));
        }
        assert_eq!(lists[0], lists[1], "{member}");
    }
    // Time-outs fire at the same moments.
    twins.both("quiet: deadlines", |h| {
        let now = h.now + Duration::from_secs(3600);
        h.bus.handle_timeouts(now, &mut h.out);
    });
}

#[test]
fn a_pending_call_times_out_at_the_same_moment_after_a_restart() {
    let mut h = Harness::with_options(with_reply_timeout());
    let (a, _) = h.client();
    let (_b, b_name) = h.client();
    h.send(
        a,
        MessageBuilder::method_call("/obj", "Slow")
            .interface("com.example.I")
            .destination(b_name),
    );
    h.take();
    let deadline = h.bus.next_deadline().expect("the call's deadline");
    let later = Duration::from_secs(2);
    let mut bus = hand_over(&h, &[], later);
    // The same moment, as the new image's clock names it.
    assert_eq!(bus.next_deadline(), Some(deadline + later));
    let mut out = Vec::new();
    bus.handle_timeouts(deadline + later - Duration::from_millis(1), &mut out);
    assert!(out.is_empty(), "{out:?}");
    bus.handle_timeouts(deadline + later, &mut out);
    let errors: Vec<_> = out
        .iter()
        .filter_map(|x| match x {
            Action::Deliver { to, msg } => Some((*to, parse_out(msg))),
            _ => None,
        })
        .filter(|(_, m)| m.msg_type() == MessageType::Error)
        .collect();
    assert_eq!(errors.len(), 1, "{out:?}");
    assert_eq!(errors[0].0, a);
    assert_eq!(
        errors[0].1.error_name(),
        Some("org.freedesktop.DBus.Error.NoReply")
    );
}

#[test]
fn without_the_fix_up_a_restored_connection_has_no_rules() {
    // Bus::restored is what gives connections their policy back: a bus
    // deserialized and used without it must not pass for a working one.
    let mut h = Harness::new();
    let (a, _) = h.client();
    let before = Clock {
        instant: h.now,
        monotonic_ns: MONOTONIC_NS,
    };
    let (bytes, _) = saving(before, || postcard::to_stdvec(&h.bus));
    let (bus, _) = restoring(before, Vec::new(), || {
        postcard::from_bytes::<Bus>(&bytes.unwrap())
    });
    let mut bus = bus.unwrap();
    assert!(!bus.conns[&a].policy().can_own("com.example.Any"));
    bus.restored(None);
    assert!(bus.conns[&a].policy().can_own("com.example.Any"));
    let _ = Instant::now;
}
