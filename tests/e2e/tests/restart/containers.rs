//! A container instance crosses a restart in place: its listening socket
//! is handed over with the other listeners, the clients that came through
//! it keep their connections and their instance, new clients can still
//! connect through it, and it can be stopped afterwards.

use std::path::Path;

use quickbus_client::{bus_call, Connection, MessageBuilder, Value};
use quickbus_e2e::containers1::connection_credential;
use quickbus_e2e::{skip, Bus, Listen, TIMEOUT};

use super::container_support::{
    add_server, containers_call, empty_asv, filtered_setup, Server, INSTANCE_KEY,
};
use super::support::restart;

fn connect(address: &str) -> Connection {
    let mut conn = Connection::connect(address).expect("connect");
    conn.set_timeout(Some(TIMEOUT)).unwrap();
    conn
}

fn instance_of(manager: &mut Connection, name: &str) -> Option<Value> {
    connection_credential(manager, name, INSTANCE_KEY)
}

#[test]
fn a_container_instance_its_socket_and_its_clients_survive_restarts() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start();
    let mut manager = connect(bus.address());
    let Server {
        instance,
        socket,
        address,
    } = add_server(&mut manager, "com.example.NotFlatpak", "app", empty_asv());
    let mut app = connect(&address);
    let app_name = app.unique_name().to_owned();
    let path = Value::ObjectPath(instance.clone());
    for i in 0..2 {
        restart(&bus, i);
        app.call(bus_call("GetId"))
            .expect("the app after a restart");
        assert_eq!(instance_of(&mut manager, &app_name), Some(path.clone()));
        assert!(Path::new(&socket).exists(), "the socket file went");
        let mut newcomer = connect(&address);
        let newcomer_name = newcomer.unique_name().to_owned();
        newcomer.call(bus_call("GetId")).expect("a new client");
        assert_eq!(
            instance_of(&mut manager, &newcomer_name),
            Some(path.clone())
        );
    }
    manager
        .call(containers_call("StopInstance", vec![path.clone()]))
        .expect("StopInstance after the restarts");
    assert!(app.call(bus_call("GetId")).is_err(), "the app was closed");
    assert!(
        Connection::connect(&address).is_err(),
        "the socket still listens"
    );
}

fn listed_names(conn: &mut Connection) -> Vec<String> {
    let reply = conn.call(bus_call("ListNames")).expect("ListNames");
    match reply.body_values().unwrap().into_iter().next() {
        Some(Value::Array { items, .. }) => items
            .into_iter()
            .map(|n| match n {
                Value::String(n) => n,
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("ListNames replied {other:?}"),
    }
}

/// What the filter `--talk=org.example.Talk` lets `app` see and do: the
/// talk name listed and callable, the hidden one absent and unknown.
fn assert_filtered(app: &mut Connection, who: &str) {
    let names = listed_names(app);
    assert!(
        names.iter().any(|n| n == "org.example.Talk"),
        "{who}: {names:?}"
    );
    assert!(
        !names.iter().any(|n| n == "org.example.Hidden"),
        "{who} sees the hidden name: {names:?}"
    );
    let hidden = app.call(
        MessageBuilder::method_call("/", "Ping")
            .interface("org.freedesktop.DBus.Peer")
            .destination("org.example.Hidden"),
    );
    assert_eq!(
        hidden.err().as_ref().and_then(|e| e.dbus_name()),
        Some("org.freedesktop.DBus.Error.ServiceUnknown"),
        "{who} reached the hidden name"
    );
    app.call(bus_call("GetNameOwner").body(vec![Value::String("org.example.Talk".into())]))
        .unwrap_or_else(|e| panic!("{who} could not see the talk name's owner: {e}"));
}

#[test]
fn a_filtered_instance_filters_its_clients_across_restarts() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start();
    let (manager, service, Server { address, .. }) = filtered_setup(bus.address());
    let mut app = connect(&address);
    assert_filtered(&mut app, "the app");
    for i in 0..2 {
        restart(&bus, i);
        assert_filtered(&mut app, "the app after a restart");
        assert_filtered(&mut connect(&address), "a new client after a restart");
    }
    drop((manager, service));
}

/// max_connections_per_container counts the connections that crossed a
/// restart: with one place and the app connected, a second client is
/// refused after the restart as before it, and gets in once the app left.
#[test]
fn the_places_of_an_instance_are_counted_again_after_a_restart() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start_with_config(
        Listen::UnixPath,
        r#"<limit name="max_connections_per_container">1</limit>"#,
    );
    let mut manager = connect(bus.address());
    let Server { address, .. } =
        add_server(&mut manager, "com.example.NotFlatpak", "app", empty_asv());
    let mut app = connect(&address);
    assert!(
        Connection::connect(&address).is_err(),
        "a second client got in"
    );
    restart(&bus, 0);
    app.call(bus_call("GetId"))
        .expect("the app after the restart");
    assert!(
        Connection::connect(&address).is_err(),
        "a second client got in after the restart"
    );
    drop(app);
    // Bounded: the bus notices the app's hang-up on its next turn.
    let deadline = std::time::Instant::now() + TIMEOUT;
    let mut second = loop {
        match Connection::connect(&address) {
            Ok(conn) => break conn,
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "never let in: {e}");
                std::thread::sleep(quickbus_e2e::POLL_INTERVAL);
            }
        }
    };
    second.call(bus_call("GetId")).expect("the second client");
}
