//! States a running bus reaches by legitimate means are never refused at
//! a restart: `Bus::check_handed_over` (run by [`restarted`]) must accept
//! every one of them, or the daemon would refuse restarts it can serve
//! (docs/restart.md, "Failure paths"). Containers whose creator left,
//! header requesters, names with every flag, a monitor that held names
//! and had calls pending, activations, contained connections before and
//! after Hello, lowered reply limits and departures: in fixed cases, and
//! in seeded random sequences restarted after every step.

use super::*;
use crate::registry::REPLACE_EXISTING;
use crate::tests::containers::{
    add_server, add_server_call, contained, containers, empty_asv, ok, path, request_header,
};

#[test]
fn legitimate_states_are_not_refused_at_a_restart() {
    let mut h = Harness::new();
    h.bus
        .set_limits(limits(Limits::default().max_replies_per_connection));
    let (a, _) = h.client();
    let (b, _) = h.client();
    let (c, _) = h.client();
    let (d, _) = h.client();
    let (x, x_name) = h.client();
    let (m, m_name) = h.client();
    // Names: an owner allowing replacement and not queueing, replaced by
    // b not queueing; c queued; d queued, then asking not to queue.
    h.request_name(a, "org.example.N", ALLOW_REPLACEMENT | DO_NOT_QUEUE);
    h.request_name(
        b,
        "org.example.N",
        REPLACE_EXISTING | DO_NOT_QUEUE | ALLOW_REPLACEMENT,
    );
    h.request_name(c, "org.example.N", 0);
    h.request_name(d, "org.example.N", 0);
    h.request_name(d, "org.example.N", DO_NOT_QUEUE);
    // An owner allowing replacement (and queueing), replaced by c.
    h.request_name(a, "org.example.M2", ALLOW_REPLACEMENT);
    h.request_name(c, "org.example.M2", REPLACE_EXISTING);
    // m holds names and is queued for one, has a call out and a call
    // owed, then becomes a monitor.
    h.request_name(m, "org.example.ByMonitor", 0);
    h.request_name(m, "org.example.N", 0);
    h.send(
        m,
        MessageBuilder::method_call("/", "Ask").destination(x_name.clone()),
    );
    h.send(
        x,
        MessageBuilder::method_call("/", "AskMonitor").destination(m_name),
    );
    h.take();
    let reply = h.call(m, become_monitor(&[]));
    assert_eq!(reply.msg_type(), MessageType::MethodReturn);
    h.take();
    // A call waiting on an activation, and a StartServiceByName.
    h.send(
        a,
        MessageBuilder::method_call("/", "Wake").destination("org.example.Activatable"),
    );
    h.send(
        b,
        call_bus(
            "StartServiceByName",
            vec![s("org.example.Activatable"), Value::Uint32(0)],
        ),
    );
    h.out.clear();
    // Calls pending between ordinary connections, then the reply limit
    // lowered below them (a reload).
    for _ in 0..3 {
        h.send(
            a,
            MessageBuilder::method_call("/", "Slow").destination(x_name.clone()),
        );
    }
    h.take();
    h.bus.set_limits(limits(1));
    // Containers: a creator that left with its app still there; an app
    // with a call out and one owed; a header requester that left, another
    // that stays; an instance that stopped listening; a contained
    // connection not past Hello.
    let (manager, _) = h.client();
    let (instance, _, _) = add_server(&mut h, manager);
    let (stopped, _, _) = add_server(&mut h, manager);
    let (app, app_name) = contained(&mut h, &instance, 1000);
    contained(&mut h, &stopped, 1000);
    ok(
        &mut h,
        manager,
        containers("StopListening", vec![path(&stopped)]),
    );
    let early = h.bus.next_connection_id();
    assert!(h
        .bus
        .add_contained_connection(early, creds(1000, 301), true, &instance));
    h.send(
        app,
        MessageBuilder::method_call("/", "FromApp").destination(x_name),
    );
    h.send(
        x,
        MessageBuilder::method_call("/", "ToApp").destination(app_name),
    );
    let (left, _) = h.client();
    let (stays, _) = h.client();
    request_header(&mut h, left);
    request_header(&mut h, stays);
    h.bus.remove_connection(left, h.now, &mut h.out);
    h.bus.remove_connection(manager, h.now, &mut h.out);
    h.answer_containers();
    h.out.clear();
    // The state is what the comments above say.
    assert!(h.bus.monitors.is_monitor(m));
    assert!(h.bus.containers.has_header_requesters());
    assert!(h
        .bus
        .containers
        .get(&instance)
        .is_some_and(|i| !i.listening && i.connections.len() == 2));
    assert!(h.bus.activation_pending("org.example.Activatable"));
    assert!(h.bus.replies.len() >= 6, "{}", h.bus.replies.len());
    // Restarted twice, each restored state checked.
    let once = restarted(&h);
    let twice = restarted(&once);
    assert_eq!(twice.bus.replies.len(), h.bus.replies.len());
}

/// How often the random sequences reached each kind of state, summed over
/// their steps, so that the test is known to cover them.
#[derive(Debug, Default)]
struct Reached {
    pending_calls: usize,
    monitors: usize,
    contained: usize,
    header_requesters: usize,
    instances: usize,
    activations: usize,
    queued_owners: usize,
}

impl Reached {
    fn count(&mut self, h: &Harness, alive: &[ConnId]) {
        let bus = &h.bus;
        self.pending_calls += bus.replies.len();
        self.monitors += alive
            .iter()
            .filter(|&&c| bus.monitors.is_monitor(c))
            .count();
        self.contained += alive
            .iter()
            .filter(|&&c| bus.container_instance_of(c).is_some())
            .count();
        self.header_requesters += usize::from(bus.containers.has_header_requesters());
        self.instances += bus.containers.len();
        self.activations += usize::from(bus.activation_pending("org.example.Activatable"));
        self.queued_owners += bus
            .registry
            .queued_owners("org.example.X")
            .map_or(0, |q| q.len());
    }

    fn every_kind(&self) -> bool {
        [
            self.pending_calls,
            self.monitors,
            self.contained,
            self.header_requesters,
            self.instances,
            self.activations,
            self.queued_owners,
        ]
        .iter()
        .all(|&n| n > 0)
    }
}

/// One random legitimate event for the bus, from the connections alive
/// in `h`.
fn random_step(h: &mut Harness, dice: &mut Dice, alive: &mut Vec<ConnId>) {
    const NAMES: [&str; 3] = ["org.example.X", "org.example.Y", "org.example.Activatable"];
    const FLAGS: [u32; 4] = [0, ALLOW_REPLACEMENT, DO_NOT_QUEUE, REPLACE_EXISTING];
    if alive.len() < 3 {
        let (id, _) = h.client();
        alive.push(id);
        return;
    }
    let from = alive[dice.below(alive.len())];
    let to = alive[dice.below(alive.len())];
    // The instances AddServer made, gone or not.
    let instance =
        (!h.listening.is_empty()).then(|| h.listening[dice.below(h.listening.len())].0.clone());
    match dice.below(20) {
        0 => {
            let (id, _) = h.client();
            alive.push(id);
        }
        1 => {
            // A contained connection, past Hello or not.
            let id = h.bus.next_connection_id();
            if let Some(p) = instance {
                if h.bus
                    .add_contained_connection(id, creds(1000, 300), true, &p)
                {
                    if dice.below(2) == 0 {
                        h.send(id, call_bus("Hello", vec![]));
                    }
                    alive.push(id);
                }
            }
        }
        2 | 3 => {
            if let Some(name) = h.bus.unique_name(to).map(str::to_owned) {
                h.send(
                    from,
                    MessageBuilder::method_call("/", "Do").destination(name),
                );
            }
        }
        4 => {
            let name = NAMES[dice.below(NAMES.len())];
            h.send(
                from,
                MessageBuilder::method_call("/", "Do").destination(name),
            );
        }
        5 => {
            // A reply to a recent serial, expected or not.
            let serial = h.next_serial.saturating_sub(dice.below(6) as u32).max(1);
            if let Some(name) = h.bus.unique_name(to).map(str::to_owned) {
                h.send(
                    from,
                    MessageBuilder::method_return(serial).destination(name),
                );
            }
        }
        6 | 7 => {
            let name = NAMES[dice.below(NAMES.len())];
            let flags = FLAGS[dice.below(FLAGS.len())] | FLAGS[dice.below(FLAGS.len())];
            h.send(
                from,
                call_bus("RequestName", vec![s(name), Value::Uint32(flags)]),
            );
        }
        8 => {
            let name = NAMES[dice.below(NAMES.len())];
            h.send(from, call_bus("ReleaseName", vec![s(name)]));
        }
        9 => {
            h.send(from, become_monitor(&[]));
        }
        10 => {
            h.send(
                from,
                call_bus(
                    "StartServiceByName",
                    vec![s("org.example.Activatable"), Value::Uint32(0)],
                ),
            );
        }
        11 => {
            h.send(
                from,
                add_server_call("com.example.NotFlatpak", "app", empty_asv(), empty_asv()),
            );
        }
        12 => {
            h.send(from, containers("RequestHeader", vec![]));
        }
        13 => {
            if let Some(p) = instance {
                let member = ["StopListening", "StopInstance"][dice.below(2)];
                h.send(from, containers(member, vec![path(&p)]));
            }
        }
        14 => {
            h.now += Duration::from_secs(dice.below(40) as u64);
            h.bus.handle_timeouts(h.now, &mut h.out);
        }
        15 => {
            // A reload lowering (or raising) how many replies one may owe.
            h.bus.set_limits(limits([0, 1, 2, 100][dice.below(4)]));
        }
        16 => {
            h.send(from, MessageBuilder::signal("/", "org.example.I", "S"));
        }
        17 => {
            h.send(from, call_bus("AddMatch", vec![s("type='signal'")]));
        }
        _ => {
            alive.retain(|&c| c != from);
            h.bus.remove_connection(from, h.now, &mut h.out);
        }
    }
    close_as_the_daemon_does(h, alive);
}

/// The daemon's part after an event: instances' stops noted, and the
/// connections the bus closed (or StopInstance closed) removed, until
/// their departures close no more.
fn close_as_the_daemon_does(h: &mut Harness, alive: &mut Vec<ConnId>) {
    loop {
        h.answer_containers();
        let mut closing: Vec<ConnId> = h
            .out
            .drain(..)
            .filter_map(|a| match a {
                Action::Disconnect { conn, .. } => Some(conn),
                _ => None,
            })
            .collect();
        for (instance, close_connections) in std::mem::take(&mut h.stopped) {
            if close_connections {
                closing.extend(
                    alive
                        .iter()
                        .copied()
                        .filter(|&c| h.bus.container_instance_of(c) == Some(instance.as_str())),
                );
            }
        }
        if closing.is_empty() {
            return;
        }
        for c in closing {
            alive.retain(|&a| a != c);
            h.bus.remove_connection(c, h.now, &mut h.out);
        }
    }
}

#[test]
fn random_legitimate_states_are_never_refused_at_a_restart() {
    let mut reached = Reached::default();
    for seed in 1..=100u64 {
        let mut h = Harness::new();
        h.bus
            .set_limits(limits(Limits::default().max_replies_per_connection));
        let mut dice = Dice(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut alive = Vec::new();
        for step in 0..120 {
            random_step(&mut h, &mut dice, &mut alive);
            reached.count(&h, &alive);
            restarted_naming(&h, &format!(" (seed {seed}, step {step})"));
        }
    }
    assert!(reached.every_kind(), "not every state reached: {reached:?}");
}
