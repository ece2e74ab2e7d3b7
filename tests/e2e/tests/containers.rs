//! Real clients (gdbus, busctl, dbus-python) through a container server's
//! socket (org.freedesktop.DBus.Containers1.AddServer, unfiltered), and a
//! portal-style dbus-python service on the bus's own socket (python/portal.py)
//! that learns who calls it from GetConnectionCredentials: the caller's
//! container instance and its own pid, with no proxy in between.

use std::process::Command;

use quickbus_client::{bus_call, Connection, Value};
use quickbus_e2e::containers1::{
    connection_credential, skip_without_containers1, CONTAINERS1, INSTANCE_KEY,
};
use quickbus_e2e::{python_path, python_script, run_bounded, Background, Bus, Finished};

/// A container instance, alive while its creator stays connected.
struct Container {
    _creator: Connection,
    path: String,
    address: String,
}

/// AddServer with no named arguments, as a container manager calls it.
fn add_server(bus: &Bus) -> Container {
    let mut creator = bus.connect();
    let empty_dict = || Value::Array {
        elem_sig: "{sv}".into(),
        items: vec![],
    };
    let reply = creator
        .call(bus_call("AddServer").interface(CONTAINERS1).body(vec![
            Value::String("com.example.NotFlatpak".into()),
            Value::String("sample-app".into()),
            empty_dict(),
            empty_dict(),
        ]))
        .unwrap_or_else(|e| panic!("AddServer: {e}; daemon log: {}", bus.log()));
    match reply.body_values().unwrap().as_slice() {
        [Value::ObjectPath(path), Value::Array { .. }, Value::String(address)] => Container {
            path: path.clone(),
            address: address.clone(),
            _creator: creator,
        },
        other => panic!("AddServer replied {other:?}"),
    }
}

/// python/portal.py on the bus's own socket, ready once it owns its name.
fn start_portal(bus: &Bus) -> Background {
    let mut portal = Background::spawn(
        bus.client(python_path())
            .arg("-u")
            .arg(python_script("portal.py")),
    );
    portal.wait_for_line(|line| line.starts_with("ready "));
    portal
}

/// `program args...` through `container`, from a shell that prints its pid
/// and then becomes the program, so the first line of stdout is the
/// client's pid.
fn run_through(bus: &Bus, container: &Container, program: &str, args: &[&str]) -> (u32, Finished) {
    let mut command: Command = bus.client("sh");
    command
        .env("DBUS_SESSION_BUS_ADDRESS", &container.address)
        .args(["-c", "echo $$; exec \"$@\"", "sh", program])
        .args(args);
    let finished = run_bounded(&mut command).success();
    let (pid, rest) = finished.stdout.split_once('\n').expect("a pid line");
    let pid = pid.parse().expect("a pid");
    let stdout = rest.to_owned();
    (pid, Finished { stdout, ..finished })
}

#[test]
fn gdbus_through_a_container_is_seen_by_a_portal_with_its_instance_and_pid() {
    let bus = Bus::start();
    if skip_without_containers1(&bus) {
        return;
    }
    let _portal = start_portal(&bus);
    let container = add_server(&bus);
    let (pid, out) = run_through(
        &bus,
        &container,
        "gdbus",
        &[
            "call",
            "--session",
            "--dest",
            "com.example.Portal",
            "--object-path",
            "/com/example/Portal",
            "--method",
            "com.example.Portal.WhoAmI",
        ],
    );
    assert_eq!(
        out.stdout.trim(),
        format!("('{}', uint32 {pid})", container.path),
        "{out:#?}"
    );
}

#[test]
fn busctl_through_a_container_is_seen_by_a_portal_with_its_instance_and_pid() {
    let bus = Bus::start();
    if skip_without_containers1(&bus) {
        return;
    }
    let _portal = start_portal(&bus);
    let container = add_server(&bus);
    let (pid, out) = run_through(
        &bus,
        &container,
        "busctl",
        &[
            "--user",
            "--no-pager",
            "call",
            "com.example.Portal",
            "/com/example/Portal",
            "com.example.Portal",
            "WhoAmI",
        ],
    );
    assert_eq!(
        out.stdout.trim(),
        format!("su \"{}\" {pid}", container.path),
        "{out:#?}"
    );
}

#[test]
fn busctl_and_gdbus_reach_the_driver_through_a_container() {
    let bus = Bus::start();
    if skip_without_containers1(&bus) {
        return;
    }
    let container = add_server(&bus);
    let id = bus.connect().get_id().unwrap();
    let (_, out) = run_through(
        &bus,
        &container,
        "busctl",
        &[
            "--user",
            "--no-pager",
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "GetId",
        ],
    );
    assert_eq!(out.stdout.trim(), format!("s \"{id}\""), "{out:#?}");
    let (_, out) = run_through(
        &bus,
        &container,
        "gdbus",
        &[
            "call",
            "--session",
            "--dest",
            "org.freedesktop.DBus",
            "--object-path",
            "/org/freedesktop/DBus",
            "--method",
            "org.freedesktop.DBus.ListNames",
        ],
    );
    assert!(out.stdout.contains("'org.freedesktop.DBus'"), "{out:#?}");
}

#[test]
fn a_python_client_through_a_container_is_itself_to_a_portal() {
    let bus = Bus::start();
    if skip_without_containers1(&bus) {
        return;
    }
    let mut portal = start_portal(&bus);
    let container = add_server(&bus);
    let mut contained = bus.peer_at(&container.address);
    let mut outside = bus.peer();
    let ask = |peer: &mut quickbus_e2e::Peer| {
        peer.command("call com.example.Portal /com/example/Portal com.example.Portal WhoAmI - []")
    };
    assert_eq!(
        ask(&mut contained),
        format!("call [\"{}\", {}]", container.path, contained.pid())
    );
    portal.wait_for_line(|line| {
        line == format!(
            "whoami {} {} {}",
            contained.unique_name(),
            container.path,
            contained.pid()
        )
    });
    // A connection to the bus's own socket is in no container.
    assert_eq!(ask(&mut outside), format!("call [\"\", {}]", outside.pid()));
}

#[test]
fn get_connection_credentials_of_a_contained_client_names_its_instance_and_its_pid() {
    let bus = Bus::start();
    if skip_without_containers1(&bus) {
        return;
    }
    let container = add_server(&bus);
    let contained = bus.peer_at(&container.address);
    let outside = bus.peer();
    let mut observer = bus.connect();
    assert_eq!(
        connection_credential(&mut observer, contained.unique_name(), INSTANCE_KEY),
        Some(Value::ObjectPath(container.path.clone()))
    );
    assert_eq!(
        connection_credential(&mut observer, contained.unique_name(), "ProcessID"),
        Some(Value::Uint32(contained.pid()))
    );
    assert_eq!(
        connection_credential(&mut observer, outside.unique_name(), INSTANCE_KEY),
        None
    );
}
