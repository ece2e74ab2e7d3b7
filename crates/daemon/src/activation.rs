//! Starting the program of a `.service` file when the bus asks for it
//! ([`quickbus_bus::Action::Activate`]), and turning its early death into
//! the error every waiter gets.
//!
//! The child gets dbus-daemon's treatment: the `Exec=` line split with
//! shell-like quoting, the daemon's environment plus the activation
//! environment and `DBUS_STARTER_ADDRESS`/`DBUS_STARTER_BUS_TYPE`, stdin
//! from /dev/null, no other descriptor than stdin, stdout and stderr, the
//! open-file limit the bus started with, its own process group, and on a
//! system bus run by root the `User=` of its file with that user's groups
//! (`initgroups`). A child that exits with status 0 is not a failure (a
//! service may fork into the background); any other exit before the name
//! is taken is.
//!
//! With `<servicehelper>` (Debian's system.conf names
//! dbus-daemon-launch-helper) the daemon runs the helper instead, as
//! dbus-daemon does: `HELPER NAME`, with the same environment. The setuid
//! helper finds the service file in the system service directories
//! itself, checks it, switches to its `User=` and execs it; its exit codes
//! ([`helper_exit_error`]) name what went wrong.
//!
//! The program is spawned on the spawner's thread (`spawner`), never on
//! the bus's loop: a child that inherited a descriptor whose close
//! blocks does not get past its exec, and the spawn waits for the exec.
//! What the spawn gives comes back through [`Launcher::reap`] (SIGCHLD):
//! the child's pid, to watch, or why it could not be spawned, which
//! fails the activation as an early exit does.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

use quickbus_bus::activation::FoundService;
use quickbus_bus::errors::{self, BusError};
use quickbus_bus::Requester;
use std::os::unix::process::CommandExt;
use tracing::{debug, info, warn};

use crate::fd_limit::StartLimit;
use crate::service_file::{self, ServiceFile};
use crate::spawner::{Job, Spawner};

/// The `.service` files the daemon knows and the directories they came
/// from. A name nobody knows makes the directories be read again
/// ([`quickbus_bus::Action::LookUpService`]), as dbus-daemon does, but
/// only when one of them changed since the last reading.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct ServiceTable {
    dirs: Vec<PathBuf>,
    /// Each directory's mtime at the last reading (None: unreadable).
    dir_times: Vec<Option<SystemTime>>,
    /// When the directories were last read.
    read_at: Option<SystemTime>,
    services: HashMap<String, ServiceFile>,
}

/// The coarsest directory mtime resolution we allow for: within this of the
/// last reading, an unchanged mtime proves nothing.
const MTIME_GRANULARITY: std::time::Duration = std::time::Duration::from_secs(2);

fn dir_times(dirs: &[PathBuf]) -> Vec<Option<SystemTime>> {
    dirs.iter()
        .map(|d| std::fs::metadata(d).and_then(|m| m.modified()).ok())
        .collect()
}

impl ServiceTable {
    /// `services` as just read from `dirs`.
    pub fn new(dirs: Vec<PathBuf>, services: Vec<ServiceFile>) -> ServiceTable {
        let mut table = ServiceTable::default();
        table.replace(dirs, services);
        table
    }

    /// After a reload: new activations use these.
    pub fn replace(&mut self, dirs: Vec<PathBuf>, services: Vec<ServiceFile>) {
        self.read_at = Some(SystemTime::now());
        self.dir_times = dir_times(&dirs);
        self.dirs = dirs;
        self.services = services.into_iter().map(|s| (s.name.clone(), s)).collect();
    }

    pub fn get(&self, name: &str) -> Option<&ServiceFile> {
        self.services.get(name)
    }

    /// `name` is not known: read the directories again if one changed,
    /// and return its file if one appeared. Known names keep their files
    /// (a reload replaces them).
    pub fn find_new(&mut self, name: &str) -> Option<&ServiceFile> {
        let times = dir_times(&self.dirs);
        if times != self.dir_times || self.may_hide_changes() {
            self.read_at = Some(SystemTime::now());
            self.dir_times = times;
            for service in service_file::scan(&self.dirs, |w| warn!("{w}")) {
                self.services.entry(service.name.clone()).or_insert(service);
            }
        }
        self.services.get(name)
    }

    /// Whether a directory changed so close to the last reading that a
    /// coarse file-system clock could hide a later change.
    fn may_hide_changes(&self) -> bool {
        let Some(read_at) = self.read_at else {
            return true;
        };
        self.dir_times
            .iter()
            .flatten()
            .any(|&mtime| mtime + MTIME_GRANULARITY >= read_at)
    }
}

/// Variables of the daemon's own environment that belong to the daemon
/// (systemd sets them for it), not to the services it starts.
const DAEMON_ONLY_VARIABLES: &[&str] = &[
    "JOURNAL_STREAM",
    "LISTEN_FDNAMES",
    "LISTEN_FDS",
    "LISTEN_PID",
    "NOTIFY_SOCKET",
    "INVOCATION_ID",
    // Set by the daemon for itself (userdb::bypass_bus_in_nss): services
    // may ask nss-systemd about users over the bus.
    "SYSTEMD_NSS_BYPASS_BUS",
];

/// dbus-daemon's line for a start, with the requester's identity as
/// journal fields too.
fn log_activation(name: &str, requested_by: Option<&Requester>, via_helper: bool) {
    let helper = if via_helper {
        " (using servicehelper)"
    } else {
        ""
    };
    let Some(r) = requested_by else {
        info!("Activating service name='{name}'{helper}");
        return;
    };
    info!(
        dbus_unique_name = r.unique_name,
        dbus_peer_uid = r.uid,
        dbus_peer_pid = r.pid,
        dbus_peer_comm = r.comm,
        "Activating service name='{name}' requested by '{}' ({}){helper}",
        r.unique_name,
        r.loginfo()
    );
}

/// What a non-zero exit status of dbus-daemon-launch-helper means
/// (dbus-daemon's `bus/activation-exit-codes.h` and the errors it maps
/// them to). The helper execs the service, so the service's own exit
/// status arrives here too, as an unknown code.
pub fn helper_exit_error(code: i32) -> BusError {
    let (name, text) = match code {
        2 => (errors::NO_MEMORY, "Launcher could not run (out of memory)"),
        3 => (
            errors::SPAWN_CONFIG_INVALID,
            "Invalid configuration (missing or empty <user>?)",
        ),
        4 => (
            errors::SPAWN_SETUP_FAILED,
            "Failed to setup environment correctly",
        ),
        5 => (
            errors::SPAWN_SERVICE_INVALID,
            "Bus name is not valid or missing",
        ),
        6 => (
            errors::SPAWN_SERVICE_NOT_FOUND,
            "Bus name not found in system service directory",
        ),
        7 => (
            errors::SPAWN_PERMISSIONS_INVALID,
            "The permission of the setuid helper is not correct",
        ),
        8 => (
            errors::SPAWN_PERMISSIONS_INVALID,
            "The service file is incorrect or does not have all required attributes",
        ),
        9 => (
            errors::SPAWN_EXEC_FAILED,
            "Cannot launch daemon, file not found or permissions invalid",
        ),
        10 => (errors::INVALID_ARGS, "Invalid arguments to command line"),
        11 => (
            errors::SPAWN_CHILD_SIGNALED,
            "Launched child was signaled, it probably crashed",
        ),
        _ => {
            return BusError::new(
                errors::SPAWN_CHILD_EXITED,
                format!("Launch helper exited with unknown return code {code}"),
            )
        }
    };
    BusError::new(name, text)
}

/// One started program, until it exits.
#[derive(serde::Serialize, serde::Deserialize)]
struct Spawned {
    name: String,
    /// Our child, waited for by pid: a restart in place (docs/restart.md)
    /// keeps the children, which a `std::process::Child` could not cross.
    #[serde(deserialize_with = "a_pid")]
    pid: u32,
    /// Started through the service helper: its exit codes mean errors.
    via_helper: bool,
}

/// A child's pid as a restart hands it over: one a process can have. A
/// larger number, taken as a pid (`i32`), is negative, and names a
/// process group to wait for or to kill (-1: every process the bus may
/// signal).
fn a_pid<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let pid = <u32 as serde::Deserialize>::deserialize(d)?;
    if i32::try_from(pid).is_err() {
        return Err(quickbus_bus::handover::reject(format!(
            "a child of pid {pid}, which no process can have"
        )));
    }
    Ok(pid)
}

/// Starts services and watches them until they exit.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Launcher {
    services: ServiceTable,
    /// The bus address the services connect back to.
    address: String,
    bus_type: String,
    /// `User=` is honoured: we are root on a system bus.
    switch_user: bool,
    /// `<servicehelper>`: the program that starts services for us.
    helper: Option<PathBuf>,
    children: Vec<Spawned>,
    /// The pid last started for each name: only its exit can fail the
    /// activation under way.
    latest: HashMap<String, u32>,
    /// The open-file limit the bus started with, which the services get.
    fd_limit: StartLimit,
    /// Spawns the programs off the loop. Not handed over: the restart
    /// ends it and takes what it spawned first.
    #[serde(skip, default = "Spawner::process")]
    spawner: Spawner,
}

impl Launcher {
    pub fn new(
        services: ServiceTable,
        address: String,
        bus_type: String,
        fd_limit: StartLimit,
    ) -> Launcher {
        let switch_user = bus_type == "system" && rustix::process::getuid().is_root();
        Launcher {
            services,
            address,
            bus_type,
            switch_user,
            helper: None,
            children: Vec::new(),
            latest: HashMap::new(),
            fd_limit,
            spawner: Spawner::process(),
        }
    }

    /// `<servicehelper>` of the configuration (at start-up and reload).
    pub fn set_helper(&mut self, helper: Option<PathBuf>) {
        self.helper = helper;
    }

    /// The service files after a reload: new activations use them.
    pub fn set_services(&mut self, dirs: Vec<PathBuf>, services: Vec<ServiceFile>) {
        self.services.replace(dirs, services);
    }

    /// The bus holds a message for `name`, which no known `.service` file
    /// provides: whether one appeared since the directories were read.
    pub fn look_up(&mut self, name: &str) -> Option<FoundService> {
        let found = self.services.find_new(name)?;
        Some(FoundService {
            systemd_unit: found.systemd_service.clone(),
            assumed_apparmor_label: found.assumed_apparmor_label.clone(),
        })
    }

    /// Start the program that provides `name` for `requested_by`. `env`:
    /// what UpdateActivationEnvironment set. An error found before
    /// spawning comes back here; the spawn itself happens on the
    /// spawner's thread, and its outcome comes back through [`reap`].
    ///
    /// [`reap`]: Launcher::reap
    pub fn start(
        &mut self,
        name: &str,
        requested_by: Option<&Requester>,
        env: &HashMap<String, String>,
    ) -> Result<(), BusError> {
        log_activation(name, requested_by, self.helper.is_some());
        let service = self.services.get(name).cloned().ok_or_else(|| {
            BusError::new(
                errors::SPAWN_SERVICE_NOT_FOUND,
                format!("The name {name} was not provided by any .service files"),
            )
        })?;
        let mut command = match &self.helper {
            Some(helper) => self.helper_command(helper, &service)?,
            None => self.command(&service)?,
        };
        self.set_environment(&mut command, env);
        self.spawner.hand_over(Job {
            name: name.to_owned(),
            command,
            via_helper: self.helper.is_some(),
        });
        Ok(())
    }

    /// Take what the spawner spawned, in the order the programs were
    /// started: a child is watched from now on; a spawn that failed is
    /// returned as the activation it fails (dbus-daemon's ExecFailed).
    fn take_spawned(&mut self) -> Vec<(String, BusError)> {
        let mut failed = Vec::new();
        for spawned in self.spawner.take_done() {
            let name = spawned.name;
            match spawned.outcome {
                Ok(pid) => {
                    debug!("service {name} started as pid {pid}");
                    // A child whose activation timed out while it was
                    // being spawned (it was killed) fails no later one.
                    if !spawned.stopped {
                        self.latest.insert(name.clone(), pid);
                    }
                    self.children.push(Spawned {
                        name,
                        pid,
                        via_helper: spawned.via_helper,
                    });
                }
                Err(e) if spawned.stopped => {
                    debug!("service {name}, stopped while being started: {e}");
                }
                Err(e) => {
                    let error = exec_failed(&name, &e);
                    info!("Failed to activate service {name}: {}", error.message);
                    failed.push((name, error));
                }
            }
        }
        failed
    }

    /// Let the spawns that wait happen, end the spawner's thread and take
    /// what it spawned, before a restart hands the children over; the
    /// activations whose spawn failed are returned, as by [`reap`].
    /// Refused (why) while a spawn is stuck.
    ///
    /// [`reap`]: Launcher::reap
    pub fn end_spawns(&mut self) -> Result<Vec<(String, BusError)>, String> {
        self.spawner
            .end(crate::spawner::END_WAIT)
            .map_err(|still| still.to_string())?;
        Ok(self.take_spawned())
    }

    /// `HELPER NAME`: the helper reads the service file itself. Like
    /// dbus-daemon, refuse a file without `User=` first (the helper would).
    fn helper_command(&self, helper: &Path, service: &ServiceFile) -> Result<Command, BusError> {
        if service.user.is_none() {
            return Err(BusError::new(
                errors::SPAWN_FILE_INVALID,
                "Cannot do system-bus activation with no user\n",
            ));
        }
        let mut command = Command::new(helper);
        command.arg(&service.name);
        Ok(command)
    }

    /// The service's own `Exec=` line, as its `User=` if we may switch.
    fn command(&self, service: &ServiceFile) -> Result<Command, BusError> {
        let name = &service.name;
        let exec = service.exec.as_deref().unwrap_or("").trim();
        if exec.is_empty() {
            return Err(BusError::new(
                errors::SPAWN_EXEC_FAILED,
                format!(
                    "Cannot launch {name}: {} has no Exec= line",
                    service.path.display()
                ),
            ));
        }
        let argv = shlex::split(exec)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| {
                BusError::new(
                    errors::SPAWN_EXEC_FAILED,
                    format!("Cannot launch {name}: cannot parse Exec={exec}"),
                )
            })?;
        let mut command = Command::new(&argv[0]);
        command.args(&argv[1..]);
        if let (true, Some(user)) = (self.switch_user, service.user.as_deref()) {
            let setup_failed = |why: String| {
                BusError::new(
                    errors::SPAWN_SETUP_FAILED,
                    format!("Cannot launch {name}: {why}"),
                )
            };
            let db = crate::userdb::UserDb::load();
            let (uid, gid) = db
                .account(user)
                .ok_or_else(|| setup_failed(format!("no such user {user}")))?;
            // The groups initgroups() would give it, as the launch helper
            // gives them.
            let groups = crate::userdb::group_list(user, gid).unwrap_or_else(|| vec![gid]);
            crate::sys::run_as_user(&mut command, uid, gid, &groups)
                .map_err(|e| setup_failed(e.to_string()))?;
        }
        Ok(command)
    }

    /// What every started program gets (the service or the helper): the
    /// daemon's environment less what belongs to the daemon, the
    /// activation environment, the bus address, stdin from /dev/null, no
    /// other descriptor of the bus, the bus's starting open-file limit,
    /// and a process group of its own.
    fn set_environment(&self, command: &mut Command, env: &HashMap<String, String>) {
        for var in DAEMON_ONLY_VARIABLES {
            command.env_remove(var);
        }
        command.envs(env);
        command.env("DBUS_STARTER_ADDRESS", &self.address);
        command.env("DBUS_STARTER_BUS_TYPE", &self.bus_type);
        match self.bus_type.as_str() {
            "session" => {
                command.env("DBUS_SESSION_BUS_ADDRESS", &self.address);
            }
            "system" => {
                command.env("DBUS_SYSTEM_BUS_ADDRESS", &self.address);
            }
            _ => {}
        }
        command.stdin(Stdio::null());
        crate::sys::start_as_service(command, self.fd_limit.rlimit());
        // Signals meant for the daemon's process group (a terminal's ^C)
        // are not the service's business.
        command.process_group(0);
    }

    /// The activation of `name` timed out: kill the program started for
    /// it (its exit is reaped as usual, and fails nothing any more), or
    /// the one being spawned for it, or drop the one waiting to be.
    pub fn stop(&mut self, name: &str) {
        self.spawner.stop(name);
        let Some(&pid) = self.latest.get(name) else {
            return;
        };
        if self.children.iter().any(|c| c.pid == pid) {
            warn!("killing service {name} (pid {pid}): it did not take its name in time");
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::Kill);
            }
        }
    }

    /// The other names whose `.service` file has the same Exec line as
    /// `name`'s: one program's failure fails them too, as in dbus-daemon.
    pub fn same_program(&self, name: &str) -> Vec<String> {
        let table = &self.services;
        let Some(exec) = table.get(name).and_then(|s| s.exec.as_deref()) else {
            return Vec::new();
        };
        let mut names: Vec<String> = table
            .services
            .values()
            .filter(|s| s.name != name && s.exec.as_deref() == Some(exec))
            .map(|s| s.name.clone())
            .collect();
        names.sort();
        names
    }

    /// Take what the spawner spawned, then collect the children that
    /// exited (after SIGCHLD). Returns the activations a failed spawn or
    /// an exit fails: (name, error).
    pub fn reap(&mut self) -> Vec<(String, BusError)> {
        let mut failed = self.take_spawned();
        let mut still_running = Vec::with_capacity(self.children.len());
        for spawned in std::mem::take(&mut self.children) {
            let status = match exit_of(spawned.pid) {
                Ok(Some(status)) => status,
                Ok(None) => {
                    still_running.push(spawned);
                    continue;
                }
                Err(e) => {
                    warn!("cannot wait for service {}: {e}", spawned.name);
                    continue;
                }
            };
            let pid = spawned.pid;
            let name = spawned.name;
            if self.latest.get(&name) == Some(&pid) {
                self.latest.remove(&name);
            } else {
                continue; // an older instance: its activation is long over
            }
            if let Some(code) = status.exit_status() {
                if code != 0 && spawned.via_helper {
                    failed.push((name.clone(), helper_exit_error(code as i32)));
                } else if code != 0 {
                    failed.push((
                        name.clone(),
                        BusError::new(
                            errors::SPAWN_CHILD_EXITED,
                            format!("Process {name} exited with status {code}"),
                        ),
                    ));
                }
            } else if let Some(signal) = status.terminating_signal() {
                failed.push((
                    name.clone(),
                    BusError::new(
                        errors::SPAWN_CHILD_SIGNALED,
                        format!("Process {name} received signal {signal}"),
                    ),
                ));
            }
        }
        self.children = still_running;
        failed
    }
}

/// How child `pid` ended, if it did (without blocking).
fn exit_of(pid: u32) -> std::io::Result<Option<rustix::process::WaitStatus>> {
    let pid = rustix::process::Pid::from_raw(pid as i32)
        .ok_or_else(|| std::io::Error::other("pid 0 is no child"))?;
    Ok(rustix::process::waitpid(
        Some(pid),
        rustix::process::WaitOptions::NOHANG,
    )?)
}

/// The ExecFailed error in dbus-daemon's words: it names the service (not
/// the program) and gives the system's text for the error, without Rust's
/// " (os error N)".
fn exec_failed(name: &str, e: &std::io::Error) -> BusError {
    let text = e.to_string();
    let text = match (text.rfind(" (os error "), e.raw_os_error()) {
        (Some(at), Some(_)) => &text[..at],
        _ => &text,
    };
    BusError::new(
        errors::SPAWN_EXEC_FAILED,
        format!("Failed to execute program {name}: {text}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    fn service(name: &str, exec: Option<&str>) -> ServiceFile {
        ServiceFile {
            path: PathBuf::from(format!("/x/{name}.service")),
            name: name.into(),
            exec: exec.map(str::to_owned),
            user: None,
            systemd_service: None,
            assumed_apparmor_label: None,
        }
    }

    fn table(services: Vec<ServiceFile>) -> ServiceTable {
        ServiceTable::new(Vec::new(), services)
    }

    /// A launcher for `services` whose spawner is its own (the tests run
    /// side by side).
    fn launcher(services: Vec<ServiceFile>, address: &str, started_with: StartLimit) -> Launcher {
        let mut launcher = Launcher::new(
            table(services),
            address.into(),
            "session".into(),
            started_with,
        );
        launcher.spawner = Spawner::for_tests();
        launcher
    }

    /// Reap until `launcher` has no children and nothing being spawned
    /// (bounded).
    fn reap_all(launcher: &mut Launcher) -> Vec<(String, BusError)> {
        let give_up = Instant::now() + Duration::from_secs(60);
        let mut failed = Vec::new();
        while !launcher.children.is_empty() || launcher.spawner.busy() {
            assert!(Instant::now() < give_up, "children never exited");
            failed.extend(launcher.reap());
            std::thread::sleep(Duration::from_millis(10));
        }
        failed
    }

    /// The pid the spawner started for `name`, once it did (bounded).
    fn started(launcher: &mut Launcher, name: &str) -> u32 {
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(launcher.reap().is_empty(), "{name} failed");
            if let Some(&pid) = launcher.latest.get(name) {
                return pid;
            }
            assert!(Instant::now() < give_up, "{name} was never spawned");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Never killed nor waited for: the restart is refused.
    #[test]
    fn a_handed_over_child_pid_no_process_can_have_is_refused() {
        for pid in [1u32 << 31, u32::MAX] {
            let state = postcard::to_stdvec(&("org.example.S", pid, false)).unwrap();
            let read = crate::restart::read_value_back::<Spawned>(&state, Vec::new());
            let Err(refusal) = read else {
                panic!("a child of pid {pid} was read back");
            };
            assert!(
                refusal.ends_with(&format!("a child of pid {pid}, which no process can have")),
                "{refusal}"
            );
        }
        let state = postcard::to_stdvec(&("org.example.S", 4321u32, false)).unwrap();
        assert_eq!(postcard::from_bytes::<Spawned>(&state).unwrap().pid, 4321);
    }

    #[test]
    fn exits_become_errors_except_status_zero() {
        let _starting = crate::test_forks::starting_programs();
        let mut launcher = launcher(
            vec![
                service("org.x.Fails", Some("/bin/sh -c 'exit 3'")),
                service("org.x.Daemonizes", Some("/bin/true")),
                service("org.x.Crashes", Some("/bin/sh -c 'kill -9 $$'")),
            ],
            "unix:path=/nonexistent",
            StartLimit::now(),
        );
        let env = HashMap::new();
        for name in ["org.x.Fails", "org.x.Daemonizes", "org.x.Crashes"] {
            launcher.start(name, None, &env).unwrap();
        }
        let mut failed = reap_all(&mut launcher);
        failed.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(failed.len(), 2, "{failed:?}");
        assert_eq!(failed[0].0, "org.x.Crashes");
        assert_eq!(failed[0].1.name, errors::SPAWN_CHILD_SIGNALED);
        assert_eq!(
            failed[0].1.message,
            "Process org.x.Crashes received signal 9"
        );
        assert_eq!(failed[1].0, "org.x.Fails");
        assert_eq!(failed[1].1.name, errors::SPAWN_CHILD_EXITED);
        assert_eq!(
            failed[1].1.message,
            "Process org.x.Fails exited with status 3"
        );
    }

    #[test]
    fn stop_kills_the_program_of_a_timed_out_activation() {
        let _starting = crate::test_forks::starting_programs();
        let mut launcher = launcher(
            vec![service("org.x.Slow", Some("/bin/sleep 600"))],
            "unix:path=/nonexistent",
            StartLimit::now(),
        );
        launcher.start("org.x.Slow", None, &HashMap::new()).unwrap();
        started(&mut launcher, "org.x.Slow");
        launcher.stop("org.x.Other"); // not started: nothing happens
        assert!(launcher.reap().is_empty());
        launcher.stop("org.x.Slow");
        let failed = reap_all(&mut launcher);
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].1.name, errors::SPAWN_CHILD_SIGNALED);
    }

    #[test]
    fn names_sharing_a_program_are_found() {
        let launcher = Launcher::new(
            table(vec![
                service("org.x.A", Some("/usr/bin/multi --serve")),
                service("org.x.B", Some("/usr/bin/multi --serve")),
                service("org.x.C", Some("/usr/bin/other")),
            ]),
            "unix:path=/nonexistent".into(),
            "session".into(),
            StartLimit::now(),
        );
        assert_eq!(launcher.same_program("org.x.A"), ["org.x.B"]);
        assert!(launcher.same_program("org.x.C").is_empty());
        assert!(launcher.same_program("org.x.Unknown").is_empty());
    }

    #[test]
    fn a_file_added_later_is_found_by_a_lookup() {
        let dir = std::env::temp_dir().join(format!("qb-table-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |file: &str, name: &str, extra: &str| {
            let text = format!("[D-BUS Service]\nName={name}\nExec=/bin/true\n{extra}");
            std::fs::write(dir.join(file), text).unwrap();
        };
        write("a.service", "org.x.A", "");
        let dirs = vec![dir.clone()];
        let found = service_file::scan(&dirs, |_| {});
        let mut launcher = Launcher::new(
            ServiceTable::new(dirs, found),
            "unix:path=/nonexistent".into(),
            "session".into(),
            StartLimit::now(),
        );
        assert_eq!(launcher.look_up("org.x.B"), None);
        // A new file (the directory's mtime moves; a coarse clock may need
        // a nudge, which is why it is set explicitly).
        write("b.service", "org.x.B", "SystemdService=b.service\n");
        let later = SystemTime::now() + Duration::from_secs(5);
        std::fs::File::open(&dir)
            .unwrap()
            .set_modified(later)
            .unwrap();
        let found = FoundService {
            systemd_unit: Some("b.service".to_owned()),
            assumed_apparmor_label: None,
        };
        assert_eq!(launcher.look_up("org.x.B"), Some(found));
        assert!(launcher.services.get("org.x.B").is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_exec_lines_fail_at_once_and_a_missing_program_once_spawned() {
        let _starting = crate::test_forks::starting_programs();
        let mut launcher = launcher(
            vec![
                service("org.x.Missing", Some("/nonexistent/program --flag")),
                service("org.x.NoExec", None),
                service("org.x.BadQuote", Some("/bin/true 'unterminated")),
            ],
            "unix:path=/nonexistent",
            StartLimit::now(),
        );
        let env = HashMap::new();
        // A program that cannot be executed fails once the spawner tried.
        launcher.start("org.x.Missing", None, &env).unwrap();
        let failed = reap_all(&mut launcher);
        assert_eq!(failed.len(), 1, "{failed:?}");
        let (name, err) = &failed[0];
        assert_eq!(name, "org.x.Missing");
        assert_eq!(err.name, errors::SPAWN_EXEC_FAILED);
        // dbus-daemon's words, which name the service.
        assert_eq!(
            err.message,
            "Failed to execute program org.x.Missing: No such file or directory"
        );
        // The others fail before anything is spawned.
        let err = launcher.start("org.x.NoExec", None, &env).unwrap_err();
        assert_eq!(err.name, errors::SPAWN_EXEC_FAILED);
        let err = launcher.start("org.x.BadQuote", None, &env).unwrap_err();
        assert_eq!(err.name, errors::SPAWN_EXEC_FAILED);
        let err = launcher.start("org.x.Unknown", None, &env).unwrap_err();
        assert_eq!(err.name, errors::SPAWN_SERVICE_NOT_FOUND);
        assert!(launcher.children.is_empty());
    }

    /// What the program `launcher` started for `name` holds once it
    /// runs (its command line contains `marker`): its descriptors and
    /// its open-file limit as /proc shows them. The program is stopped.
    fn started_holds(launcher: &mut Launcher, name: &str, marker: &str) -> (Vec<u32>, Vec<String>) {
        launcher.start(name, None, &HashMap::new()).unwrap();
        let pid = started(launcher, name);
        // Forked, then executed: only then is what it holds its own.
        let give_up = Instant::now() + Duration::from_secs(60);
        while !std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
        {
            assert!(Instant::now() < give_up, "the program never ran");
            std::thread::sleep(Duration::from_millis(10));
        }
        // The new command line shows before exec has closed the
        // close-on-exec descriptors; once sleep sleeps (state S: an exec
        // in progress runs or waits uninterruptibly), exec is over.
        let sleeping = |pid: u32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .is_some_and(|state| state.trim_start().starts_with('S'))
            })
        };
        while !sleeping(pid) {
            assert!(Instant::now() < give_up, "the program never slept");
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut fds: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
            .collect();
        fds.sort_unstable();
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let limit = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .unwrap()
            .split_whitespace()
            .take(2)
            .map(str::to_owned)
            .collect();
        launcher.stop(name);
        reap_all(launcher);
        (fds, limit)
    }

    /// A launcher whose bus started with a soft fd limit one below ours,
    /// and that limit as /proc shows it.
    fn launcher_started_lower(services: Vec<ServiceFile>) -> (Launcher, Vec<String>) {
        let mut started_with = StartLimit::now();
        started_with.soft = started_with.soft.map(|soft| soft - 1);
        let shown = |n: Option<u64>| n.map_or("unlimited".to_owned(), |n| n.to_string());
        let limit = vec![shown(started_with.soft), shown(started_with.hard)];
        (
            launcher(services, "unix:path=/nonexistent", started_with),
            limit,
        )
    }

    #[test]
    fn a_started_program_or_helper_holds_only_stdio_and_the_fd_limit_the_bus_started_with() {
        use std::os::fd::AsRawFd;
        let _starting = crate::test_forks::starting_programs();
        // A descriptor the bus holds without close-on-exec: whatever the
        // bus holds, the program gets none of it.
        let stray = std::fs::File::open("/dev/null").unwrap();
        crate::sys::set_close_on_exec(stray.as_raw_fd(), false).unwrap();
        let marker = format!("3600.{}", std::process::id());
        let exec = format!("/bin/sleep {marker}");
        let (mut launcher, limit) =
            launcher_started_lower(vec![service("org.x.Sleeps", Some(&exec))]);
        assert_eq!(
            started_holds(&mut launcher, "org.x.Sleeps", &marker),
            (vec![0, 1, 2], limit)
        );
        // The same through `<servicehelper>`, run as `HELPER NAME`: here
        // the helper is sleep, and the name its argument.
        let mut helped = service(&marker, Some("/bin/false"));
        helped.user = Some("nobody".into());
        let (mut launcher, limit) = launcher_started_lower(vec![helped]);
        launcher.set_helper(Some(PathBuf::from("/bin/sleep")));
        assert_eq!(
            started_holds(&mut launcher, &marker, &marker),
            (vec![0, 1, 2], limit)
        );
        drop(stray);
    }

    #[test]
    fn the_child_sees_quoted_arguments_and_the_starter_environment() {
        let _starting = crate::test_forks::starting_programs();
        let dir = std::env::temp_dir().join(format!("qb-launch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("env");
        let script = format!(
            "/bin/sh -c 'printf \"%s|%s|%s|%s|%s\" \"$1\" \"$DBUS_STARTER_ADDRESS\" \"$DBUS_STARTER_BUS_TYPE\" \"$FROM_UAE\" \"$(cat)\" > {}' sh \"two words\"",
            out.display()
        );
        let mut launcher = launcher(
            vec![service("org.x.Env", Some(&script))],
            "unix:path=/the/bus",
            StartLimit::now(),
        );
        let env = HashMap::from([("FROM_UAE".to_owned(), "yes".to_owned())]);
        launcher.start("org.x.Env", None, &env).unwrap();
        assert!(reap_all(&mut launcher).is_empty());
        let seen = std::fs::read_to_string(&out).unwrap();
        assert_eq!(seen, "two words|unix:path=/the/bus|session|yes|");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
