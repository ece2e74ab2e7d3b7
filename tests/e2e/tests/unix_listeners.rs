//! The unix addresses whose socket the daemon names itself: `tmpdir=`,
//! `dir=` and `runtime=yes`, against dbus-daemon 1.14.10 (the reference,
//! run in the same test). Since dbus 1.14.4 (dbus#416) `tmpdir=` makes a
//! socket file as `dir=` does, never an abstract socket: an abstract
//! socket is reachable from every process that shares the network
//! namespace, a sandbox with its own /tmp included.

#[allow(dead_code)]
#[path = "restart/support.rs"]
mod restart_support;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use quickbus_e2e::{
    assert_guid_suffix, can_change_user, daemon_path, driver_call, run_bounded, skip,
    terminate_and_wait, write_config, write_reference_config, Background, Bus, Listen, TempDir,
};

const REFERENCE: &str = "/usr/bin/dbus-daemon";

/// What a daemon made of one listen address: the printed address with the
/// directory, the random part of the name and the guid replaced, the
/// socket files it created with their modes (octal), and what was left once it
/// stopped.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    address: String,
    files: Vec<(String, String)>,
    left_after_exit: Vec<String>,
}

/// The entries of `dir`, sorted, `dir/runtime` itself left out.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    found.sort();
    found
}

/// `dbus-` and ten ASCII letters or digits become `dbus-XXXXXXXXXX`.
fn hide_random_name(name: &str) -> String {
    match name.strip_prefix("dbus-") {
        Some(random) if random.len() == 10 && random.bytes().all(|b| b.is_ascii_alphanumeric()) => {
            "dbus-XXXXXXXXXX".to_owned()
        }
        _ => name.to_owned(),
    }
}

/// Runs `daemon --address=<address>` (`DIR` in it is a fresh directory
/// for sockets, and `XDG_RUNTIME_DIR` is that directory too), checks the
/// printed address serves, stops it and reports what it did.
fn listen_with(daemon: &Path, address: &str) -> Outcome {
    let scratch = TempDir::new();
    let config = if daemon == Path::new(REFERENCE) {
        write_reference_config(scratch.path(), Listen::UnixPath)
    } else {
        write_config(scratch.path(), Listen::UnixPath)
    };
    let sockets = scratch.path().join("sockets");
    std::fs::create_dir(&sockets).unwrap();
    let mut process = Background::spawn(
        Command::new(daemon)
            .env("XDG_RUNTIME_DIR", &sockets)
            .arg(format!("--config-file={}", config.display()))
            .arg(format!(
                "--address={}",
                address.replace("DIR", &sockets.display().to_string())
            ))
            .args(["--nofork", "--print-address"]),
    );
    let printed = process.read_line();
    assert_guid_suffix(&printed);
    let names = driver_call(&printed, "ListNames").success().stdout;
    assert!(names.contains("org.freedesktop.DBus"), "{names}");
    let files = entries(&sockets)
        .iter()
        .map(|path| {
            let meta = std::fs::symlink_metadata(path).unwrap();
            assert!(
                meta.file_type().is_socket(),
                "{} is not a socket",
                path.display()
            );
            let name = path.file_name().unwrap().to_string_lossy();
            (
                hide_random_name(&name),
                format!("{:o}", meta.permissions().mode() & 0o7777),
            )
        })
        .collect();
    terminate_and_wait(process.pid());
    let (without_guid, _) = printed.rsplit_once(",guid=").unwrap();
    let address = without_guid.replace(&sockets.display().to_string(), "DIR");
    let address = match address.rsplit_once('/') {
        Some((head, name)) => format!("{head}/{}", hide_random_name(name)),
        None => address,
    };
    Outcome {
        address,
        files,
        left_after_exit: entries(&sockets)
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
    }
}

#[test]
fn tmpdir_dir_and_runtime_make_the_socket_files_dbus_daemon_makes() {
    if skip::unless(
        Path::new(REFERENCE).is_file(),
        "needs the reference /usr/bin/dbus-daemon (package dbus-daemon)",
    ) {
        return;
    }
    for (address, expected) in [
        ("unix:tmpdir=DIR", "unix:path=DIR/dbus-XXXXXXXXXX"),
        ("unix:dir=DIR", "unix:path=DIR/dbus-XXXXXXXXXX"),
        ("unix:runtime=yes", "unix:path=DIR/bus"),
    ] {
        let reference = listen_with(Path::new(REFERENCE), address);
        let tested = listen_with(&daemon_path(), address);
        assert_eq!(reference.address, expected, "{address}: {reference:?}");
        assert_eq!(tested, reference, "{address}");
        // One socket file, open to everyone (the policy decides who may
        // connect), gone once the daemon stopped.
        let file = expected.rsplit('/').next().unwrap().to_owned();
        assert_eq!(tested.files, [(file, "777".to_owned())], "{address}");
        assert!(tested.left_after_exit.is_empty(), "{address}: {tested:?}");
    }
}

/// A process in a mount namespace of its own, with a tmpfs where the bus's
/// temporary directory was, but in the host's network namespace (as a
/// Flatpak sandbox is): it must not reach a bus that listens on
/// `unix:tmpdir=`. Before the fix the bus listened on an abstract socket,
/// which that process reached. Root: creating a mount namespace needs
/// CAP_SYS_ADMIN.
#[test]
fn a_process_with_its_own_tmp_cannot_reach_a_tmpdir_bus() {
    if skip::unless(can_change_user(), "needs root, to create a mount namespace") {
        return;
    }
    let bus = Bus::start_with(Listen::UnixTmpdir);
    let tmp = bus.dir().parent().unwrap().to_owned();
    let list_names = |mounts: &str| {
        let script = format!("set -e\n{mounts}\nexec \"$@\"");
        run_bounded(
            bus.client("unshare")
                .args(["-m", "--propagation", "private", "sh", "-c", &script])
                .arg(&tmp)
                .args([
                    "dbus-send",
                    "--session",
                    "--print-reply",
                    "--dest=org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.ListNames",
                ]),
        )
    };
    // The same namespace without the tmpfs reaches the bus: what fails
    // below is the view of the file system, nothing else.
    list_names("").success();
    let sandboxed = list_names("mount -t tmpfs sandbox \"$0\"").failure();
    assert!(
        !sandboxed.stdout.contains("org.freedesktop.DBus"),
        "{}: {sandboxed:#?}",
        bus.address()
    );
}

/// The socket file of a `unix:tmpdir=` bus crosses restarts in place (the
/// same file serves new clients after each) and is removed when the bus
/// stops, by the image that did not create it.
#[test]
fn a_tmpdir_socket_file_serves_across_restarts_and_goes_when_the_bus_stops() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let bus = Bus::start_with(Listen::UnixTmpdir);
    let socket = bus
        .address()
        .strip_prefix("unix:path=")
        .and_then(|rest| rest.split(',').next())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("not a socket file: {}", bus.address()));
    // A round trip first: the daemon prints its address before its main
    // loop (and its SIGUSR2 handler) runs.
    driver_call(bus.address(), "ListNames").success();
    for i in 0..2 {
        restart_support::restart(&bus, i);
        assert!(
            socket.exists(),
            "{} gone after restart {i}",
            socket.display()
        );
        driver_call(bus.address(), "ListNames").success();
    }
    // SIGTERM, and the check before the bus's directory goes with `bus`.
    terminate_and_wait(bus.pid());
    assert!(!socket.exists(), "{} left behind", socket.display());
}
