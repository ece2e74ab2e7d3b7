//! Well-known names: every RequestName flag, queueing, releasing, and
//! connections that go away holding names (or places in queues).

use super::{call_to, s, u, Scenario};

const NAME: &str = "com.example.Name";
const ALLOW: u32 = 0x1;
const REPLACE: u32 = 0x2;
const NO_QUEUE: u32 = 0x4;

/// (case, a's flags, b's flags): a takes NAME first, then b asks for it.
fn contests() -> Vec<(&'static str, u32, u32)> {
    vec![
        ("queue", 0, 0),
        ("do-not-queue", 0, NO_QUEUE),
        ("replace-refused", 0, REPLACE),
        ("replace-allowed", ALLOW, REPLACE),
        ("replace-allowed-do-not-queue", ALLOW, REPLACE | NO_QUEUE),
        ("allowed-not-asked", ALLOW, 0),
        ("allowed-not-asked-do-not-queue", ALLOW, NO_QUEUE),
        ("replace-refused-do-not-queue", 0, REPLACE | NO_QUEUE),
        ("owner-do-not-queue-replaced", ALLOW | NO_QUEUE, REPLACE),
        (
            "all-flags",
            ALLOW | REPLACE | NO_QUEUE,
            ALLOW | REPLACE | NO_QUEUE,
        ),
    ]
}

pub fn scenarios() -> Vec<Scenario> {
    let mut all = Vec::new();
    for (case, first, second) in contests() {
        all.push(Scenario::new(format!("names/{case}"), move |script| {
            script.client("a");
            script.client("b");
            script.bus("a", "RequestName", vec![s(NAME), u(first)]);
            script.bus("b", "RequestName", vec![s(NAME), u(second)]);
            script.bus("a", "ListQueuedOwners", vec![s(NAME)]);
            // The first owner lets go: who has it now?
            script.bus("a", "ReleaseName", vec![s(NAME)]);
            script.bus("a", "GetNameOwner", vec![s(NAME)]);
        }));
    }
    all.push(Scenario::new("names/already-owner", |script| {
        script.client("a");
        script.bus("a", "RequestName", vec![s(NAME), u(0)]);
        script.bus("a", "RequestName", vec![s(NAME), u(ALLOW)]);
        script.client("b");
        script.bus("b", "RequestName", vec![s(NAME), u(REPLACE)]);
    }));
    all.push(Scenario::new("names/queue-of-three", |script| {
        for c in ["a", "b", "c"] {
            script.client(c);
            script.bus(c, "RequestName", vec![s(NAME), u(0)]);
        }
        script.bus("a", "ListQueuedOwners", vec![s(NAME)]);
        script.bus("b", "ReleaseName", vec![s(NAME)]);
        script.bus("a", "ListQueuedOwners", vec![s(NAME)]);
        script.bus("a", "ReleaseName", vec![s(NAME)]);
        script.bus("a", "GetNameOwner", vec![s(NAME)]);
    }));
    all.push(Scenario::new("names/requeue-with-do-not-queue", |script| {
        script.client("a");
        script.client("b");
        script.bus("a", "RequestName", vec![s(NAME), u(0)]);
        script.bus("b", "RequestName", vec![s(NAME), u(0)]);
        // b, waiting in the queue, asks again without queueing: it leaves
        // the queue.
        script.bus("b", "RequestName", vec![s(NAME), u(NO_QUEUE)]);
        script.bus("a", "ListQueuedOwners", vec![s(NAME)]);
    }));
    all.push(Scenario::new("names/owner-changes-flags", |script| {
        script.client("a");
        script.client("b");
        script.bus("a", "RequestName", vec![s(NAME), u(0)]);
        script.bus("b", "RequestName", vec![s(NAME), u(REPLACE)]);
        // The owner now allows replacement: the queued b does not take
        // over until it asks again.
        script.bus("a", "RequestName", vec![s(NAME), u(ALLOW)]);
        script.bus("b", "GetNameOwner", vec![s(NAME)]);
        script.bus("b", "RequestName", vec![s(NAME), u(REPLACE)]);
        script.bus("b", "ListQueuedOwners", vec![s(NAME)]);
    }));
    all.push(Scenario::new("names/release-from-queue", |script| {
        script.client("a");
        script.client("b");
        script.bus("a", "RequestName", vec![s(NAME), u(0)]);
        script.bus("b", "RequestName", vec![s(NAME), u(0)]);
        script.bus("b", "ReleaseName", vec![s(NAME)]);
        script.bus("b", "ReleaseName", vec![s(NAME)]);
        script.bus("a", "ListQueuedOwners", vec![s(NAME)]);
    }));
    all.push(Scenario::new("names/two-names-one-owner", |script| {
        script.client("a");
        script.bus("a", "RequestName", vec![s("com.example.One"), u(0)]);
        script.bus("a", "RequestName", vec![s("com.example.Two"), u(0)]);
        script.client("b");
        script.bus("b", "ListNames", vec![]);
    }));
    all.push(Scenario::new("names/call-by-well-known-name", |script| {
        script.client("a");
        script.client("b");
        script.bus("b", "RequestName", vec![s(NAME), u(0)]);
        script.send("a", call_to(NAME, "Hi"));
        script.reply("b", vec![s("hello")]);
        script.drain("a");
    }));
    all.push(Scenario::new("names/signals-to-third-party", |script| {
        script.client("watcher");
        script.bus(
            "watcher",
            "AddMatch",
            vec![s("type='signal',sender='org.freedesktop.DBus'")],
        );
        script.client("a");
        script.client("b");
        script.bus("a", "RequestName", vec![s(NAME), u(ALLOW)]);
        script.bus("b", "RequestName", vec![s(NAME), u(REPLACE)]);
    }));
    // Connections that go away.
    all.push(Scenario::new("disconnect/unique-only", |script| {
        script.client("a");
        script.client("b");
        script.disconnect("a");
    }));
    all.push(Scenario::new("disconnect/owner", |script| {
        script.client("a");
        script.bus("a", "RequestName", vec![s(NAME), u(0)]);
        script.disconnect("a");
        script.client("b");
        script.bus("b", "NameHasOwner", vec![s(NAME)]);
    }));
    all.push(Scenario::new("disconnect/owner-of-two", |script| {
        script.client("a");
        script.bus("a", "RequestName", vec![s("com.example.One"), u(0)]);
        script.bus("a", "RequestName", vec![s("com.example.Two"), u(0)]);
        script.disconnect("a");
    }));
    all.push(Scenario::new("disconnect/owner-with-queue", |script| {
        script.client("a");
        script.client("b");
        script.bus("a", "RequestName", vec![s(NAME), u(0)]);
        script.bus("b", "RequestName", vec![s(NAME), u(0)]);
        script.disconnect("a");
        script.bus("b", "GetNameOwner", vec![s(NAME)]);
    }));
    all.push(Scenario::new("disconnect/queued", |script| {
        script.client("a");
        script.client("b");
        script.bus("a", "RequestName", vec![s(NAME), u(0)]);
        script.bus("b", "RequestName", vec![s(NAME), u(0)]);
        script.disconnect("b");
        script.bus("a", "ListQueuedOwners", vec![s(NAME)]);
    }));
    all.push(Scenario::new("disconnect/with-pending-call", |script| {
        script.client("a");
        script.client("b");
        script.bus("b", "RequestName", vec![s(NAME), u(0)]);
        script.send("a", call_to(NAME, "NeverAnswered"));
        script.disconnect("b");
        script.drain("a");
    }));
    all.push(Scenario::new("disconnect/with-match-rules", |script| {
        script.client("a");
        script.bus("a", "AddMatch", vec![s("type='signal',member='X'")]);
        script.disconnect("a");
        script.client("b");
        script.send("b", super::signal("X"));
    }));
    all.push(Scenario::new("disconnect/unregistered", |script| {
        script.connect("a");
        script.disconnect("a");
        script.client("b");
        script.bus("b", "ListNames", vec![]);
    }));
    all
}
