//! Names the app owns or queues for (--own, with prefixes), and calls to
//! them from services.

use super::{add_match, ask, call_to, request, service_owning, Case};
use crate::sandbox::harness::s;

const MINE: &str = "org.example.Mine";
/// RequestName flags.
const ALLOW_REPLACEMENT: u32 = 1;
const REPLACE_EXISTING: u32 = 2;
const DO_NOT_QUEUE: u32 = 4;

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("own/request-name", &["--own=org.example.Mine"], |sb| {
            sb.service("svc");
            add_match(
                sb,
                "svc",
                "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged'",
            );
            sb.app("app");
            request(sb, "app", MINE, 0);
            request(sb, "app", MINE, 0);
        }),
        Case::new("own/talk-is-not-own", &["--talk=org.example.Mine"], |sb| {
            sb.app("app");
            request(sb, "app", MINE, 0);
        }),
        Case::new("own/see-is-not-own", &["--see=org.example.Mine"], |sb| {
            sb.app("app");
            request(sb, "app", MINE, 0);
        }),
        Case::new("own/no-rule-is-hidden", &[], |sb| {
            sb.app("app");
            request(sb, "app", MINE, 0);
            request(sb, "app", MINE, DO_NOT_QUEUE);
        }),
        Case::new("own/prefix", &["--own=org.example.Mine.*"], |sb| {
            sb.app("app");
            for name in [
                "org.example.Mine",
                "org.example.Mine.Sub.Deep",
                "org.example.MineX",
            ] {
                request(sb, "app", name, 0);
            }
            sb.bus("app", "ListNames", vec![]);
        }),
        Case::new(
            "own/queued-behind-service",
            &["--own=org.example.Mine"],
            |sb| {
                service_owning(sb, "svc", &[MINE]);
                sb.app("app");
                request(sb, "app", MINE, 0);
                ask(sb, "app", "ListQueuedOwners", MINE);
                ask(sb, "svc", "ReleaseName", MINE);
                ask(sb, "app", "GetNameOwner", MINE);
            },
        ),
        Case::new("own/do-not-queue", &["--own=org.example.Mine"], |sb| {
            service_owning(sb, "svc", &[MINE]);
            sb.app("app");
            request(sb, "app", MINE, DO_NOT_QUEUE);
            ask(sb, "app", "ListQueuedOwners", MINE);
        }),
        Case::new("own/replace-service", &["--own=org.example.Mine"], |sb| {
            sb.service("svc");
            request(sb, "svc", MINE, ALLOW_REPLACEMENT);
            sb.app("app");
            request(sb, "app", MINE, REPLACE_EXISTING);
            ask(sb, "svc", "GetNameOwner", MINE);
        }),
        Case::new(
            "own/service-replaces-app",
            &["--own=org.example.Mine"],
            |sb| {
                sb.service("svc");
                sb.app("app");
                request(sb, "app", MINE, ALLOW_REPLACEMENT);
                request(sb, "svc", MINE, REPLACE_EXISTING);
                ask(sb, "app", "NameHasOwner", MINE);
                ask(sb, "app", "ListQueuedOwners", MINE);
            },
        ),
        Case::new("own/release-name", &["--own=org.example.Mine"], |sb| {
            sb.app("app");
            request(sb, "app", MINE, 0);
            ask(sb, "app", "ReleaseName", MINE);
            ask(sb, "app", "ReleaseName", MINE);
            ask(sb, "app", "ReleaseName", "org.example.NotMine");
        }),
        Case::new(
            "own/service-calls-owned-name",
            &["--own=org.example.Mine"],
            |sb| {
                sb.service("svc");
                sb.app("app");
                request(sb, "app", MINE, 0);
                sb.send("svc", call_to(MINE, "Hello").body(vec![s("from svc")]));
                sb.answer("app", vec![s("from app")]);
            },
        ),
        Case::new(
            "own/two-apps-same-rules",
            &["--own=org.example.Mine"],
            |sb| {
                sb.app("app");
                sb.app("app2");
                request(sb, "app", MINE, 0);
                request(sb, "app2", MINE, 0);
                ask(sb, "app2", "ListQueuedOwners", MINE);
                // app2 owns nothing the rules let it see through app: app's
                // unique name is visible because it owns MINE.
                let app = sb.unique_name("app");
                sb.send("app2", call_to(&app, "Hi"));
                sb.answer("app", vec![]);
            },
        ),
        Case::new(
            "own/app-leaves-holding-name",
            &["--own=org.example.Mine"],
            |sb| {
                sb.service("svc");
                add_match(
                    sb,
                    "svc",
                    "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged'",
                );
                sb.app("app");
                request(sb, "app", MINE, 0);
                sb.disconnect("app");
                ask(sb, "svc", "NameHasOwner", MINE);
            },
        ),
        Case::new(
            "own/queued-owner-leaves",
            &["--own=org.example.Mine"],
            |sb| {
                service_owning(sb, "svc", &[MINE]);
                sb.app("app");
                request(sb, "app", MINE, 0);
                sb.disconnect("svc");
                ask(sb, "app", "GetNameOwner", MINE);
            },
        ),
        Case::new(
            "own/release-a-talk-name",
            &["--talk=org.example.Mine"],
            |sb| {
                service_owning(sb, "svc", &[MINE]);
                sb.app("app");
                ask(sb, "app", "ReleaseName", MINE);
                ask(sb, "app", "ListQueuedOwners", MINE);
            },
        ),
        Case::new(
            "own/owned-name-broadcasts",
            &["--own=org.example.Mine"],
            |sb| {
                sb.service("svc");
                add_match(sb, "svc", "type='signal',interface='org.example.Iface'");
                sb.app("app");
                request(sb, "app", MINE, 0);
                sb.send("app", super::signal(super::OBJ, super::IFACE, "FromOwner"));
            },
        ),
        Case::new("own/own-implies-talk", &["--own=org.example.Mine"], |sb| {
            service_owning(sb, "svc", &[MINE]);
            sb.app("app");
            sb.send("app", call_to(MINE, "Talk"));
            sb.answer("svc", vec![s("ok")]);
        }),
    ]
}
