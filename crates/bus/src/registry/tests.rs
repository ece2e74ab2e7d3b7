use super::*;

const A: ConnId = ConnId(1);
const B: ConnId = ConnId(2);
const C: ConnId = ConnId(3);
const NAME: &str = "org.example.Name";

fn changed(old: Option<ConnId>, new: Option<ConnId>) -> NameEvent {
    NameEvent::OwnerChanged {
        name: NAME.into(),
        old,
        new,
    }
}

fn lost(conn: ConnId) -> NameEvent {
    NameEvent::Lost {
        conn,
        name: NAME.into(),
    }
}

fn acquired(conn: ConnId) -> NameEvent {
    NameEvent::Acquired {
        conn,
        name: NAME.into(),
    }
}

/// A registry where `A` owns NAME with `flags`.
fn owned_by_a(flags: u32) -> NameRegistry {
    let mut r = NameRegistry::new();
    let mut ev = Vec::new();
    assert_eq!(
        r.request(A, NAME, flags, &mut ev),
        RequestReply::PrimaryOwner
    );
    assert_eq!(ev, vec![changed(None, Some(A)), acquired(A)]);
    r
}

fn request(r: &mut NameRegistry, conn: ConnId, flags: u32) -> (RequestReply, Vec<NameEvent>) {
    let mut ev = Vec::new();
    let reply = r.request(conn, NAME, flags, &mut ev);
    (reply, ev)
}

#[test]
fn first_request_makes_primary_owner() {
    let r = owned_by_a(0);
    assert_eq!(r.owner(NAME), Some(A));
    assert_eq!(r.count(A), 1);
    assert!(r.holds(A, NAME));
}

#[test]
fn owner_asking_again_is_already_owner_and_updates_flags() {
    let mut r = owned_by_a(0);
    assert_eq!(
        request(&mut r, A, ALLOW_REPLACEMENT),
        (RequestReply::AlreadyOwner, vec![])
    );
    // Now replaceable.
    let (reply, ev) = request(&mut r, B, REPLACE_EXISTING);
    assert_eq!(reply, RequestReply::PrimaryOwner);
    assert_eq!(ev, vec![lost(A), changed(Some(A), Some(B)), acquired(B)]);
}

/// Every flag combination a second requester can use, against an owner
/// that allows replacement or not, and queues or not.
#[test]
fn every_flag_combination_against_every_owner() {
    for owner_flags in 0..8u32 {
        for flags in 0..8u32 {
            let mut r = owned_by_a(owner_flags);
            let (reply, ev) = request(&mut r, B, flags);
            let owner_allows = owner_flags & ALLOW_REPLACEMENT != 0;
            let replaces = flags & REPLACE_EXISTING != 0 && owner_allows;
            let queues = flags & DO_NOT_QUEUE == 0;
            let ctx = format!("owner flags {owner_flags}, request flags {flags}");
            if replaces {
                assert_eq!(reply, RequestReply::PrimaryOwner, "{ctx}");
                assert_eq!(
                    ev,
                    vec![lost(A), changed(Some(A), Some(B)), acquired(B)],
                    "{ctx}"
                );
                assert_eq!(r.owner(NAME), Some(B), "{ctx}");
                // An owner that said DO_NOT_QUEUE is dropped, else queued.
                let expect = if owner_flags & DO_NOT_QUEUE != 0 {
                    vec![B]
                } else {
                    vec![B, A]
                };
                assert_eq!(r.queued_owners(NAME).unwrap(), expect, "{ctx}");
                assert_eq!(r.holds(A, NAME), owner_flags & DO_NOT_QUEUE == 0, "{ctx}");
            } else if queues {
                assert_eq!(reply, RequestReply::InQueue, "{ctx}");
                assert!(ev.is_empty(), "{ctx}");
                assert_eq!(r.queued_owners(NAME).unwrap(), vec![A, B], "{ctx}");
                assert!(r.holds(B, NAME), "{ctx}");
            } else {
                assert_eq!(reply, RequestReply::Exists, "{ctx}");
                assert!(ev.is_empty(), "{ctx}");
                assert_eq!(r.queued_owners(NAME).unwrap(), vec![A], "{ctx}");
                assert!(!r.holds(B, NAME), "{ctx}");
            }
        }
    }
}

#[test]
fn queued_connection_asking_do_not_queue_leaves_the_queue() {
    let mut r = owned_by_a(0);
    assert_eq!(request(&mut r, B, 0).0, RequestReply::InQueue);
    assert_eq!(request(&mut r, B, DO_NOT_QUEUE).0, RequestReply::Exists);
    assert_eq!(r.queued_owners(NAME).unwrap(), vec![A]);
    assert_eq!(r.count(B), 0);
}

#[test]
fn replace_existing_in_queue_jumps_to_second_place() {
    let mut r = owned_by_a(0);
    request(&mut r, B, 0);
    request(&mut r, C, 0);
    // The owner does not allow replacement: C waits, but right behind A.
    assert_eq!(
        request(&mut r, C, REPLACE_EXISTING).0,
        RequestReply::InQueue
    );
    assert_eq!(r.queued_owners(NAME).unwrap(), vec![A, C, B]);
}

#[test]
fn replacing_from_the_queue_swaps_with_the_owner() {
    let mut r = owned_by_a(ALLOW_REPLACEMENT);
    request(&mut r, B, 0);
    request(&mut r, C, 0);
    let (reply, ev) = request(&mut r, C, REPLACE_EXISTING);
    assert_eq!(reply, RequestReply::PrimaryOwner);
    assert_eq!(ev, vec![lost(A), changed(Some(A), Some(C)), acquired(C)]);
    assert_eq!(r.queued_owners(NAME).unwrap(), vec![C, A, B]);
}

#[test]
fn release_promotes_the_next_in_queue() {
    let mut r = owned_by_a(0);
    request(&mut r, B, 0);
    request(&mut r, C, 0);
    let mut ev = Vec::new();
    assert_eq!(r.release(A, NAME, &mut ev), ReleaseReply::Released);
    assert_eq!(ev, vec![lost(A), changed(Some(A), Some(B)), acquired(B)]);
    assert_eq!(r.queued_owners(NAME).unwrap(), vec![B, C]);
    assert_eq!(r.count(A), 0);
}

#[test]
fn release_from_the_queue_is_silent() {
    let mut r = owned_by_a(0);
    request(&mut r, B, 0);
    let mut ev = Vec::new();
    assert_eq!(r.release(B, NAME, &mut ev), ReleaseReply::Released);
    assert!(ev.is_empty());
    assert_eq!(r.queued_owners(NAME).unwrap(), vec![A]);
}

#[test]
fn release_last_owner_removes_the_name() {
    let mut r = owned_by_a(0);
    let mut ev = Vec::new();
    assert_eq!(r.release(A, NAME, &mut ev), ReleaseReply::Released);
    assert_eq!(ev, vec![lost(A), changed(Some(A), None)]);
    assert!(!r.has_owner(NAME));
    assert_eq!(r.names().count(), 0);
}

#[test]
fn release_replies_for_unknown_name_and_non_owner() {
    let mut r = owned_by_a(0);
    let mut ev = Vec::new();
    assert_eq!(
        r.release(A, "org.example.Other", &mut ev),
        ReleaseReply::NonExistent
    );
    assert_eq!(r.release(B, NAME, &mut ev), ReleaseReply::NotOwner);
    assert!(ev.is_empty());
}

#[test]
fn disconnect_releases_newest_first_and_unique_name_last() {
    let mut r = NameRegistry::new();
    let mut ev = Vec::new();
    r.add_unique(A, ":1.0", &mut ev);
    r.request(A, "org.example.First", 0, &mut ev);
    r.request(A, "org.example.Second", 0, &mut ev);
    r.add_unique(B, ":1.1", &mut ev);
    r.request(B, "org.example.First", 0, &mut ev);
    ev.clear();
    r.remove_connection(A, &mut ev);
    let order: Vec<&str> = ev
        .iter()
        .filter_map(|e| match e {
            NameEvent::OwnerChanged { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        order,
        vec!["org.example.Second", "org.example.First", ":1.0"]
    );
    assert_eq!(r.owner("org.example.First"), Some(B));
    assert_eq!(r.count(A), 0);
    assert!(!r.has_owner(":1.0"));
    assert!(ev.contains(&NameEvent::Acquired {
        conn: B,
        name: "org.example.First".into()
    }));
}

/// The registry's two views (queues by name, names by connection) agree,
/// no queue is empty and nobody waits twice in one queue.
fn assert_consistent(r: &NameRegistry) {
    let mut from_queues = 0;
    for (name, queue) in &r.names {
        assert!(!queue.owners.is_empty(), "{name} has an empty queue");
        for (i, owner) in queue.owners.iter().enumerate() {
            assert!(
                r.holds(owner.conn, name),
                "{name}: {:?} not tracked",
                owner.conn
            );
            assert!(
                queue
                    .owners
                    .iter()
                    .skip(i + 1)
                    .all(|o| o.conn != owner.conn),
                "{name}: {:?} queued twice",
                owner.conn
            );
            from_queues += 1;
        }
    }
    let from_held: usize = r.held.values().map(HashMap::len).sum();
    assert_eq!(
        from_queues, from_held,
        "queues and per-connection lists disagree"
    );
    for (conn, names) in &r.held {
        assert!(!names.is_empty(), "{conn:?} has an empty list");
        for name in names.keys() {
            let queue = r.names.get(name).expect("held name exists");
            assert!(queue.position(*conn).is_some(), "{name} lost {conn:?}");
        }
    }
}

mod random {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Request(u64, usize, u32),
        Release(u64, usize),
        Disconnect(u64),
    }

    const NAMES: [&str; 3] = ["org.example.A", "org.example.B", "org.example.C"];

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..4u64, 0..3usize, 0..8u32).prop_map(|(c, n, f)| Op::Request(c, n, f)),
            2 => (0..4u64, 0..3usize).prop_map(|(c, n)| Op::Release(c, n)),
            1 => (0..4u64).prop_map(Op::Disconnect),
        ]
    }

    proptest! {
        #[test]
        fn any_sequence_keeps_the_registry_consistent(ops in proptest::collection::vec(op(), 1..60)) {
            let mut r = NameRegistry::new();
            for op in ops {
                let mut events = Vec::new();
                let owners_before: Vec<Option<ConnId>> = NAMES.iter().map(|n| r.owner(n)).collect();
                match op {
                    Op::Request(c, n, flags) => {
                        let reply = r.request(ConnId(c), NAMES[n], flags, &mut events);
                        let is_owner = r.owner(NAMES[n]) == Some(ConnId(c));
                        prop_assert_eq!(
                            is_owner,
                            matches!(reply, RequestReply::PrimaryOwner | RequestReply::AlreadyOwner)
                        );
                        prop_assert_eq!(r.holds(ConnId(c), NAMES[n]), reply != RequestReply::Exists);
                    }
                    Op::Release(c, n) => {
                        r.release(ConnId(c), NAMES[n], &mut events);
                        prop_assert!(!r.holds(ConnId(c), NAMES[n]));
                    }
                    Op::Disconnect(c) => {
                        r.remove_connection(ConnId(c), &mut events);
                        prop_assert_eq!(r.count(ConnId(c)), 0);
                    }
                }
                assert_consistent(&r);
                // Every change of primary owner was announced, once.
                for (i, name) in NAMES.iter().enumerate() {
                    let after = r.owner(name);
                    let announced: Vec<_> = events
                        .iter()
                        .filter_map(|e| match e {
                            NameEvent::OwnerChanged { name: n, old, new } if n == name => Some((*old, *new)),
                            _ => None,
                        })
                        .collect();
                    if owners_before[i] == after {
                        prop_assert!(announced.is_empty());
                    } else {
                        prop_assert_eq!(announced, vec![(owners_before[i], after)]);
                    }
                }
            }
        }
    }
}

/// A handed-over state whose names' queues and the names each connection
/// holds disagree (a place held by nobody, a name held without a place, a
/// connection twice in a queue), whose names are held by a connection
/// that left or by a monitor, or whose join order is past its counter.
#[test]
fn handed_over_queues_and_held_names_must_agree() {
    use crate::tests::{become_monitor, call_bus, s, Harness};
    use quickbus_wire::Value;
    const X: &str = "org.example.X";
    let mut h = Harness::new();
    let (a, _) = h.client();
    let (b, _) = h.client();
    let (m, _) = h.client();
    h.send(m, become_monitor(&[]));
    for conn in [a, b] {
        h.send(conn, call_bus("RequestName", vec![s(X), Value::Uint32(0)]));
    }
    h.take();
    assert_eq!(h.bus.check_handed_over(), Ok(vec![]));
    let refused = |h: &mut Harness, why: String| {
        assert_eq!(h.bus.check_handed_over(), Err(why));
    };
    let (an, bn, mn) = (a.0, b.0, m.0);
    let next_seq = h.bus.registry.next_seq;

    // b's place in X's queue lost, while b still holds X.
    fn queue(h: &mut Harness) -> &mut VecDeque<Owner> {
        &mut h.bus.registry.names.get_mut(X).unwrap().owners
    }
    let b_place = queue(&mut h).pop_back().unwrap();
    refused(
        &mut h,
        format!("connection {bn} holds {X}, but is not in its queue"),
    );
    // b twice in X's queue.
    queue(&mut h).push_back(b_place);
    queue(&mut h).push_back(b_place);
    refused(
        &mut h,
        "the name queues have 5 places, for 4 names held: \
         a place is held by no connection, or a connection is twice in a queue"
            .into(),
    );
    queue(&mut h).pop_back();
    // a in X's queue without holding X.
    let a_joined = h.bus.registry.held.get_mut(&a).unwrap().remove(X).unwrap();
    refused(
        &mut h,
        "the name queues have 4 places, for 3 names held: \
         a place is held by no connection, or a connection is twice in a queue"
            .into(),
    );
    // a joined X at the join order's next number, or the counter at its end.
    fn held_by(h: &mut Harness, conn: ConnId) -> &mut HashMap<String, u64> {
        h.bus.registry.held.get_mut(&conn).unwrap()
    }
    held_by(&mut h, a).insert(X.into(), next_seq);
    refused(
        &mut h,
        format!("connection {an} joined {X} at {next_seq}, not before the next, {next_seq}"),
    );
    held_by(&mut h, a).insert(X.into(), a_joined);
    h.bus.registry.next_seq = u64::MAX;
    refused(&mut h, "the names' join order is used up".into());
    h.bus.registry.next_seq = next_seq;
    // The monitor (which gave its names up) in X's queue.
    queue(&mut h).push_back(Owner::new(m, 0));
    h.bus.registry.track(m, X);
    refused(
        &mut h,
        format!(
            "connection {mn} holds names, but may hold none \
             (not on the bus past Hello, or a monitor)"
        ),
    );
    queue(&mut h).pop_back();
    h.bus.registry.untrack(m, X);
    // Names held by a connection that left, and a name nobody queues for.
    let gone = ConnId(99);
    h.bus.registry.held.insert(gone, HashMap::new());
    refused(
        &mut h,
        "connection 99 holds names, but may hold none \
         (not on the bus past Hello, or a monitor)"
            .into(),
    );
    h.bus.registry.held.remove(&gone);
    h.bus
        .registry
        .names
        .insert(NAME.into(), NameQueue::default());
    refused(&mut h, format!("the name {NAME} has an empty queue"));
    h.bus.registry.names.remove(NAME);
    assert_eq!(h.bus.check_handed_over(), Ok(vec![]));
}
