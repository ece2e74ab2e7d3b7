//! Per-app filtering through the bus: what a filtered connection may
//! send, what it receives, and what the driver tells it, as
//! xdg-dbus-proxy `--filter` with the same options would
//! (flatpak-proxy.c).

use std::sync::Arc;

use super::*;
use crate::app_filter::AppFilter;

const SVC: &str = "org.example.Svc";

/// A filtered connection past Hello, its deliveries drained.
fn app(h: &mut Harness, options: &[&str]) -> (ConnId, String) {
    let id = h.connect(true);
    let filter = AppFilter::from_proxy_options(options).unwrap();
    h.bus.set_app_filter(id, Arc::new(filter));
    let reply = h.call(id, call_bus("Hello", vec![]));
    assert_eq!(reply.msg_type(), MessageType::MethodReturn, "Hello passes");
    let name = match &reply.body_values().unwrap()[0] {
        Value::String(name) => name.clone(),
        other => panic!("Hello returned {other:?}"),
    };
    h.take();
    (id, name)
}

/// An unfiltered connection owning `name`.
fn service(h: &mut Harness, name: &str) -> (ConnId, String) {
    let (id, unique) = h.client();
    h.request_name(id, name, 0);
    h.take();
    (id, unique)
}

fn call_to(dest: &str, path: &str, interface: &str, member: &str) -> MessageBuilder {
    MessageBuilder::method_call(path, member)
        .interface(interface)
        .destination(dest.to_owned())
}

fn ping(dest: &str) -> MessageBuilder {
    call_to(dest, "/", "org.example.Iface", "Ping")
}

/// The error the app got for its call, and that nobody else got
/// anything: (name, text).
fn refused(h: &mut Harness, app: ConnId, builder: MessageBuilder) -> (String, String) {
    let reply = h.call(app, builder);
    assert_eq!(reply.msg_type(), MessageType::Error, "expected an error");
    let rest = h.take();
    assert!(rest.is_empty(), "nobody else hears of it: {rest:?}");
    let text = match reply.body_values().unwrap().first() {
        Some(Value::String(t)) => t.clone(),
        other => panic!("error without text: {other:?}"),
    };
    (reply.error_name().unwrap().to_owned(), text)
}

fn refused_name(h: &mut Harness, app: ConnId, builder: MessageBuilder) -> String {
    let (name, text) = refused(h, app, builder);
    assert_eq!(
        name, text,
        "the proxy's errors carry their own name as text"
    );
    name
}

/// Whether the call reaches `to` (then `to` got exactly it).
fn reaches(h: &mut Harness, from: ConnId, to: ConnId, builder: MessageBuilder) -> bool {
    h.send(from, builder);
    let got = h.take();
    match &got[..] {
        [] => false,
        [(c, m)] if *c == to && m.msg_type() != MessageType::Error => true,
        [(c, m)] if *c == from && m.msg_type() == MessageType::Error => false,
        other => panic!("unexpected deliveries: {:?}", summary(other)),
    }
}

fn list(h: &mut Harness, app: ConnId, member: &str) -> Vec<String> {
    let mut names = string_list(&h.driver(app, member, vec![])[0]);
    names.sort();
    names
}

#[test]
fn a_name_without_a_rule_does_not_exist_for_the_app() {
    let mut h = Harness::new();
    let (svc, svc_unique) = service(&mut h, SVC);
    let (a, _) = app(&mut h, &[]);
    assert_eq!(refused_name(&mut h, a, ping(SVC)), errors::SERVICE_UNKNOWN);
    let no_start = ping(SVC).flags(flags::NO_AUTO_START);
    assert_eq!(refused_name(&mut h, a, no_start), errors::NAME_HAS_NO_OWNER);
    assert_eq!(
        refused_name(&mut h, a, ping(&svc_unique)),
        errors::NAME_HAS_NO_OWNER
    );
    // Nothing at all when no reply is wanted.
    h.send(a, ping(SVC).flags(flags::NO_REPLY_EXPECTED));
    assert!(h.take().is_empty());
    // A signal addressed to it is dropped too.
    h.send(
        a,
        MessageBuilder::signal("/", "org.example.Iface", "Sig").destination(SVC),
    );
    assert!(h.take().is_empty());
    // An unfiltered peer is not affected.
    let (b, _) = h.client();
    assert!(reaches(&mut h, b, svc, ping(SVC)));
}

#[test]
fn see_makes_a_name_visible_but_not_callable() {
    let mut h = Harness::new();
    let (_, svc_unique) = service(&mut h, SVC);
    let (a, _) = app(&mut h, &[&format!("--see={SVC}")]);
    assert_eq!(refused_name(&mut h, a, ping(SVC)), errors::ACCESS_DENIED);
    // The owner's unique name is as visible as the name.
    assert_eq!(
        refused_name(&mut h, a, ping(&svc_unique)),
        errors::ACCESS_DENIED
    );
    assert_eq!(
        h.driver(a, "NameHasOwner", vec![s(SVC)]),
        vec![Value::Bool(true)]
    );
    assert_eq!(
        h.driver(a, "GetNameOwner", vec![s(SVC)]),
        vec![s(&svc_unique)]
    );
}

#[test]
fn talk_lets_calls_through_by_name_and_by_unique_name_and_replies_back() {
    let mut h = Harness::new();
    let (svc, svc_unique) = service(&mut h, SVC);
    let (a, a_unique) = app(&mut h, &[&format!("--talk={SVC}")]);
    assert!(reaches(&mut h, a, svc, ping(SVC)));
    let serial = h.send(a, ping(&svc_unique));
    let got = h.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, svc);
    // The answer comes back once.
    let answer = MessageBuilder::method_return(serial).destination(a_unique.clone());
    h.send(svc, answer.clone());
    assert_eq!(summary(&h.take()), vec![(a, "return".into(), vec![])]);
    h.send(svc, answer);
    assert!(h.take().is_empty(), "a second answer is dropped");
}

#[test]
fn call_rules_allow_only_the_methods_and_paths_they_name() {
    let mut h = Harness::new();
    let (svc, svc_unique) = service(&mut h, SVC);
    let (a, _) = app(
        &mut h,
        &[
            &format!("--call={SVC}=org.example.Iface.Get@/obj"),
            &format!("--call={SVC}=org.example.Other.*@/tree/*"),
        ],
    );
    assert!(reaches(
        &mut h,
        a,
        svc,
        call_to(SVC, "/obj", "org.example.Iface", "Get")
    ));
    assert!(reaches(
        &mut h,
        a,
        svc,
        call_to(&svc_unique, "/obj", "org.example.Iface", "Get")
    ));
    assert!(reaches(
        &mut h,
        a,
        svc,
        call_to(SVC, "/tree/x/y", "org.example.Other", "Anything")
    ));
    for denied in [
        call_to(SVC, "/obj", "org.example.Iface", "Set"),
        call_to(SVC, "/obj/sub", "org.example.Iface", "Get"),
        call_to(SVC, "/treetop", "org.example.Other", "Anything"),
        MessageBuilder::method_call("/obj", "Get").destination(SVC),
    ] {
        assert_eq!(refused_name(&mut h, a, denied), errors::ACCESS_DENIED);
    }
    // A call rule makes the name TALK: it may be started, and seen.
    assert_eq!(
        h.driver(a, "NameHasOwner", vec![s(SVC)]),
        vec![Value::Bool(true)]
    );
}

#[test]
fn a_prefix_rule_covers_the_names_below_it() {
    let mut h = Harness::new();
    let (svc, _) = service(&mut h, "org.example.Svc.Sub");
    let (other, _) = service(&mut h, "org.examples.Other");
    let (a, _) = app(&mut h, &["--talk=org.example.*"]);
    assert!(reaches(&mut h, a, svc, ping("org.example.Svc.Sub")));
    assert_eq!(
        refused_name(&mut h, a, ping("org.examples.Other")),
        errors::SERVICE_UNKNOWN
    );
    let (b, _) = h.client();
    assert!(reaches(&mut h, b, other, ping("org.examples.Other")));
}

#[test]
fn only_own_names_may_be_requested_released_and_listed() {
    let mut h = Harness::new();
    let (a, _) = app(
        &mut h,
        &["--own=org.example.Mine.*", "--talk=org.example.Talk"],
    );
    assert_eq!(h.request_name(a, "org.example.Mine", 0), 1);
    assert_eq!(h.request_name(a, "org.example.Mine.Sub", 0), 1);
    h.take();
    let owners = h.driver(a, "ListQueuedOwners", vec![s("org.example.Mine")]);
    assert_eq!(string_list(&owners[0]).len(), 1);
    let request = |name: &str| call_bus("RequestName", vec![s(name), Value::Uint32(0)]);
    assert_eq!(
        refused_name(&mut h, a, request("org.example.Talk")),
        errors::ACCESS_DENIED
    );
    // A name it may not see: as for any hidden destination.
    assert_eq!(
        refused_name(&mut h, a, request("org.example.Hidden")),
        errors::SERVICE_UNKNOWN
    );
    assert_eq!(
        refused_name(
            &mut h,
            a,
            call_bus("ReleaseName", vec![s("org.example.Talk")])
        ),
        errors::ACCESS_DENIED
    );
    assert_eq!(
        h.driver(a, "ReleaseName", vec![s("org.example.Mine")]),
        vec![Value::Uint32(1)]
    );
}

#[test]
fn driver_answers_show_only_what_the_app_may_see() {
    let mut h = Harness::new();
    let (_, seen_unique) = service(&mut h, "org.example.Seen");
    let (_, hidden_unique) = service(&mut h, "org.example.Hidden");
    let (a, a_unique) = app(&mut h, &["--see=org.example.Seen"]);
    let mut expected = vec![
        BUS_NAME.to_owned(),
        a_unique.clone(),
        "org.example.Seen".to_owned(),
        seen_unique.clone(),
    ];
    expected.sort();
    assert_eq!(list(&mut h, a, "ListNames"), expected);
    assert_eq!(list(&mut h, a, "ListActivatableNames"), vec![BUS_NAME]);
    let (a2, _) = app(&mut h, &["--see=org.example.Activatable"]);
    let mut activatable = vec![BUS_NAME.to_owned(), "org.example.Activatable".into()];
    activatable.sort();
    assert_eq!(list(&mut h, a2, "ListActivatableNames"), activatable);

    assert_eq!(
        h.driver(a, "NameHasOwner", vec![s("org.example.Hidden")]),
        vec![Value::Bool(false)]
    );
    assert_eq!(
        h.driver(a, "NameHasOwner", vec![s(&hidden_unique)]),
        vec![Value::Bool(false)]
    );
    assert_eq!(
        refused_name(
            &mut h,
            a,
            call_bus("GetNameOwner", vec![s("org.example.Hidden")])
        ),
        errors::NAME_HAS_NO_OWNER
    );
    // Unfiltered connections see everything.
    let (b, _) = h.client();
    assert!(list(&mut h, b, "ListNames").contains(&hidden_unique));
}

#[test]
fn credentials_only_of_what_the_app_may_see() {
    let mut h = Harness::new();
    let (_, seen_unique) = service(&mut h, "org.example.Seen");
    let (_, hidden_unique) = service(&mut h, "org.example.Hidden");
    let (a, a_unique) = app(&mut h, &["--see=org.example.Seen"]);
    for method in [
        "GetConnectionUnixUser",
        "GetConnectionUnixProcessID",
        "GetConnectionCredentials",
    ] {
        for name in [
            "org.example.Seen",
            seen_unique.as_str(),
            a_unique.as_str(),
            BUS_NAME,
        ] {
            h.driver(a, method, vec![s(name)]);
        }
        for name in ["org.example.Hidden", hidden_unique.as_str()] {
            assert_eq!(
                refused_name(&mut h, a, call_bus(method, vec![s(name)])),
                errors::SERVICE_UNKNOWN,
                "{method} {name}"
            );
        }
    }
}

#[test]
fn start_service_by_name_needs_talk() {
    let mut h = Harness::new();
    let (a, _) = app(&mut h, &["--see=org.example.Activatable"]);
    let start = |name: &str| call_bus("StartServiceByName", vec![s(name), Value::Uint32(0)]);
    assert_eq!(
        refused_name(&mut h, a, start("org.example.Activatable")),
        errors::ACCESS_DENIED
    );
    assert_eq!(
        refused_name(&mut h, a, start("org.example.Other")),
        errors::SERVICE_UNKNOWN
    );
    let (b, _) = app(&mut h, &["--talk=org.example.Activatable"]);
    h.send(b, start("org.example.Activatable"));
    assert!(
        h.out.iter().any(
            |a| matches!(a, Action::Activate { name, .. } if name == "org.example.Activatable")
        ),
        "the start goes ahead"
    );
}

#[test]
fn escapes_are_refused() {
    let mut h = Harness::new();
    let (a, _) = app(&mut h, &[]);
    let denied = [
        call_bus("AddMatch", vec![s("eavesdrop=true")]),
        call_bus("AddMatch", vec![s("type='signal',eavesdrop='true'")]),
        call_bus("AddMatch", vec![s("type='signal',eavesdrop = 'true'")]),
        call_bus("AddMatch", vec![s("eavesdrop\t='false'")]),
        call_bus("UpdateActivationEnvironment", vec![]),
        call_bus("ReloadConfig", vec![]),
        call_bus("GetConnectionAppArmorSecurityContext", vec![s(BUS_NAME)]),
        become_monitor(&[]),
        MessageBuilder::method_call(BUS_PATH, "Ping")
            .interface("org.freedesktop.DBus.Peer")
            .destination(BUS_NAME),
        MessageBuilder::method_call(BUS_PATH, "GetAll")
            .interface("org.freedesktop.DBus.Properties")
            .destination(BUS_NAME)
            .body(vec![s(BUS_INTERFACE)]),
        MessageBuilder::method_call(BUS_PATH, "GetId").destination(BUS_NAME),
    ];
    for call in denied {
        assert_eq!(refused_name(&mut h, a, call), errors::ACCESS_DENIED);
    }
    // Wildcards and overlong names are not names: nothing to see.
    for name in ["org.example.*", "*", &format!("org.{}", "x".repeat(300))] {
        assert_eq!(
            refused_name(&mut h, a, call_bus("GetNameOwner", vec![s(name)])),
            errors::NAME_HAS_NO_OWNER
        );
    }
    // What the proxy lets through.
    h.add_match(a, "type='signal'");
    h.driver(a, "RemoveMatch", vec![s("type='signal'")]);
    h.driver(a, "GetId", vec![]);
    let introspect = MessageBuilder::method_call("/", "Introspect")
        .interface("org.freedesktop.DBus.Introspectable")
        .destination(BUS_NAME);
    assert_eq!(h.call(a, introspect).msg_type(), MessageType::MethodReturn);
    // Still not a monitor, still filtered.
    let (svc, _) = service(&mut h, SVC);
    let (b, _) = h.client();
    assert!(reaches(&mut h, b, svc, ping(SVC)));
}

#[test]
fn only_answers_to_calls_the_app_made_reach_it() {
    let mut h = Harness::new();
    let (svc, _) = service(&mut h, SVC);
    let (a, a_unique) = app(&mut h, &[&format!("--talk={SVC}")]);
    let serial = h.send(a, ping(SVC));
    h.take();
    // A made-up answer to a serial never sent, and an error to one.
    for made_up in [
        MessageBuilder::method_return(serial + 7).destination(a_unique.clone()),
        MessageBuilder::error(serial + 8, "org.example.Error").destination(a_unique.clone()),
    ] {
        h.send(svc, made_up);
        assert!(h.take().is_empty(), "dropped, nobody told");
    }
    // The session bus would have passed it to an unfiltered peer.
    let (b, b_unique) = h.client();
    h.send(svc, MessageBuilder::method_return(99).destination(b_unique));
    assert_eq!(summary(&h.take()), vec![(b, "return".into(), vec![])]);
    // The real answer still passes.
    h.send(
        svc,
        MessageBuilder::method_return(serial).destination(a_unique),
    );
    assert_eq!(summary(&h.take()), vec![(a, "return".into(), vec![])]);
}

#[test]
fn the_app_answers_only_calls_it_received_once() {
    let mut h = Harness::new();
    let (svc, svc_unique) = service(&mut h, SVC);
    let (a, a_unique) = app(&mut h, &[]);
    // A trusted peer may call the app.
    let serial = h.send(svc, ping(&a_unique));
    assert_eq!(h.take().len(), 1);
    let answer = MessageBuilder::method_return(serial).destination(svc_unique.clone());
    h.send(a, answer.clone());
    assert_eq!(summary(&h.take()), vec![(svc, "return".into(), vec![])]);
    h.send(a, answer);
    assert!(h.take().is_empty(), "a second answer is dropped");
    h.send(
        a,
        MessageBuilder::error(serial + 5, "org.example.Error").destination(svc_unique),
    );
    assert!(h.take().is_empty(), "an answer to nothing is dropped");
}

#[test]
fn a_caller_becomes_visible_to_the_app_but_not_callable() {
    let mut h = Harness::new();
    let (caller, caller_unique) = h.client();
    let (a, a_unique) = app(&mut h, &[]);
    assert!(!list(&mut h, a, "ListNames").contains(&caller_unique));
    h.send(
        caller,
        MessageBuilder::signal("/", "org.example.Iface", "Hi").destination(a_unique),
    );
    assert_eq!(h.take().len(), 1, "unicast signals from peers pass");
    assert!(list(&mut h, a, "ListNames").contains(&caller_unique));
    assert_eq!(
        refused_name(&mut h, a, ping(&caller_unique)),
        errors::ACCESS_DENIED
    );
    // Its departure is heard.
    h.add_match(a, "type='signal',member='NameOwnerChanged'");
    h.bus.remove_connection(caller, h.now, &mut h.out);
    let got = summary(&h.take());
    assert_eq!(
        got,
        vec![(
            a,
            "NameOwnerChanged".into(),
            vec![caller_unique.clone(), caller_unique, String::new()]
        )]
    );
}

fn broadcast(path: &str, member: &str) -> MessageBuilder {
    MessageBuilder::signal(path, "org.example.Iface", member)
}

#[test]
fn broadcasts_come_in_from_talk_names_and_as_broadcast_rules_allow() {
    let mut h = Harness::new();
    let (talk, _) = service(&mut h, "org.example.Talk");
    let (seen, _) = service(&mut h, "org.example.Seen");
    let (ruled, _) = service(&mut h, "org.example.Ruled");
    let (stranger, _) = h.client();
    let (a, _) = app(
        &mut h,
        &[
            "--talk=org.example.Talk",
            "--see=org.example.Seen",
            "--broadcast=org.example.Ruled=org.example.Iface.Changed@/obj/*",
        ],
    );
    let (b, _) = h.client();
    h.add_match(a, "type='signal'");
    h.add_match(b, "type='signal'");
    h.take();
    let heard = |h: &mut Harness, from: ConnId, builder: MessageBuilder| {
        h.send(from, builder);
        let got: Vec<ConnId> = h.take().into_iter().map(|(to, _)| to).collect();
        assert!(got.contains(&b), "the unfiltered peer hears everything");
        got.contains(&a)
    };
    assert!(heard(&mut h, talk, broadcast("/any", "Anything")));
    assert!(!heard(&mut h, seen, broadcast("/any", "Anything")));
    assert!(!heard(&mut h, stranger, broadcast("/any", "Anything")));
    assert!(heard(&mut h, ruled, broadcast("/obj/x", "Changed")));
    assert!(!heard(&mut h, ruled, broadcast("/obj/x", "Other")));
    assert!(!heard(&mut h, ruled, broadcast("/elsewhere", "Changed")));
    // Its own broadcasts come back to it.
    assert!(heard(&mut h, a, broadcast("/any", "Mine")));
    // A --call rule alone lets no broadcast in.
    let (c, _) = app(&mut h, &["--call=org.example.Talk=*"]);
    h.add_match(c, "type='signal'");
    h.take();
    h.send(talk, broadcast("/any", "Anything"));
    assert!(!h.take().iter().any(|(to, _)| *to == c));
}

#[test]
fn name_owner_changed_only_for_what_the_app_may_see() {
    let mut h = Harness::new();
    let (a, _) = app(&mut h, &["--see=org.example.Seen.*"]);
    // No match rule: the proxy's own subscription still passes the
    // signals of the names in the policy on.
    let (svc, svc_unique) = h.client();
    h.take();
    h.request_name(svc, "org.example.Seen.One", 0);
    h.request_name(svc, "org.example.Hidden", 0);
    let got = summary(&h.take());
    let to_app: Vec<_> = got.iter().filter(|(to, ..)| *to == a).cloned().collect();
    assert_eq!(
        to_app,
        vec![(
            a,
            "NameOwnerChanged".into(),
            vec![
                "org.example.Seen.One".into(),
                String::new(),
                svc_unique.clone()
            ]
        )]
    );
    // With a match rule for every NameOwnerChanged: still only the
    // visible ones, once each, and the owner's unique name now.
    h.add_match(a, "type='signal',member='NameOwnerChanged'");
    let (other, _) = h.client();
    h.take();
    h.request_name(other, "org.example.Hidden2", 0);
    h.bus.remove_connection(svc, h.now, &mut h.out);
    let to_app: Vec<_> = summary(&h.take())
        .into_iter()
        .filter(|(to, ..)| *to == a)
        .map(|(_, _, args)| args)
        .collect();
    assert_eq!(
        to_app,
        vec![
            vec![
                "org.example.Seen.One".into(),
                svc_unique.clone(),
                String::new()
            ],
            vec![svc_unique.clone(), svc_unique, String::new()],
        ]
    );
}

#[test]
fn a_unique_name_keeps_the_level_of_a_name_it_released() {
    // As xdg-dbus-proxy: a peer's level is "sticky".
    let mut h = Harness::new();
    let (svc, svc_unique) = service(&mut h, SVC);
    let (a, _) = app(&mut h, &[&format!("--talk={SVC}")]);
    h.driver(svc, "ReleaseName", vec![s(SVC)]);
    h.take();
    assert!(reaches(&mut h, a, svc, ping(&svc_unique)));
    // The name itself passes the filter; the bus answers that it has no
    // owner, in its own words.
    let (name, text) = refused(&mut h, a, ping(SVC));
    assert_eq!(name, errors::SERVICE_UNKNOWN);
    assert_ne!(name, text);
    // A later owner gets the level when it takes the name.
    let (next, next_unique) = h.client();
    assert_eq!(
        refused_name(&mut h, a, ping(&next_unique)),
        errors::NAME_HAS_NO_OWNER
    );
    h.request_name(next, SVC, 0);
    h.take();
    assert!(reaches(&mut h, a, next, ping(&next_unique)));
}

#[test]
fn two_apps_do_not_see_each_other_without_a_rule() {
    let mut h = Harness::new();
    let (a, a_unique) = app(&mut h, &["--own=org.example.A"]);
    h.request_name(a, "org.example.A", 0);
    let (b, _) = app(&mut h, &[]);
    let (c, _) = app(&mut h, &["--talk=org.example.A"]);
    h.take();
    assert_eq!(
        refused_name(&mut h, b, ping("org.example.A")),
        errors::SERVICE_UNKNOWN
    );
    assert_eq!(
        refused_name(&mut h, b, ping(&a_unique)),
        errors::NAME_HAS_NO_OWNER
    );
    assert!(reaches(&mut h, c, a, ping("org.example.A")));
}

#[test]
fn the_filter_crosses_a_restart() {
    let mut h = Harness::new();
    let (svc, svc_unique) = service(&mut h, SVC);
    let (a, _) = app(&mut h, &[&format!("--call={SVC}=org.example.Iface.Ping")]);
    let mut h = super::handover::restarted(&h);
    assert!(reaches(&mut h, a, svc, ping(&svc_unique)));
    assert_eq!(
        refused_name(&mut h, a, call_to(SVC, "/", "org.example.Iface", "Other")),
        errors::ACCESS_DENIED
    );
    assert_eq!(
        refused_name(&mut h, a, ping("org.example.Else")),
        errors::SERVICE_UNKNOWN
    );
}
