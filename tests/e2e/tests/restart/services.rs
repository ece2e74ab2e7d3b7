//! What an exec passes on, before and after restarts in place: every
//! descriptor of the bus is close-on-exec, and a service the bus starts
//! gets nothing open but stdin, stdout and stderr (not the bus's
//! listening sockets and connections, which a new image takes over, nor
//! what the bus itself inherited), and the open-file limit the bus was
//! started with, not the one it raised for itself.

use std::process::Command;

use quickbus_e2e::{quickbus_daemon_path, skip, Bus, Listen, TempDir};

use super::{add_service, restart, wait_for_process_with};

/// The soft open-file limit the bus is started with (or the hard limit,
/// where that is lower), and both limits as /proc/PID/limits shows them.
fn start_limit() -> (u64, String) {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
    let soft = hard.map_or(512, |hard| hard.min(512));
    let hard = hard.map_or("unlimited".to_owned(), |hard| hard.to_string());
    (soft, format!("{soft} {hard}"))
}

/// Waits (bounded) until process `pid`, a `sleep`, sleeps: its new
/// command line shows before its exec has closed the close-on-exec
/// descriptors, and only then is what it holds its own. An exec in
/// progress is running or waits uninterruptibly; `S` is sleep's sleep.
fn wait_until_sleeping(pid: u32) {
    let deadline = std::time::Instant::now() + quickbus_e2e::TIMEOUT;
    while quickbus_e2e::process_state(pid) != Some('S') {
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} never slept"
        );
        std::thread::sleep(quickbus_e2e::POLL_INTERVAL);
    }
}

/// The descriptors process `pid` has open, in order.
fn open_fds(pid: u32) -> Vec<u32> {
    let mut fds: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort_unstable();
    fds
}

/// "soft hard" of process `pid`'s open-file limit, as /proc writes them.
fn fd_limit(pid: u32) -> String {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let fields: Vec<&str> = line["Max open files".len()..].split_whitespace().collect();
    format!("{} {}", fields[0], fields[1])
}

/// A bus reading `services`, started with a descriptor it does not know
/// (as from a careless parent; bash picks a free number, so it cannot
/// replace the one the address is printed on) and the soft open-file
/// limit of [`start_limit`], which it raises.
fn bus_inheriting_a_stray_fd(services: &TempDir) -> Bus {
    let (soft, _) = start_limit();
    let mut wrapper = Command::new("bash");
    wrapper.args([
        "-c",
        &format!("exec {{stray}}</dev/null; ulimit -S -n {soft} && exec \"$0\" \"$@\""),
    ]);
    wrapper.arg(quickbus_daemon_path());
    let dir = TempDir::new();
    let config = quickbus_e2e::write_config_with(
        dir.path(),
        Listen::UnixPath,
        &format!("<servicedir>{}</servicedir>", services.path().display()),
    );
    Bus::start_command(
        dir,
        wrapper,
        &[format!("--config-file={}", config.display())],
    )
}

/// The descriptors above stderr of process `pid` without close-on-exec
/// (`O_CLOEXEC` in the flags of /proc/PID/fdinfo).
fn inheritable_fds(pid: u32) -> Vec<u32> {
    const O_CLOEXEC: u32 = 0o2_000_000;
    open_fds(pid)
        .into_iter()
        .filter(|&fd| fd > 2)
        .filter(|fd| {
            // A descriptor closed meanwhile has no fdinfo: not inheritable.
            let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"));
            let flags = info.ok().and_then(|info| {
                let line = info.lines().find(|l| l.starts_with("flags:"))?;
                u32::from_str_radix(line["flags:".len()..].trim(), 8).ok()
            });
            flags.is_some_and(|flags| flags & O_CLOEXEC == 0)
        })
        .collect()
}

#[test]
fn every_descriptor_of_the_bus_is_close_on_exec_before_and_after_restarts() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    let services = TempDir::new();
    let bus = bus_inheriting_a_stray_fd(&services);
    // Connections the bus holds, as a restart hands them over.
    let mut client = bus.connect();
    let _peer = bus.peer();
    for restarts in 0..=3 {
        if restarts > 0 {
            restart(&bus, restarts - 1);
        }
        client.get_id().expect("the bus serves");
        assert_eq!(
            inheritable_fds(bus.pid()),
            Vec::<u32>::new(),
            "after {restarts} restarts"
        );
    }
}

#[test]
fn a_started_service_holds_only_stdio_and_the_starting_fd_limit_after_0_to_3_restarts() {
    if skip::quickbus_only("restarting in place") {
        return;
    }
    const NAME: &str = "org.example.Inspected";
    let (_, expected_limit) = start_limit();
    // The service sleeps, with an argument unique to this test process
    // (the pid at a fixed width: no other pid is a prefix of it), while
    // the test looks at it from outside: a program listing its own
    // descriptors would see the one it lists them with, a shell the ones
    // it saves.
    let marker = format!("3600.{:010}", std::process::id());
    let services = TempDir::new();
    add_service(&services, NAME, &format!("/bin/sleep {marker}"));
    let bus = bus_inheriting_a_stray_fd(&services);
    assert_ne!(
        fd_limit(bus.pid()),
        expected_limit,
        "the bus did not raise its limit: the test would prove nothing"
    );
    // Clients whose connections the bus holds, as a restart hands them over.
    let mut peer = bus.peer();
    let _client = bus.connect();
    for restarts in 0..=3 {
        if restarts > 0 {
            restart(&bus, restarts - 1);
        }
        peer.send(&format!("call {NAME} /x org.example.X Y - []"));
        let service = wait_for_process_with(&marker);
        wait_until_sleeping(service);
        let fds = open_fds(service);
        let limit = fd_limit(service);
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(service as i32).unwrap(),
            rustix::process::Signal::Kill,
        )
        .unwrap();
        let ended = peer.result();
        assert!(ended.contains("Spawn.ChildSignaled"), "{ended}");
        assert_eq!(
            fds,
            [0, 1, 2],
            "after {restarts} restarts the service holds descriptors of the bus"
        );
        assert_eq!(limit, expected_limit, "after {restarts} restarts");
    }
}
