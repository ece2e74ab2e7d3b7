//! The index against a linear scan of the rules, and the fast path
//! ([`MessageRules::lets_through`]) against the full search, over every
//! combination of message facts.

use quickbus_wire::MessageType;

use super::{Facts, MessageRules, Side};
use crate::policy::{MessageRule, NameMatch, MAX_MESSAGE_UNIX_FDS};

fn rules(side: Side, list: &[(bool, MessageRule)]) -> MessageRules {
    let mut rules = MessageRules::new(side);
    for (allow, spec) in list {
        rules.push(*allow, spec.clone());
    }
    rules
}

fn eavesdrop() -> MessageRule {
    MessageRule {
        eavesdrop: true,
        ..MessageRule::default()
    }
}

fn deny_interface() -> MessageRule {
    MessageRule {
        interface: Some("x.Secret".into()),
        ..MessageRule::default()
    }
}

/// Every combination of the facts the rules look at.
fn all_facts() -> Vec<Facts<'static>> {
    let mut all = Vec::new();
    let types = [
        MessageType::MethodCall,
        MessageType::MethodReturn,
        MessageType::Error,
        MessageType::Signal,
    ];
    for msg_type in types {
        for interface in [None, Some("x.Secret"), Some("x.Open")] {
            for bits in 0..16u8 {
                for unix_fds in [0, 1, MAX_MESSAGE_UNIX_FDS + 1] {
                    all.push(Facts {
                        msg_type,
                        path: Some("/p"),
                        interface,
                        member: Some("M"),
                        error: None,
                        is_reply: bits & 1 != 0,
                        requested_reply: bits & 2 != 0,
                        eavesdropping: bits & 4 != 0,
                        broadcast: bits & 8 != 0,
                        unix_fds,
                    });
                }
            }
        }
    }
    all
}

/// How many of `all_facts` the fast path lets through; panics where it
/// lets through what the search would refuse or log.
fn checked_fast_passes(rules: &MessageRules) -> usize {
    let names = |f: &mut dyn FnMut(&str)| f("a.b.C");
    let mut passes = 0;
    for m in all_facts() {
        if rules.lets_through(&m) {
            let rule = rules.decide(&m, &names);
            assert!(
                rule.is_some_and(|r| r.allow && !r.spec.log),
                "fast path passed {m:?}, search says {rule:?}"
            );
            passes += 1;
        }
    }
    passes
}

#[test]
fn session_rules_let_everything_through_that_has_a_sane_fd_count() {
    let send = rules(Side::Send, &[(true, eavesdrop())]);
    let receive = rules(
        Side::Receive,
        &[(true, eavesdrop()), (true, MessageRule::default())],
    );
    let sane = all_facts()
        .iter()
        .filter(|m| m.unix_fds <= MAX_MESSAGE_UNIX_FDS)
        .count();
    assert_eq!(checked_fast_passes(&send), sane);
    assert_eq!(checked_fast_passes(&receive), sane);
}

#[test]
fn plain_allow_lets_ordinary_messages_through_only() {
    for side in [Side::Send, Side::Receive] {
        let rules = rules(side, &[(true, MessageRule::default())]);
        let passes = checked_fast_passes(&rules);
        let ordinary = all_facts()
            .iter()
            .filter(|m| m.is_ordinary() && m.unix_fds <= MAX_MESSAGE_UNIX_FDS)
            .count();
        assert_eq!(passes, ordinary, "{side:?}");
    }
}

#[test]
fn unrequested_replies_open_with_requested_reply_false_on_send_only() {
    let spec = MessageRule {
        requested_reply: Some(false),
        ..MessageRule::default()
    };
    let send = rules(Side::Send, &[(true, spec.clone())]);
    let receive = rules(Side::Receive, &[(true, spec)]);
    let sane = all_facts()
        .iter()
        .filter(|m| m.unix_fds <= MAX_MESSAGE_UNIX_FDS)
        .count();
    assert_eq!(checked_fast_passes(&send), sane);
    assert!(checked_fast_passes(&receive) < sane);
}

#[test]
fn a_later_deny_or_log_rule_closes_the_fast_path() {
    for later in [
        (false, deny_interface()),
        (false, MessageRule::default()),
        (
            true,
            MessageRule {
                log: true,
                member: Some("M".into()),
                ..MessageRule::default()
            },
        ),
    ] {
        let rules = rules(Side::Send, &[(true, eavesdrop()), later]);
        assert_eq!(checked_fast_passes(&rules), 0);
    }
}

#[test]
fn an_allow_all_after_a_deny_reopens_it() {
    let rules = rules(
        Side::Send,
        &[
            (false, MessageRule::default()),
            (true, eavesdrop()),
            (
                true,
                MessageRule {
                    name: NameMatch::Prefix("a.b".into()),
                    ..MessageRule::default()
                },
            ),
        ],
    );
    assert!(checked_fast_passes(&rules) > 0);
}

#[test]
fn conditional_allows_and_fd_limits_are_left_to_the_search() {
    let by_interface = rules(
        Side::Send,
        &[(
            true,
            MessageRule {
                interface: Some("x.Open".into()),
                eavesdrop: true,
                ..MessageRule::default()
            },
        )],
    );
    assert_eq!(checked_fast_passes(&by_interface), 0);
    let no_fds = rules(
        Side::Send,
        &[(
            true,
            MessageRule {
                max_fds: 0,
                eavesdrop: true,
                ..MessageRule::default()
            },
        )],
    );
    let without_fds = all_facts().iter().filter(|m| m.unix_fds == 0).count();
    assert_eq!(checked_fast_passes(&no_fds), without_fds);
}

const TYPES: [MessageType; 4] = [
    MessageType::MethodCall,
    MessageType::MethodReturn,
    MessageType::Error,
    MessageType::Signal,
];

/// The index must decide exactly as a scan of every rule would, for
/// rules and messages with and without each keyed field.
#[test]
fn indexed_decisions_equal_a_linear_scan() {
    let mut rules = MessageRules::new(Side::Send);
    let types = [None].into_iter().chain(TYPES.map(Some));
    for msg_type in types {
        for interface in [None, Some("a.I")] {
            for member in [None, Some("M")] {
                for path in [None, Some("/p")] {
                    for requested_reply in [None, Some(true), Some(false)] {
                        for allow in [true, false] {
                            let spec = MessageRule {
                                msg_type,
                                interface: interface.map(Into::into),
                                member: member.map(Into::into),
                                path: path.map(Into::into),
                                requested_reply,
                                ..MessageRule::default()
                            };
                            rules.push(allow, spec);
                        }
                    }
                }
            }
        }
    }
    let no_names = |_: &mut dyn FnMut(&str)| {};
    let mut checked = 0;
    for msg_type in TYPES {
        for interface in [None, Some("a.I"), Some("a.J")] {
            for member in [None, Some("M"), Some("N")] {
                for path in [None, Some("/p"), Some("/q")] {
                    for (is_reply, requested_reply) in [(false, false), (true, false), (true, true)]
                    {
                        let facts = Facts {
                            msg_type,
                            path,
                            interface,
                            member,
                            error: None,
                            is_reply,
                            broadcast: false,
                            unix_fds: 0,
                            requested_reply,
                            eavesdropping: false,
                        };
                        let scanned = rules
                            .rules
                            .iter()
                            .rev()
                            .find(|r| r.matches(Side::Send, &facts));
                        let indexed = rules.decide(&facts, &no_names);
                        assert!(
                            match (scanned, indexed) {
                                (Some(a), Some(b)) => std::ptr::eq(a, b),
                                (None, None) => true,
                                _ => false,
                            },
                            "{facts:?}: scan {scanned:?}, index {indexed:?}"
                        );
                        let all = rules
                            .rules
                            .iter()
                            .filter(|r| r.matches(Side::Send, &facts))
                            .count();
                        assert_eq!(rules.count_matches(&facts, &no_names), all, "{facts:?}");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 4 * 3 * 3 * 3 * 3);
}
