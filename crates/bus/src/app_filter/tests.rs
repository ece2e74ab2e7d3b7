//! The option syntax and the rules, without a bus.

use proptest::prelude::*;

use super::parse::{parse_option, Rule};
use super::rules::{MessageFacts, MessageRule, PathRule};
use super::*;

fn facts<'a>(path: &'a str, interface: &'a str, member: &'a str) -> MessageFacts<'a> {
    MessageFacts {
        path: Some(path),
        interface: Some(interface),
        member: Some(member),
    }
}

fn filter(options: &[&str]) -> AppFilter {
    AppFilter::from_proxy_options(options).expect("valid options")
}

#[test]
fn levels_come_from_the_option_and_the_driver_is_always_talk() {
    let f = filter(&["--see=org.example.Seen", "--own=org.example.Mine"]);
    assert_eq!(f.level_of_name("org.example.Seen"), Level::See);
    assert_eq!(f.level_of_name("org.example.Mine"), Level::Own);
    assert_eq!(f.level_of_name("org.example.Other"), Level::None);
    assert_eq!(f.level_of_name(crate::BUS_NAME), Level::Talk);
    let empty = filter(&[]);
    assert_eq!(empty.level_of_name(crate::BUS_NAME), Level::Talk);
    assert_eq!(empty.level_of_name("org.example.Seen"), Level::None);
}

#[test]
fn a_prefix_covers_the_name_and_below_but_not_its_siblings() {
    let f = filter(&["--talk=org.example.*"]);
    assert_eq!(f.level_of_name("org.example"), Level::Talk);
    assert_eq!(f.level_of_name("org.example.A"), Level::Talk);
    assert_eq!(f.level_of_name("org.example.A.B"), Level::Talk);
    assert_eq!(f.level_of_name("org.examples"), Level::None);
    assert_eq!(f.level_of_name("org"), Level::None);
    // An exact name does not cover what is below it.
    let f = filter(&["--talk=org.example"]);
    assert_eq!(f.level_of_name("org.example.A"), Level::None);
}

#[test]
fn the_highest_level_wins() {
    let f = filter(&[
        "--see=org.example.*",
        "--own=org.example.Mine",
        "--talk=org.example.Mine.*",
    ]);
    assert_eq!(f.level_of_name("org.example.Mine"), Level::Own);
    assert_eq!(f.level_of_name("org.example.Mine.Sub"), Level::Talk);
    assert_eq!(f.level_of_name("org.example.Else"), Level::See);
}

#[test]
fn call_and_broadcast_rules_give_talk_and_only_their_kind() {
    let f = filter(&[
        "--call=org.example.Svc=org.example.Iface.Do@/obj",
        "--broadcast=org.example.Svc=org.example.Iface.Changed@/obj/*",
    ]);
    assert_eq!(f.level_of_name("org.example.Svc"), Level::Talk);
    let call = facts("/obj", "org.example.Iface", "Do");
    assert!(f.call_allowed("org.example.Svc", &call));
    assert!(!f.broadcast_allowed("org.example.Svc", &call));
    let signal = facts("/obj/a/b", "org.example.Iface", "Changed");
    assert!(f.broadcast_allowed("org.example.Svc", &signal));
    assert!(!f.call_allowed("org.example.Svc", &signal));
    assert!(!f.call_allowed(
        "org.example.Svc",
        &facts("/obj", "org.example.Iface", "Other")
    ));
    assert!(!f.call_allowed(
        "org.example.Svc",
        &facts("/obj2", "org.example.Iface", "Do")
    ));
}

#[test]
fn see_allows_no_message_talk_and_own_allow_all() {
    let msg = facts("/", "a.b", "C");
    let f = filter(&[
        "--see=org.example.S",
        "--talk=org.example.T",
        "--own=org.example.O",
    ]);
    assert!(!f.call_allowed("org.example.S", &msg));
    assert!(!f.broadcast_allowed("org.example.S", &msg));
    for name in ["org.example.T", "org.example.O"] {
        assert!(f.call_allowed(name, &msg));
        assert!(f.broadcast_allowed(name, &msg));
    }
}

#[test]
fn rules_parse_as_flatpak_proxy_reads_them() {
    let rule = |r: &str| MessageRule::parse(r);
    let m = |i: Option<&str>, m: Option<&str>, p: PathRule| MessageRule {
        interface: i.map(str::to_owned),
        member: m.map(str::to_owned),
        path: p,
    };
    assert_eq!(rule(""), m(None, None, PathRule::Any));
    assert_eq!(rule("*"), m(None, None, PathRule::Any));
    assert_eq!(rule("@"), m(None, None, PathRule::Any));
    assert_eq!(rule("org.a.B.*"), m(Some("org.a.B"), None, PathRule::Any));
    assert_eq!(
        rule("org.a.B.M"),
        m(Some("org.a.B"), Some("M"), PathRule::Any)
    );
    assert_eq!(rule("Plain"), m(Some("Plain"), None, PathRule::Any));
    assert_eq!(
        rule("*@/a/b"),
        m(None, None, PathRule::Exact("/a/b".into()))
    );
    assert_eq!(
        rule("org.a.B.M@/a/*"),
        m(Some("org.a.B"), Some("M"), PathRule::Subtree("/a".into()))
    );
    assert_eq!(rule("@/*"), m(None, None, PathRule::Subtree(String::new())));
}

#[test]
fn subtree_paths_match_the_path_and_below_only() {
    let f = filter(&["--call=org.example.S=*@/a/b/*"]);
    let ok = |p: &str| f.call_allowed("org.example.S", &facts(p, "x.y", "Z"));
    assert!(ok("/a/b"));
    assert!(ok("/a/b/c"));
    assert!(!ok("/a/bc"));
    assert!(!ok("/a"));
    let all = filter(&["--call=org.example.S=@/*"]);
    assert!(all.call_allowed("org.example.S", &facts("/", "x.y", "Z")));
    assert!(all.call_allowed("org.example.S", &facts("/q/r", "x.y", "Z")));
}

#[test]
fn a_rule_with_an_interface_needs_a_message_with_one() {
    let f = filter(&["--call=org.example.S=org.example.I.*"]);
    let no_interface = MessageFacts {
        path: Some("/"),
        interface: None,
        member: Some("M"),
    };
    assert!(!f.call_allowed("org.example.S", &no_interface));
    assert!(f.call_allowed("org.example.S", &facts("/", "org.example.I", "M")));
}

#[test]
fn malformed_options_are_refused_naming_them() {
    for bad in [
        "--log",
        "--filter",
        "--sloppy-names",
        "--see",
        "--see=",
        "--see=:1.5",
        "--talk=org",
        "--talk=org.*",
        "--own=.*",
        "--see=org..example",
        "--see=org.1example",
        "--call=org.example.S",
        "--broadcast=org.example.S",
        "--call=:1.5=*",
        "--see=org.example.S ",
        "see=org.example.S",
    ] {
        let err = AppFilter::from_proxy_options(&[bad]).expect_err(bad);
        assert!(err.to_string().contains(&format!("\"{bad}\"")), "{err}");
    }
}

#[test]
fn options_survive_serialization() {
    let f = filter(&[
        "--talk=org.example.*",
        "--call=org.other.S=org.other.I.M@/p",
    ]);
    let bytes = postcard::to_allocvec(&f).unwrap();
    let back: AppFilter = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(back.options(), f.options());
    assert_eq!(back.level_of_name("org.example.X"), Level::Talk);
    assert!(back.call_allowed("org.other.S", &facts("/p", "org.other.I", "M")));
}

/// A well-known name: two to four elements of letters, digits, `_`, `-`.
fn well_known_name() -> impl Strategy<Value = String> {
    prop::collection::vec("[A-Za-z_-][A-Za-z0-9_-]{0,6}", 2..5).prop_map(|e| e.join("."))
}

proptest! {
    #[test]
    fn every_valid_name_parses_with_every_option(
        name in well_known_name(),
        prefix in any::<bool>(),
        rule in "[A-Za-z0-9_.*@/-]{0,20}",
    ) {
        let name = if prefix { format!("{name}.*") } else { name };
        for flag in ["--see", "--talk", "--own"] {
            let option = format!("{flag}={name}");
            let parsed = parse_option(&option).unwrap();
            prop_assert_eq!(parsed.subtree, prefix);
            prop_assert_eq!(parsed.rule, Rule::Everything);
        }
        for flag in ["--call", "--broadcast"] {
            let option = format!("{flag}={name}={rule}");
            let parsed = parse_option(&option).unwrap();
            prop_assert_eq!(parsed.level, Level::Talk);
            prop_assert_eq!(parsed.name.as_str(), name.trim_end_matches(".*"));
        }
    }

    #[test]
    fn parsing_never_panics(option in ".{0,40}") {
        let _ = AppFilter::from_proxy_options(&[option]);
    }

    #[test]
    fn a_prefix_rule_covers_every_name_below(
        name in well_known_name(),
        below in prop::collection::vec("[A-Za-z_][A-Za-z0-9_]{0,5}", 0..3),
    ) {
        let f = filter(&[&format!("--talk={name}.*")]);
        let mut deeper = name.clone();
        for element in &below {
            deeper = format!("{deeper}.{element}");
        }
        prop_assert_eq!(f.level_of_name(&deeper), Level::Talk);
        prop_assert_eq!(f.level_of_name(&format!("{name}x")), Level::None);
    }

    #[test]
    fn a_rule_matches_what_it_names(
        interface in well_known_name(),
        member in "[A-Za-z_][A-Za-z0-9_]{0,8}",
        path in prop::collection::vec("[A-Za-z0-9_]{1,5}", 0..4),
    ) {
        let path = format!("/{}", path.join("/"));
        let f = filter(&[&format!("--call=org.example.S={interface}.{member}@{path}")]);
        prop_assert!(f.call_allowed("org.example.S", &facts(&path, &interface, &member)));
        let other_member = format!("{member}x");
        prop_assert!(!f.call_allowed("org.example.S", &facts(&path, &interface, &other_member)));
        let other_path = format!("{path}/x").replace("//", "/");
        prop_assert!(!f.call_allowed("org.example.S", &facts(&other_path, &interface, &member)));
    }
}
