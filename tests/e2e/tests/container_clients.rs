//! Real clients (gdbus, busctl, dbus-python) through a container server's
//! socket (org.freedesktop.DBus.Containers1.AddServer, unfiltered), and a
//! portal-style dbus-python service on the bus's own socket (python/portal.py)
//! that learns who calls it from GetConnectionCredentials: the caller's
//! container instance and its own pid, with no proxy in between.

use std::process::Command;

use quickbus_client::{containers1, Connection, Value};
use quickbus_e2e::containers1::{
    connection_credential, ensure_socket_dir, skip_without_containers1, INSTANCE_KEY,
};
use quickbus_e2e::{python_path, python_script, run_bounded, Background, Bus};

/// A container instance, alive while its creator stays connected.
struct Container {
    _creator: Connection,
    path: String,
    address: String,
}

/// AddServer with no named arguments, as a container manager calls it.
fn add_server(bus: &Bus) -> Container {
    ensure_socket_dir();
    let mut creator = bus.connect();
    let request = containers1::Request {
        container_type: "com.example.NotFlatpak".into(),
        name: "sample-app".into(),
        metadata: Vec::new(),
        filter: None,
    };
    let instance = containers1::add_server(&mut creator, &request)
        .unwrap_or_else(|e| panic!("{e}; daemon log: {}", bus.log()));
    Container {
        path: instance.path,
        address: instance.address,
        _creator: creator,
    }
}

/// A bus and a container server on it; `None` when the test cannot run
/// here (see [`skip_without_containers1`]).
fn bus_with_container() -> Option<(Bus, Container)> {
    let bus = Bus::start();
    if skip_without_containers1(&bus) {
        return None;
    }
    let container = add_server(&bus);
    Some((bus, container))
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
/// and then becomes the program: the client's pid, and the rest of its
/// output, trimmed.
fn run_through(bus: &Bus, container: &Container, program: &str, args: &[&str]) -> (u32, String) {
    let mut command: Command = bus.client("sh");
    command
        .env("DBUS_SESSION_BUS_ADDRESS", &container.address)
        .args(["-c", "echo $$; exec \"$@\"", "sh", program])
        .args(args);
    let finished = run_bounded(&mut command).success();
    let (pid, rest) = finished.stdout.split_once('\n').expect("a pid line");
    (pid.parse().expect("a pid"), rest.trim().to_owned())
}

/// `gdbus call --session` through `container`: the client's pid and the
/// reply as gdbus prints it.
fn gdbus_call(
    bus: &Bus,
    container: &Container,
    dest: &str,
    path: &str,
    method: &str,
) -> (u32, String) {
    let argv = [
        "call",
        "--session",
        "--dest",
        dest,
        "--object-path",
        path,
        "--method",
        method,
    ];
    run_through(bus, container, "gdbus", &argv)
}

/// `busctl --user call` through `container`: the client's pid and the
/// reply as busctl prints it.
fn busctl_call(
    bus: &Bus,
    container: &Container,
    dest: &str,
    path: &str,
    method: &str,
) -> (u32, String) {
    let (interface, member) = method.rsplit_once('.').expect("INTERFACE.MEMBER");
    let argv = [
        "--user",
        "--no-pager",
        "call",
        dest,
        path,
        interface,
        member,
    ];
    run_through(bus, container, "busctl", &argv)
}

const PORTAL: [&str; 3] = [
    "com.example.Portal",
    "/com/example/Portal",
    "com.example.Portal.WhoAmI",
];
const DRIVER: [&str; 2] = ["org.freedesktop.DBus", "/org/freedesktop/DBus"];

#[test]
fn gdbus_and_busctl_through_a_container_are_seen_by_a_portal_with_their_instance_and_pid() {
    let Some((bus, container)) = bus_with_container() else {
        return;
    };
    let _portal = start_portal(&bus);
    let [dest, path, method] = PORTAL;
    let (pid, reply) = gdbus_call(&bus, &container, dest, path, method);
    assert_eq!(reply, format!("('{}', uint32 {pid})", container.path));
    let (pid, reply) = busctl_call(&bus, &container, dest, path, method);
    assert_eq!(reply, format!("su \"{}\" {pid}", container.path));
}

#[test]
fn busctl_and_gdbus_reach_the_driver_through_a_container() {
    let Some((bus, container)) = bus_with_container() else {
        return;
    };
    let id = bus.connect().get_id().unwrap();
    let [dest, path] = DRIVER;
    let (_, reply) = busctl_call(&bus, &container, dest, path, "org.freedesktop.DBus.GetId");
    assert_eq!(reply, format!("s \"{id}\""));
    let (_, reply) = gdbus_call(
        &bus,
        &container,
        dest,
        path,
        "org.freedesktop.DBus.ListNames",
    );
    assert!(reply.contains("'org.freedesktop.DBus'"), "{reply}");
}

#[test]
fn a_python_client_through_a_container_is_itself_to_a_portal() {
    let Some((bus, container)) = bus_with_container() else {
        return;
    };
    let mut portal = start_portal(&bus);
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
    let Some((bus, container)) = bus_with_container() else {
        return;
    };
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
