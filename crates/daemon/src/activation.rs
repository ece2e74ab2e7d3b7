//! Starting the program of a `.service` file when the bus asks for it
//! ([`quickbus_bus::Action::Activate`]), and turning its early death into
//! the error every waiter gets.
//!
//! The child gets dbus-daemon's treatment: the `Exec=` line split with
//! shell-like quoting, the daemon's environment plus the activation
//! environment and `DBUS_STARTER_ADDRESS`/`DBUS_STARTER_BUS_TYPE`, stdin
//! from /dev/null, its own process group, and on a system bus run by root
//! the `User=` of its file. A child that exits with status 0 is not a
//! failure (a service may fork into the background); any other exit before
//! the name is taken is.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};

use quickbus_bus::errors::{self, BusError};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use tracing::{info, warn};

use crate::service_file::ServiceFile;

/// Variables of the daemon's own environment that belong to the daemon
/// (systemd sets them for it), not to the services it starts.
const DAEMON_ONLY_VARIABLES: &[&str] = &[
    "JOURNAL_STREAM",
    "LISTEN_FDNAMES",
    "LISTEN_FDS",
    "LISTEN_PID",
    "NOTIFY_SOCKET",
    "INVOCATION_ID",
];

/// One started program, until it exits.
struct Spawned {
    name: String,
    child: Child,
}

/// Starts services and watches them until they exit.
pub struct Launcher {
    services: HashMap<String, ServiceFile>,
    /// The bus address the services connect back to.
    address: String,
    bus_type: String,
    /// `User=` is honoured: we are root on a system bus.
    switch_user: bool,
    children: Vec<Spawned>,
    /// The pid last started for each name: only its exit can fail the
    /// activation under way.
    latest: HashMap<String, u32>,
}

impl Launcher {
    pub fn new(services: Vec<ServiceFile>, address: String, bus_type: String) -> Launcher {
        let switch_user = bus_type == "system" && rustix::process::getuid().is_root();
        let mut launcher = Launcher {
            services: HashMap::new(),
            address,
            bus_type,
            switch_user,
            children: Vec::new(),
            latest: HashMap::new(),
        };
        launcher.set_services(services);
        launcher
    }

    /// The service files after a reload: new activations use them.
    pub fn set_services(&mut self, services: Vec<ServiceFile>) {
        self.services = services.into_iter().map(|s| (s.name.clone(), s)).collect();
    }

    /// Start the program that provides `name`. `env`: what
    /// UpdateActivationEnvironment set.
    pub fn start(&mut self, name: &str, env: &HashMap<String, String>) -> Result<(), BusError> {
        let service = self.services.get(name).ok_or_else(|| {
            BusError::new(
                errors::SPAWN_SERVICE_NOT_FOUND,
                format!("The name {name} was not provided by any .service files"),
            )
        })?;
        let mut command = self.command(service, env)?;
        let program = command.get_program().to_string_lossy().into_owned();
        let child = command.spawn().map_err(|e| {
            warn!("failed to activate service '{name}': cannot run {program}: {e}");
            BusError::new(
                errors::SPAWN_EXEC_FAILED,
                format!("Failed to execute program {program}: {e}"),
            )
        })?;
        info!("activating service name='{name}' pid={}", child.id());
        self.latest.insert(name.to_owned(), child.id());
        self.children.push(Spawned {
            name: name.to_owned(),
            child,
        });
        Ok(())
    }

    fn command(
        &self,
        service: &ServiceFile,
        env: &HashMap<String, String>,
    ) -> Result<Command, BusError> {
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
        // Signals meant for the daemon's process group (a terminal's ^C)
        // are not the service's business.
        command.process_group(0);
        if let (true, Some(user)) = (self.switch_user, service.user.as_deref()) {
            let account = uzers::get_user_by_name(user).ok_or_else(|| {
                BusError::new(
                    errors::SPAWN_SETUP_FAILED,
                    format!("Cannot launch {name}: no such user {user}"),
                )
            })?;
            // std drops root's supplementary groups when it changes uid.
            command.gid(account.primary_group_id());
            command.uid(account.uid());
        }
        Ok(command)
    }

    /// The other names whose `.service` file has the same Exec line as
    /// `name`'s: one program's failure fails them too, as in dbus-daemon.
    pub fn same_program(&self, name: &str) -> Vec<String> {
        let Some(exec) = self.services.get(name).and_then(|s| s.exec.as_deref()) else {
            return Vec::new();
        };
        let mut names: Vec<String> = self
            .services
            .values()
            .filter(|s| s.name != name && s.exec.as_deref() == Some(exec))
            .map(|s| s.name.clone())
            .collect();
        names.sort();
        names
    }

    /// Collect the children that exited (after SIGCHLD). Returns the
    /// activations their exit fails: (name, error).
    pub fn reap(&mut self) -> Vec<(String, BusError)> {
        let mut failed = Vec::new();
        let mut still_running = Vec::with_capacity(self.children.len());
        for mut spawned in std::mem::take(&mut self.children) {
            let status = match spawned.child.try_wait() {
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
            let pid = spawned.child.id();
            let name = spawned.name;
            if self.latest.get(&name) == Some(&pid) {
                self.latest.remove(&name);
            } else {
                continue; // an older instance: its activation is long over
            }
            if let Some(code) = status.code() {
                if code != 0 {
                    failed.push((
                        name.clone(),
                        BusError::new(
                            errors::SPAWN_CHILD_EXITED,
                            format!("Process {name} exited with status {code}"),
                        ),
                    ));
                }
            } else if let Some(signal) = status.signal() {
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
        }
    }

    /// Reap until `launcher` has no children (bounded).
    fn reap_all(launcher: &mut Launcher) -> Vec<(String, BusError)> {
        let give_up = Instant::now() + Duration::from_secs(60);
        let mut failed = Vec::new();
        while !launcher.children.is_empty() {
            assert!(Instant::now() < give_up, "children never exited");
            failed.extend(launcher.reap());
            std::thread::sleep(Duration::from_millis(10));
        }
        failed
    }

    #[test]
    fn exits_become_errors_except_status_zero() {
        let mut launcher = Launcher::new(
            vec![
                service("org.x.Fails", Some("/bin/sh -c 'exit 3'")),
                service("org.x.Daemonizes", Some("/bin/true")),
                service("org.x.Crashes", Some("/bin/sh -c 'kill -9 $$'")),
            ],
            "unix:path=/nonexistent".into(),
            "session".into(),
        );
        let env = HashMap::new();
        for name in ["org.x.Fails", "org.x.Daemonizes", "org.x.Crashes"] {
            launcher.start(name, &env).unwrap();
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
    fn names_sharing_a_program_are_found() {
        let launcher = Launcher::new(
            vec![
                service("org.x.A", Some("/usr/bin/multi --serve")),
                service("org.x.B", Some("/usr/bin/multi --serve")),
                service("org.x.C", Some("/usr/bin/other")),
            ],
            "unix:path=/nonexistent".into(),
            "session".into(),
        );
        assert_eq!(launcher.same_program("org.x.A"), ["org.x.B"]);
        assert!(launcher.same_program("org.x.C").is_empty());
        assert!(launcher.same_program("org.x.Unknown").is_empty());
    }

    #[test]
    fn bad_exec_lines_fail_at_once() {
        let mut launcher = Launcher::new(
            vec![
                service("org.x.Missing", Some("/nonexistent/program --flag")),
                service("org.x.NoExec", None),
                service("org.x.BadQuote", Some("/bin/true 'unterminated")),
            ],
            "unix:path=/nonexistent".into(),
            "session".into(),
        );
        let env = HashMap::new();
        let err = launcher.start("org.x.Missing", &env).unwrap_err();
        assert_eq!(err.name, errors::SPAWN_EXEC_FAILED);
        assert!(
            err.message.contains("/nonexistent/program"),
            "{}",
            err.message
        );
        let err = launcher.start("org.x.NoExec", &env).unwrap_err();
        assert_eq!(err.name, errors::SPAWN_EXEC_FAILED);
        let err = launcher.start("org.x.BadQuote", &env).unwrap_err();
        assert_eq!(err.name, errors::SPAWN_EXEC_FAILED);
        let err = launcher.start("org.x.Unknown", &env).unwrap_err();
        assert_eq!(err.name, errors::SPAWN_SERVICE_NOT_FOUND);
        assert!(launcher.children.is_empty());
    }

    #[test]
    fn the_child_sees_quoted_arguments_and_the_starter_environment() {
        let dir = std::env::temp_dir().join(format!("qb-launch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("env");
        let script = format!(
            "/bin/sh -c 'printf \"%s|%s|%s|%s|%s\" \"$1\" \"$DBUS_STARTER_ADDRESS\" \"$DBUS_STARTER_BUS_TYPE\" \"$FROM_UAE\" \"$(cat)\" > {}' sh \"two words\"",
            out.display()
        );
        let mut launcher = Launcher::new(
            vec![service("org.x.Env", Some(&script))],
            "unix:path=/the/bus".into(),
            "session".into(),
        );
        let env = HashMap::from([("FROM_UAE".to_owned(), "yes".to_owned())]);
        launcher.start("org.x.Env", &env).unwrap();
        assert!(reap_all(&mut launcher).is_empty());
        let seen = std::fs::read_to_string(&out).unwrap();
        assert_eq!(seen, "two words|unix:path=/the/bus|session|yes|");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
