//! Service activation: `.service` files in a `<servicedir>` started by the
//! bus when a message (dbus-send) or StartServiceByName asks for their
//! name, with the real dbus-python service in python/activated.py, and
//! the errors of services that cannot start.

use std::path::{Path, PathBuf};

use quickbus_e2e::{python_path, python_script, Bus, Finished, Listen, TempDir};

const PATH: &str = "/org/example/Activated";
const IFACE: &str = "org.example.Activated";

/// A service directory and the bus that reads it.
struct Services {
    dir: TempDir,
    bus: Option<Bus>,
}

impl Services {
    /// A fresh, empty service directory; no bus yet.
    fn new() -> Services {
        Services {
            dir: TempDir::new(),
            bus: None,
        }
    }

    /// Start the bus reading the directory; `extra` goes into its
    /// configuration too.
    fn start(mut self, extra: &str) -> Services {
        let config = format!(
            "<servicedir>{}</servicedir>{extra}",
            self.dir.path().display()
        );
        self.bus = Some(Bus::start_with_config(Listen::UnixPath, &config));
        self
    }

    fn bus(&self) -> &Bus {
        self.bus.as_ref().expect("Services::start first")
    }

    /// Writes `<name>.service` with the given Exec line.
    fn add(&self, name: &str, exec: &str) {
        let path = self.dir.path().join(format!("{name}.service"));
        std::fs::write(
            &path,
            format!("[D-BUS Service]\nName={name}\nExec={exec}\n"),
        )
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    /// Writes a service file starting python/activated.py for `name`.
    fn add_python(&self, name: &str, options: &str) {
        let exec = format!(
            "{} {} {name} {options}",
            python_path().display(),
            python_script("activated.py").display()
        );
        self.add(name, &exec);
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// `dbus-send --print-reply --dest=<name> /org/example/Activated
    /// org.example.Activated.<method> <args>`
    fn call(&self, name: &str, method: &str, args: &[&str]) -> Finished {
        let dest = format!("--dest={name}");
        let member = format!("{IFACE}.{method}");
        let mut argv = vec!["--session", "--print-reply", &dest, PATH, &member];
        argv.extend_from_slice(args);
        self.bus().run("dbus-send", &argv)
    }

    /// StartServiceByName(name, 0) through dbus-send.
    fn start_service(&self, name: &str) -> Finished {
        let name = format!("string:{name}");
        self.bus().run(
            "dbus-send",
            &[
                "--session",
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.StartServiceByName",
                &name,
                "uint32:0",
            ],
        )
    }
}

/// The D-Bus error name dbus-send printed for a failed call.
fn error_name(out: &Finished) -> &str {
    out.stderr
        .trim_start()
        .strip_prefix("Error ")
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("no D-Bus error in {out:#?}"))
}

fn open_gate(path: &Path) {
    std::fs::write(path, b"open").expect("open the gate");
}

#[test]
fn a_message_starts_the_service_and_reaches_it() {
    let services = Services::new();
    services.add_python("org.example.Echo", "");
    let services = services.start("");
    let out = services
        .call("org.example.Echo", "Echo", &["string:hello"])
        .success();
    assert!(out.stdout.contains(r#"string "hello""#), "{out:#?}");
    // It runs with the starter environment, pointing at this bus.
    let out = services.call("org.example.Echo", "Starter", &[]).success();
    assert!(out.stdout.contains(r#"string "session""#), "{out:#?}");
    let bus_path = services
        .bus()
        .address()
        .split(',')
        .next()
        .unwrap()
        .to_owned();
    assert!(out.stdout.contains(&bus_path), "{out:#?}");
    services.call("org.example.Echo", "Exit", &[]).success();
}

#[test]
fn start_service_by_name_replies_success_then_already_running() {
    let services = Services::new();
    services.add_python("org.example.Started", "");
    let services = services.start("");
    let out = services.start_service("org.example.Started").success();
    assert!(out.stdout.contains("uint32 1"), "{out:#?}");
    let out = services.start_service("org.example.Started").success();
    assert!(out.stdout.contains("uint32 2"), "{out:#?}");
    services.call("org.example.Started", "Exit", &[]).success();
}

/// Messages sent while the service starts wait in the bus and arrive in
/// order; a ReloadConfig meanwhile does not lose them.
#[test]
fn messages_sent_during_a_slow_start_arrive_in_order() {
    let services = Services::new();
    let gate = services.path("gate");
    services.add_python("org.example.Slow", &format!("--gate {}", gate.display()));
    let services = services.start("");
    let mut peer = services.bus().peer();
    for text in ["one", "two", "three"] {
        let sent = peer.command(&format!(
            r#"call_noreply org.example.Slow {PATH} {IFACE} Echo s ["{text}"]"#
        ));
        assert_eq!(sent, "call_noreply sent");
    }
    // A round trip: the bus has queued all three before the gate opens.
    assert_eq!(peer.command("ping"), "pong");
    peer.bus("ReloadConfig", "-", "[]");
    open_gate(&gate);
    let reply = peer.command(&format!(
        r#"call org.example.Slow {PATH} {IFACE} Echo s ["four"]"#
    ));
    assert_eq!(reply, r#"call "four""#);
    let log = peer.command(&format!("call org.example.Slow {PATH} {IFACE} Log - []"));
    assert_eq!(log, r#"call ["one", "two", "three", "four"]"#);
    services.call("org.example.Slow", "Exit", &[]).success();
}

#[test]
fn a_service_that_exits_at_once_fails_with_child_exited() {
    let services = Services::new();
    services.add("org.example.Exits", "/bin/sh -c 'exit 3'");
    let services = services.start("");
    let out = services
        .call("org.example.Exits", "Echo", &["string:x"])
        .failure();
    assert_eq!(
        error_name(&out),
        "org.freedesktop.DBus.Error.Spawn.ChildExited"
    );
    let out = services.start_service("org.example.Exits").failure();
    assert_eq!(
        error_name(&out),
        "org.freedesktop.DBus.Error.Spawn.ChildExited"
    );
}

#[test]
fn a_missing_program_fails_with_exec_failed() {
    let services = Services::new();
    let missing = services.path("no-such-program");
    services.add("org.example.Missing", &missing.display().to_string());
    let services = services.start("");
    let out = services
        .call("org.example.Missing", "Echo", &["string:x"])
        .failure();
    assert_eq!(
        error_name(&out),
        "org.freedesktop.DBus.Error.Spawn.ExecFailed"
    );
}

#[test]
fn a_service_that_never_takes_its_name_times_out() {
    let services = Services::new();
    services.add_python("org.example.Shy", "--never-own");
    let services = services.start(r#"<limit name="service_start_timeout">500</limit>"#);
    let out = services
        .call("org.example.Shy", "Echo", &["string:x"])
        .failure();
    assert_eq!(error_name(&out), "org.freedesktop.DBus.Error.TimedOut");
}

/// A service file added after start-up is found after ReloadConfig.
#[test]
fn services_added_before_a_reload_can_be_started() {
    let services = Services::new().start("");
    let out = services
        .call("org.example.Late", "Echo", &["string:x"])
        .failure();
    assert_eq!(
        error_name(&out),
        "org.freedesktop.DBus.Error.ServiceUnknown"
    );
    services.add_python("org.example.Late", "");
    services.bus().reload_config();
    let out = services
        .call("org.example.Late", "Echo", &["string:late"])
        .success();
    assert!(out.stdout.contains(r#"string "late""#), "{out:#?}");
    services.call("org.example.Late", "Exit", &[]).success();
}

/// As with dbus-daemon, a name nobody knows makes the bus read its service
/// directories again: a file installed after start-up works at once.
#[test]
fn a_service_file_installed_later_is_found_without_a_reload() {
    let services = Services::new().start("");
    services.add_python("org.example.Installed", "");
    let out = services
        .call("org.example.Installed", "Echo", &["string:new"])
        .success();
    assert!(out.stdout.contains(r#"string "new""#), "{out:#?}");
    services
        .call("org.example.Installed", "Exit", &[])
        .success();
}
