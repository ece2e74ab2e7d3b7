//! The `<policy>` configuration enforced on real clients: every send,
//! receive, own and connect attribute, each as a deny rule (after an
//! allow-everything policy) and as an allow rule (after a deny of its whole
//! class), seen through dbus-python peers and dbus-send; dbus-daemon's
//! precedence (mandatory after default, user and group policies, the last
//! match wins); and a ReloadConfig that changes the policy while messages
//! flow. The distribution's own system.conf is in `system_bus.rs`.
//!
//! A refused method call comes back as AccessDenied; a refused reply never
//! comes (dbus-daemon does not answer for it either), so the caller gives
//! up after its own time-out with NoReply, having seen the service get the
//! call; a refused signal is simply absent, which the tests see by sending an
//! allowed message after it and finding only that one (the bus keeps each
//! sender's order).

use quickbus_e2e::{can_change_user, skip, write_config_with, Bus, Listen, Peer};

/// Why some of these tests cannot run without root.
const NEEDS_ROOT: &str = "needs root to run clients as other users";
const ACCESS_DENIED: &str = "org.freedesktop.DBus.Error.AccessDenied";
const NO_REPLY: &str = "org.freedesktop.DBus.Error.NoReply";

/// `nobody` and `nogroup` on Debian.
const NOBODY: u32 = 65534;
const NOGROUP: u32 = 65534;
/// `daemon`, another user the database knows.
const DAEMON: u32 = 1;
/// A uid and gid no user database entry names.
const STRANGER: u32 = 4321;

/// The harness's allow-everything policy followed by `rules` in a default
/// policy of their own (later, so they win).
fn bus_with(rules: &str) -> Bus {
    let extra = format!(r#"<policy context="default">{rules}</policy>"#);
    Bus::start_configured(|dir| write_config_with(dir, Listen::UnixPath, &extra))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Reached the service (whatever it answered).
    Passed,
    /// The bus refused the call: AccessDenied.
    Denied,
    /// The service got the call, the bus dropped its answer: the caller
    /// only got NoReply.
    ReplyRefused,
}

fn outcome(result: &str) -> Outcome {
    if result.starts_with(&format!("error {ACCESS_DENIED} ")) {
        Outcome::Denied
    } else if result.starts_with(&format!("error {NO_REPLY} ")) {
        Outcome::ReplyRefused
    } else {
        Outcome::Passed
    }
}

/// Who calls and who answers.
#[derive(Clone, Copy, Debug)]
enum Who {
    /// The client; owns com.example.Caller.
    A,
    /// A service owning com.example.Service.Sub.
    B,
    /// A service owning com.example.ServiceX; also a second caller.
    C,
}

/// One method call of the matrix.
#[derive(Clone, Copy, Debug)]
struct Call {
    from: Who,
    to: Who,
    path: &'static str,
    /// `Test.Echo`, `Test.Record`, `Test.Fail` or `Peer.Ping`.
    method: &'static str,
}

const fn call(from: Who, to: Who, path: &'static str, method: &'static str) -> Call {
    Call {
        from,
        to,
        path,
        method,
    }
}

/// Three peers: A the client, B and C services serving /obj and /other.
struct Cast {
    a: Peer,
    b: Peer,
    c: Peer,
}

impl Cast {
    fn new(bus: &Bus) -> Cast {
        let mut a = bus.peer();
        let mut b = bus.peer();
        let mut c = bus.peer();
        assert_eq!(a.request_name("com.example.Caller", 0), 1);
        for (peer, name) in [
            (&mut b, "com.example.Service.Sub"),
            (&mut c, "com.example.ServiceX"),
        ] {
            assert_eq!(peer.request_name(name, 0), 1);
            peer.serve("/obj");
            peer.serve("/other");
        }
        Cast { a, b, c }
    }

    fn peer(&mut self, who: Who) -> &mut Peer {
        match who {
            Who::A => &mut self.a,
            Who::B => &mut self.b,
            Who::C => &mut self.c,
        }
    }

    fn run(&mut self, call: Call) -> Outcome {
        let dest = match call.to {
            Who::A => "com.example.Caller",
            Who::B => "com.example.Service.Sub",
            Who::C => "com.example.ServiceX",
        };
        let (iface, member, args) = match call.method {
            "Test.Echo" => ("com.example.Test", "Echo", r#"s ["x"]"#),
            "Test.Record" => ("com.example.Test", "Record", r#"s ["x"]"#),
            "Test.Fail" => ("com.example.Test", "Fail", "- []"),
            "Peer.Ping" => ("org.freedesktop.DBus.Peer", "Ping", "- []"),
            other => panic!("no such test method {other}"),
        };
        let line = format!("call {dest} {} {iface} {member} {args}", call.path);
        let result = self.peer(call.from).command(&line);
        let seen = outcome(&result);
        if seen == Outcome::ReplyRefused {
            let called = format!("called {member} ");
            self.peer(call.to).wait_event(|e| e.starts_with(&called));
        }
        seen
    }
}

/// One attribute: a rule, a call it matches and one it does not.
struct Attribute {
    rule: &'static str,
    matching: Call,
    other: Call,
}

use Who::{A, B, C};

const SEND_ATTRIBUTES: &[Attribute] = &[
    Attribute {
        rule: r#"send_destination="com.example.Service.Sub""#,
        matching: call(A, B, "/obj", "Test.Echo"),
        other: call(A, C, "/obj", "Test.Echo"),
    },
    Attribute {
        // Covers com.example.Service.Sub, not com.example.ServiceX.
        rule: r#"send_destination_prefix="com.example.Service""#,
        matching: call(A, B, "/obj", "Test.Echo"),
        other: call(A, C, "/obj", "Test.Echo"),
    },
    Attribute {
        rule: r#"send_interface="com.example.Test""#,
        matching: call(A, B, "/obj", "Test.Echo"),
        other: call(A, B, "/obj", "Peer.Ping"),
    },
    Attribute {
        rule: r#"send_interface="com.example.Test" send_member="Echo""#,
        matching: call(A, B, "/obj", "Test.Echo"),
        other: call(A, B, "/obj", "Test.Record"),
    },
    Attribute {
        rule: r#"send_path="/obj""#,
        matching: call(A, B, "/obj", "Test.Echo"),
        other: call(A, B, "/other", "Test.Echo"),
    },
    Attribute {
        rule: r#"send_type="method_call" send_interface="com.example.Test""#,
        matching: call(A, B, "/obj", "Test.Echo"),
        other: call(A, B, "/obj", "Peer.Ping"),
    },
];

const RECEIVE_ATTRIBUTES: &[Attribute] = &[
    Attribute {
        // The receiver's rule names the sender by a name it owns.
        rule: r#"receive_sender="com.example.Caller""#,
        matching: call(A, B, "/obj", "Test.Echo"),
        other: call(C, B, "/obj", "Test.Echo"),
    },
    Attribute {
        rule: r#"receive_interface="com.example.Test""#,
        matching: call(A, B, "/obj", "Test.Echo"),
        other: call(A, B, "/obj", "Peer.Ping"),
    },
    Attribute {
        rule: r#"receive_interface="com.example.Test" receive_member="Echo""#,
        matching: call(A, B, "/obj", "Test.Echo"),
        other: call(A, B, "/obj", "Test.Record"),
    },
    Attribute {
        rule: r#"receive_path="/obj""#,
        matching: call(A, B, "/obj", "Test.Echo"),
        other: call(A, B, "/other", "Test.Echo"),
    },
    Attribute {
        rule: r#"receive_type="method_call" receive_interface="com.example.Test""#,
        matching: call(A, B, "/obj", "Test.Echo"),
        other: call(A, B, "/obj", "Peer.Ping"),
    },
];

/// Every method call of a class refused, except calls to the bus: the
/// background an allow rule has to punch a hole in.
const DENY_ALL_SENDS: &str =
    r#"<deny send_type="method_call"/><allow send_destination="org.freedesktop.DBus"/>"#;
const DENY_ALL_RECEIVES: &str = r#"<deny receive_type="method_call"/>"#;

/// Each attribute as `<deny>` (only its call refused) and as `<allow>`
/// after a deny of every call (only its call let through).
fn check_matrix(attributes: &[Attribute], deny_all: &str) {
    for attribute in attributes {
        let bus = bus_with(&format!("<deny {}/>", attribute.rule));
        let mut cast = Cast::new(&bus);
        let seen = (cast.run(attribute.matching), cast.run(attribute.other));
        assert_eq!(
            seen,
            (Outcome::Denied, Outcome::Passed),
            "<deny {}/>: {:?} then {:?}",
            attribute.rule,
            attribute.matching,
            attribute.other
        );
        drop(cast);
        drop(bus);

        let bus = bus_with(&format!("{deny_all}<allow {}/>", attribute.rule));
        let mut cast = Cast::new(&bus);
        let seen = (cast.run(attribute.matching), cast.run(attribute.other));
        assert_eq!(
            seen,
            (Outcome::Passed, Outcome::Denied),
            "<allow {}/> after {deny_all}: {:?} then {:?}",
            attribute.rule,
            attribute.matching,
            attribute.other
        );
    }
}

#[test]
fn send_attributes_allow_and_deny() {
    check_matrix(SEND_ATTRIBUTES, DENY_ALL_SENDS);
}

#[test]
fn receive_attributes_allow_and_deny() {
    check_matrix(RECEIVE_ATTRIBUTES, DENY_ALL_RECEIVES);
}

/// The requested_reply attributes and errors: a deny rule only touches a
/// requested reply when it says `*_requested_reply="true"`; the refused
/// reply leaves the caller with the bus's NoReply.
#[test]
fn replies_and_errors_refused_only_by_requested_reply_rules() {
    let fail = call(A, B, "/obj", "Test.Fail");
    let echo = call(A, B, "/obj", "Test.Echo");
    let cases: &[(&str, Outcome, Outcome)] = &[
        // Without requested_reply="true" a deny leaves requested replies alone.
        (
            r#"<deny send_type="error" send_error="com.example.Error.Failed"/>"#,
            Outcome::Passed,
            Outcome::Passed,
        ),
        (
            r#"<deny send_type="method_return"/>"#,
            Outcome::Passed,
            Outcome::Passed,
        ),
        (
            r#"<deny send_type="error" send_error="com.example.Error.Failed" send_requested_reply="true"/>"#,
            Outcome::ReplyRefused,
            Outcome::Passed,
        ),
        (
            r#"<deny send_type="method_return" send_requested_reply="true"/>"#,
            Outcome::Passed,
            Outcome::ReplyRefused,
        ),
        (
            r#"<deny receive_type="error" receive_error="com.example.Error.Failed" receive_requested_reply="true"/>"#,
            Outcome::ReplyRefused,
            Outcome::Passed,
        ),
        (
            // (The sender keeps the bus's own replies deliverable.)
            r#"<deny receive_sender="com.example.Service.Sub" receive_type="method_return" receive_requested_reply="true"/>"#,
            Outcome::Passed,
            Outcome::ReplyRefused,
        ),
        (
            r#"<deny receive_type="error"/>"#,
            Outcome::Passed,
            Outcome::Passed,
        ),
    ];
    for &(rules, fail_outcome, echo_outcome) in cases {
        let bus = bus_with(rules);
        let mut cast = Cast::new(&bus);
        // Only bounds the wait for a reply that must not come; a reply
        // that does come arrives long before.
        assert_eq!(cast.a.command("timeout 5"), "timeout ok");
        let seen = (cast.run(fail), cast.run(echo));
        assert_eq!(seen, (fail_outcome, echo_outcome), "{rules}: Fail, Echo");
    }
}

/// Emits a signal from `from`; `dest` None makes it a broadcast.
fn emit(from: &mut Peer, iface: &str, member: &str, dest: Option<&str>) {
    let dest = dest.map_or(String::new(), |d| format!(r#","dest":"{d}""#));
    from.emit(&format!(
        r#"{{"path":"/sig","iface":"{iface}","member":"{member}"{dest}}}"#
    ));
}

/// Sends A's probe signals to B, then an allowed marker; returns the
/// members of B's signals from com.example.Sig that came before it.
fn signals_seen(cast: &mut Cast, probes: &[(&str, bool)]) -> Vec<String> {
    let b_name = cast.b.unique_name().to_owned();
    cast.b
        .add_match("type='signal',interface='com.example.Sig'");
    cast.b
        .add_match("type='signal',interface='com.example.Marker'");
    for &(member, broadcast) in probes {
        let dest = (!broadcast).then_some(b_name.as_str());
        emit(&mut cast.a, "com.example.Sig", member, dest);
    }
    emit(&mut cast.a, "com.example.Marker", "Done", Some(&b_name));
    cast.b
        .wait_event(|e| e.starts_with("signal com.example.Marker.Done "));
    cast.b
        .events()
        .iter()
        .filter_map(|e| e.strip_prefix("signal com.example.Sig."))
        .map(|e| e.split(' ').next().unwrap_or_default().to_owned())
        .collect()
}

/// send_type, receive_type and send_broadcast on signals.
#[test]
fn signal_rules_by_type_and_broadcast() {
    let probes = [("Unicast", false), ("Broadcast", true)];
    let cases: &[(&str, &[&str])] = &[
        ("", &["Unicast", "Broadcast"]),
        (
            r#"<deny send_type="signal" send_interface="com.example.Sig"/>"#,
            &[],
        ),
        (
            r#"<deny receive_type="signal" receive_interface="com.example.Sig"/>"#,
            &[],
        ),
        (
            r#"<deny send_type="signal" send_interface="com.example.Sig"/>
               <allow send_interface="com.example.Sig" send_member="Unicast"/>"#,
            &["Unicast"],
        ),
        (
            r#"<deny receive_type="signal" receive_interface="com.example.Sig"/>
               <allow receive_interface="com.example.Sig" receive_member="Broadcast"/>"#,
            &["Broadcast"],
        ),
        (
            r#"<deny send_interface="com.example.Sig" send_broadcast="true"/>"#,
            &["Unicast"],
        ),
        (
            r#"<deny send_interface="com.example.Sig" send_broadcast="false"/>"#,
            &["Broadcast"],
        ),
    ];
    for &(rules, expected) in cases {
        let bus = bus_with(rules);
        let mut cast = Cast::new(&bus);
        assert_eq!(signals_seen(&mut cast, &probes), expected, "{rules}");
    }
}

/// What an eavesdropper (B) sees of a unicast signal from A to C, given
/// receive rules with and without `eavesdrop="true"`.
#[test]
fn eavesdropping_needs_an_eavesdrop_rule() {
    let cases: &[(&str, bool)] = &[
        // The harness's allow-all receive rule has no eavesdrop="true".
        ("", false),
        (r#"<allow eavesdrop="true"/>"#, true),
        (
            r#"<allow eavesdrop="true"/><deny eavesdrop="true" receive_interface="com.example.Sig"/>"#,
            false,
        ),
        (
            r#"<allow eavesdrop="true"/><deny eavesdrop="true" receive_interface="com.example.Other"/>"#,
            true,
        ),
    ];
    for &(rules, overheard) in cases {
        let bus = bus_with(rules);
        let mut cast = Cast::new(&bus);
        let c_name = cast.c.unique_name().to_owned();
        let b_name = cast.b.unique_name().to_owned();
        cast.b
            .add_match("eavesdrop=true,type='signal',interface='com.example.Sig'");
        cast.b
            .add_match("type='signal',interface='com.example.Marker'");
        emit(&mut cast.a, "com.example.Sig", "Private", Some(&c_name));
        emit(&mut cast.a, "com.example.Marker", "Done", Some(&b_name));
        cast.b
            .wait_event(|e| e.starts_with("signal com.example.Marker.Done "));
        let seen = cast
            .b
            .events()
            .iter()
            .any(|e| e.starts_with("signal com.example.Sig.Private "));
        assert_eq!(seen, overheard, "{rules}: {:?}", cast.b.events());
    }
}

/// RequestName's answer: the reply code, or the error name.
fn request(peer: &mut Peer, name: &str) -> String {
    let reply = peer.bus_call("RequestName", "su", &format!(r#"["{name}", 0]"#));
    match reply.strip_prefix("bus RequestName ") {
        Some(code) => code.to_owned(),
        None => reply.split(' ').nth(1).unwrap_or_default().to_owned(),
    }
}

#[test]
fn own_and_own_prefix_allow_and_deny() {
    let cases: &[(&str, &[(&str, &str)])] = &[
        (
            r#"<deny own="com.example.Taken"/>"#,
            &[
                ("com.example.Taken", ACCESS_DENIED),
                ("com.example.Free", "1"),
            ],
        ),
        (
            r#"<deny own="*"/><allow own="com.example.Mine"/>"#,
            &[
                ("com.example.Mine", "1"),
                ("com.example.Yours", ACCESS_DENIED),
            ],
        ),
        (
            r#"<deny own_prefix="com.example.Private"/>"#,
            &[
                ("com.example.Private", ACCESS_DENIED),
                ("com.example.Private.Deep", ACCESS_DENIED),
                ("com.example.PrivateNot", "1"),
            ],
        ),
        (
            r#"<deny own="*"/><allow own_prefix="com.example.Mine"/>"#,
            &[
                ("com.example.Mine.Too", "1"),
                ("com.example.MineNot", ACCESS_DENIED),
            ],
        ),
    ];
    for &(rules, names) in cases {
        let bus = bus_with(rules);
        let mut peer = bus.peer();
        for &(name, expected) in names {
            assert_eq!(request(&mut peer, name), expected, "{rules}: {name}");
        }
    }
}

/// Whether a dbus-send running as `uid`:`gid` gets through Hello.
fn connects(bus: &Bus, uid: u32, gid: u32) -> bool {
    let finished = quickbus_e2e::run_bounded(
        bus.client_as("dbus-send", uid, gid)
            .args(["--session", "--print-reply", "--dest=org.freedesktop.DBus"])
            .args(["/org/freedesktop/DBus", "org.freedesktop.DBus.GetId"]),
    );
    finished.status.success()
}

/// Connect rules: `user` and `group` in the default policy. Groups are the
/// user database's groups of the connection's uid (dbus-daemon's rule),
/// so a uid no database knows is in no group whatever its socket gid.
#[test]
fn user_and_group_connect_rules() {
    if skip::unless(can_change_user(), NEEDS_ROOT) {
        return;
    }
    /// uid, gid, whether it may connect.
    type Client = (u32, u32, bool);
    let cases: &[(&str, &[Client])] = &[
        // A uid the user database does not know has no groups to check,
        // and dbus-daemon refuses it whatever the rules.
        ("", &[(STRANGER, STRANGER, false), (DAEMON, DAEMON, true)]),
        (
            r#"<deny user="nobody"/>"#,
            &[(NOBODY, NOGROUP, false), (DAEMON, DAEMON, true)],
        ),
        (
            r#"<deny user="*"/><allow user="nobody"/>"#,
            &[(NOBODY, NOGROUP, true), (DAEMON, DAEMON, false)],
        ),
        // The socket's gid does not count: nobody is in nogroup, daemon not.
        (
            r#"<deny group="nogroup"/>"#,
            &[(NOBODY, DAEMON, false), (DAEMON, NOGROUP, true)],
        ),
        (
            r#"<deny user="*"/><allow group="nogroup"/>"#,
            &[(NOBODY, DAEMON, true), (DAEMON, NOGROUP, false)],
        ),
    ];
    for &(rules, clients) in cases {
        let bus = bus_with(rules);
        for &(uid, gid, expected) in clients {
            assert_eq!(connects(&bus, uid, gid), expected, "{rules}: {uid}:{gid}");
        }
    }
}

/// The contexts' order: mandatory rules come after every other policy
/// whatever their place in the file; user and group policies after the
/// default one; at_console="true" applies to nobody.
#[test]
fn policy_contexts_take_precedence_over_document_order() {
    if skip::unless(can_change_user(), NEEDS_ROOT) {
        return;
    }
    let rules = r#"
      <policy context="mandatory"><deny own="com.example.Mandatory"/></policy>
      <policy user="nobody"><allow own="com.example.Mandatory"/><deny own="com.example.ByUser"/></policy>
      <policy group="nogroup"><deny own="com.example.ByGroup"/><deny own="com.example.GroupThenUser"/></policy>
      <policy user="nobody"><allow own="com.example.GroupThenUser"/></policy>
      <policy at_console="true"><deny own="com.example.Console"/></policy>
      <policy at_console="false"><deny own="com.example.NotConsole"/></policy>
      <policy context="default"><allow own="com.example.Mandatory"/><allow own="com.example.ByUser"/>
        <allow own="com.example.NotConsole"/></policy>"#;
    let bus = Bus::start_configured(|dir| write_config_with(dir, Listen::UnixPath, rules));
    let mut nobody = bus.peer_as(NOBODY, NOGROUP);
    let mut root = bus.peer();
    let expectations: &[(&str, &str, &str)] = &[
        ("com.example.Mandatory", ACCESS_DENIED, ACCESS_DENIED),
        ("com.example.ByUser", ACCESS_DENIED, "1"),
        ("com.example.ByGroup", ACCESS_DENIED, "1"),
        ("com.example.GroupThenUser", "1", "1"),
        ("com.example.Console", "1", "1"),
        ("com.example.NotConsole", ACCESS_DENIED, ACCESS_DENIED),
    ];
    for &(name, for_nobody, for_root) in expectations {
        for (who, peer, expected) in [
            ("nobody", &mut nobody, for_nobody),
            ("root", &mut root, for_root),
        ] {
            let answer = request(peer, name);
            if answer == "1" {
                peer.release_name(name);
            }
            assert_eq!(answer, expected, "{who}: {name}");
        }
    }
}

/// The AccessDenied text says which check refused and who was involved,
/// in dbus-daemon's words.
#[test]
fn access_denied_names_the_rule_and_the_parties() {
    let bus = bus_with(r#"<deny send_interface="com.example.Test" send_member="Echo"/>"#);
    let mut cast = Cast::new(&bus);
    let result = cast
        .a
        .command(r#"call com.example.Service.Sub /obj com.example.Test Echo s ["x"]"#);
    let text = result
        .strip_prefix(&format!("error {ACCESS_DENIED} "))
        .unwrap_or_else(|| panic!("not refused: {result}"));
    assert!(
        text.starts_with("Rejected send message, 2 matched rules; "),
        "{text}"
    );
    for part in [
        r#"type="method_call""#,
        &format!(
            r#"sender="{}" (uid={} pid={} comm="{}"#,
            cast.a.unique_name(),
            rustix::process::geteuid().as_raw(),
            cast.a.pid(),
            quickbus_e2e::python_path().display()
        ),
        r#"interface="com.example.Test" member="Echo""#,
        r#"destination="com.example.Service.Sub""#,
    ] {
        assert!(text.contains(part), "{part} missing from {text}");
    }
}

/// ReloadConfig while a stream of signals flows from A to B: every signal
/// arrives, in order, both connections stay, and the new policy rules
/// from then on.
#[test]
fn reload_under_traffic_keeps_connections_and_messages() {
    const COUNT: u32 = 2000;
    let dir = quickbus_e2e::TempDir::new();
    let write = |rules: &str| write_config_with(dir.path(), Listen::UnixPath, rules);
    let config = write("");
    let bus = Bus::start_args(
        quickbus_e2e::TempDir::new(),
        &[format!("--config-file={}", config.display())],
    );
    let mut a = bus.peer();
    let mut b = bus.peer();
    b.add_match("type='signal',interface='com.example.Flow'");
    assert_eq!(request(&mut a, "com.example.Later"), "1");

    write(r#"<policy context="default"><deny own="com.example.Later"/></policy>"#);
    a.send(&format!(
        r#"emit_numbered {COUNT} {{"path":"/flow","iface":"com.example.Flow","member":"N"}}"#
    ));
    bus.reload_config();
    assert_eq!(a.result(), format!("emit_numbered sent {COUNT}"));
    for n in 0..COUNT {
        let wanted = format!(
            "signal com.example.Flow.N path=/flow sender={} dest=- args=[{n}]",
            a.unique_name()
        );
        b.wait_event(|e| e == wanted);
    }
    let numbers: Vec<&String> = b
        .events()
        .iter()
        .filter(|e| e.starts_with("signal com.example.Flow.N "))
        .collect();
    assert_eq!(numbers.len(), COUNT as usize, "duplicates or strays");

    // Both still connected; the new policy in force for them and for new
    // connections, the name A already owns kept (rules apply to requests).
    assert_eq!(a.command("ping"), "pong");
    assert_eq!(b.command("ping"), "pong");
    assert_eq!(request(&mut b, "com.example.Later"), ACCESS_DENIED);
    let mut late = bus.peer();
    assert_eq!(request(&mut late, "com.example.Later"), ACCESS_DENIED);
    assert_eq!(request(&mut late, "com.example.Other"), "1");
}

/// An allow rule with `log="true"` lets its messages through and logs each
/// as dbus-daemon does ("Would reject message"): a broadcast once per
/// receiver, each line naming that receiver (the rule keeps the bus
/// asking the sender's rules per receiver).
#[test]
fn an_allow_rule_with_log_logs_a_broadcast_once_per_receiver() {
    let bus =
        bus_with(r#"<allow send_interface="com.example.Sig" send_member="Logged" log="true"/>"#);
    let mut cast = Cast::new(&bus);
    for receiver in [&mut cast.b, &mut cast.c] {
        receiver.add_match("type='signal',interface='com.example.Sig'");
    }
    emit(&mut cast.a, "com.example.Sig", "Logged", None);
    for receiver in [&mut cast.b, &mut cast.c] {
        receiver.wait_event(|e| e.starts_with("signal com.example.Sig.Logged "));
    }
    // The log is written as the bus goes on: read it until both lines
    // are there (or the time-out shows what was).
    let would_lines = |log: &str| -> Vec<String> {
        log.lines()
            .filter(|l| l.contains("Would reject") && l.contains("member=\"Logged\""))
            .map(str::to_owned)
            .collect()
    };
    let deadline = std::time::Instant::now() + quickbus_e2e::TIMEOUT;
    let mut would = would_lines(&bus.log());
    while would.len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        would = would_lines(&bus.log());
    }
    assert_eq!(would.len(), 2, "{}", bus.log());
    // As dbus-daemon writes it: no destination reads as the bus's name,
    // and the receiver is the party named last.
    for receiver in [&cast.b, &cast.c] {
        let pid = format!(" pid={} ", receiver.pid());
        let names_it = |line: &&String| {
            line.split_once("destination=\"org.freedesktop.DBus\" (")
                .is_some_and(|(_, receiver)| receiver.contains(&pid))
        };
        assert_eq!(
            would.iter().filter(names_it).count(),
            1,
            "{pid}: {would:#?}"
        );
    }
}
