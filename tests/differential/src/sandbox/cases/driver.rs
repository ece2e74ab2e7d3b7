//! What the app learns from the bus driver: ListNames,
//! ListActivatableNames, NameHasOwner, GetNameOwner, NameOwnerChanged, the
//! GetConnection* family, and the driver methods a sandbox may not call.

use super::{add_match, ask, call_at, request, service_owning, u, Case};
use crate::sandbox::harness::{bus_call, s};

const SEEN: &str = "org.example.Seen";
const HIDDEN: &str = "org.example.Hidden";
const NOC: &str = "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged'";

/// The usual bus for these cases: `svc` owns SEEN, `svc2` owns HIDDEN,
/// then the app connects.
fn seen_and_hidden(sb: &mut crate::sandbox::Sandbox) {
    service_owning(sb, "svc", &[SEEN]);
    service_owning(sb, "svc2", &[HIDDEN]);
    sb.app("app");
}

pub fn cases() -> Vec<Case> {
    let mut all = vec![
        Case::new("driver/hello-and-get-id", &[], |sb| {
            sb.app("app");
            sb.bus("app", "GetId", vec![]);
        }),
        Case::new("driver/hello-twice", &[], |sb| {
            sb.app("app");
            sb.bus("app", "Hello", vec![]);
        }),
        Case::new("driver/list-names-no-rules", &[], |sb| {
            seen_and_hidden(sb);
            sb.bus("app", "ListNames", vec![]);
        }),
        Case::new("driver/list-names-see", &["--see=org.example.Seen"], |sb| {
            seen_and_hidden(sb);
            sb.bus("app", "ListNames", vec![]);
        }),
        Case::new(
            "driver/list-names-prefix",
            &["--see=org.example.A.*"],
            |sb| {
                service_owning(
                    sb,
                    "svc",
                    &["org.example.A", "org.example.A.B.C", "org.example.AB"],
                );
                service_owning(sb, "svc2", &["org.example.B"]);
                sb.app("app");
                sb.bus("app", "ListNames", vec![]);
            },
        ),
        Case::new(
            "driver/list-names-owner-acquired-later",
            &["--talk=org.example.Seen"],
            |sb| {
                sb.service("svc");
                sb.app("app");
                request(sb, "svc", SEEN, 0);
                sb.bus("app", "ListNames", vec![]);
            },
        ),
        Case::new(
            "driver/list-activatable-names",
            &["--see=org.example.Activatable.*"],
            |sb| {
                sb.app("app");
                sb.bus("app", "ListActivatableNames", vec![]);
            },
        )
        .activatable("org.example.Activatable.One")
        .activatable("org.example.Other"),
        Case::new(
            "driver/name-has-owner",
            &["--see=org.example.Seen", "--see=org.example.Unowned"],
            |sb| {
                seen_and_hidden(sb);
                for name in [SEEN, HIDDEN, "org.example.Unowned"] {
                    ask(sb, "app", "NameHasOwner", name);
                }
            },
        ),
        Case::new("driver/get-name-owner", &["--see=org.example.Seen"], |sb| {
            seen_and_hidden(sb);
            for name in [SEEN, HIDDEN, "org.example.Unowned"] {
                ask(sb, "app", "GetNameOwner", name);
            }
        }),
        Case::new("driver/get-name-owner-of-self", &[], |sb| {
            sb.app("app");
            let me = sb.unique_name("app");
            ask(sb, "app", "GetNameOwner", &me);
            ask(sb, "app", "NameHasOwner", &me);
        }),
        Case::new(
            "driver/name-owner-changed-filtered",
            &["--see=org.example.Seen"],
            |sb| {
                sb.service("svc");
                sb.app("app");
                add_match(sb, "app", NOC);
                request(sb, "svc", SEEN, 0);
                request(sb, "svc", HIDDEN, 0);
                ask(sb, "svc", "ReleaseName", SEEN);
                ask(sb, "svc", "ReleaseName", HIDDEN);
            },
        ),
        // The proxy asks for NameOwnerChanged of every name in its rules
        // on the app's connection: the app gets them unasked.
        Case::new(
            "driver/name-owner-changed-unasked",
            &["--talk=org.example.Seen", "--see=org.example.P.*"],
            |sb| {
                sb.service("svc");
                sb.app("app");
                request(sb, "svc", SEEN, 0);
                request(sb, "svc", "org.example.P.Q", 0);
                request(sb, "svc", HIDDEN, 0);
            },
        ),
        Case::new(
            "driver/name-owner-changed-peer-leaves",
            &["--talk=org.example.Seen"],
            |sb| {
                service_owning(sb, "svc", &[SEEN]);
                sb.service("svc2");
                sb.app("app");
                add_match(sb, "app", NOC);
                sb.disconnect("svc");
                sb.disconnect("svc2");
            },
        ),
        Case::new(
            "driver/credentials-of-seen-name",
            &["--see=org.example.Seen"],
            |sb| {
                seen_and_hidden(sb);
                for member in [
                    "GetConnectionUnixUser",
                    "GetConnectionUnixProcessID",
                    "GetConnectionCredentials",
                    "GetConnectionSELinuxSecurityContext",
                ] {
                    ask(sb, "app", member, SEEN);
                    ask(sb, "app", member, HIDDEN);
                }
            },
        ),
        Case::new(
            "driver/credentials-of-seen-unique",
            &["--see=org.example.Seen"],
            |sb| {
                seen_and_hidden(sb);
                let seen = sb.unique_name("svc");
                let hidden = sb.unique_name("svc2");
                ask(sb, "app", "GetConnectionUnixUser", &seen);
                ask(sb, "app", "GetConnectionUnixUser", &hidden);
            },
        ),
        // A proxy's app is the proxy to the bus: its pid is the proxy's.
        Case::new("driver/app-credentials-asked-by-self", &[], |sb| {
            sb.app("app");
            let me = sb.unique_name("app");
            ask(sb, "app", "GetConnectionUnixProcessID", &me);
            ask(sb, "app", "GetConnectionCredentials", &me);
        }),
        Case::new("driver/app-credentials-asked-by-service", &[], |sb| {
            sb.service("svc");
            sb.app("app");
            let app = sb.unique_name("app");
            ask(sb, "svc", "GetConnectionUnixUser", &app);
            ask(sb, "svc", "GetConnectionCredentials", &app);
        }),
        Case::new("driver/add-and-remove-match", &[], |sb| {
            sb.app("app");
            let rule = "type='signal',interface='org.example.Iface'";
            add_match(sb, "app", rule);
            sb.call("app", bus_call("RemoveMatch").body(vec![s(rule)]));
            sb.call("app", bus_call("RemoveMatch").body(vec![s(rule)]));
        }),
        Case::new("driver/add-match-malformed", &[], |sb| {
            sb.app("app");
            add_match(sb, "app", "type='nonsense'");
        }),
        Case::new(
            "driver/start-service-by-name",
            &[
                "--talk=org.example.Seen",
                "--see=org.example.Hidden",
                "--talk=org.example.Unowned",
            ],
            |sb| {
                seen_and_hidden(sb);
                for name in [SEEN, HIDDEN, "org.example.Unowned", "org.example.Nobody"] {
                    sb.bus("app", "StartServiceByName", vec![s(name), u(0)]);
                }
            },
        ),
        Case::new("driver/introspect-bus", &[], |sb| {
            sb.app("app");
            let call = call_at(
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.Introspectable",
                "Introspect",
            );
            // The XML is each bus's own: only the reply's kind is compared.
            sb.call_eliding_reply("app", call);
        }),
    ];
    for member in ["ReloadConfig", "GetAdtAuditSessionData", "ListQueuedOwners"] {
        all.push(Case::new(
            format!("driver/other-{member}"),
            &[],
            move |sb| {
                sb.app("app");
                ask(sb, "app", member, "org.example.Seen");
            },
        ));
    }
    all
}
