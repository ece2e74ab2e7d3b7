//! Eavesdropping as dbus-daemon decides it: only root and the bus's own
//! user may add an `eavesdrop=true` match rule (whatever the policy says),
//! and each eavesdropped copy must pass the sender's send rules with the
//! eavesdropper as receiver and the eavesdropper's receive rules, with
//! the `eavesdrop` attribute's meaning on each, and replies counting as
//! unrequested (`bus_context_check_security_policy` with a proposed
//! recipient that is not the addressed one).

use quickbus_wire::{Message, MessageBuilder, MessageType, Value};

use super::{call_bus, creds, receive_rule, s, send_rule, Harness};
use crate::policy::{MessageRule, NameMatch, PolicyConfig, PolicyRule, RuleKind};
use crate::*;

const ROOT: u32 = 0;
const NOBODY: u32 = 65534;
const DAEMON: u32 = 1;
/// The harness's bus runs as this user.
const BUS_OWNER: u32 = 1000;

fn peer(h: &mut Harness, uid: u32) -> (ConnId, String) {
    let id = h.bus.add_connection(creds(uid, 7000 + uid), true);
    let name = match &h.driver(id, "Hello", vec![])[0] {
        Value::String(n) => n.clone(),
        other => panic!("Hello returned {other:?}"),
    };
    h.take();
    (id, name)
}

fn add_match_result(h: &mut Harness, from: ConnId, rule: &str) -> Message {
    h.call(from, call_bus("AddMatch", vec![s(rule)]))
}

#[test]
fn only_root_and_the_bus_owner_may_add_eavesdropping_rules() {
    let mut h = Harness::new();
    // The most open policy there is: it does not make eavesdropping less
    // privileged.
    h.bus.set_policy(PolicyConfig::allow_all());
    let (root, _) = peer(&mut h, ROOT);
    let (owner, _) = peer(&mut h, BUS_OWNER);
    let (nobody, nobody_name) = peer(&mut h, NOBODY);
    for (who, rule) in [
        (root, "eavesdrop=true"),
        (owner, "eavesdrop='true',type='method_call'"),
        (nobody, "type='method_call'"),
        (nobody, "eavesdrop='false'"),
        // The last eavesdrop wins: this one does not eavesdrop.
        (nobody, "eavesdrop='true',eavesdrop='false'"),
    ] {
        let reply = add_match_result(&mut h, who, rule);
        assert_eq!(reply.msg_type(), MessageType::MethodReturn, "{rule}");
    }
    for rule in ["eavesdrop=true", "eavesdrop='false',eavesdrop='true'"] {
        let (name, text) = h.driver_error(nobody, call_bus("AddMatch", vec![s(rule)]));
        assert_eq!(name, errors::ACCESS_DENIED);
        assert_eq!(
            text,
            format!(
                "rejected attempt to call AddMatch by connection {nobody_name} (uid={NOBODY} pid={} comm=\"\") with uid {NOBODY}",
                7000 + NOBODY
            )
        );
    }
    h.take();
    // The refused rule was not added: a call between others reaches the
    // addressed recipient and root's eavesdropping rule only.
    let (a, _) = peer(&mut h, DAEMON);
    let (b, b_name) = peer(&mut h, DAEMON);
    h.send(
        a,
        MessageBuilder::method_call("/", "Secret")
            .interface("org.example.I")
            .destination(b_name),
    );
    let to: Vec<ConnId> = h.take().into_iter().map(|(to, _)| to).collect();
    assert_eq!(to, vec![b, root, owner]);
}

// ------------------------------------------------ what an eavesdropper sees

fn eavesdrop() -> MessageRule {
    MessageRule {
        eavesdrop: true,
        ..MessageRule::default()
    }
}

fn test_interface(eavesdrop: bool) -> MessageRule {
    MessageRule {
        interface: Some("com.example.Test".into()),
        eavesdrop,
        ..MessageRule::default()
    }
}

/// The e2e harness's policy: everyone may connect, own, send and receive,
/// nobody may eavesdrop.
fn base() -> Vec<PolicyRule> {
    vec![
        PolicyRule::allow(RuleKind::User(None)),
        PolicyRule::allow(RuleKind::Own(NameMatch::Any)),
        send_rule(true, MessageRule::default()),
        receive_rule(true, MessageRule::default()),
    ]
}

/// [`base`] plus session.conf's two eavesdrop="true" rules.
fn session() -> Vec<PolicyRule> {
    let mut rules = base();
    rules.push(send_rule(true, eavesdrop()));
    rules.push(receive_rule(true, eavesdrop()));
    rules
}

fn with(mut rules: Vec<PolicyRule>, more: Vec<PolicyRule>) -> Vec<PolicyRule> {
    rules.extend(more);
    rules
}

/// What root's `eavesdrop=true` rule delivered of A's (nobody's) call to
/// B (uid 1), B's reply, A's failing call's error, and A's signal to B.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    call: bool,
    reply: bool,
    error: bool,
    signal: bool,
}

const ALL: Seen = Seen {
    call: true,
    reply: true,
    error: true,
    signal: true,
};
const NOTHING: Seen = Seen {
    call: false,
    reply: false,
    error: false,
    signal: false,
};

fn observe(config: PolicyConfig) -> Seen {
    let mut h = Harness::new();
    h.bus.set_policy(config);
    let (spy, _) = peer(&mut h, ROOT);
    let (a, a_name) = peer(&mut h, NOBODY);
    let (b, _) = peer(&mut h, DAEMON);
    h.add_match(spy, "eavesdrop=true");
    assert_eq!(h.request_name(a, "com.example.Caller", 0), 1);
    assert_eq!(h.request_name(b, "com.example.Service", 0), 1);
    h.take();
    let mut seen = Seen::default();
    // Each message must reach its addressed recipient; whether it also
    // reaches the spy is the question.
    let deliver = |h: &mut Harness, from, builder: MessageBuilder, to| {
        h.send(from, builder);
        let got: Vec<ConnId> = h.take().into_iter().map(|(c, _)| c).collect();
        assert!(
            got.contains(&to),
            "the addressed recipient missed it: {got:?}"
        );
        assert!(got.iter().all(|&c| c == to || c == spy), "{got:?}");
        got.contains(&spy)
    };
    let call = |member: &str| {
        MessageBuilder::method_call("/obj", member)
            .interface("com.example.Test")
            .destination("com.example.Service")
    };
    let serial = h.send(a, call("Echo"));
    let got: Vec<ConnId> = h.take().into_iter().map(|(c, _)| c).collect();
    assert!(got.contains(&b), "{got:?}");
    seen.call = got.contains(&spy);
    seen.reply = deliver(
        &mut h,
        b,
        MessageBuilder::method_return(serial)
            .destination(a_name.clone())
            .body(vec![s("x")]),
        a,
    );
    let serial = h.send(a, call("Fail"));
    h.take();
    seen.error = deliver(
        &mut h,
        b,
        MessageBuilder::error(serial, "com.example.Error.Failed").destination(a_name),
        a,
    );
    seen.signal = deliver(
        &mut h,
        a,
        MessageBuilder::signal("/obj", "com.example.Signal", "Sig")
            .destination("com.example.Service"),
        b,
    );
    seen
}

fn default_only(rules: Vec<PolicyRule>) -> PolicyConfig {
    PolicyConfig {
        default: rules,
        ..PolicyConfig::default()
    }
}

#[test]
fn eavesdropped_messages_pass_both_parties_rules() {
    let root_eavesdrops = {
        let mut config = default_only(base());
        config.by_user.insert(
            ROOT,
            vec![
                send_rule(true, eavesdrop()),
                receive_rule(true, eavesdrop()),
            ],
        );
        config
    };
    let b_sends_to_eavesdroppers = {
        let mut config = default_only(with(base(), vec![receive_rule(true, eavesdrop())]));
        config
            .by_user
            .insert(DAEMON, vec![send_rule(true, eavesdrop())]);
        config
    };
    let root_denies_test = {
        let mut config = default_only(session());
        config
            .by_user
            .insert(ROOT, vec![receive_rule(false, test_interface(false))]);
        config
    };
    let rows: Vec<(&str, PolicyConfig, Seen)> = vec![
        ("no eavesdrop rules", default_only(base()), NOTHING),
        (
            "receive eavesdrop only: replies need a send rule too",
            default_only(with(base(), vec![receive_rule(true, eavesdrop())])),
            Seen {
                call: true,
                signal: true,
                ..NOTHING
            },
        ),
        ("session.conf", default_only(session()), ALL),
        (
            "send eavesdrop only",
            default_only(with(base(), vec![send_rule(true, eavesdrop())])),
            NOTHING,
        ),
        // dbus-daemon's policy optimizer: a rule without keys drops the
        // rules of its side before it, session.conf's eavesdrop rules here.
        (
            "a plain allow receive rule after session.conf's",
            default_only(with(
                session(),
                vec![receive_rule(true, MessageRule::default())],
            )),
            NOTHING,
        ),
        (
            "a plain allow send rule after session.conf's",
            default_only(with(
                session(),
                vec![send_rule(true, MessageRule::default())],
            )),
            Seen {
                call: true,
                signal: true,
                ..NOTHING
            },
        ),
        (
            "deny receive_interface eavesdrop=true (replies have no interface)",
            default_only(with(
                session(),
                vec![receive_rule(false, test_interface(true))],
            )),
            Seen {
                signal: true,
                ..NOTHING
            },
        ),
        (
            "send_destination is checked against the eavesdropper's names",
            default_only(with(
                session(),
                vec![
                    send_rule(false, test_interface(false)),
                    send_rule(
                        true,
                        MessageRule {
                            name: NameMatch::Exact("com.example.Service".into()),
                            ..test_interface(false)
                        },
                    ),
                ],
            )),
            Seen {
                signal: true,
                ..NOTHING
            },
        ),
        (
            "root's own context",
            root_eavesdrops,
            Seen {
                call: true,
                signal: true,
                ..NOTHING
            },
        ),
        ("the replier's own context", b_sends_to_eavesdroppers, ALL),
        (
            "deny receive_sender eavesdrop=true",
            default_only(with(
                session(),
                vec![receive_rule(
                    false,
                    MessageRule {
                        name: NameMatch::Exact("com.example.Caller".into()),
                        eavesdrop: true,
                        ..MessageRule::default()
                    },
                )],
            )),
            Seen {
                reply: true,
                error: true,
                ..NOTHING
            },
        ),
        (
            "eavesdropped replies are unrequested",
            default_only(with(
                session(),
                vec![send_rule(
                    false,
                    MessageRule {
                        msg_type: Some(MessageType::MethodReturn),
                        requested_reply: Some(false),
                        ..MessageRule::default()
                    },
                )],
            )),
            Seen {
                reply: false,
                ..ALL
            },
        ),
        (
            "an eavesdrop allow for method calls only",
            default_only(with(
                base(),
                vec![
                    send_rule(true, eavesdrop()),
                    receive_rule(
                        true,
                        MessageRule {
                            msg_type: Some(MessageType::MethodCall),
                            ..eavesdrop()
                        },
                    ),
                ],
            )),
            Seen {
                call: true,
                ..NOTHING
            },
        ),
        (
            "send_requested_reply=false lets replies go to eavesdroppers too",
            default_only(with(
                base(),
                vec![
                    receive_rule(true, eavesdrop()),
                    send_rule(
                        true,
                        MessageRule {
                            msg_type: Some(MessageType::MethodReturn),
                            requested_reply: Some(false),
                            ..MessageRule::default()
                        },
                    ),
                ],
            )),
            Seen {
                error: false,
                ..ALL
            },
        ),
        (
            "a plain receive deny in root's context",
            root_denies_test,
            Seen {
                signal: true,
                ..NOTHING
            },
        ),
    ];
    for (what, config, expected) in rows {
        assert_eq!(observe(config), expected, "{what}");
    }
}

/// dbus-daemon passes a call the bus driver accepted on to the match rules
/// (with no addressed recipient), so eavesdroppers see other peers' calls
/// to the bus, the AddMatch that made them eavesdroppers included; the
/// bus's replies, and calls it refused, they do not see.
#[test]
fn eavesdroppers_see_calls_the_bus_accepted() {
    let mut h = Harness::new();
    h.bus.set_policy(PolicyConfig::allow_all());
    let (spy, _) = peer(&mut h, ROOT);
    let (a, a_name) = peer(&mut h, NOBODY);
    h.add_match(spy, "eavesdrop=true,type='method_call'");
    let own = h.take();
    assert_eq!(own.len(), 1, "{own:?}");
    assert_eq!((own[0].0, own[0].1.member()), (spy, Some("AddMatch")));

    h.driver(a, "GetId", vec![]);
    let got = h.take();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, spy);
    assert_eq!(got[0].1.member(), Some("GetId"));
    assert_eq!(got[0].1.sender(), Some(a_name.as_str()));
    // Refused by the driver: not passed on.
    h.driver_error(a, call_bus("AddMatch", vec![s("eavesdrop=true")]));
    assert_eq!(h.take().len(), 0);
    // A newcomer's Hello, stamped with the name it got.
    let c = h.bus.add_connection(creds(DAEMON, 3), false);
    let name = match &h.driver(c, "Hello", vec![])[0] {
        Value::String(n) => n.clone(),
        other => panic!("Hello returned {other:?}"),
    };
    let got = h.take();
    let hello = got
        .iter()
        .find(|(to, m)| *to == spy && m.member() == Some("Hello"))
        .expect("the spy sees Hello");
    assert_eq!(hello.1.sender(), Some(name.as_str()));
}

/// What a delivery is to its receiver (`Action::Queued`'s `kind`): only
/// the addressed receiver of a call owes an answer; an eavesdropper's
/// copy of a call is a signal to it. Were it a call, the daemon would
/// take the eavesdropper for one owing a reply until it next sent one,
/// and never let it sit out as a heavy sender (`server::fair_share`).
#[test]
fn an_eavesdroppers_copies_are_signals_to_it() {
    let mut h = Harness::new();
    h.bus.set_policy(PolicyConfig::allow_all());
    let (spy, _) = peer(&mut h, ROOT);
    let (caller, caller_name) = peer(&mut h, NOBODY);
    let (callee, callee_name) = peer(&mut h, NOBODY);
    h.add_match(spy, "eavesdrop=true");
    h.take();
    let serial = h.send(
        caller,
        MessageBuilder::method_call("/", "Ping").destination(callee_name.as_str()),
    );
    h.send(
        callee,
        MessageBuilder::method_return(serial).destination(caller_name.as_str()),
    );
    let kinds: Vec<(ConnId, flow::Kind)> = std::mem::take(&mut h.out)
        .into_iter()
        .filter_map(|action| match action {
            Action::Queued { to, kind, .. } => Some((to, kind)),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (callee, flow::Kind::Call),
            (spy, flow::Kind::Signal),
            (caller, flow::Kind::Reply),
            (spy, flow::Kind::Reply),
        ]
    );
}

/// A call the bus took goes to eavesdroppers with no addressed recipient,
/// each of them eavesdropping: its receive rules must let it eavesdrop
/// (session.conf's eavesdrop="true" rule), or it does not see the call,
/// however it subscribed.
#[test]
fn calls_to_the_bus_reach_only_eavesdroppers_their_rules_let_eavesdrop() {
    for (rules, overheard) in [(base(), false), (session(), true)] {
        let mut h = Harness::new();
        h.bus.set_policy(default_only(rules));
        let (spy, _) = peer(&mut h, ROOT);
        let (a, _) = peer(&mut h, NOBODY);
        h.add_match(spy, "eavesdrop=true,type='method_call'");
        h.take();
        h.driver(a, "GetId", vec![]);
        let got = h.take();
        let seen = got
            .iter()
            .any(|(to, m)| *to == spy && m.member() == Some("GetId"));
        assert_eq!(seen, overheard, "{got:?}");
    }
}
