//! dbus-python peers: name ownership, replacement, queueing, and the
//! signals each side sees.

use quickbus_e2e::flags::{ALLOW_REPLACEMENT, DO_NOT_QUEUE, REPLACE_EXISTING};
use quickbus_e2e::{Bus, Peer};

const NAME: &str = "com.example.Queue";

// RequestName replies.
const PRIMARY_OWNER: u32 = 1;
const IN_QUEUE: u32 = 2;
const EXISTS: u32 = 3;
const ALREADY_OWNER: u32 = 4;
// ReleaseName replies.
const RELEASED: u32 = 1;
const NON_EXISTENT: u32 = 2;
const NOT_OWNER: u32 = 3;

/// A peer that records every NameOwnerChanged of [`NAME`].
fn watcher(bus: &Bus) -> Peer {
    let mut watcher = bus.peer();
    watcher.add_match(&format!(
        "type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',\
         member='NameOwnerChanged',arg0='{NAME}'"
    ));
    watcher
}

fn owner_changed(old: &str, new: &str) -> String {
    format!(
        "signal org.freedesktop.DBus.NameOwnerChanged path=/org/freedesktop/DBus \
         sender=org.freedesktop.DBus dest=- args=[\"{NAME}\", \"{old}\", \"{new}\"]"
    )
}

fn name_signal(member: &str, to: &Peer) -> String {
    format!(
        "signal org.freedesktop.DBus.{member} path=/org/freedesktop/DBus \
         sender=org.freedesktop.DBus dest={} args=[\"{NAME}\"]",
        to.unique_name()
    )
}

/// Waits for `peer` to be told it acquired or lost [`NAME`] (`member`).
fn expect_name_signal(peer: &mut Peer, member: &str) {
    let expected = name_signal(member, peer);
    peer.wait_event(|e| e == expected);
}

fn queued_owners(peer: &mut Peer) -> String {
    peer.bus("ListQueuedOwners", "s", &format!("[\"{NAME}\"]"))
}

fn names_list(peers: &[&Peer]) -> String {
    let names: Vec<&str> = peers.iter().map(|p| p.unique_name()).collect();
    quickbus_e2e::json_string_list(&names)
}

/// Waits until `watcher` saw `count` NameOwnerChanged signals and returns them.
fn owner_changes(watcher: &mut Peer, count: usize) -> Vec<String> {
    let mut seen = Vec::new();
    while seen.len() < count {
        seen.push(watcher.wait_event(|e| e.contains(".NameOwnerChanged ")));
    }
    seen
}

#[test]
fn replacement_moves_the_name_and_each_side_is_told() {
    let bus = Bus::start();
    let mut watcher = watcher(&bus);
    let mut a = bus.peer();
    let mut b = bus.peer();

    assert_eq!(a.request_name(NAME, ALLOW_REPLACEMENT), PRIMARY_OWNER);
    expect_name_signal(&mut a, "NameAcquired");
    assert_eq!(a.request_name(NAME, ALLOW_REPLACEMENT), ALREADY_OWNER);

    assert_eq!(b.request_name(NAME, REPLACE_EXISTING), PRIMARY_OWNER);
    expect_name_signal(&mut a, "NameLost");
    expect_name_signal(&mut b, "NameAcquired");

    let (a_name, b_name) = (a.unique_name().to_owned(), b.unique_name().to_owned());
    assert_eq!(
        owner_changes(&mut watcher, 2),
        [owner_changed("", &a_name), owner_changed(&a_name, &b_name)]
    );
    // A did not ask for DO_NOT_QUEUE, so it waits behind B.
    assert_eq!(queued_owners(&mut watcher), names_list(&[&b, &a]));
    assert_eq!(
        watcher.bus("GetNameOwner", "s", &format!("[\"{NAME}\"]")),
        format!("\"{b_name}\"")
    );
}

#[test]
fn replace_existing_is_refused_when_the_owner_did_not_allow_it() {
    let bus = Bus::start();
    let mut a = bus.peer();
    let mut b = bus.peer();
    assert_eq!(a.request_name(NAME, 0), PRIMARY_OWNER);
    assert_eq!(b.request_name(NAME, REPLACE_EXISTING), IN_QUEUE);
    assert_eq!(queued_owners(&mut a), names_list(&[&a, &b]));
    let mut c = bus.peer();
    assert_eq!(
        c.request_name(NAME, REPLACE_EXISTING | DO_NOT_QUEUE),
        EXISTS
    );
    assert_eq!(queued_owners(&mut c), names_list(&[&a, &b]));
}

#[test]
fn do_not_queue_is_refused_without_joining_the_queue() {
    let bus = Bus::start();
    let mut a = bus.peer();
    let mut c = bus.peer();
    assert_eq!(a.request_name(NAME, 0), PRIMARY_OWNER);
    assert_eq!(c.request_name(NAME, DO_NOT_QUEUE), EXISTS);
    assert_eq!(queued_owners(&mut c), names_list(&[&a]));
    // Releasing a name one is not queued for changes nothing.
    assert_eq!(c.release_name(NAME), NOT_OWNER);
    assert_eq!(c.release_name("com.example.Nobody"), NON_EXISTENT);
    assert_eq!(queued_owners(&mut c), names_list(&[&a]));
}

#[test]
fn release_promotes_the_next_in_queue_and_disconnect_does_too() {
    let bus = Bus::start();
    let mut watcher = watcher(&bus);
    let mut a = bus.peer();
    let mut b = bus.peer();
    let mut c = bus.peer();
    let names = [a.unique_name(), b.unique_name(), c.unique_name()].map(str::to_owned);

    assert_eq!(a.request_name(NAME, 0), PRIMARY_OWNER);
    assert_eq!(b.request_name(NAME, 0), IN_QUEUE);
    assert_eq!(c.request_name(NAME, 0), IN_QUEUE);
    assert_eq!(queued_owners(&mut watcher), names_list(&[&a, &b, &c]));

    assert_eq!(a.release_name(NAME), RELEASED);
    expect_name_signal(&mut a, "NameLost");
    expect_name_signal(&mut b, "NameAcquired");
    assert_eq!(queued_owners(&mut watcher), names_list(&[&b, &c]));

    b.kill();
    expect_name_signal(&mut c, "NameAcquired");
    assert_eq!(queued_owners(&mut watcher), names_list(&[&c]));

    assert_eq!(
        owner_changes(&mut watcher, 3),
        [
            owner_changed("", &names[0]),
            owner_changed(&names[0], &names[1]),
            owner_changed(&names[1], &names[2]),
        ]
    );

    c.kill();
    assert_eq!(
        owner_changes(&mut watcher, 1),
        [owner_changed(&names[2], "")]
    );
    let reply = watcher.bus_call("ListQueuedOwners", "s", &format!("[\"{NAME}\"]"));
    assert!(
        reply.starts_with("error org.freedesktop.DBus.Error.NameHasNoOwner "),
        "{reply}"
    );
}

#[test]
fn a_queued_peer_that_disconnects_leaves_the_queue_silently() {
    let bus = Bus::start();
    let mut watcher = watcher(&bus);
    let mut a = bus.peer();
    let mut b = bus.peer();
    let mut c = bus.peer();
    assert_eq!(a.request_name(NAME, 0), PRIMARY_OWNER);
    assert_eq!(b.request_name(NAME, 0), IN_QUEUE);
    assert_eq!(c.request_name(NAME, 0), IN_QUEUE);
    b.kill();
    // Wait (bounded) until the bus noticed B is gone.
    let b_gone = format!("\"{}\"", b.unique_name());
    let deadline = std::time::Instant::now() + quickbus_e2e::TIMEOUT;
    while queued_owners(&mut watcher).contains(&b_gone) {
        assert!(
            std::time::Instant::now() < deadline,
            "B never left the queue"
        );
        std::thread::sleep(quickbus_e2e::POLL_INTERVAL);
    }
    assert_eq!(queued_owners(&mut watcher), names_list(&[&a, &c]));
    assert_eq!(a.release_name(NAME), RELEASED);
    expect_name_signal(&mut c, "NameAcquired");
    let (a_name, c_name) = (a.unique_name().to_owned(), c.unique_name().to_owned());
    assert_eq!(
        owner_changes(&mut watcher, 2),
        [owner_changed("", &a_name), owner_changed(&a_name, &c_name)]
    );
}

#[test]
fn unique_names_announce_themselves_to_their_owner() {
    let bus = Bus::start();
    let mut peer = bus.peer();
    let unique = peer.unique_name().to_owned();
    let expected = format!(
        "signal org.freedesktop.DBus.NameAcquired path=/org/freedesktop/DBus \
         sender=org.freedesktop.DBus dest={unique} args=[\"{unique}\"]"
    );
    peer.wait_event(|e| e == expected);
    let reply = peer.bus_call("RequestName", "su", r#"[":1.999999", 0]"#);
    assert!(
        reply.starts_with("error "),
        "a unique name cannot be requested: {reply}"
    );
}

#[test]
fn connecting_and_disconnecting_peers_change_their_unique_names_owner() {
    let bus = Bus::start();
    let mut watcher = bus.peer();
    watcher.add_match("type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged'");
    let mut peer = bus.peer();
    let unique = peer.unique_name().to_owned();
    let changed = |old: &str, new: &str| {
        format!(
            "signal org.freedesktop.DBus.NameOwnerChanged path=/org/freedesktop/DBus \
             sender=org.freedesktop.DBus dest=- args=[\"{unique}\", \"{old}\", \"{new}\"]"
        )
    };
    let appeared = changed("", &unique);
    watcher.wait_event(|e| e == appeared);
    peer.kill();
    let gone = changed(&unique, "");
    watcher.wait_event(|e| e == gone);
}
