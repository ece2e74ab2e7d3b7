//! The `quickbus` binary against a real bus daemon (QUICKBUS_TEST_DAEMON,
//! default the workspace's quickbus-daemon).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use quickbus_client::Connection;
use quickbus_e2e::Bus as TestBus;

/// Run `quickbus --address ADDR ARGS...`, killed if it outlives the limit.
fn quickbus(bus: &TestBus, args: &[&str]) -> Output {
    let mut argv = vec!["--address", bus.address()];
    argv.extend_from_slice(args);
    run(&argv, &[])
}

/// Run `quickbus --timeout 20 ARGS...` with only `env` as bus variables.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut argv = vec!["--timeout", "20"];
    argv.extend_from_slice(args);
    run_at(Path::new(env!("CARGO_BIN_EXE_quickbus")), &argv, env)
}

/// Run `program ARGS...` with only `env` as bus variables, killed if it
/// outlives the limit.
fn run_at(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .env_remove("DBUS_SYSTEM_BUS_ADDRESS")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start quickbus");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("wait for quickbus").is_some() {
            return child.wait_with_output().expect("collect output");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("collect output");
            panic!("quickbus {args:?} did not finish: {output:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn call_prints_the_reply_like_busctl() {
    let bus = TestBus::start();
    let out = quickbus(
        &bus,
        &[
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.GetNameOwner",
            "s",
            "org.freedesktop.DBus",
        ],
    );
    assert_eq!(stdout(&out), "s \"org.freedesktop.DBus\"\n");

    let out = quickbus(
        &bus,
        &[
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.NameHasOwner",
            "s",
            "org.example.Nobody",
        ],
    );
    assert_eq!(stdout(&out), "b false\n");
}

#[test]
fn call_sees_names_owned_by_others() {
    let bus = TestBus::start();
    let mut owner = bus.connect();
    assert_eq!(owner.request_name("org.example.Owned", 0).unwrap(), 1);
    let out = quickbus(
        &bus,
        &[
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.GetNameOwner",
            "s",
            "org.example.Owned",
        ],
    );
    assert_eq!(stdout(&out), format!("s \"{}\"\n", owner.unique_name()));
    let out = quickbus(
        &bus,
        &[
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.ListQueuedOwners",
            "s",
            "org.example.Owned",
        ],
    );
    assert_eq!(stdout(&out), format!("as 1 \"{}\"\n", owner.unique_name()));
}

#[test]
fn error_replies_go_to_stderr_with_exit_code_1() {
    let bus = TestBus::start();
    let out = quickbus(
        &bus,
        &[
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.GetNameOwner",
            "s",
            "org.example.Nobody",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("org.freedesktop.DBus.Error.NameHasNoOwner"),
        "{err}"
    );
}

#[test]
fn argument_mistakes_exit_1_without_a_bus() {
    let bus = TestBus::start();
    let out = quickbus(
        &bus,
        &[
            "call",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.GetNameOwner",
            "s",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("too few"));
}

#[test]
fn emit_reaches_a_listener_with_its_arguments() {
    let bus = TestBus::start();
    let mut listener = bus.connect();
    listener
        .add_match("type='signal',interface='org.example.Tool'")
        .unwrap();
    let out = quickbus(
        &bus,
        &[
            "emit",
            "/org/example",
            "org.example.Tool.Changed",
            "a{sv}",
            "2",
            "One",
            "s",
            "Eins",
            "Two",
            "u",
            "2",
        ],
    );
    stdout(&out);
    let message = receive_signal(&mut listener, "Changed");
    assert_eq!(message.path(), Some("/org/example"));
    assert_eq!(message.signature(), "a{sv}");
    assert_eq!(message.destination(), None);
}

#[test]
fn emit_with_destination_is_unicast() {
    let bus = TestBus::start();
    let mut target = bus.connect();
    let destination = target.unique_name().to_owned();
    let out = quickbus(
        &bus,
        &[
            "emit",
            "--destination",
            &destination,
            "/x",
            "org.example.Tool.Direct",
            "i",
            "-7",
        ],
    );
    stdout(&out);
    let message = receive_signal(&mut target, "Direct");
    assert_eq!(message.destination(), Some(destination.as_str()));
    assert_eq!(
        message.body_values().unwrap(),
        vec![quickbus_client::Value::Int32(-7)]
    );
}

fn receive_signal(conn: &mut Connection, member: &str) -> quickbus_client::Message {
    for _ in 0..100 {
        let (message, _) = conn.receive().expect("a signal");
        if message.member() == Some(member) {
            return message;
        }
    }
    panic!("no {member} signal");
}

#[test]
fn list_shows_names_with_owner_pid_and_uid() {
    let bus = TestBus::start();
    let mut owner = bus.connect();
    assert_eq!(owner.request_name("org.example.Listed", 0).unwrap(), 1);
    let out = stdout(&quickbus(&bus, &["list"]));
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "PID", "PROCESS", "UID", "CONNECTION"]);
    let row = lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cols| cols[0] == "org.example.Listed")
        .unwrap_or_else(|| panic!("name missing from:\n{out}"));
    assert_eq!(row[1], std::process::id().to_string());
    assert_eq!(row[3], rustix::process::getuid().as_raw().to_string());
    assert_eq!(row[4], owner.unique_name());
    assert!(out.contains("org.freedesktop.DBus"), "{out}");
    assert!(out.contains(owner.unique_name()), "{out}");

    let unique_only = stdout(&quickbus(&bus, &["list", "--unique"]));
    assert!(!unique_only.contains("org.example.Listed"), "{unique_only}");
    assert!(unique_only.contains(owner.unique_name()), "{unique_only}");
    let acquired = stdout(&quickbus(&bus, &["list", "--acquired"]));
    assert!(acquired.contains("org.example.Listed"), "{acquired}");
    assert!(
        !acquired.contains(&format!("\n{} ", owner.unique_name())),
        "{acquired}"
    );
}

#[test]
fn quiet_call_prints_nothing() {
    let bus = TestBus::start();
    let out = quickbus(
        &bus,
        &[
            "call",
            "--quiet",
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.GetId",
        ],
    );
    assert_eq!(stdout(&out), "");
}

#[test]
fn call_without_expecting_a_reply_returns_at_once() {
    let bus = TestBus::start();
    let mut silent = bus.connect();
    silent.request_name("org.example.Silent", 0).unwrap();
    let out = quickbus(
        &bus,
        &[
            "call",
            "--expect-reply=no",
            "org.example.Silent",
            "/",
            "org.example.Silent.Poke",
            "u",
            "5",
        ],
    );
    assert_eq!(stdout(&out), "");
    for _ in 0..100 {
        let (message, _) = silent.receive().expect("the call");
        if message.member() == Some("Poke") {
            assert_eq!(
                message.flags() & quickbus_wire::flags::NO_REPLY_EXPECTED,
                quickbus_wire::flags::NO_REPLY_EXPECTED
            );
            assert_eq!(
                message.body_values().unwrap(),
                vec![quickbus_client::Value::Uint32(5)]
            );
            return;
        }
    }
    panic!("the call never arrived");
}

#[test]
fn the_bus_comes_from_the_environment_by_default() {
    let bus = TestBus::start();
    let get_id = [
        "call",
        "org.freedesktop.DBus",
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus.GetId",
    ];
    let mut reference = bus.connect();
    let expected = format!("s \"{}\"\n", reference.get_id().unwrap());
    let session = run(&get_id, &[("DBUS_SESSION_BUS_ADDRESS", bus.address())]);
    assert_eq!(stdout(&session), expected);
    let mut system_args = vec!["--system"];
    system_args.extend_from_slice(&get_id);
    let system = run(&system_args, &[("DBUS_SYSTEM_BUS_ADDRESS", bus.address())]);
    assert_eq!(stdout(&system), expected);
    let nowhere = run(&get_id, &[]);
    assert_eq!(nowhere.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&nowhere.stderr).contains("DBUS_SESSION_BUS_ADDRESS"));
}

/// The quickbus binary hard-linked into a directory of its own (a link,
/// not a copy: nothing is written that a concurrent test's child could
/// hold open), with `quickbus-bench` beside it a link to `bench` if given.
fn quickbus_alone(name: &str, bench: Option<&str>) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let quickbus = dir.join("quickbus");
    std::fs::hard_link(env!("CARGO_BIN_EXE_quickbus"), &quickbus).unwrap();
    if let Some(bench) = bench {
        std::os::unix::fs::symlink(bench, dir.join("quickbus-bench")).unwrap();
    }
    quickbus
}

#[test]
fn bench_runs_the_benchmark_lab_beside_it_with_every_argument() {
    // quickbus-bench here is echo: what it prints are the arguments it got,
    // the global options and --help included.
    let quickbus = quickbus_alone("echo", Some("/bin/echo"));
    let args = ["restart", "--connections", "5", "--address", "x", "--help"];
    let mut argv = vec!["bench"];
    argv.extend_from_slice(&args);
    assert_eq!(
        stdout(&run_at(&quickbus, &argv, &[])),
        format!("{}\n", args.join(" "))
    );
    // Its exit status is the command's (here a shell's).
    let quickbus = quickbus_alone("sh", Some("/bin/sh"));
    let exited = run_at(&quickbus, &["bench", "-c", "exit 7"], &[]);
    assert_eq!(exited.status.code(), Some(7));
}

#[test]
fn bench_without_the_lab_says_where_it_comes_from() {
    let quickbus = quickbus_alone("missing", None);
    let missing = run_at(
        &quickbus,
        &["bench", "restart"],
        &[("PATH", "/nonexistent")],
    );
    assert_eq!(missing.status.code(), Some(1));
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(
        said.contains("quickbus-bench is not installed")
            && said.contains("cargo build --release -p quickbus-daemon -p quickbus-bench"),
        "{said}"
    );
}
