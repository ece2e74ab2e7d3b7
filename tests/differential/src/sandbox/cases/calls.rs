//! Method calls from the app: --see, --talk, --call rules (interface,
//! member, path, path subtree, name prefix), and replies, which pass only
//! for calls made.

use quickbus_client::MessageBuilder;
use quickbus_wire::flags;

use super::{call_at, call_to, service_owning, Case, IFACE, OBJ};
use crate::sandbox::harness::s;
use crate::sandbox::Sandbox;

const SVC: &str = "org.example.Service";

/// `svc` owns SVC, the app connects.
fn with_service(sb: &mut Sandbox) {
    service_owning(sb, "svc", &[SVC]);
    sb.app("app");
}

/// The app sends `call`; `svc` answers whatever arrived.
fn call_and_answer(sb: &mut Sandbox, call: MessageBuilder) {
    sb.send("app", call);
    sb.answer("svc", vec![s("ok")]);
}

/// A --call rule case: `svc` owns SVC, the app makes each of `calls`
/// (path, interface, member), `svc` answers those that arrived.
fn rule_case(name: &str, rule: &str, calls: &'static [(&str, &str, &str)]) -> Case {
    let option = format!("--call={SVC}={rule}");
    Case::new(format!("call-rule/{name}"), &[option.as_str()], move |sb| {
        with_service(sb);
        for (path, interface, member) in calls {
            call_and_answer(sb, call_at(SVC, path, interface, member));
        }
    })
}

pub fn cases() -> Vec<Case> {
    vec![
        Case::new(
            "call/talk-and-reply",
            &["--talk=org.example.Service"],
            |sb| {
                with_service(sb);
                call_and_answer(sb, call_to(SVC, "Echo").body(vec![s("hi")]));
            },
        ),
        Case::new(
            "call/talk-and-error",
            &["--talk=org.example.Service"],
            |sb| {
                with_service(sb);
                sb.send("app", call_to(SVC, "Fail"));
                sb.answer_error("svc", "org.example.Error.Failed");
            },
        ),
        Case::new("call/see-is-denied", &["--see=org.example.Service"], |sb| {
            with_service(sb);
            call_and_answer(sb, call_to(SVC, "Echo"));
        }),
        Case::new("call/no-rule-is-hidden", &[], |sb| {
            with_service(sb);
            call_and_answer(sb, call_to(SVC, "Echo"));
        }),
        Case::new("call/hidden-no-auto-start", &[], |sb| {
            with_service(sb);
            call_and_answer(sb, call_to(SVC, "Echo").flags(flags::NO_AUTO_START));
        }),
        Case::new(
            "call/unowned-talk-name",
            &["--talk=org.example.Service"],
            |sb| {
                sb.app("app");
                sb.send("app", call_to(SVC, "Echo"));
            },
        ),
        Case::new(
            "call/talk-prefix",
            &["--talk=org.example.Service.*"],
            |sb| {
                service_owning(
                    sb,
                    "svc",
                    &[
                        "org.example.Service",
                        "org.example.Service.Sub",
                        "org.example.ServiceX",
                    ],
                );
                sb.app("app");
                for name in [
                    "org.example.Service",
                    "org.example.Service.Sub",
                    "org.example.ServiceX",
                ] {
                    call_and_answer(sb, call_to(name, "Echo"));
                }
            },
        ),
        Case::new(
            "call/unique-of-talk-name",
            &["--talk=org.example.Service"],
            |sb| {
                with_service(sb);
                let svc = sb.unique_name("svc");
                call_and_answer(sb, call_to(&svc, "Echo"));
            },
        ),
        Case::new(
            "call/unique-of-name-acquired-later",
            &["--talk=org.example.Service"],
            |sb| {
                sb.service("svc");
                sb.app("app");
                let svc = sb.unique_name("svc");
                call_and_answer(sb, call_to(&svc, "Before"));
                super::request(sb, "svc", SVC, 0);
                call_and_answer(sb, call_to(&svc, "After"));
            },
        ),
        Case::new(
            "call/unique-of-prefix-name-acquired-later",
            &["--talk=org.example.Service.*"],
            |sb| {
                sb.service("svc");
                sb.app("app");
                let svc = sb.unique_name("svc");
                super::request(sb, "svc", "org.example.Service.Sub", 0);
                call_and_answer(sb, call_to(&svc, "After"));
            },
        ),
        Case::new(
            "call/name-moves-to-another-owner",
            &["--talk=org.example.Service"],
            |sb| {
                service_owning(sb, "svc", &[SVC]);
                sb.service("svc2");
                super::request(sb, "svc2", SVC, 0);
                sb.app("app");
                super::ask(sb, "svc", "ReleaseName", SVC);
                let svc2 = sb.unique_name("svc2");
                sb.send("app", call_to(SVC, "ToName"));
                sb.answer("svc2", vec![s("by name")]);
                sb.send("app", call_to(&svc2, "ToUnique"));
                sb.answer("svc2", vec![s("by unique name")]);
            },
        ),
        Case::new("call/app-calls-itself", &[], |sb| {
            sb.app("app");
            let me = sb.unique_name("app");
            sb.send("app", call_to(&me, "Myself"));
            sb.answer("app", vec![s("me")]);
        }),
        Case::new(
            "call/unique-of-see-name",
            &["--see=org.example.Service"],
            |sb| {
                with_service(sb);
                let svc = sb.unique_name("svc");
                call_and_answer(sb, call_to(&svc, "Echo"));
            },
        ),
        Case::new(
            "call/no-reply-expected",
            &["--talk=org.example.Service", "--see=org.example.Seen"],
            |sb| {
                service_owning(sb, "svc", &[SVC, "org.example.Seen"]);
                sb.app("app");
                let quiet = flags::NO_REPLY_EXPECTED;
                sb.send("app", call_to(SVC, "Talk").flags(quiet));
                sb.send("app", call_to("org.example.Seen", "See").flags(quiet));
                sb.send("app", call_to("org.example.Nobody", "None").flags(quiet));
            },
        ),
        Case::new(
            "call/unicast-signal-from-app",
            &["--talk=org.example.Service", "--see=org.example.Seen"],
            |sb| {
                service_owning(sb, "svc", &[SVC, "org.example.Seen"]);
                sb.app("app");
                for to in [SVC, "org.example.Seen"] {
                    sb.send(
                        "app",
                        MessageBuilder::signal(OBJ, IFACE, "Poke").destination(to),
                    );
                }
            },
        ),
        Case::new("call/service-calls-app", &[], |sb| {
            sb.service("svc");
            sb.app("app");
            let app = sb.unique_name("app");
            sb.send("svc", call_to(&app, "Ask").body(vec![s("?")]));
            sb.answer("app", vec![s("answer")]);
        }),
        Case::new("call/app-calls-back-its-caller", &[], |sb| {
            sb.service("svc");
            sb.app("app");
            let app = sb.unique_name("app");
            let svc = sb.unique_name("svc");
            sb.send("svc", call_to(&app, "Ask"));
            sb.answer("app", vec![]);
            // Having called the app, svc's unique name is visible (SEE),
            // not callable.
            call_and_answer(sb, call_to(&svc, "Back"));
            super::ask(sb, "app", "GetConnectionUnixUser", &svc);
        }),
        Case::new("reply/app-replies-twice", &[], |sb| {
            sb.service("svc");
            sb.app("app");
            let app = sb.unique_name("app");
            let call = sb.send("svc", call_to(&app, "Ask")).expect("sent");
            let svc = sb.unique_name("svc");
            sb.answer("app", vec![s("first")]);
            sb.send(
                "app",
                MessageBuilder::method_return(call)
                    .destination(svc.as_str())
                    .body(vec![s("second")]),
            );
        }),
        Case::new(
            "reply/service-replies-twice",
            &["--talk=org.example.Service"],
            |sb| {
                with_service(sb);
                let app = sb.unique_name("app");
                let call = sb.send("app", call_to(SVC, "Echo")).expect("sent");
                sb.answer("svc", vec![s("first")]);
                sb.send(
                    "svc",
                    MessageBuilder::method_return(call)
                        .destination(app.as_str())
                        .body(vec![s("second")]),
                );
            },
        ),
        Case::new("reply/unsolicited-to-app", &[], |sb| {
            sb.service("svc");
            sb.app("app");
            let app = sb.unique_name("app");
            sb.send(
                "svc",
                MessageBuilder::method_return(60000).destination(app.as_str()),
            );
            sb.send(
                "svc",
                MessageBuilder::error(60001, "org.example.Error.Forged").destination(app.as_str()),
            );
        }),
        Case::new(
            "reply/unsolicited-from-app",
            &["--talk=org.example.Service"],
            |sb| {
                with_service(sb);
                let svc = sb.unique_name("svc");
                sb.send(
                    "app",
                    MessageBuilder::method_return(60000).destination(svc.as_str()),
                );
                sb.send(
                    "app",
                    MessageBuilder::error(60001, "org.example.Error.Forged").destination(SVC),
                );
            },
        ),
        rule_case(
            "member",
            "org.example.Iface.Allowed",
            &[
                (OBJ, IFACE, "Allowed"),
                (OBJ, IFACE, "Other"),
                (OBJ, "org.example.Other", "Allowed"),
            ],
        ),
        rule_case(
            "interface-wildcard",
            "org.example.Iface.*",
            &[
                (OBJ, IFACE, "Any"),
                ("/elsewhere", IFACE, "Any"),
                (OBJ, "org.example.IfaceX", "Any"),
            ],
        ),
        rule_case(
            "path",
            "*@/org/example/Obj",
            &[
                (OBJ, IFACE, "A"),
                ("/org/example/Obj/child", IFACE, "A"),
                ("/org/example", "org.example.Other", "B"),
            ],
        ),
        rule_case(
            "path-subtree",
            "*@/org/example/*",
            &[
                ("/org/example", IFACE, "A"),
                ("/org/example/a/b", IFACE, "A"),
                ("/org/examplefoo", IFACE, "A"),
                ("/org", IFACE, "A"),
            ],
        ),
        rule_case(
            "member-at-path",
            "org.example.Iface.M@/org/example/Obj",
            &[
                (OBJ, IFACE, "M"),
                (OBJ, IFACE, "N"),
                ("/org/example/Other", IFACE, "M"),
            ],
        ),
        Case::new(
            "call-rule/without-interface",
            &["--call=org.example.Service=org.example.Iface.M"],
            |sb| {
                with_service(sb);
                call_and_answer(sb, MessageBuilder::method_call(OBJ, "M").destination(SVC));
            },
        ),
        Case::new(
            "call-rule/name-prefix",
            &["--call=org.example.*=org.example.Iface.M"],
            |sb| {
                service_owning(sb, "svc", &["org.example.A.B"]);
                service_owning(sb, "svc2", &["org.examplefoo"]);
                sb.app("app");
                call_and_answer(sb, call_to("org.example.A.B", "M"));
                call_and_answer(sb, call_to("org.example.A.B", "N"));
                sb.send("app", call_to("org.examplefoo", "M"));
                sb.bus("app", "ListNames", vec![]);
            },
        ),
        Case::new(
            "call-rule/with-talk",
            &[
                "--talk=org.example.Service",
                "--call=org.example.Service=org.example.Iface.M",
            ],
            |sb| {
                with_service(sb);
                call_and_answer(sb, call_to(SVC, "M"));
                call_and_answer(sb, call_to(SVC, "Other"));
            },
        ),
        Case::new(
            "call-rule/two-rules",
            &[
                "--call=org.example.Service=org.example.Iface.M",
                "--call=org.example.Service=*@/org/example/Other",
            ],
            |sb| {
                with_service(sb);
                call_and_answer(sb, call_to(SVC, "M"));
                call_and_answer(sb, call_at(SVC, "/org/example/Other", IFACE, "X"));
                call_and_answer(sb, call_to(SVC, "X"));
            },
        ),
        Case::new(
            "call-rule/unique-name",
            &["--call=org.example.Service=org.example.Iface.M"],
            |sb| {
                with_service(sb);
                let svc = sb.unique_name("svc");
                call_and_answer(sb, call_to(&svc, "M"));
                call_and_answer(sb, call_to(&svc, "N"));
            },
        ),
        Case::new(
            "call-rule/broadcast-rule-allows-no-call",
            &["--broadcast=org.example.Service=*"],
            |sb| {
                with_service(sb);
                call_and_answer(sb, call_to(SVC, "M"));
                super::ask(sb, "app", "NameHasOwner", SVC);
            },
        ),
    ]
}
