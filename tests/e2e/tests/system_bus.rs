//! `--system` with the distribution's own /usr/share/dbus-1/system.conf
//! and the system.d files Debian packages install (systemd's login1 and
//! hostname1 ones here): the daemon drops to `<user>` after binding,
//! writes its `<pidfile>`, and its real rules hold for clients running as
//! root and as nobody. Needs root (fails otherwise, see `quickbus_e2e::skip`): the daemon must be
//! able to change user, and the clients run as other users.

use std::path::Path;

use quickbus_e2e::{can_change_user, run_bounded, skip, Bus, TempDir};

const ACCESS_DENIED: &str = "org.freedesktop.DBus.Error.AccessDenied";
const SYSTEM_CONF: &str = "/usr/share/dbus-1/system.conf";
const NOBODY: u32 = 65534;
const NOGROUP: u32 = 65534;

/// Whether this test can run here (else it is skipped or fails, see
/// [`skip`]).
fn usable() -> bool {
    !skip::unless(can_change_user(), "needs root, to change users")
        && !skip::unless(
            Path::new(SYSTEM_CONF).exists(),
            &format!("no {SYSTEM_CONF} (package dbus-daemon)"),
        )
}

/// The uid of `user` from /etc/passwd.
fn uid_of(user: &str) -> u32 {
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&user)).then(|| fields.get(2)?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no user {user}"))
}

/// The effective uid of a running process, from /proc.
fn process_uid(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let line = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .expect("Uid line");
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// `quickbus-daemon --system`, listening in a scratch directory instead
/// of /run/dbus, without the pid file in /run.
fn system_bus() -> Bus {
    let dir = TempDir::new();
    let address = format!("--address=unix:path={}", dir.path().join("bus").display());
    Bus::start_args(dir, &["--system".into(), address, "--nopidfile".into()])
}

/// dbus-send as `uid`:`gid` calling `member` on `dest`; Ok(stdout) or
/// Err(stderr).
fn send_as(
    bus: &Bus,
    ids: (u32, u32),
    dest: &str,
    path: &str,
    member: &str,
    args: &[&str],
) -> Result<String, String> {
    let finished = run_bounded(
        bus.client_as("dbus-send", ids.0, ids.1)
            .args([
                "--session",
                "--print-reply",
                &format!("--dest={dest}"),
                path,
                member,
            ])
            .args(args),
    );
    if finished.status.success() {
        Ok(finished.stdout)
    } else {
        Err(finished.stderr)
    }
}

fn driver_as(bus: &Bus, ids: (u32, u32), member: &str, args: &[&str]) -> Result<String, String> {
    send_as(
        bus,
        ids,
        "org.freedesktop.DBus",
        "/org/freedesktop/DBus",
        &format!("org.freedesktop.DBus.{member}"),
        args,
    )
}

fn denied(outcome: Result<String, String>) -> bool {
    matches!(outcome, Err(text) if text.contains(ACCESS_DENIED))
}

#[test]
fn system_conf_rules_hold_for_root_and_nobody() {
    if !usable() {
        return;
    }
    let bus = system_bus();
    let root = (0, 0);
    let nobody = (NOBODY, NOGROUP);

    // Anyone may talk to the bus itself...
    assert!(driver_as(&bus, nobody, "GetId", &[]).is_ok());
    assert!(driver_as(&bus, nobody, "ListNames", &[]).is_ok());
    // ...except what system.conf denies.
    assert!(denied(driver_as(
        &bus,
        nobody,
        "UpdateActivationEnvironment",
        &["dict:string:string:A,B"]
    )));
    // Names: `<deny own="*"/>`, holes for root in system.d files.
    let hostname = ["string:org.freedesktop.hostname1", "uint32:0"];
    assert!(denied(driver_as(&bus, nobody, "RequestName", &hostname)));
    assert!(denied(driver_as(
        &bus,
        nobody,
        "RequestName",
        &["string:com.example.Anything", "uint32:0"]
    )));
    assert!(driver_as(&bus, root, "RequestName", &hostname).is_ok());

    // login1.conf: everyone may use a few interfaces of login1, only
    // root anything else. A root python peer plays login1.
    let mut login1 = bus.peer();
    assert_eq!(login1.request_name("org.freedesktop.login1", 0), 1);
    login1.serve("/obj");
    let echo = ["com.example.Test.Echo", "string:hi"];
    let to_login1 = |ids, member: &str, args: &[&str]| {
        send_as(&bus, ids, "org.freedesktop.login1", "/obj", member, args)
    };
    assert!(denied(to_login1(nobody, echo[0], &echo[1..])));
    assert!(to_login1(nobody, "org.freedesktop.DBus.Peer.Ping", &[]).is_ok());
    assert!(to_login1(root, echo[0], &echo[1..]).is_ok_and(|out| out.contains("\"hi\"")));
}

#[test]
fn system_bus_drops_to_its_user_after_writing_its_pid_file() {
    if !usable() {
        return;
    }
    let dir = TempDir::new();
    let pidfile = dir.path().join("pid");
    // The distribution's file, with the pid file moved out of /run (the
    // last <pidfile> wins, as in dbus-daemon).
    let config = dir.path().join("system-test.conf");
    std::fs::write(
        &config,
        format!(
            "<busconfig><include>{SYSTEM_CONF}</include><pidfile>{}</pidfile></busconfig>",
            pidfile.display()
        ),
    )
    .unwrap();
    let address = format!("--address=unix:path={}", dir.path().join("bus").display());
    let config_arg = format!("--config-file={}", config.display());
    let bus = Bus::start_args(dir, &[config_arg, address]);

    // The bus reports its new uid for itself. This first round trip also
    // proves start-up is over: both daemons print their address before
    // they write the pid file and change user, and serve only after.
    let messagebus = uid_of("messagebus");
    let reply = driver_as(
        &bus,
        (0, 0),
        "GetConnectionUnixUser",
        &["string:org.freedesktop.DBus"],
    )
    .expect("GetConnectionUnixUser");
    assert!(reply.contains(&format!("uint32 {messagebus}")), "{reply}");
    let written = std::fs::read_to_string(&pidfile).expect("pid file");
    assert_eq!(written, format!("{}\n", bus.pid()));
    assert_eq!(process_uid(bus.pid()), messagebus);
}
