//! An app trying to get out of its sandbox: eavesdropping, monitoring,
//! unique names it may not see, names it may not own, driver calls through
//! other interfaces, forged senders and replies.

use quickbus_client::{MessageBuilder, Value};

use super::{
    add_match, ask, call_at, call_to, request, service_owning, signal, u, Case, IFACE, OBJ,
};
use crate::sandbox::harness::s;
use crate::sandbox::Sandbox;

const HIDDEN: &str = "org.example.Hidden";

/// `svc` owns HIDDEN (no rule names it), the app connects.
fn with_hidden(sb: &mut Sandbox) {
    service_owning(sb, "svc", &[HIDDEN]);
    sb.app("app");
}

fn monitor_call() -> MessageBuilder {
    call_at(
        "org.freedesktop.DBus",
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus.Monitoring",
        "BecomeMonitor",
    )
    .body(vec![
        Value::Array {
            elem_sig: "s".into(),
            items: Vec::new(),
        },
        u(0),
    ])
}

pub fn cases() -> Vec<Case> {
    let mut all = vec![
        Case::new("escape/become-monitor", &[], |sb| {
            with_hidden(sb);
            sb.call("app", monitor_call());
            sb.send("svc", call_to(HIDDEN, "Private"));
        }),
        Case::new("escape/update-activation-environment", &[], |sb| {
            sb.app("app");
            let env = Value::Array {
                elem_sig: "{ss}".into(),
                items: vec![Value::DictEntry(Box::new(s("X")), Box::new(s("1")))],
            };
            sb.bus("app", "UpdateActivationEnvironment", vec![env]);
        }),
        Case::new("escape/call-hidden-unique", &[], |sb| {
            with_hidden(sb);
            let svc = sb.unique_name("svc");
            sb.send("app", call_to(&svc, "Private"));
            sb.answer("svc", vec![]);
        }),
        Case::new("escape/signal-to-hidden-unique", &[], |sb| {
            with_hidden(sb);
            let svc = sb.unique_name("svc");
            sb.send("app", signal(OBJ, IFACE, "Poke").destination(svc.as_str()));
            sb.send("app", signal(OBJ, IFACE, "Poke").destination(HIDDEN));
        }),
        Case::new("escape/introspect-hidden-unique", &[], |sb| {
            with_hidden(sb);
            let svc = sb.unique_name("svc");
            for name in [svc.as_str(), HIDDEN] {
                ask(sb, "app", "GetNameOwner", name);
                ask(sb, "app", "NameHasOwner", name);
                ask(sb, "app", "GetConnectionCredentials", name);
            }
        }),
        Case::new("escape/guess-unique-names", &[], |sb| {
            with_hidden(sb);
            for guess in [":1.0", ":1.1", ":1.2", ":1.3"] {
                sb.send("app", call_to(guess, "Guess"));
            }
        }),
        Case::new(
            "escape/request-hidden-name",
            &["--talk=org.example.Talk"],
            |sb| {
                with_hidden(sb);
                request(sb, "app", HIDDEN, 2);
                request(sb, "app", "org.example.Talk", 0);
                ask(sb, "svc", "GetNameOwner", HIDDEN);
            },
        ),
        Case::new("escape/request-unique-name", &[], |sb| {
            with_hidden(sb);
            let svc = sb.unique_name("svc");
            request(sb, "app", &svc, 0);
            let me = sb.unique_name("app");
            request(sb, "app", &me, 0);
        }),
        Case::new("escape/forged-sender", &["--talk=org.example.Talk"], |sb| {
            service_owning(sb, "svc", &["org.example.Talk"]);
            sb.app("app");
            sb.send(
                "app",
                call_to("org.example.Talk", "Who").sender("org.freedesktop.DBus"),
            );
            sb.answer("svc", vec![]);
        }),
        Case::new("escape/forged-reply-to-driver-call", &[], |sb| {
            with_hidden(sb);
            let svc = sb.unique_name("svc");
            // svc is waiting for nothing: a reply to its Hello's serial.
            sb.send(
                "app",
                MessageBuilder::error(1, "org.freedesktop.DBus.Error.Failed")
                    .destination(svc.as_str()),
            );
        }),
        Case::new("escape/driver-without-interface", &[], |sb| {
            sb.app("app");
            sb.call(
                "app",
                MessageBuilder::method_call("/org/freedesktop/DBus", "ListNames")
                    .destination("org.freedesktop.DBus"),
            );
        }),
        Case::new("escape/driver-properties", &[], |sb| {
            sb.app("app");
            sb.call(
                "app",
                call_at(
                    "org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.Properties",
                    "GetAll",
                )
                .body(vec![s("org.freedesktop.DBus")]),
            );
        }),
        Case::new("escape/driver-peer-ping", &[], |sb| {
            sb.app("app");
            sb.call(
                "app",
                call_at(
                    "org.freedesktop.DBus",
                    "/",
                    "org.freedesktop.DBus.Peer",
                    "Ping",
                ),
            );
        }),
        Case::new("escape/signal-to-driver", &[], |sb| {
            sb.app("app");
            sb.send(
                "app",
                signal(OBJ, IFACE, "Spoof").destination("org.freedesktop.DBus"),
            );
            sb.bus("app", "GetId", vec![]);
        }),
        Case::new("escape/add-match-for-hidden-sender", &[], |sb| {
            with_hidden(sb);
            add_match(sb, "app", "type='signal',sender='org.example.Hidden'");
            sb.send("svc", signal(OBJ, IFACE, "Secret"));
        }),
        // xdg-dbus-proxy keeps a unique name's policy after its owner
        // released the name that gave it ("sticky").
        Case::new(
            "escape/policy-of-released-name",
            &["--talk=org.example.Talk"],
            |sb| {
                service_owning(sb, "svc", &["org.example.Talk"]);
                sb.app("app");
                let svc = sb.unique_name("svc");
                ask(sb, "svc", "ReleaseName", "org.example.Talk");
                sb.send("app", call_to(&svc, "StillThere"));
                sb.answer("svc", vec![]);
            },
        ),
    ];
    for rule in [
        "eavesdrop=true",
        "type='method_call',eavesdrop='true'",
        "type='signal', eavesdrop = 'true'",
        "eavesdrop='false'",
    ] {
        all.push(Case::new(
            format!("escape/eavesdrop: {rule}"),
            &[],
            move |sb| {
                with_hidden(sb);
                add_match(sb, "app", rule);
                sb.service("peer");
                sb.send("peer", call_to(HIDDEN, "Private"));
                sb.answer("svc", vec![s("secret")]);
            },
        ));
    }
    all
}
