//! `quickbus sandbox` against a real bus daemon (QUICKBUS_TEST_DAEMON,
//! default the workspace's quickbus-daemon): COMMAND runs on its own
//! container server, is the app the bus sees, gets what the policy allows,
//! and the instance is gone when COMMAND exits.

use std::path::Path;
use std::process::{Command, ExitStatus};

use quickbus_client::{bus_call, CallError, Connection, Value};
use quickbus_e2e::containers1::{
    connection_credential, skip_without_containers1, CONTAINERS1, INSTANCE_KEY,
};
use quickbus_e2e::{python_path, run_bounded, Background, Bus as TestBus, Finished, Peer};
use rustix::process::{kill_process, Pid, Signal};

/// `quickbus --address BUS --timeout 20 sandbox ARGS...`, with the bus
/// variables of a client of `bus`.
fn sandbox(bus: &TestBus, args: &[&str]) -> Command {
    quickbus_e2e::containers1::ensure_socket_dir();
    let mut command = bus.client(env!("CARGO_BIN_EXE_quickbus"));
    command
        .args(["--address", bus.address(), "--timeout", "20", "sandbox"])
        .args(args);
    command
}

/// A dbus-python peer (tests/e2e/python/peer.py) run by `quickbus sandbox
/// ARGS... -- python3`.
fn sandboxed_peer(bus: &TestBus, args: &[&str]) -> Peer {
    let mut command = sandbox(bus, args);
    command.arg("--").arg(python_path());
    Peer::start(command)
}

/// A dbus-python peer on the bus's own socket that owns `name` and serves
/// com.example.Test at /t.
fn service(bus: &TestBus, name: &str) -> Peer {
    let mut peer = bus.peer();
    assert_eq!(peer.request_name(name, 0), 1);
    peer.serve("/t");
    peer
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| panic!("quickbus sandbox itself was killed: {status:?}"))
}

fn get_instance_info(conn: &mut Connection, path: &str) -> Result<Vec<Value>, CallError> {
    let reply = conn.call(
        bus_call("GetInstanceInfo")
            .interface(CONTAINERS1)
            .body(vec![Value::ObjectPath(path.into())]),
    )?;
    Ok(reply.body_values()?)
}

#[test]
fn the_command_is_the_app_on_its_own_instance_which_is_gone_after_it_exits() {
    let bus = TestBus::start();
    if skip_without_containers1(&bus) {
        return;
    }
    let address_file = bus.dir().join("address");
    // A shell writes down its bus address, then becomes the python peer.
    let mut command = sandbox(
        &bus,
        &[
            "--name=sample-app",
            "--metadata=Version=1.0",
            "--",
            "sh",
            "-c",
        ],
    );
    command
        .arg(format!(
            "echo \"$DBUS_SESSION_BUS_ADDRESS\" > {}; exec \"$@\"",
            address_file.display()
        ))
        .arg("sh")
        .arg(python_path());
    let peer = Peer::start(command);
    let mut observer = bus.connect();

    let Some(Value::ObjectPath(instance)) =
        connection_credential(&mut observer, peer.unique_name(), INSTANCE_KEY)
    else {
        panic!("the app is in no container; daemon log: {}", bus.log());
    };
    // The app's own pid: no process stands between it and the bus.
    assert_eq!(
        connection_credential(&mut observer, peer.unique_name(), "ProcessID"),
        Some(Value::Uint32(peer.pid()))
    );
    let info = get_instance_info(&mut observer, &instance).expect("GetInstanceInfo");
    assert_eq!(info[1], Value::String("org.quickbus.Sandbox".into()));
    assert_eq!(info[2], Value::String("sample-app".into()));
    let Value::Array { items, .. } = &info[3] else {
        panic!("{info:?}")
    };
    assert_eq!(
        items,
        &[Value::DictEntry(
            Box::new(Value::String("Version".into())),
            Box::new(Value::Variant(Box::new(Value::String("1.0".into()))))
        )]
    );

    let address = std::fs::read_to_string(&address_file).unwrap();
    let socket = address
        .trim()
        .strip_prefix("unix:path=")
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("not a path address: {address:?}"))
        .to_owned();
    assert_ne!(address.trim(), bus.address());
    assert!(Path::new(&socket).exists(), "{socket}");

    assert_eq!(exit_code(peer.finish()), 0);
    assert!(
        get_instance_info(&mut observer, &instance).is_err(),
        "{instance} still exists"
    );
    assert!(!Path::new(&socket).exists(), "{socket} is still there");
}

#[test]
fn the_exit_status_is_the_commands() {
    let bus = TestBus::start();
    if skip_without_containers1(&bus) {
        return;
    }
    let run = |args: &[&str]| run_bounded(&mut sandbox(&bus, args));
    assert_eq!(exit_code(run(&["--", "sh", "-c", "exit 7"]).status), 7);
    assert_eq!(exit_code(run(&["--", "true"]).status), 0);
    // Killed by SIGTERM: 128 + 15, as a shell says.
    let killed = run(&["--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(exit_code(killed.status), 143, "{killed:#?}");
    // Not found: 127, as a shell says.
    let missing = run(&["--", "/nonexistent/quickbus-test-app"]);
    assert_eq!(exit_code(missing.status), 127, "{missing:#?}");
    assert!(
        missing.stderr.contains("/nonexistent/quickbus-test-app"),
        "{missing:#?}"
    );
}

#[test]
fn a_refused_container_is_a_clear_error_and_the_command_does_not_run() {
    let bus = TestBus::start();
    if skip_without_containers1(&bus) {
        return;
    }
    let ran = bus.dir().join("ran");
    let ran_text = ran.display().to_string();
    let refused = run_bounded(&mut sandbox(
        &bus,
        &["--type=not an interface", "--", "touch", &ran_text],
    ));
    assert_eq!(exit_code(refused.status), 125, "{refused:#?}");
    assert_eq!(refused.stderr.lines().count(), 1, "{refused:#?}");
    assert!(
        refused
            .stderr
            .contains("AddServer failed: org.freedesktop.DBus.Error.InvalidArgs"),
        "{refused:#?}"
    );
    assert!(!ran.exists());
}

#[test]
fn an_unreachable_bus_is_a_clear_error_and_the_command_does_not_run() {
    let bus = TestBus::start();
    let ran = bus.dir().join("ran");
    let missing = format!("unix:path={}", bus.dir().join("nobody").display());
    let mut command = bus.client(env!("CARGO_BIN_EXE_quickbus"));
    command.args(["--address", &missing, "sandbox", "--", "touch"]);
    command.arg(&ran);
    let failed: Finished = run_bounded(&mut command);
    assert_eq!(exit_code(failed.status), 125, "{failed:#?}");
    assert_eq!(failed.stderr.lines().count(), 1, "{failed:#?}");
    assert!(failed.stderr.contains("nobody"), "{failed:#?}");
    assert!(!ran.exists());
}

#[test]
fn sigterm_to_the_launcher_reaches_the_command() {
    let bus = TestBus::start();
    if skip_without_containers1(&bus) {
        return;
    }
    let mut launcher = Background::spawn(&mut sandbox(
        &bus,
        &[
            "--",
            "sh",
            "-c",
            "trap 'exit 42' TERM; echo ready; while :; do sleep 0.1; done",
        ],
    ));
    launcher.wait_for_line(|line| line == "ready");
    let pid = Pid::from_raw(launcher.pid() as i32).expect("a pid");
    kill_process(pid, Signal::Term).expect("kill -TERM");
    assert_eq!(exit_code(launcher.wait()), 42, "{}", launcher.stderr());
}

#[test]
fn talk_lets_the_app_call_that_name_and_nothing_else() {
    let bus = TestBus::start();
    if skip_without_containers1(&bus) {
        return;
    }
    let _allowed = service(&bus, "com.example.Allowed");
    let mut other = service(&bus, "com.example.Other");

    let mut app = sandboxed_peer(&bus, &["--talk=com.example.Allowed"]);
    let call = |app: &mut Peer, name: &str| {
        app.command(&format!("call {name} /t com.example.Test Echo s [\"hi\"]"))
    };
    assert_eq!(call(&mut app, "com.example.Allowed"), "call \"hi\"");
    let refused = call(&mut app, "com.example.Other");
    assert!(
        refused.starts_with("error org.freedesktop.DBus.Error.ServiceUnknown "),
        "{refused}"
    );
    // The other service was never called: reading its output up to a
    // fresh round trip collects every call it had received.
    assert_eq!(other.command("ping"), "pong");
    assert!(
        !other.events().iter().any(|e| e.starts_with("called ")),
        "{:?}",
        other.events()
    );
    assert_eq!(exit_code(app.finish()), 0);
}

#[test]
fn filter_with_no_rule_leaves_only_the_bus_driver() {
    let bus = TestBus::start();
    if skip_without_containers1(&bus) {
        return;
    }
    let _service = service(&bus, "com.example.Service");

    let mut app = sandboxed_peer(&bus, &["--filter"]);
    let names = app.bus("ListNames", "-", "[]");
    assert!(!names.contains("com.example.Service"), "{names}");
    let refused = app.command("call com.example.Service /t com.example.Test Echo s [\"hi\"]");
    assert!(
        refused.starts_with("error org.freedesktop.DBus.Error.ServiceUnknown "),
        "{refused}"
    );
    assert_eq!(exit_code(app.finish()), 0);
}
