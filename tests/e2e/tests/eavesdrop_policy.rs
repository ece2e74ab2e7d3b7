//! Eavesdropping (`AddMatch` with `eavesdrop=true`) decided as dbus-daemon
//! 1.14 decides it, checked against both daemons:
//!
//! - Only root and the bus's own user may add an eavesdropping rule,
//!   whatever the policy allows (dbus-daemon's privileged-caller check):
//!   anyone else gets AccessDenied, "rejected attempt to call AddMatch by
//!   connection :1.N (uid=... pid=... comm="...") with uid N", and the bus
//!   logs that line. The attack of issue 17 (session.conf's
//!   `<allow eavesdrop="true"/>`, a secret service only root may call, an
//!   eavesdropper running as nobody) gets nothing.
//! - What a privileged eavesdropper then gets is the policy's decision,
//!   message by message: the sender's send rules with the eavesdropper as
//!   the receiver (its names, not the addressed one's), then the
//!   eavesdropper's receive rules, where `eavesdrop="true"` widens an allow
//!   rule to eavesdropping and narrows a deny rule to it, and eavesdropped
//!   replies count as unrequested. A table of configurations shows it.
//!
//! The clients run as other users (nobody, daemon), so these tests need
//! root; they say so and do nothing otherwise.

use quickbus_e2e::{can_change_user, skip, write_config_with, Bus, Listen, Peer};

/// Why these tests cannot run without root.
const NEEDS_ROOT: &str = "needs root to run clients as other users";
const ACCESS_DENIED: &str = "org.freedesktop.DBus.Error.AccessDenied";
const NOBODY: u32 = 65534;
const NOGROUP: u32 = 65534;
/// `daemon` on Debian.
const DAEMON: u32 = 1;

/// The harness's allow-everything policy (no eavesdrop rule), then
/// `policies` (whole `<policy>` elements).
fn bus_with(policies: &str) -> Bus {
    Bus::start_configured(|dir| write_config_with(dir, Listen::UnixPath, policies))
}

/// session.conf's default context, as far as eavesdropping goes.
const SESSION: &str = r#"<allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>"#;

fn default_policy(rules: &str) -> String {
    format!(r#"<policy context="default">{rules}</policy>"#)
}

/// AddMatch's raw result line (`bus AddMatch null` or `error NAME TEXT`).
fn add_match(peer: &mut Peer, rule: &str) -> String {
    peer.bus_call("AddMatch", "s", &quickbus_e2e::json_string_list(&[rule]))
}

/// Waits for the broadcast `com.example.End.<member>` from `sender`: every
/// message `sender` sent before it has reached `spy` by then, if it was
/// going to (the bus keeps each sender's order).
fn wait_sentinel(spy: &mut Peer, sender: &mut Peer, member: &str) {
    sender.emit(&format!(
        r#"{{"path":"/end","iface":"com.example.End","member":"{member}"}}"#
    ));
    let wanted = format!("signal com.example.End.{member} ");
    spy.wait_event(|e| e.starts_with(&wanted));
}

/// Lines of `spy`'s events that show a message between other peers: not
/// to or from the bus, not a broadcast, not addressed to the spy.
fn overheard(spy: &Peer) -> Vec<String> {
    let to_spy = format!(" dest={} ", spy.unique_name());
    spy.events()
        .iter()
        .filter(|e| e.starts_with("eavesdropped ") || e.starts_with("signal "))
        .filter(|e| {
            !e.contains(" dest=- ")
                && !e.contains(&to_spy)
                && !e.contains(" dest=org.freedesktop.DBus ")
                && !e.contains(" sender=org.freedesktop.DBus ")
        })
        .cloned()
        .collect()
}

/// Issue 17: session.conf's `<allow eavesdrop="true"/>`, org.secret
/// callable by root only; nobody asks to eavesdrop and is refused, in
/// dbus-daemon's words, and overhears nothing.
#[test]
fn nobody_cannot_eavesdrop_on_roots_calls_to_a_secret_service() {
    if skip::unless(can_change_user(), NEEDS_ROOT) {
        return;
    }
    let bus = bus_with(&format!(
        r#"{}
  <policy context="default"><deny send_destination="org.secret"/></policy>
  <policy user="root"><allow send_destination="org.secret"/></policy>"#,
        default_policy(SESSION)
    ));
    let mut secret = bus.peer();
    assert_eq!(secret.request_name("org.secret", 0), 1);
    secret.serve("/obj");
    let mut root = bus.peer();
    let mut attacker = bus.peer_as(NOBODY, NOGROUP);
    assert_eq!(attacker.command("spy"), "spy ok");

    let refused = add_match(&mut attacker, "eavesdrop=true");
    let text = refused
        .strip_prefix(&format!("error {ACCESS_DENIED} "))
        .unwrap_or_else(|| panic!("AddMatch(eavesdrop=true) as nobody: {refused}"));
    let who = format!(
        "rejected attempt to call AddMatch by connection {} (uid={NOBODY} pid={} comm=\"",
        attacker.unique_name(),
        attacker.pid()
    );
    assert!(text.starts_with(&who), "{text}");
    assert!(text.ends_with(&format!("\") with uid {NOBODY}")), "{text}");
    let log = bus.log();
    assert!(log.contains(&who), "no log line {who:?}: {log}");
    // Written another way, or with other keys: still eavesdropping.
    for rule in [
        "eavesdrop='true'",
        "eavesdrop='false',eavesdrop='true'",
        "type='method_call',destination='org.secret',eavesdrop=true",
    ] {
        let result = add_match(&mut attacker, rule);
        assert!(
            result.starts_with(&format!("error {ACCESS_DENIED} rejected attempt")),
            "{rule}: {result}"
        );
    }
    // What it may do: listen to broadcasts (the sentinels below).
    attacker.add_match("type='signal'");
    attacker.add_match("eavesdrop='true',eavesdrop='false'");

    // Root calls the secret service; the service answers; peers talk.
    let reply = root.command(r#"call org.secret /obj com.example.Test Echo s ["the secret"]"#);
    assert_eq!(reply, r#"call "the secret""#);
    let mut other = bus.peer();
    let reply = other.command(&format!(
        r#"call {} /obj com.example.Test Echo s ["between peers"]"#,
        secret.unique_name()
    ));
    assert_eq!(reply, r#"call "between peers""#);
    for (sender, member) in [
        (&mut root, "Root"),
        (&mut secret, "Secret"),
        (&mut other, "Other"),
    ] {
        wait_sentinel(&mut attacker, sender, member);
    }
    assert_eq!(overheard(&attacker), Vec::<String>::new());
}

/// The bus's own user (root here) may eavesdrop, and under session.conf's
/// rules gets the calls, replies and unicast signals of the same scene,
/// and the calls to the bus that the bus accepted (not those it refused).
#[test]
fn root_may_eavesdrop_under_session_conf() {
    if skip::unless(can_change_user(), NEEDS_ROOT) {
        return;
    }
    let bus = bus_with(&default_policy(SESSION));
    let mut scene = Scene::new(&bus);
    assert_eq!(
        scene.run(),
        Seen {
            call: true,
            reply: true,
            error: true,
            signal: true
        }
    );
    let a_name = scene.a.unique_name().to_owned();
    let refused = add_match(&mut scene.a, "eavesdrop=true");
    assert!(
        refused.starts_with(&format!("error {ACCESS_DENIED} ")),
        "{refused}"
    );
    assert_eq!(scene.a.command("ping"), "pong");
    let get_id = format!(
        "eavesdropped method_call org.freedesktop.DBus.GetId sender={a_name} dest=org.freedesktop.DBus "
    );
    scene.spy.wait_event(|e| e.starts_with(&get_id));
    let to_bus: Vec<&String> = scene
        .spy
        .events()
        .iter()
        .filter(|e| e.contains(&format!("sender={a_name} dest=org.freedesktop.DBus ")))
        .collect();
    assert!(
        !to_bus.iter().any(|e| e.contains("DBus.AddMatch ")),
        "the refused AddMatch was overheard: {to_bus:#?}"
    );
}

/// A calls B, B answers (a return and an error), A signals B; root spies.
struct Scene {
    /// nobody, owning com.example.Caller.
    a: Peer,
    /// daemon (uid 1), owning com.example.Service, serving /obj.
    b: Peer,
    /// root, eavesdropping; owns no well-known name.
    spy: Peer,
}

/// Which of A's and B's messages the spy overheard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Seen {
    call: bool,
    reply: bool,
    error: bool,
    signal: bool,
}

impl Scene {
    fn new(bus: &Bus) -> Scene {
        let mut a = bus.peer_as(NOBODY, NOGROUP);
        let mut b = bus.peer_as(DAEMON, DAEMON);
        assert_eq!(a.request_name("com.example.Caller", 0), 1);
        assert_eq!(b.request_name("com.example.Service", 0), 1);
        b.serve("/obj");
        let mut spy = bus.peer();
        assert_eq!(spy.command("spy"), "spy ok");
        assert_eq!(add_match(&mut spy, "eavesdrop=true"), "bus AddMatch null");
        Scene { a, b, spy }
    }

    fn run(&mut self) -> Seen {
        let a = &mut self.a;
        let echo = a.command(r#"call com.example.Service /obj com.example.Test Echo s ["x"]"#);
        assert_eq!(echo, r#"call "x""#, "A's call to B");
        let fail = a.command("call com.example.Service /obj com.example.Test Fail - []");
        assert!(
            fail.starts_with("error com.example.Error.Failed "),
            "A's failing call: {fail}"
        );
        a.emit(
            r#"{"path":"/obj","iface":"com.example.Signal","member":"Sig","dest":"com.example.Service"}"#,
        );
        self.b
            .wait_event(|e| e.starts_with("signal com.example.Signal.Sig "));
        wait_sentinel(&mut self.spy, &mut self.a, "A");
        wait_sentinel(&mut self.spy, &mut self.b, "B");
        let heard = overheard(&self.spy);
        let has = |prefix: &str| heard.iter().any(|e| e.starts_with(prefix));
        let seen = Seen {
            call: has("eavesdropped method_call com.example.Test.Echo "),
            reply: has("eavesdropped method_return "),
            error: has("eavesdropped error com.example.Error.Failed "),
            signal: has("signal com.example.Signal.Sig "),
        };
        let known = heard
            .iter()
            .filter(|e| {
                e.starts_with("eavesdropped method_call com.example.Test.Fail ")
                    || e.starts_with("eavesdropped method_call com.example.Test.Echo ")
                    || e.starts_with("eavesdropped method_return ")
                    || e.starts_with("eavesdropped error com.example.Error.Failed ")
                    || e.starts_with("signal com.example.Signal.Sig ")
            })
            .count();
        assert_eq!(known, heard.len(), "overheard something else: {heard:#?}");
        // The Fail call goes with the Echo call.
        assert_eq!(
            seen.call,
            has("eavesdropped method_call com.example.Test.Fail "),
            "{heard:#?}"
        );
        seen
    }
}

const NOTHING: Seen = Seen {
    call: false,
    reply: false,
    error: false,
    signal: false,
};
const ALL: Seen = Seen {
    call: true,
    reply: true,
    error: true,
    signal: true,
};

/// Each configuration (after the harness's allow-everything policy) and
/// what root's eavesdropping rule gets of A's and B's messages.
#[test]
fn what_an_eavesdropper_gets_is_the_policys_decision() {
    if skip::unless(can_change_user(), NEEDS_ROOT) {
        return;
    }
    let session_and = |rules: &str| default_policy(&format!("{SESSION}{rules}"));
    let rows: Vec<(&str, String, Seen)> = vec![
        ("no eavesdrop rule", String::new(), NOTHING),
        (
            "receive side only: an eavesdropped reply is unrequested, and B's send rules lack eavesdrop",
            default_policy(r#"<allow eavesdrop="true"/>"#),
            Seen {
                call: true,
                signal: true,
                ..NOTHING
            },
        ),
        ("session.conf", default_policy(SESSION), ALL),
        (
            "send side only",
            default_policy(r#"<allow send_destination="*" eavesdrop="true"/>"#),
            NOTHING,
        ),
        // dbus-daemon's policy optimizer: a rule without type, path,
        // interface, member, error or name drops the earlier rules of its
        // side, whatever its eavesdrop attribute, session.conf's eavesdrop
        // rules here.
        (
            "a plain allow receive rule after session.conf's",
            session_and(r#"<allow receive_sender="*"/>"#),
            NOTHING,
        ),
        (
            "a plain allow send rule after session.conf's",
            session_and(r#"<allow send_destination="*"/>"#),
            Seen {
                call: true,
                signal: true,
                ..NOTHING
            },
        ),
        (
            "deny receive_interface eavesdrop=true: replies have no interface",
            session_and(r#"<deny receive_interface="com.example.Test" eavesdrop="true"/>"#),
            Seen {
                signal: true,
                ..NOTHING
            },
        ),
        (
            "send_destination is matched against the eavesdropper's names",
            session_and(
                r#"<deny send_interface="com.example.Test"/>
                <allow send_interface="com.example.Test" send_destination="com.example.Service"/>"#,
            ),
            Seen {
                signal: true,
                ..NOTHING
            },
        ),
        (
            "eavesdrop rules in root's own context",
            format!(r#"<policy user="root">{SESSION}</policy>"#),
            Seen {
                call: true,
                signal: true,
                ..NOTHING
            },
        ),
        (
            "the replier's context lets its replies go to eavesdroppers",
            format!(
                r#"{}<policy user="daemon"><allow send_destination="*" eavesdrop="true"/></policy>"#,
                default_policy(r#"<allow eavesdrop="true"/>"#)
            ),
            ALL,
        ),
        (
            "deny receive_sender eavesdrop=true",
            session_and(r#"<deny receive_sender="com.example.Caller" eavesdrop="true"/>"#),
            Seen {
                reply: true,
                error: true,
                ..NOTHING
            },
        ),
        (
            "a deny of unrequested replies hits eavesdropped ones",
            session_and(r#"<deny send_type="method_return" send_requested_reply="false"/>"#),
            Seen {
                reply: false,
                ..ALL
            },
        ),
        (
            "a plain receive deny in root's context",
            format!(
                r#"{}<policy user="root"><deny receive_interface="com.example.Test"/></policy>"#,
                default_policy(SESSION)
            ),
            Seen {
                signal: true,
                ..NOTHING
            },
        ),
        (
            "an eavesdrop allow for method calls only",
            default_policy(
                r#"<allow send_destination="*" eavesdrop="true"/>
                <allow receive_type="method_call" eavesdrop="true"/>"#,
            ),
            Seen {
                call: true,
                ..NOTHING
            },
        ),
        (
            "send_requested_reply=false lets replies go to eavesdroppers too",
            default_policy(
                r#"<allow eavesdrop="true"/>
                <allow send_type="method_return" send_requested_reply="false"/>"#,
            ),
            Seen {
                error: false,
                ..ALL
            },
        ),
        (
            "the mandatory context comes last",
            format!(
                r#"<policy context="mandatory"><deny eavesdrop="true" receive_type="error"/></policy>{}"#,
                default_policy(SESSION)
            ),
            Seen {
                error: false,
                ..ALL
            },
        ),
    ];
    let mut wrong = Vec::new();
    for (what, policies, expected) in &rows {
        let bus = bus_with(policies);
        let seen = Scene::new(&bus).run();
        if seen != *expected {
            wrong.push(format!("{what}: expected {expected:?}, got {seen:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
