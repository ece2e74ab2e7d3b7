//! The driver interface method by method, with good and bad arguments,
//! after Hello (a client `a`; a client `b` owning com.example.Held) and
//! before it (a client that never said Hello, then says it).

use quickbus_client::{MessageBuilder, Value};

use super::{s, strings, u, Scenario};

const BUS: &str = "org.freedesktop.DBus";
const PEER: &str = "org.freedesktop.DBus.Peer";
const INTROSPECTABLE: &str = "org.freedesktop.DBus.Introspectable";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";
const STATS: &str = "org.freedesktop.DBus.Debug.Stats";
const HELD: &str = "com.example.Held";

/// (case, interface, member, arguments) of driver calls made by a
/// registered client.
fn registered_calls() -> Vec<(&'static str, &'static str, &'static str, Vec<Value>)> {
    let env = Value::Array {
        elem_sig: "{ss}".into(),
        items: vec![Value::DictEntry(Box::new(s("QB_DIFF")), Box::new(s("1")))],
    };
    vec![
        ("Hello/again", BUS, "Hello", vec![]),
        (
            "RequestName/free",
            BUS,
            "RequestName",
            vec![s("com.example.A"), u(0)],
        ),
        ("RequestName/held", BUS, "RequestName", vec![s(HELD), u(0)]),
        (
            "RequestName/invalid",
            BUS,
            "RequestName",
            vec![s("nodot"), u(0)],
        ),
        ("RequestName/empty", BUS, "RequestName", vec![s(""), u(0)]),
        (
            "RequestName/unique",
            BUS,
            "RequestName",
            vec![s(":1.99"), u(0)],
        ),
        ("RequestName/driver", BUS, "RequestName", vec![s(BUS), u(0)]),
        (
            "RequestName/unknown-flags",
            BUS,
            "RequestName",
            vec![s("com.example.A"), u(0x18)],
        ),
        (
            "RequestName/no-flags-arg",
            BUS,
            "RequestName",
            vec![s("com.example.A")],
        ),
        (
            "RequestName/wrong-types",
            BUS,
            "RequestName",
            vec![u(0), s("com.example.A")],
        ),
        ("ReleaseName/not-owner", BUS, "ReleaseName", vec![s(HELD)]),
        (
            "ReleaseName/no-owner",
            BUS,
            "ReleaseName",
            vec![s("com.example.Nobody")],
        ),
        ("ReleaseName/invalid", BUS, "ReleaseName", vec![s("nodot")]),
        ("ReleaseName/unique", BUS, "ReleaseName", vec![s(":1.99")]),
        ("ReleaseName/driver", BUS, "ReleaseName", vec![s(BUS)]),
        ("NameHasOwner/held", BUS, "NameHasOwner", vec![s(HELD)]),
        (
            "NameHasOwner/free",
            BUS,
            "NameHasOwner",
            vec![s("com.example.Nobody")],
        ),
        ("NameHasOwner/driver", BUS, "NameHasOwner", vec![s(BUS)]),
        (
            "NameHasOwner/invalid",
            BUS,
            "NameHasOwner",
            vec![s("no..dots")],
        ),
        ("NameHasOwner/no-arg", BUS, "NameHasOwner", vec![]),
        ("GetNameOwner/held", BUS, "GetNameOwner", vec![s(HELD)]),
        (
            "GetNameOwner/free",
            BUS,
            "GetNameOwner",
            vec![s("com.example.Nobody")],
        ),
        ("GetNameOwner/driver", BUS, "GetNameOwner", vec![s(BUS)]),
        (
            "GetNameOwner/missing-unique",
            BUS,
            "GetNameOwner",
            vec![s(":1.999")],
        ),
        ("GetNameOwner/invalid", BUS, "GetNameOwner", vec![s("-bad")]),
        ("ListNames", BUS, "ListNames", vec![]),
        ("ListActivatableNames", BUS, "ListActivatableNames", vec![]),
        (
            "ListQueuedOwners/held",
            BUS,
            "ListQueuedOwners",
            vec![s(HELD)],
        ),
        (
            "ListQueuedOwners/free",
            BUS,
            "ListQueuedOwners",
            vec![s("com.example.Nobody")],
        ),
        (
            "ListQueuedOwners/driver",
            BUS,
            "ListQueuedOwners",
            vec![s(BUS)],
        ),
        (
            "ListQueuedOwners/invalid",
            BUS,
            "ListQueuedOwners",
            vec![s("x")],
        ),
        (
            "GetConnectionUnixUser/held",
            BUS,
            "GetConnectionUnixUser",
            vec![s(HELD)],
        ),
        (
            "GetConnectionUnixUser/free",
            BUS,
            "GetConnectionUnixUser",
            vec![s("com.example.Nobody")],
        ),
        (
            "GetConnectionUnixUser/driver",
            BUS,
            "GetConnectionUnixUser",
            vec![s(BUS)],
        ),
        (
            "GetConnectionUnixProcessID/held",
            BUS,
            "GetConnectionUnixProcessID",
            vec![s(HELD)],
        ),
        (
            "GetConnectionUnixProcessID/driver",
            BUS,
            "GetConnectionUnixProcessID",
            vec![s(BUS)],
        ),
        (
            "GetConnectionUnixProcessID/invalid",
            BUS,
            "GetConnectionUnixProcessID",
            vec![s("")],
        ),
        (
            "GetConnectionCredentials/held",
            BUS,
            "GetConnectionCredentials",
            vec![s(HELD)],
        ),
        (
            "GetConnectionCredentials/driver",
            BUS,
            "GetConnectionCredentials",
            vec![s(BUS)],
        ),
        (
            "GetConnectionCredentials/free",
            BUS,
            "GetConnectionCredentials",
            vec![s("com.example.Nobody")],
        ),
        (
            "GetAdtAuditSessionData/held",
            BUS,
            "GetAdtAuditSessionData",
            vec![s(HELD)],
        ),
        (
            "GetConnectionSELinuxSecurityContext/held",
            BUS,
            "GetConnectionSELinuxSecurityContext",
            vec![s(HELD)],
        ),
        ("GetId", BUS, "GetId", vec![]),
        ("GetId/extra-arg", BUS, "GetId", vec![s("x")]),
        (
            "StartServiceByName/unknown",
            BUS,
            "StartServiceByName",
            vec![s("com.example.Nobody"), u(0)],
        ),
        (
            "StartServiceByName/invalid",
            BUS,
            "StartServiceByName",
            vec![s("nodot"), u(0)],
        ),
        (
            "StartServiceByName/running",
            BUS,
            "StartServiceByName",
            vec![s(HELD), u(0)],
        ),
        (
            "UpdateActivationEnvironment",
            BUS,
            "UpdateActivationEnvironment",
            vec![env],
        ),
        (
            "UpdateActivationEnvironment/wrong-type",
            BUS,
            "UpdateActivationEnvironment",
            vec![strings(&["A=B"])],
        ),
        ("AddMatch/valid", BUS, "AddMatch", vec![s("type='signal'")]),
        (
            "AddMatch/invalid",
            BUS,
            "AddMatch",
            vec![s("type='nonsense'")],
        ),
        (
            "RemoveMatch/absent",
            BUS,
            "RemoveMatch",
            vec![s("type='signal'")],
        ),
        ("RemoveMatch/invalid", BUS, "RemoveMatch", vec![s("bogus")]),
        ("ReloadConfig", BUS, "ReloadConfig", vec![]),
        ("unknown-method", BUS, "NoSuchMethod", vec![]),
        (
            "unknown-interface",
            "com.example.NoSuchInterface",
            "GetId",
            vec![],
        ),
        ("Peer.Ping", PEER, "Ping", vec![]),
        ("Peer.GetMachineId", PEER, "GetMachineId", vec![]),
        ("Peer.unknown", PEER, "Pong", vec![]),
        ("Introspect", INTROSPECTABLE, "Introspect", vec![]),
        (
            "Properties.Get/Features",
            PROPERTIES,
            "Get",
            vec![s(BUS), s("Features")],
        ),
        (
            "Properties.Get/Interfaces",
            PROPERTIES,
            "Get",
            vec![s(BUS), s("Interfaces")],
        ),
        (
            "Properties.Get/unknown-property",
            PROPERTIES,
            "Get",
            vec![s(BUS), s("Nope")],
        ),
        (
            "Properties.Get/unknown-interface",
            PROPERTIES,
            "Get",
            vec![s("com.example.Nope"), s("Features")],
        ),
        ("Properties.GetAll", PROPERTIES, "GetAll", vec![s(BUS)]),
        (
            "Properties.GetAll/empty-interface",
            PROPERTIES,
            "GetAll",
            vec![s("")],
        ),
        (
            "Properties.Set",
            PROPERTIES,
            "Set",
            vec![
                s(BUS),
                s("Features"),
                Value::Variant(Box::new(strings(&[]))),
            ],
        ),
        (
            "Stats.GetConnectionStats/held",
            STATS,
            "GetConnectionStats",
            vec![s(HELD)],
        ),
        (
            "Stats.GetConnectionStats/free",
            STATS,
            "GetConnectionStats",
            vec![s("com.example.Nobody")],
        ),
        ("Stats.GetStats", STATS, "GetStats", vec![]),
        ("Stats.GetAllMatchRules", STATS, "GetAllMatchRules", vec![]),
    ]
}

/// Driver calls made before Hello, each followed by Hello and GetId.
fn unregistered_calls() -> Vec<(&'static str, &'static str, &'static str, Vec<Value>)> {
    vec![
        ("GetId", BUS, "GetId", vec![]),
        (
            "RequestName",
            BUS,
            "RequestName",
            vec![s("com.example.Early"), u(0)],
        ),
        ("ListNames", BUS, "ListNames", vec![]),
        ("AddMatch", BUS, "AddMatch", vec![s("type='signal'")]),
        ("NoSuchMethod", BUS, "NoSuchMethod", vec![]),
        ("Peer.Ping", PEER, "Ping", vec![]),
        ("Introspect", INTROSPECTABLE, "Introspect", vec![]),
    ]
}

fn driver_call(interface: &str, member: &str, args: Vec<Value>) -> MessageBuilder {
    MessageBuilder::method_call("/org/freedesktop/DBus", member)
        .interface(interface)
        .destination(BUS)
        .body(args)
}

pub fn scenarios() -> Vec<Scenario> {
    let mut all = Vec::new();
    for (case, interface, member, args) in registered_calls() {
        all.push(Scenario::new(format!("driver/{case}"), move |script| {
            script.client("a");
            script.client("b");
            script.bus("b", "RequestName", vec![s(HELD), u(0)]);
            script.call("a", driver_call(interface, member, args.clone()));
        }));
    }
    for (case, interface, member, args) in unregistered_calls() {
        all.push(Scenario::new(
            format!("before-hello/{case}"),
            move |script| {
                script.connect("a");
                script.call("a", driver_call(interface, member, args.clone()));
                script.hello("a");
                script.bus("a", "GetId", vec![]);
            },
        ));
    }
    all.push(Scenario::new("before-hello/hello-twice", |script| {
        script.client("a");
        script.hello("a");
        script.bus("a", "GetId", vec![]);
    }));
    all.push(Scenario::new("before-hello/call-to-peer", |script| {
        script.client("b");
        script.bus("b", "RequestName", vec![s(HELD), u(0)]);
        script.connect("a");
        script.call("a", super::call_to(HELD, "Early"));
        script.hello("a");
    }));
    all.push(Scenario::new("before-hello/signal", |script| {
        script.client("b");
        script.bus("b", "AddMatch", vec![s("type='signal'")]);
        script.connect("a");
        let serial = script.next_serial("a");
        let bytes = super::signal("Early").build(serial).expect("builds");
        // No Hello after it: whether dbus-daemon reads a Hello sent behind
        // the signal before it drops the connection depends on timing.
        script.send_raw("a", bytes.to_vec(), &[]);
    }));
    // The driver answers Peer on any path, and its own interface only
    // where it lives (or everywhere?): the paths decide.
    for (case, path, interface, member) in [
        ("path/GetId-elsewhere", "/com/example", BUS, "GetId"),
        ("path/Ping-elsewhere", "/com/example", PEER, "Ping"),
        ("path/Introspect-root", "/", INTROSPECTABLE, "Introspect"),
        ("path/Introspect-org", "/org", INTROSPECTABLE, "Introspect"),
        (
            "path/Introspect-elsewhere",
            "/com/example",
            INTROSPECTABLE,
            "Introspect",
        ),
    ] {
        all.push(Scenario::new(format!("driver/{case}"), move |script| {
            script.client("a");
            let call = MessageBuilder::method_call(path, member)
                .interface(interface)
                .destination(BUS);
            script.call("a", call);
        }));
    }
    all.push(Scenario::new("driver/no-interface/GetId", |script| {
        script.client("a");
        let call = MessageBuilder::method_call("/org/freedesktop/DBus", "GetId").destination(BUS);
        script.call("a", call);
    }));
    all.push(Scenario::new("driver/no-interface/Ping", |script| {
        script.client("a");
        let call = MessageBuilder::method_call("/org/freedesktop/DBus", "Ping").destination(BUS);
        script.call("a", call);
    }));
    all.push(Scenario::new(
        "driver/no-reply-expected/RequestName",
        |script| {
            script.client("a");
            let call = driver_call(BUS, "RequestName", vec![s("com.example.Quiet"), u(0)])
                .flags(quickbus_wire::flags::NO_REPLY_EXPECTED);
            script.send("a", call);
            script.bus("a", "GetNameOwner", vec![s("com.example.Quiet")]);
        },
    ));
    // Peer without a destination: the bus itself answers Peer.
    for member in ["Ping", "GetMachineId"] {
        all.push(Scenario::new(
            format!("no-destination/Peer.{member}"),
            move |script| {
                script.client("a");
                let call = MessageBuilder::method_call("/", member).interface(PEER);
                script.call("a", call);
            },
        ));
    }
    all.push(Scenario::new("no-destination/GetId", |script| {
        script.client("a");
        let call = MessageBuilder::method_call("/org/freedesktop/DBus", "GetId").interface(BUS);
        script.call("a", call);
    }));
    all
}
