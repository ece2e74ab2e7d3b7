//! Broadcast signals to and from the app: --talk, --see, --broadcast rules
//! (member, path subtree, name prefix), unicast signals, and signals the
//! app emits.

use super::{add_match, request, service_owning, signal, Case, IFACE, OBJ};
use crate::sandbox::harness::s;
use crate::sandbox::Sandbox;

const SVC: &str = "org.example.Service";
const ALL_SIGNALS: &str = "type='signal'";

/// `svc` owns SVC, the app connects and matches every signal.
fn listening(sb: &mut Sandbox) {
    service_owning(sb, "svc", &[SVC]);
    sb.app("app");
    add_match(sb, "app", ALL_SIGNALS);
}

/// A --broadcast rule case: `svc` emits each of `signals` (path,
/// interface, member).
fn rule_case(name: &str, rule: &str, signals: &'static [(&str, &str, &str)]) -> Case {
    let option = format!("--broadcast={SVC}={rule}");
    Case::new(
        format!("broadcast-rule/{name}"),
        &[option.as_str()],
        move |sb| {
            listening(sb);
            for (path, interface, member) in signals {
                sb.send("svc", signal(path, interface, member).body(vec![s("x")]));
            }
        },
    )
}

pub fn cases() -> Vec<Case> {
    vec![
        Case::new(
            "broadcast/talk-name",
            &["--talk=org.example.Service"],
            |sb| {
                listening(sb);
                sb.send("svc", signal(OBJ, IFACE, "Changed").body(vec![s("v")]));
            },
        ),
        Case::new("broadcast/see-name", &["--see=org.example.Service"], |sb| {
            listening(sb);
            sb.send("svc", signal(OBJ, IFACE, "Changed"));
        }),
        Case::new("broadcast/no-rule", &[], |sb| {
            listening(sb);
            sb.send("svc", signal(OBJ, IFACE, "Changed"));
        }),
        Case::new(
            "broadcast/without-match-rule",
            &["--talk=org.example.Service"],
            |sb| {
                service_owning(sb, "svc", &[SVC]);
                sb.app("app");
                sb.send("svc", signal(OBJ, IFACE, "Changed"));
            },
        ),
        Case::new(
            "broadcast/narrow-match-rule",
            &["--talk=org.example.Service"],
            |sb| {
                service_owning(sb, "svc", &[SVC]);
                sb.app("app");
                add_match(sb, "app", "type='signal',member='Wanted'");
                sb.send("svc", signal(OBJ, IFACE, "Wanted"));
                sb.send("svc", signal(OBJ, IFACE, "Unwanted"));
            },
        ),
        Case::new(
            "broadcast/sender-gains-name-later",
            &["--talk=org.example.Service"],
            |sb| {
                sb.service("svc");
                sb.app("app");
                add_match(sb, "app", ALL_SIGNALS);
                sb.send("svc", signal(OBJ, IFACE, "Before"));
                request(sb, "svc", SVC, 0);
                sb.send("svc", signal(OBJ, IFACE, "After"));
            },
        ),
        Case::new("broadcast/talk-prefix", &["--talk=org.example.*"], |sb| {
            service_owning(sb, "svc", &["org.example.A.B"]);
            service_owning(sb, "svc2", &["org.other.C"]);
            sb.app("app");
            add_match(sb, "app", ALL_SIGNALS);
            sb.send("svc", signal(OBJ, IFACE, "FromPrefix"));
            sb.send("svc2", signal(OBJ, IFACE, "FromOther"));
        }),
        Case::new(
            "broadcast/prefix-owner-acquired-later",
            &["--talk=org.example.*"],
            |sb| {
                sb.service("svc");
                sb.app("app");
                add_match(sb, "app", ALL_SIGNALS);
                request(sb, "svc", "org.example.Late", 0);
                sb.send("svc", signal(OBJ, IFACE, "AfterName"));
            },
        ),
        Case::new(
            "broadcast/after-the-name-is-released",
            &["--talk=org.example.Service"],
            |sb| {
                listening(sb);
                super::ask(sb, "svc", "ReleaseName", SVC);
                sb.send("svc", signal(OBJ, IFACE, "AfterRelease"));
            },
        ),
        Case::new("broadcast/unicast-signal-to-app", &[], |sb| {
            sb.service("svc");
            sb.app("app");
            let app = sb.unique_name("app");
            sb.send(
                "svc",
                signal(OBJ, IFACE, "ForYou").destination(app.as_str()),
            );
            sb.bus("app", "ListNames", vec![]);
        }),
        Case::new("broadcast/app-emits", &[], |sb| {
            sb.service("svc");
            add_match(sb, "svc", "type='signal',interface='org.example.Iface'");
            sb.app("app");
            sb.send("app", signal(OBJ, IFACE, "FromApp").body(vec![s("hi")]));
        }),
        Case::new(
            "broadcast/two-apps",
            &["--talk=org.example.Service"],
            |sb| {
                listening(sb);
                sb.app("app2");
                add_match(sb, "app2", ALL_SIGNALS);
                // Neither app may see the other (no rule names them).
                sb.send("app", signal(OBJ, IFACE, "FromApp"));
                sb.send("svc", signal(OBJ, IFACE, "FromService"));
            },
        ),
        rule_case(
            "member",
            "org.example.Iface.Changed",
            &[
                (OBJ, IFACE, "Changed"),
                (OBJ, IFACE, "Other"),
                (OBJ, "org.example.Else", "Changed"),
            ],
        ),
        rule_case(
            "path-subtree",
            "*@/org/example/*",
            &[
                ("/org/example", IFACE, "A"),
                ("/org/example/x/y", IFACE, "B"),
                ("/org/examplefoo", IFACE, "C"),
            ],
        ),
        rule_case(
            "interface-at-path",
            "org.example.Iface.*@/org/example/Obj",
            &[
                (OBJ, IFACE, "A"),
                ("/org/example/Other", IFACE, "B"),
                (OBJ, "org.example.Else", "C"),
            ],
        ),
        Case::new(
            "broadcast-rule/name-prefix",
            &["--broadcast=org.example.*=*@/org/example/*"],
            |sb| {
                service_owning(sb, "svc", &["org.example.A"]);
                sb.app("app");
                add_match(sb, "app", ALL_SIGNALS);
                sb.send("svc", signal(OBJ, IFACE, "Allowed"));
                sb.send("svc", signal("/elsewhere", IFACE, "Filtered"));
            },
        ),
        Case::new(
            "broadcast-rule/call-rule-allows-no-broadcast",
            &["--call=org.example.Service=*"],
            |sb| {
                listening(sb);
                sb.send("svc", signal(OBJ, IFACE, "Changed"));
            },
        ),
        Case::new(
            "broadcast-rule/allows-no-call",
            &["--broadcast=org.example.Service=*"],
            |sb| {
                listening(sb);
                sb.send("svc", signal(OBJ, IFACE, "Changed"));
                sb.send("app", super::call_to(SVC, "M"));
                sb.answer("svc", vec![]);
            },
        ),
    ]
}
