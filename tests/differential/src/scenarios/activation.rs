//! Service activation: by StartServiceByName and by a message, with the
//! NO_AUTO_START flag, and services that cannot start or never take their
//! name.

use quickbus_wire::flags;

use super::{call_to, s, u, Scenario};

const SERVICE: &str = "org.example.Activatable";

fn helper(name: &str) -> String {
    format!("{{helper}} {name}")
}

pub fn scenarios() -> Vec<Scenario> {
    let mut all = Vec::new();
    all.push(
        Scenario::new("activation/start-service-by-name", |script| {
            script.client("a");
            script.bus("a", "StartServiceByName", vec![s(SERVICE), u(0)]);
            script.bus("a", "StartServiceByName", vec![s(SERVICE), u(0)]);
            script.call("a", call_to(SERVICE, "Echo").body(vec![s("hi")]));
        })
        .service(SERVICE, &helper(SERVICE)),
    );
    all.push(
        Scenario::new("activation/by-message", |script| {
            script.client("a");
            script.call("a", call_to(SERVICE, "Echo").body(vec![s("first")]));
            script.call("a", call_to(SERVICE, "Echo").body(vec![s("second")]));
        })
        .service(SERVICE, &helper(SERVICE)),
    );
    all.push(
        Scenario::new("activation/no-auto-start", |script| {
            script.client("a");
            script.call("a", call_to(SERVICE, "Echo").flags(flags::NO_AUTO_START));
            script.bus("a", "NameHasOwner", vec![s(SERVICE)]);
        })
        .service(SERVICE, &helper(SERVICE)),
    );
    all.push(
        Scenario::new("activation/list-activatable", |script| {
            script.client("a");
            script.bus("a", "ListActivatableNames", vec![]);
        })
        .service(SERVICE, &helper(SERVICE))
        .service("org.example.Second", &helper("org.example.Second")),
    );
    all.push(
        Scenario::new("activation/exec-fails", |script| {
            script.client("a");
            script.bus(
                "a",
                "StartServiceByName",
                vec![s("org.example.Missing"), u(0)],
            );
        })
        .service("org.example.Missing", "/nonexistent/program"),
    );
    all.push(
        // A program that exits with status 0 is not a failure to
        // dbus-daemon: the start times out (after a short limit here).
        Scenario::new("activation/exits-without-name", |script| {
            script.client("a");
            script.bus(
                "a",
                "StartServiceByName",
                vec![s("org.example.Quitter"), u(0)],
            );
        })
        .config(r#"<limit name="service_start_timeout">300</limit>"#)
        .service("org.example.Quitter", "/bin/true"),
    );
    all.push(
        Scenario::new("activation/fails-with-status", |script| {
            script.client("a");
            script.call("a", call_to("org.example.Failing", "Echo"));
        })
        .service("org.example.Failing", "/bin/false"),
    );
    all.push(
        Scenario::new("activation/unknown-name", |script| {
            script.client("a");
            script.bus(
                "a",
                "StartServiceByName",
                vec![s("org.example.Nowhere"), u(0)],
            );
            script.call("a", call_to("org.example.Nowhere", "Echo"));
        })
        .service(SERVICE, &helper(SERVICE)),
    );
    all
}
