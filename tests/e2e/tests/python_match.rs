//! dbus-python peers: match rules deliver exactly the broadcasts they
//! select, by each key a rule can have.
//!
//! Every test installs one rule on a receiver, lets a sender emit the same
//! set of signals, then a marker signal the receiver also listens for. The
//! bus keeps one sender's messages in order, so when the marker arrives
//! every selected signal has arrived too, and the received set is final.

use quickbus_e2e::{Bus, Peer};

/// (interface, member, path, args as [[signature, value], ...]) — each
/// (interface.member, path) pair is distinct, so it names the signal.
const SIGNALS: [(&str, &str, &str, &str); 9] = [
    (
        "com.example.One",
        "Alpha",
        "/com/example/a",
        r#"[["s", "foo"], ["s", "bar"]]"#,
    ),
    (
        "com.example.One",
        "Beta",
        "/com/example/a/b",
        r#"[["s", "foo.bar"], ["s", "baz"]]"#,
    ),
    (
        "com.example.Two",
        "Alpha",
        "/com/example/ab",
        r#"[["s", "/com/example/"], ["s", "bar"]]"#,
    ),
    (
        "com.example.Two",
        "Gamma",
        "/other",
        r#"[["o", "/com/example/x"]]"#,
    ),
    (
        "com.example.One",
        "Alpha",
        "/com",
        r#"[["s", "foo.bar.baz"]]"#,
    ),
    (
        "com.example.Two",
        "Delta",
        "/com/example/a",
        r#"[["s", "/com/"]]"#,
    ),
    (
        "com.example.One",
        "Epsilon",
        "/x",
        r#"[["s", "foo.barx"], ["s", "foo"]]"#,
    ),
    (
        "com.example.Two",
        "Zeta",
        "/com/example",
        r#"[["o", "/com/examplex"]]"#,
    ),
    ("com.example.One", "Alpha", "/y", "[]"),
];

const MARKER_RULE: &str = "type='signal',interface='com.example.Marker'";

fn emit_all(sender: &mut Peer) {
    for (iface, member, path, args) in SIGNALS {
        sender.emit(&format!(
            r#"{{"path": "{path}", "iface": "{iface}", "member": "{member}", "args": {args}}}"#
        ));
    }
    sender.emit(r#"{"path": "/marker", "iface": "com.example.Marker", "member": "Done"}"#);
}

/// `sender=<name> <interface>.<member> <path>` for each signal `receiver`
/// got from the test signals (ignoring the marker and the bus's own).
fn received(receiver: &mut Peer, senders: usize) -> Vec<String> {
    for _ in 0..senders {
        receiver.wait_event(|e| e.starts_with("signal com.example.Marker.Done "));
    }
    receiver
        .events()
        .iter()
        .filter(|e| e.starts_with("signal com.example.") && !e.contains("com.example.Marker."))
        .map(|e| {
            let words: Vec<&str> = e.split(' ').collect();
            format!(
                "{} {} {}",
                words[3],
                words[1],
                words[2].trim_start_matches("path=")
            )
        })
        .collect()
}

fn expected(sender: &Peer, indices: &[usize]) -> Vec<String> {
    indices
        .iter()
        .map(|&i| {
            let (iface, member, path, _) = SIGNALS[i];
            format!("sender={} {iface}.{member} {path}", sender.unique_name())
        })
        .collect()
}

/// Installs `rule` on a fresh receiver, has a sender emit [`SIGNALS`], and
/// checks the receiver got exactly those at `indices`, in order.
fn check_rule(rule: &str, indices: &[usize]) {
    let bus = Bus::start();
    let mut receiver = bus.peer();
    receiver.add_match(rule);
    receiver.add_match(MARKER_RULE);
    let mut sender = bus.peer();
    emit_all(&mut sender);
    assert_eq!(
        received(&mut receiver, 1),
        expected(&sender, indices),
        "rule {rule}"
    );
}

#[test]
fn arg0_matches_string_equality() {
    check_rule("type='signal',arg0='foo'", &[0]);
}

#[test]
fn arg1_matches_the_second_argument() {
    check_rule("type='signal',arg1='bar'", &[0, 2]);
}

#[test]
fn arg0path_matches_path_prefixes_either_way() {
    check_rule("type='signal',arg0path='/com/example/'", &[2, 3, 5]);
}

#[test]
fn arg0namespace_matches_a_dotted_namespace() {
    check_rule("type='signal',arg0namespace='foo.bar'", &[1, 4]);
}

#[test]
fn path_namespace_matches_the_path_and_below() {
    check_rule("type='signal',path_namespace='/com/example/a'", &[0, 1, 5]);
}

#[test]
fn path_matches_exactly() {
    check_rule("type='signal',path='/com/example/a'", &[0, 5]);
}

#[test]
fn member_matches_any_interface() {
    check_rule("member='Alpha'", &[0, 2, 4, 8]);
}

#[test]
fn interface_matches_every_member() {
    check_rule("type='signal',interface='com.example.Two'", &[2, 3, 5, 7]);
}

#[test]
fn all_keys_of_a_rule_must_match() {
    check_rule(
        "type='signal',interface='com.example.One',member='Alpha',arg0='foo'",
        &[0],
    );
}

#[test]
fn a_rule_that_matches_nothing_delivers_nothing() {
    check_rule("type='signal',interface='com.example.Three'", &[]);
}

#[test]
fn sender_by_unique_or_well_known_name_selects_one_sender() {
    for by_well_known_name in [false, true] {
        let bus = Bus::start();
        let mut chosen = bus.peer();
        let mut other = bus.peer();
        assert_eq!(chosen.request_name("com.example.Chosen", 0), 1);
        let mut receiver = bus.peer();
        let rule_sender = if by_well_known_name {
            "com.example.Chosen".to_owned()
        } else {
            chosen.unique_name().to_owned()
        };
        receiver.add_match(&format!("type='signal',sender='{rule_sender}'"));
        receiver.add_match(MARKER_RULE);
        // The other sender goes first and finishes: its marker arrives before
        // the chosen sender's signals are even sent.
        emit_all(&mut other);
        receiver.wait_event(|e| e.starts_with("signal com.example.Marker.Done "));
        emit_all(&mut chosen);
        assert_eq!(
            received(&mut receiver, 1),
            expected(&chosen, &[0, 1, 2, 3, 4, 5, 6, 7, 8]),
            "rule sender='{rule_sender}'"
        );
    }
}

#[test]
fn remove_match_stops_delivery_and_duplicate_rules_count_twice() {
    let bus = Bus::start();
    let mut receiver = bus.peer();
    let mut sender = bus.peer();
    let rule = "type='signal',interface='com.example.One',member='Beta'";
    receiver.add_match(MARKER_RULE);
    receiver.add_match(rule);
    receiver.add_match(rule);
    // One copy per message even with the rule installed twice.
    emit_all(&mut sender);
    assert_eq!(received(&mut receiver, 1), expected(&sender, &[1]));
    // Removing one of the two copies leaves the other in force.
    receiver.remove_match(rule);
    emit_all(&mut sender);
    assert_eq!(received(&mut receiver, 1), expected(&sender, &[1, 1]));
    receiver.remove_match(rule);
    emit_all(&mut sender);
    assert_eq!(received(&mut receiver, 1), expected(&sender, &[1, 1]));
    // Removing a rule that is not installed is an error.
    let reply = receiver.bus_call("RemoveMatch", "s", &quickbus_e2e::json_string_list(&[rule]));
    assert!(
        reply.starts_with("error org.freedesktop.DBus.Error.MatchRuleNotFound "),
        "{reply}"
    );
}

#[test]
fn a_malformed_rule_is_refused() {
    let bus = Bus::start();
    let mut receiver = bus.peer();
    let reply = receiver.bus_call("AddMatch", "s", r#"["type='signal',bogus_key='x'"]"#);
    assert!(
        reply.starts_with("error org.freedesktop.DBus.Error.MatchRuleInvalid "),
        "{reply}"
    );
}
