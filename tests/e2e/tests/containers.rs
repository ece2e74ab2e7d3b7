//! org.freedesktop.DBus.Containers1 against the daemon, as dbus-daemon's
//! bus/containers.c defines it: a container manager's AddServer makes a
//! path socket, clients connect through it (the repository's client and
//! gdbus), the bus names their instance, each method's errors, and the
//! ways an instance stops. Debian's dbus-daemon is built without
//! Containers1, so these run against quickbus only.

#[path = "containers/support.rs"]
mod support;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::time::Instant;

use quickbus_client::{bus_call, Connection, MessageBuilder, Value};
use quickbus_e2e::containers1::connection_credential;
use quickbus_e2e::{skip, write_config_with, Bus, Listen, POLL_INTERVAL, TIMEOUT};
use support::{add_server, containers_call, empty_asv, Server, INSTANCE_KEY};

const KIND: &str = "com.example.NotFlatpak";

fn connect(address: &str) -> Connection {
    let mut conn = Connection::connect(address).expect("connect");
    conn.set_timeout(Some(TIMEOUT)).unwrap();
    conn
}

fn s(v: &str) -> Value {
    Value::String(v.into())
}

fn o(v: &str) -> Value {
    Value::ObjectPath(v.into())
}

/// The error name and text a call ends with.
fn error_of(conn: &mut Connection, call: MessageBuilder) -> (String, String) {
    match conn.call(call) {
        Err(quickbus_client::CallError::Remote(e)) => (e.name, e.message),
        other => panic!("expected an error reply, got {other:?}"),
    }
}

/// Waits (bounded) for `conn` to receive InstanceRemoved(`instance`).
fn wait_removed(conn: &mut Connection, instance: &str) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        assert!(Instant::now() < deadline, "no InstanceRemoved({instance})");
        let (msg, _) = conn.receive().expect("InstanceRemoved");
        if msg.member() == Some("InstanceRemoved") {
            assert_eq!(msg.body_values().unwrap(), vec![o(instance)]);
            return;
        }
    }
}

/// A bus with a manager, an InstanceRemoved watcher and an instance.
fn watched_server() -> (Bus, Connection, Connection, Server) {
    let bus = Bus::start();
    let mut manager = connect(bus.address());
    let watch = watcher(&bus);
    let server = add_server(&mut manager, KIND, "app", empty_asv());
    (bus, manager, watch, server)
}

fn watcher(bus: &Bus) -> Connection {
    let mut conn = connect(bus.address());
    conn.add_match(&format!(
        "type='signal',interface='{}',member='InstanceRemoved'",
        support::CONTAINERS1
    ))
    .unwrap();
    conn
}

/// Waits (bounded) until `path` is gone.
fn wait_gone(path: &str) {
    let deadline = Instant::now() + TIMEOUT;
    while Path::new(path).exists() {
        assert!(Instant::now() < deadline, "{path} is still there");
        std::thread::sleep(POLL_INTERVAL);
    }
}

#[test]
fn a_client_connects_through_the_socket_and_the_bus_names_its_instance() {
    if skip::quickbus_only("Containers1") {
        return;
    }
    let bus = Bus::start();
    let mut manager = connect(bus.address());
    let metadata = Value::Array {
        elem_sig: "{sv}".into(),
        items: vec![Value::DictEntry(
            Box::new(s("Species")),
            Box::new(Value::Variant(Box::new(s("Martes martes")))),
        )],
    };
    let Server {
        instance,
        socket,
        address,
    } = add_server(&mut manager, KIND, "sample-app", metadata.clone());
    assert!(instance.starts_with("/org/freedesktop/DBus/Containers1/c"));
    // A path socket, never an abstract one, open to all as libdbus's are
    // (EXTERNAL and the creator's uid decide who gets in).
    let meta = std::fs::symlink_metadata(&socket).expect("the socket file");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o777);
    assert!(address.starts_with(&format!("unix:path={socket},guid=")));
    let mut app = connect(&address);
    let app_name = app.unique_name().to_owned();
    // The app reaches the bus and other peers.
    app.call(bus_call("GetId")).expect("GetId from the app");
    let ping = MessageBuilder::method_call("/", "Ping")
        .interface("org.freedesktop.DBus.Peer")
        .destination(manager.unique_name());
    let id = app.send(ping, &[]).unwrap();
    loop {
        let (msg, _) = manager.receive().expect("the ping");
        if msg.member() == Some("Ping") {
            let pong = MessageBuilder::method_return(msg.serial()).destination(app_name.clone());
            manager.send(pong, &[]).unwrap();
            break;
        }
    }
    app.wait_reply(id).expect("the manager's answer");
    // Who it is: its own pid (no proxy), and its instance.
    assert_eq!(
        connection_credential(&mut manager, &app_name, INSTANCE_KEY),
        Some(o(&instance))
    );
    assert_eq!(
        connection_credential(&mut manager, &app_name, "ProcessID"),
        Some(Value::Uint32(std::process::id()))
    );
    let me = manager.unique_name().to_owned();
    assert_eq!(connection_credential(&mut manager, &me, INSTANCE_KEY), None);
    let got = manager
        .call(containers_call("GetConnectionInstance", vec![s(&app_name)]))
        .expect("GetConnectionInstance");
    assert_eq!(got.signature(), "oa{sv}ssa{sv}");
    let values = got.body_values().unwrap();
    assert_eq!(values[0], o(&instance));
    assert_eq!(values[2..], [s(KIND), s("sample-app"), metadata.clone()]);
    let info = manager
        .call(containers_call("GetInstanceInfo", vec![o(&instance)]))
        .expect("GetInstanceInfo");
    assert_eq!(info.body_values().unwrap()[1..], values[2..]);
    let supported = manager
        .call(
            MessageBuilder::method_call("/org/freedesktop/DBus", "Get")
                .interface("org.freedesktop.DBus.Properties")
                .destination("org.freedesktop.DBus")
                .body(vec![s(support::CONTAINERS1), s("SupportedArguments")]),
        )
        .expect("SupportedArguments");
    assert_eq!(
        supported.body_values().unwrap(),
        vec![Value::Variant(Box::new(Value::Array {
            elem_sig: "s".into(),
            items: vec![s("org.quickbus.Filter")]
        }))]
    );
    // The socket goes with the bus.
    drop(app);
    bus.stop();
    wait_gone(&socket);
}

#[test]
fn each_method_refuses_as_dbus_daemon_does() {
    if skip::quickbus_only("Containers1") {
        return;
    }
    let bus = Bus::start();
    let mut manager = connect(bus.address());
    let me = manager.unique_name().to_owned();
    let add = |kind: &str, named: Value| {
        containers_call("AddServer", vec![s(kind), s("app"), empty_asv(), named])
    };
    let named = |key: &str, value: Value| Value::Array {
        elem_sig: "{sv}".into(),
        items: vec![Value::DictEntry(
            Box::new(s(key)),
            Box::new(Value::Variant(Box::new(value))),
        )],
    };
    let invalid = "org.freedesktop.DBus.Error.InvalidArgs";
    let not_container = "org.freedesktop.DBus.Error.NotContainer";
    let cases: Vec<(MessageBuilder, &str, String)> = vec![
        (
            add("not a type", empty_asv()),
            invalid,
            "The container type identifier must have the syntax of an interface name".into(),
        ),
        (
            add(
                KIND,
                named("ThisArgumentIsntImplemented", Value::Bool(false)),
            ),
            invalid,
            "Named parameter ThisArgumentIsntImplemented is not understood".into(),
        ),
        (
            add(
                KIND,
                named(
                    "org.quickbus.Filter",
                    Value::Array {
                        elem_sig: "s".into(),
                        items: vec![s("--log")],
                    },
                ),
            ),
            invalid,
            "Invalid filter option \"--log\": not one of --see, --talk, --own, --call, --broadcast"
                .into(),
        ),
        (
            containers_call("GetConnectionInstance", vec![s(&me)]),
            not_container,
            format!("Connection '{me}' is not in a container"),
        ),
        (
            containers_call("GetConnectionInstance", vec![s("org.freedesktop.DBus")]),
            not_container,
            "The message bus is not in a container".into(),
        ),
        (
            containers_call("GetConnectionInstance", vec![s("com.example.Nope")]),
            "org.freedesktop.DBus.Error.NameHasNoOwner",
            "Could not get container instance of name 'com.example.Nope': no such name".into(),
        ),
        (
            containers_call("GetInstanceInfo", vec![o("/nope")]),
            not_container,
            "There is no container with path '/nope'".into(),
        ),
        (
            containers_call("StopInstance", vec![o("/nope")]),
            not_container,
            "There is no container with path '/nope'".into(),
        ),
        (
            containers_call("StopListening", vec![o("/nope")]),
            not_container,
            "There is no container with path '/nope'".into(),
        ),
    ];
    for (call, name, text) in cases {
        assert_eq!(error_of(&mut manager, call), (name.to_owned(), text));
    }
    // Inside a container: no nesting, nothing privileged.
    let server = add_server(&mut manager, KIND, "app", empty_asv());
    let mut app = connect(&server.address);
    let app_name = app.unique_name().to_owned();
    let (name, text) = error_of(&mut app, add(KIND, empty_asv()));
    assert_eq!(name, "org.freedesktop.DBus.Error.AccessDenied");
    assert!(
        text.starts_with(&format!(
            "rejected attempt to call AddServer by connection {app_name} ("
        )) && text.ends_with(") in container"),
        "{text}"
    );
    for call in [
        containers_call("StopInstance", vec![o(&server.instance)]),
        containers_call("StopListening", vec![o(&server.instance)]),
        bus_call("UpdateActivationEnvironment").body(vec![Value::Array {
            elem_sig: "{ss}".into(),
            items: vec![],
        }]),
    ] {
        let (name, text) = error_of(&mut app, call);
        assert_eq!(name, "org.freedesktop.DBus.Error.AccessDenied");
        assert!(text.ends_with("in container"), "{text}");
    }
}

#[test]
fn stop_listening_closes_the_socket_and_the_instance_goes_with_its_last_client() {
    if skip::quickbus_only("Containers1") {
        return;
    }
    let (_bus, mut manager, mut watch, server) = watched_server();
    let mut app = connect(&server.address);
    manager
        .call(containers_call("StopListening", vec![o(&server.instance)]))
        .expect("StopListening");
    wait_gone(&server.socket);
    assert!(Connection::connect(&server.address).is_err());
    // The app keeps working, and the instance stays while it does.
    app.call(bus_call("GetId"))
        .expect("the app after StopListening");
    manager
        .call(containers_call(
            "GetInstanceInfo",
            vec![o(&server.instance)],
        ))
        .expect("the instance stays while its app is connected");
    drop(app);
    wait_removed(&mut watch, &server.instance);
}

#[test]
fn stop_instance_disconnects_its_clients() {
    if skip::quickbus_only("Containers1") {
        return;
    }
    let (_bus, mut manager, mut watch, server) = watched_server();
    let mut app = connect(&server.address);
    manager
        .call(containers_call("StopInstance", vec![o(&server.instance)]))
        .expect("StopInstance");
    wait_removed(&mut watch, &server.instance);
    assert!(app.call(bus_call("GetId")).is_err(), "the app was closed");
    wait_gone(&server.socket);
}

#[test]
fn the_creator_leaving_stops_listening_but_its_clients_stay() {
    if skip::quickbus_only("Containers1") {
        return;
    }
    let (_bus, manager, mut watch, server) = watched_server();
    let mut app = connect(&server.address);
    drop(manager);
    wait_gone(&server.socket);
    app.call(bus_call("GetId"))
        .expect("the app outlives its manager");
    drop(app);
    wait_removed(&mut watch, &server.instance);
}

#[test]
fn gdbus_makes_a_server_and_connects_through_it() {
    if skip::quickbus_only("Containers1") {
        return;
    }
    support::ensure_socket_dir();
    let bus = Bus::start();
    // gdbus stays connected until it exits, which stops its instance's
    // socket: the manager here is the repository's client, gdbus the app.
    let mut manager = connect(bus.address());
    let server = add_server(&mut manager, KIND, "gdbus-app", empty_asv());
    let id = manager.get_id().expect("GetId");
    let out = bus
        .run(
            "gdbus",
            &[
                "call",
                "--address",
                &server.address,
                "--dest",
                "org.freedesktop.DBus",
                "--object-path",
                "/org/freedesktop/DBus",
                "--method",
                "org.freedesktop.DBus.GetId",
            ],
        )
        .success();
    assert_eq!(out.stdout.trim(), format!("('{id}',)"));
    // gdbus as the manager: AddServer with its text syntax.
    let made = bus
        .run(
            "gdbus",
            &[
                "call",
                "--session",
                "--dest",
                "org.freedesktop.DBus",
                "--object-path",
                "/org/freedesktop/DBus",
                "--method",
                "org.freedesktop.DBus.Containers1.AddServer",
                KIND,
                "by-gdbus",
                "@a{sv} {}",
                "@a{sv} {}",
            ],
        )
        .success();
    assert!(
        made.stdout
            .starts_with("(objectpath '/org/freedesktop/DBus/Containers1/c"),
        "{}",
        made.stdout
    );
}

#[test]
fn instances_survive_a_reload_which_applies_the_container_limits_at_once() {
    if skip::quickbus_only("Containers1") {
        return;
    }
    let limits = |max: u32, per_connection: u32| {
        format!(
            r#"<limit name="max_containers">{max}</limit>
            <limit name="max_connections_per_container">{per_connection}</limit>"#
        )
    };
    let bus = Bus::start_with_config(Listen::UnixPath, &limits(1, 1));
    let mut manager = connect(bus.address());
    let server = add_server(&mut manager, KIND, "app", empty_asv());
    let add = || containers_call("AddServer", vec![s(KIND), s("b"), empty_asv(), empty_asv()]);
    let (name, text) = error_of(&mut manager, add());
    assert_eq!(name, "org.freedesktop.DBus.Error.LimitsExceeded");
    assert!(text.ends_with("(max_containers=1)"), "{text}");
    let mut app = connect(&server.address);
    // One connection per container: a second is closed at once.
    assert!(Connection::connect(&server.address).is_err());
    write_config_with(bus.dir(), Listen::UnixPath, &limits(2, 2));
    manager
        .call(bus_call("ReloadConfig"))
        .expect("ReloadConfig");
    app.call(bus_call("GetId"))
        .expect("the app after the reload");
    let mut second = connect(&server.address);
    second
        .call(bus_call("GetId"))
        .expect("a second client, now allowed");
    manager.call(add()).expect("a second instance, now allowed");
}

/// gdbus through a filtered container (`org.quickbus.Filter`
/// `--talk=org.example.Talk`): ListNames shows the talk name and not the
/// hidden one, and a call to the hidden one is ServiceUnknown, as
/// xdg-dbus-proxy answers it.
#[test]
fn gdbus_through_a_filtered_container_sees_only_what_the_filter_gives() {
    if skip::quickbus_only("Containers1 with org.quickbus.Filter") {
        return;
    }
    let bus = Bus::start();
    let (manager, service, server) = support::filtered_setup(bus.address());
    let gdbus_call = |dest: &str, method: &str| {
        bus.run(
            "gdbus",
            &[
                "call",
                "--address",
                &server.address,
                "--dest",
                dest,
                "--object-path",
                "/org/freedesktop/DBus",
                "--method",
                method,
            ],
        )
    };
    let names = gdbus_call("org.freedesktop.DBus", "org.freedesktop.DBus.ListNames").success();
    assert!(
        names.stdout.contains("'org.example.Talk'"),
        "{}",
        names.stdout
    );
    assert!(
        !names.stdout.contains("org.example.Hidden"),
        "{}",
        names.stdout
    );
    let hidden = gdbus_call("org.example.Hidden", "org.freedesktop.DBus.Peer.Ping");
    assert!(
        hidden
            .stderr
            .contains("org.freedesktop.DBus.Error.ServiceUnknown"),
        "{:?}",
        hidden.stderr
    );
    drop((manager, service));
}

/// Another user's connections to a container socket (refused at BEGIN)
/// take none of max_connections_per_container's places (8): they cannot
/// lock the app out until their authentication times out.
#[test]
fn another_users_connections_cannot_lock_the_app_out() {
    if skip::quickbus_only("Containers1")
        || skip::unless(
            quickbus_e2e::can_change_user(),
            "needs root, to connect as nobody",
        )
    {
        return;
    }
    let bus = Bus::start();
    let mut manager = connect(bus.address());
    let server = add_server(&mut manager, KIND, "app", empty_asv());
    let socket = server.socket.clone();
    let held: Vec<std::os::unix::net::UnixStream> =
        quickbus_e2e::as_user(quickbus_e2e::NOBODY, move || {
            (0..12)
                .filter_map(|_| std::os::unix::net::UnixStream::connect(&socket).ok())
                .collect()
        });
    assert!(!held.is_empty(), "nobody could not even connect");
    let mut app = connect(&server.address);
    app.call(bus_call("GetId"))
        .expect("the creator's app gets in while nobody holds connections");
    drop(held);
}
