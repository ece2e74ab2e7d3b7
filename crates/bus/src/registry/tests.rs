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
