//! A restart in place (docs/restart.md), compared byte for byte: the bus
//! written out inside `handover::saving` and read back inside
//! `handover::restoring` with the other process's `Instant`s, then fed
//! the same events as the original, must emit exactly the same actions
//! (deliveries by their bytes, fds by the file they are) and have the
//! same next deadline. Names and their queues, counted rules, eavesdroppers
//! and monitors, a policy that refuses, every Debug.Stats call and the
//! traffic counters, pending calls and their deadlines, an activation with
//! its waiting message and fd, held senders and flow control, the next
//! unique name; seeded random event sequences restarted at a random point
//! (`random`); and what cannot be written: fds and instants outside a
//! handover, a bus in the middle of an event, and a bus restored without
//! its policy fix-up.

use std::os::fd::{AsFd, OwnedFd};

use crate::fds::PassedFd;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::flow::{OutBounds, Pacing};
use crate::handover::tests::as_handed_over;
use crate::handover::{restoring, saving, Clock};
use crate::policy::{NameMatch, PolicyRule, RuleKind};
use crate::registry::{ALLOW_REPLACEMENT, DO_NOT_QUEUE};

mod legitimate_states;
mod random;

/// How far the new process's `Instant`s are from the old one's for the
/// same `CLOCK_MONOTONIC` reading.
const SHIFT: Duration = Duration::from_secs(3600);
const MONOTONIC_AT_RESTART: u64 = 7_000_000_000_000;

/// A small deterministic generator (xorshift), so a failure names its seed.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The limits of the random and legitimate-state tests: calls wait 30 s
/// for their replies, and a connection may owe
/// `max_replies_per_connection` of them.
fn limits(max_replies_per_connection: usize) -> Limits {
    Limits {
        reply_timeout: Some(Duration::from_secs(30)),
        max_replies_per_connection,
        ..Limits::default()
    }
}

/// What an action is, comparable across the two buses: a delivery by its
/// bytes and the files its fds are (device, inode), anything else by its
/// Debug text.
#[derive(Debug, PartialEq)]
enum Seen {
    Deliver {
        to: ConnId,
        bytes: Vec<u8>,
        files: Vec<(u64, u64)>,
        kind: flow::Kind,
    },
    Other(String),
}

fn file_of(fd: &PassedFd) -> (u64, u64) {
    let meta = std::fs::File::from(fd.as_fd().try_clone_to_owned().unwrap())
        .metadata()
        .unwrap();
    (meta.dev(), meta.ino())
}

fn seen(actions: Vec<Action>) -> Vec<Seen> {
    actions
        .into_iter()
        .map(|action| match action {
            Action::Queued { to, kind, msg, .. } => Seen::Deliver {
                to,
                bytes: [&msg.header[..], &msg.body[..]].concat(),
                files: msg.fds.iter().flat_map(|f| f.iter()).map(file_of).collect(),
                kind,
            },
            other => Seen::Other(format!("{other:?}")),
        })
        .collect()
}

/// Files of their own (one each, unlinked at once), so that an fd that
/// crosses the handover can be told from any other.
fn distinct_files(n: usize) -> Vec<PassedFd> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    (0..n)
        .map(|_| {
            let path = std::env::temp_dir().join(format!(
                "quickbus-handover-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let file = std::fs::File::create(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            PassedFd::from(OwnedFd::from(file))
        })
        .collect()
}

/// What the daemon does across exec, in one process: write the bus out,
/// hand its fds and buffers over (here: open the same files again, as
/// the fd table of the new process would hold them, and copy the
/// buffers), and read it back in a process
/// whose `Instant`s are [`SHIFT`] later. The new harness has the same
/// state as `h` and its clock reads `h.now + SHIFT`.
pub(super) fn restarted(h: &Harness) -> Harness {
    restarted_naming(h, "")
}

/// [`restarted`], a failed check naming `case` (a seeded test's seed and
/// step).
fn restarted_naming(h: &Harness, case: &str) -> Harness {
    let before = Clock {
        instant: h.now,
        monotonic_ns: MONOTONIC_AT_RESTART,
    };
    let (bytes, saved) = saving(before, || postcard::to_stdvec(&h.bus).unwrap());
    let (fds, buffers) = as_handed_over(&saved);
    let after = Clock {
        instant: h.now + SHIFT,
        monotonic_ns: MONOTONIC_AT_RESTART,
    };
    let (bus, unused) = restoring(after, fds, buffers, || {
        postcard::from_bytes::<Bus>(&bytes).unwrap()
    });
    assert_eq!(unused, 0, "every fd handed over belongs to the state{case}");
    let mut bus = bus;
    assert_eq!(
        bus.check_handed_over(),
        Ok(vec![]),
        "the state is accepted and its tallies add up to the queues{case}"
    );
    bus.restored(None);
    let mut twin = Harness::with_options(options());
    twin.bus = bus;
    twin.now = h.now + SHIFT;
    twin.next_serial = h.next_serial;
    twin
}

/// Run `step` on both harnesses; they must act alike. Returns what they
/// did.
fn both(old: &mut Harness, new: &mut Harness, step: impl Fn(&mut Harness)) -> Vec<Seen> {
    step(old);
    step(new);
    let (a, b) = (
        seen(std::mem::take(&mut old.out)),
        seen(std::mem::take(&mut new.out)),
    );
    assert_eq!(a, b, "the restored bus acts differently");
    assert_eq!(
        old.bus.next_deadline().map(|t| t + SHIFT),
        new.bus.next_deadline(),
        "deadlines moved"
    );
    a
}

fn stats_call(member: &str, body: Vec<Value>) -> MessageBuilder {
    MessageBuilder::method_call(BUS_PATH, member)
        .interface("org.freedesktop.DBus.Debug.Stats")
        .destination(BUS_NAME)
        .body(body)
}

fn sorted_names(h: &mut Harness, from: ConnId) -> Vec<String> {
    let mut names = string_list(&h.driver(from, "ListNames", vec![])[0]);
    names.sort();
    names
}

fn delivered(seen: &[Seen]) -> Vec<(ConnId, Message)> {
    seen.iter()
        .filter_map(|s| match s {
            Seen::Deliver { to, bytes, .. } => {
                Some((*to, Message::parse(Bytes::from(bytes.clone())).unwrap()))
            }
            Seen::Other(_) => None,
        })
        .collect()
}

#[test]
fn a_restored_bus_keeps_names_rules_calls_activations_and_counters() {
    let mut h = Harness::new();
    h.bus.set_limits(Limits {
        reply_timeout: Some(Duration::from_secs(25)),
        ..Limits::default()
    });
    // The policy keeps one name from everyone: each connection's rules
    // must be looked up again after the restore.
    let mut policy = PolicyConfig::allow_all();
    policy
        .default
        .push(PolicyRule::deny(RuleKind::Own(NameMatch::Exact(
            "org.example.Forbidden".into(),
        ))));
    h.bus.set_policy(policy);

    let (a, name_a) = h.client();
    let (b, name_b) = h.client();
    let (c, _) = h.client();
    let (gone, name_gone) = h.client();
    let (m, _) = h.client();
    // Owned names with queues and flags.
    h.request_name(a, "org.example.Queued", ALLOW_REPLACEMENT);
    h.request_name(b, "org.example.Queued", 0);
    h.request_name(c, "org.example.Queued", 0);
    h.request_name(b, "org.example.B", DO_NOT_QUEUE);
    // Match rules, a duplicate, an eavesdropper, rules naming a unique
    // name and a well-known one.
    h.add_match(a, "type='signal',interface='org.example.I'");
    h.add_match(b, "type='signal',member='Ping'");
    h.add_match(b, "type='signal',member='Ping'");
    h.add_match(c, "eavesdrop='true',type='method_call'");
    h.add_match(c, &format!("sender='{name_a}'"));
    h.add_match(a, &format!("sender='{name_gone}'"));
    h.add_match(c, "type='signal',sender='org.example.Queued'");
    // A monitor.
    h.call(m, become_monitor(&["type='signal'", "type='method_call'"]));
    // Some traffic, and a connection that left (its unique name must
    // never come back).
    h.send(
        a,
        MessageBuilder::signal("/", "org.example.I", "Ping").body(vec![s("hi")]),
    );
    h.bus.remove_connection(gone, h.now, &mut h.out);
    // A call waiting for its reply, with a deadline.
    let pending = h.send(
        a,
        MessageBuilder::method_call("/", "Slow").destination(name_b.clone()),
    );
    // An activation in progress, the message waiting for it with an fd.
    let file = distinct_files(1);
    let file_id = file_of(&file[0]);
    h.send_with_fds(
        c,
        MessageBuilder::method_call("/", "Start")
            .interface("org.example.Iface")
            .destination("org.example.Activatable")
            .unix_fds(1),
        file,
    );
    assert!(h
        .out
        .iter()
        .any(|a| matches!(a, Action::Activate { name, .. } if name == "org.example.Activatable")));
    h.out.clear();
    h.now += Duration::from_secs(5);

    let mut r = restarted(&h);

    // The same answers to the driver, byte for byte.
    for who in [a, b, c] {
        both(&mut h, &mut r, |h| {
            for name in ["org.example.Queued", "org.example.B", ":1.1"] {
                h.send(who, call_bus("ListQueuedOwners", vec![s(name)]));
                h.send(who, call_bus("GetNameOwner", vec![s(name)]));
            }
            h.send(who, call_bus("ListMatchRules", vec![]));
            h.send(who, stats_call("GetStats", vec![]));
            h.send(who, stats_call("GetAllMatchRules", vec![]));
            for id in [&name_a, &name_b] {
                h.send(who, stats_call("GetConnectionStats", vec![s(id)]));
            }
        });
    }
    for id in [a, b, c, m] {
        assert_eq!(h.bus.traffic(id), r.bus.traffic(id));
    }
    assert_eq!(sorted_names(&mut h, a), sorted_names(&mut r, a));
    for h in [&mut h, &mut r] {
        let c_name = h.bus.unique_name(c).unwrap().to_owned();
        assert_eq!(
            string_list(&h.driver(a, "ListQueuedOwners", vec![s("org.example.Queued")])[0]),
            [name_a.clone(), name_b.clone(), c_name]
        );
    }
    // What the monitor and the eavesdropper saw of those calls.
    assert_eq!(
        seen(std::mem::take(&mut h.out)),
        seen(std::mem::take(&mut r.out))
    );
    assert!(h.bus.activation_pending("org.example.Activatable"));
    assert!(r.bus.activation_pending("org.example.Activatable"));
    assert_eq!(
        r.bus.next_deadline(),
        h.bus.next_deadline().map(|t| t + SHIFT)
    );

    // A signal reaches the same receivers, in the same order (the monitor
    // and the rules' owners).
    let got = both(&mut h, &mut r, |h| {
        h.send(
            a,
            MessageBuilder::signal("/", "org.example.I", "Ping").body(vec![s("again")]),
        );
    });
    let to: Vec<ConnId> = delivered(&got).iter().map(|(to, _)| *to).collect();
    assert_eq!(to, [m, a, b, c]);

    // The policy still refuses the forbidden name and allows others.
    both(&mut h, &mut r, |h| {
        h.send(
            c,
            call_bus(
                "RequestName",
                vec![s("org.example.Forbidden"), Value::Uint32(0)],
            ),
        );
        h.send(
            c,
            call_bus("RequestName", vec![s("org.example.Fine"), Value::Uint32(0)]),
        );
    });

    // The activated service takes its name: the waiting message goes to
    // it, with its fd.
    let got = both(&mut h, &mut r, |h| {
        let service = h.connect(true);
        h.send(service, call_bus("Hello", vec![]));
        h.send(
            service,
            call_bus(
                "RequestName",
                vec![s("org.example.Activatable"), Value::Uint32(0)],
            ),
        );
    });
    let started = got
        .iter()
        .find_map(|s| match s {
            Seen::Deliver { bytes, files, .. } => {
                let msg = Message::parse(Bytes::from(bytes.clone())).unwrap();
                (msg.member() == Some("Start")).then(|| files.clone())
            }
            Seen::Other(_) => None,
        })
        .expect("the waiting message was delivered");
    assert_eq!(started, [file_id], "the same file crossed the handover");
    assert!(!r.bus.activation_pending("org.example.Activatable"));

    // The next unique name is the next one, on both: never a used one.
    let got = both(&mut h, &mut r, |h| {
        let late = h.connect(true);
        h.send(late, call_bus("Hello", vec![]));
    });
    let hello = delivered(&got)
        .into_iter()
        .find(|(_, m)| m.msg_type() == MessageType::MethodReturn)
        .unwrap()
        .1;
    assert_eq!(hello.body_values().unwrap(), [s(":1.6")]);
    // :1.0 to :1.4 before the restart (:1.3 left), the service :1.5.
    assert_eq!(name_gone, ":1.3");

    // The pending call times out at the same moment (in each process's
    // own Instants); its reply would come too late.
    let deadline = r.bus.next_deadline().unwrap();
    assert_eq!(
        deadline,
        r.now - Duration::from_secs(5) + Duration::from_secs(25)
    );
    let quiet = both(&mut h, &mut r, |h| {
        h.now += Duration::from_secs(20) - Duration::from_nanos(1);
        h.bus.handle_timeouts(h.now, &mut h.out);
    });
    assert!(quiet.is_empty(), "{quiet:?}");
    let got = both(&mut h, &mut r, |h| {
        h.now += Duration::from_nanos(1);
        h.bus.handle_timeouts(h.now, &mut h.out);
    });
    let no_reply: Vec<_> = delivered(&got)
        .into_iter()
        .filter(|(to, m)| *to == a && m.reply_serial() == Some(pending))
        .map(|(_, m)| m.error_name().map(str::to_owned))
        .collect();
    assert_eq!(no_reply, [Some(errors::NO_REPLY.to_owned())]);

    // The owner of the queued name leaves: the next in line owns it.
    both(&mut h, &mut r, |h| {
        h.bus.remove_connection(a, h.now, &mut h.out)
    });
    for h in [&mut h, &mut r] {
        assert_eq!(
            h.driver(b, "GetNameOwner", vec![s("org.example.Queued")]),
            [s(&name_b)]
        );
    }
}

/// `h`'s bus written out: its state, and the bytes of the buffers
/// handed over beside it.
fn written_out(h: &Harness) -> (Vec<u8>, usize) {
    let clock = Clock {
        instant: h.now,
        monotonic_ns: MONOTONIC_AT_RESTART,
    };
    let (state, saved) = saving(clock, || postcard::to_stdvec(&h.bus).unwrap());
    (state, saved.buffers.iter().map(Bytes::len).sum())
}

#[test]
fn a_message_waiting_for_an_activation_crosses_once() {
    // The message as received and the copy stamped from it for the
    // service, whose body lies in it: one buffer, not two copies.
    const BODY: usize = 64 * 1024;
    let mut h = Harness::new();
    let (c, _) = h.client();
    h.send(
        c,
        MessageBuilder::method_call("/", "Start")
            .destination("org.example.Activatable")
            .body(vec![Value::Array {
                elem_sig: "y".into(),
                items: vec![Value::Byte(1); BODY],
            }]),
    );
    assert!(h.bus.activation_pending("org.example.Activatable"));
    let (state, held) = written_out(&h);
    assert!(held < BODY + 1024, "{held} bytes of buffers");
    assert!(state.len() < BODY, "{} bytes of state", state.len());
    // And it still reaches the service after the restart.
    let mut r = restarted(&h);
    let (service, _) = r.client();
    r.request_name(service, "org.example.Activatable", 0);
    let delivered = seen(std::mem::take(&mut r.out));
    assert!(delivered.iter().any(|d| matches!(
        d,
        Seen::Deliver { to, bytes, .. } if *to == service && bytes.len() > BODY
    )));
}

#[test]
fn a_broadcast_queued_for_many_receivers_crosses_once_and_stays_queued() {
    const BODY: usize = 64 * 1024;
    let mut h = Harness::new();
    let (a, _) = h.client();
    let receivers: Vec<ConnId> = (0..3).map(|_| h.client().0).collect();
    for &r in &receivers {
        h.add_match(r, "type='signal',member='Big'");
        h.bus.write_up_to(r, usize::MAX, h.now, &mut h.out);
    }
    h.out.clear();
    h.send(
        a,
        MessageBuilder::signal("/", "org.example.T", "Big").body(vec![Value::Array {
            elem_sig: "y".into(),
            items: vec![Value::Byte(7); BODY],
        }]),
    );
    // The first receiver's socket took part of it.
    h.bus.write_up_to(receivers[0], 100, h.now, &mut h.out);
    let (_, held) = written_out(&h);
    assert!(held < BODY + 1024, "{held} bytes of buffers");
    let r = restarted(&h);
    for &to in &receivers {
        let queued = |h: &Harness| {
            let outbox = h.bus.conns[&to].queue.outbox();
            (outbox.bytes(), outbox.next_write_bytes().0)
        };
        let (before, after) = (queued(&h), queued(&r));
        assert!(before.0 > BODY - 100, "{to:?}: {} bytes queued", before.0);
        assert_eq!(before, after, "{to:?}'s queue changed across the restart");
    }
}

#[test]
fn a_reply_pending_across_the_restart_still_routes() {
    let mut h = Harness::new();
    // Unrequested replies are refused: only the pending call lets one by.
    h.bus.set_policy(requested_replies_only());
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    let serial = h.send(
        a,
        MessageBuilder::method_call("/", "Slow").destination(name_b.clone()),
    );
    h.take();
    let mut r = restarted(&h);
    let got = both(&mut h, &mut r, |h| {
        h.send(b, MessageBuilder::method_return(serial).destination(":1.0"));
        // A second reply answers nothing pending any more: refused.
        h.send(b, MessageBuilder::method_return(serial).destination(":1.0"));
    });
    let what: Vec<(ConnId, Option<String>)> = delivered(&got)
        .into_iter()
        .map(|(to, m)| (to, m.error_name().map(str::to_owned)))
        .collect();
    assert_eq!(
        what,
        [(a, None), (b, Some(errors::ACCESS_DENIED.to_owned()))]
    );
}

#[test]
fn a_held_sender_stays_held_and_is_released_when_its_receiver_drains() {
    let mut h = Harness::new();
    h.bus.set_out_bounds(OutBounds {
        max_bytes: 1000,
        max_fds: 4,
        hold: Duration::from_millis(500),
        pacing: Pacing {
            bytes: 0,
            timeout: Duration::from_millis(100),
        },
        memory: Duration::from_secs(60),
        queues_per_user: 4,
        hold_budget: Duration::from_millis(100),
    });
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    for conn in [a, b] {
        h.bus.write_up_to(conn, usize::MAX, h.now, &mut h.out);
    }
    h.out.clear();
    let signal = || {
        MessageBuilder::signal("/", "org.example.T", "S")
            .destination(name_b.clone())
            .body(vec![s(&"x".repeat(300))])
    };
    let mut queued = 0;
    while !h
        .out
        .iter()
        .any(|x| matches!(x, Action::HoldSender { conn } if *conn == a))
    {
        h.send(a, signal());
        queued += 1;
        assert!(queued < 10, "never held");
    }
    let bytes: usize = h
        .out
        .iter()
        .map(|x| match x {
            Action::Queued { to, msg, .. } if *to == b => msg.header.len() + msg.body.len(),
            _ => 0,
        })
        .sum();
    h.out.clear();
    let mut r = restarted(&h);
    assert_eq!(
        r.bus.next_deadline(),
        h.bus.next_deadline().map(|t| t + SHIFT),
        "the hold's end"
    );
    // Another signal while held goes in the same way on both.
    both(&mut h, &mut r, |h| {
        h.send(a, signal());
    });
    let got = both(&mut h, &mut r, |h| {
        h.bus.write_up_to(b, bytes, h.now, &mut h.out);
    });
    assert!(got.contains(&Seen::Other(format!(
        "{:?}",
        Action::ReleaseSender { conn: a }
    ))));
    assert_eq!(h.bus.traffic(a), r.bus.traffic(a));
}

/// A state whose traffic counters are at their end (a corrupt one: no
/// bus counts that far) routes on after the restart, the counters
/// staying there: adding to them panicked in a debug build and wrapped
/// them to 0 in a release one. (The bus's totals are the same `Traffic`:
/// `traffic::tests`.)
#[test]
fn traffic_counters_at_their_end_stay_there_after_a_restart() {
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, name_b) = h.client();
    let end = crate::traffic::tests::AT_THE_END;
    for conn in [a, b] {
        h.bus.conns.get_mut(&conn).unwrap().traffic = end;
    }
    let mut r = restarted(&h);
    r.send(a, MessageBuilder::method_call("/", "M").destination(name_b));
    let (error, _) = r.driver_error(a, call_bus("GetNameOwner", vec![s("org.example.Nobody")]));
    assert_eq!(error, errors::NAME_HAS_NO_OWNER);
    r.bus.record_dropped(b);
    r.bus.record_hold(a, false);
    r.bus.record_hold(a, true);
    r.bus.record_held(a, Duration::from_secs(1));
    for conn in [a, b] {
        assert_eq!(r.bus.traffic(conn), Some(end));
    }
}

#[test]
fn fds_and_instants_cannot_be_written_outside_a_handover() {
    let mut h = Harness::new();
    h.bus.set_limits(crate::Limits {
        reply_timeout: Some(std::time::Duration::from_secs(25)),
        ..crate::Limits::default()
    });
    let (a, name_a) = h.client();
    h.send(a, MessageBuilder::method_call("/", "M").destination(name_a));
    // The call waits for its reply until a deadline: written outside a
    // handover, the bus refuses rather than losing it.
    assert_eq!(h.bus.replies.waiting(a), 1);
    assert!(postcard::to_stdvec(&h.bus).is_err());
}

/// `h`'s bus cannot be written for a handover (postcard keeps no text
/// of a custom error, so only that it failed is known).
fn refused(h: &Harness) -> bool {
    let clock = Clock {
        instant: h.now,
        monotonic_ns: MONOTONIC_AT_RESTART,
    };
    saving(clock, || postcard::to_stdvec(&h.bus)).0.is_err()
}

/// `msg` from `from`, without the harness answering what the bus asks
/// of the daemon (`send` would).
fn unanswered(h: &mut Harness, from: ConnId, msg: MessageBuilder) {
    h.next_serial += 1;
    let raw = msg.build(h.next_serial).unwrap();
    h.bus.receive(
        from,
        Message::parse(raw).unwrap(),
        Vec::new(),
        h.now,
        &mut h.out,
    );
}

#[test]
fn a_bus_in_the_middle_of_an_event_is_not_written() {
    // A message parked until the daemon has looked for its service.
    let mut h = Harness::with_options(BusOptions {
        rescan_service_files: true,
        ..options()
    });
    let (a, _) = h.client();
    unanswered(
        &mut h,
        a,
        MessageBuilder::method_call("/", "M").destination("org.example.New"),
    );
    assert!(
        matches!(h.out.as_slice(), [Action::LookUpService { name }] if name == "org.example.New")
    );
    assert!(refused(&h));
    // Answered, the bus is between events again.
    h.bus
        .service_looked_up("org.example.New", None, h.now, &mut h.out);
    h.out.clear();
    restarted(&h);

    // A GetConnectionCredentials reply waiting for the daemon's pidfd.
    let subject = h.bus.add_connection(
        Credentials {
            process_started: Some(5555),
            ..creds(1001, 77)
        },
        true,
    );
    h.send(subject, call_bus("Hello", vec![]));
    let subject_name = h.bus.unique_name(subject).unwrap().to_owned();
    h.out.clear();
    unanswered(
        &mut h,
        a,
        call_bus("GetConnectionCredentials", vec![s(&subject_name)]),
    );
    assert!(
        matches!(
            h.out.as_slice(),
            [Action::OpenPidfd {
                pid: 77,
                started: 5555
            }]
        ),
        "{:?}",
        h.out
    );
    assert!(refused(&h));
    h.bus.pidfd_opened(None, h.now, &mut h.out);
    h.out.clear();
    restarted(&h);
}

#[test]
fn without_the_fix_up_a_restored_connection_has_no_rules() {
    // Bus::restored is what gives connections their policy back: a bus
    // deserialized and used without it must not pass for a working one.
    let mut h = Harness::new();
    let (a, _) = h.client();
    let before = Clock {
        instant: h.now,
        monotonic_ns: MONOTONIC_AT_RESTART,
    };
    let (bytes, saved) = saving(before, || postcard::to_stdvec(&h.bus));
    let (bus, _) = restoring(before, Vec::new(), saved.buffers, || {
        postcard::from_bytes::<Bus>(&bytes.unwrap())
    });
    let mut bus = bus.unwrap();
    assert!(!bus.conns[&a].policy().can_own("com.example.Any"));
    bus.restored(None);
    assert!(bus.conns[&a].policy().can_own("com.example.Any"));
}
