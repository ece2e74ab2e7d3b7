//! The fast path ([`MessageRules::lets_through`]) against the full search
//! over every combination of message facts.

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
