//! From the command line to a running event loop, in dbus-daemon's order:
//! adopt inherited fds, load the configuration, bind, fork, write the pid
//! file, print the address and pid, serve.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;

use quickbus_bus::{Bus, BusOptions};
use tracing::{error, info, warn};

use crate::activation::{Launcher, ServiceTable};
use crate::auth::AuthConfig;
use crate::cli::{Options, PrintTarget};
use crate::config::BusConfig;
use crate::landed_limits::LandedLimits;
use crate::listen::{self, Listener};
use crate::restart::Setup;
use crate::server::{Reloaded, Server, ServerOptions};
use crate::service_file;

/// Run the daemon; the returned value is the process exit code.
pub fn main() -> i32 {
    let code = run();
    // Its last lines (a fatal error, "exiting") before the process goes.
    crate::logging::drain();
    code
}

fn run() -> i32 {
    // A restart in place: exec made this process dumpable again, which a
    // bus running as its `<user>` was not (restart::dumpable).
    let resuming = std::env::var_os(crate::restart::HANDOVER_FD).is_some();
    if resuming {
        crate::restart::dumpable::conceal();
    }
    let opts = match crate::cli::parse_args(std::env::args_os()) {
        Ok(opts) => opts,
        Err(exit) => return exit.print_and_code(),
    };
    if opts.introspect {
        print!(
            "{}",
            quickbus_bus::introspection_xml(quickbus_bus::BUS_PATH)
        );
        return 0;
    }
    crate::userdb::bypass_bus_in_nss();
    // Fds clients pass are closed off the loop, whose close may block
    // (docs/reliability.md, "Fds clients pass").
    crate::fd_closer::register();
    // A restart in place: this image continues the previous one's bus.
    if resuming {
        return crate::restart::resume(&opts);
    }
    // Before anything else is opened: the fds the parent handed us.
    let print_address = match adopt_target(opts.print_address) {
        Ok(t) => t,
        Err(e) => return fail(format!("--print-address: {e}")),
    };
    let print_pid = match adopt_target(opts.print_pid) {
        Ok(t) => t,
        Err(e) => return fail(format!("--print-pid: {e}")),
    };
    let systemd_sockets = match listen::from_systemd() {
        Ok(l) => l,
        Err(e) => return fail(format!("sockets from systemd: {e}")),
    };
    crate::logging::init();
    // Whatever else was inherited is not passed on by an exec: a restart
    // in place hands over only what the bus names (docs/restart.md).
    if let Err(e) = crate::sys::close_on_exec_above_stdio() {
        warn!("cannot mark inherited descriptors close-on-exec: {e}");
    }

    let config = match crate::config::resolve(&opts) {
        Ok(c) => c,
        Err(e) => return fail(format!("Failed to start message bus: {e}")),
    };
    crate::logging::configure(opts.syslog, config.syslog);
    warn_of_test_hooks();
    match serve(&opts, config, systemd_sockets, print_address, print_pid) {
        Ok(()) => 0,
        Err(e) => fail(format!("Failed to start message bus: {e}")),
    }
}

/// The tests' hooks into the daemon (one makes every restart in place
/// fail, one makes the handover's state refused, one sends the log to
/// another socket, one hands even a single connection's reads and writes
/// to the thread pool, one replaces the configuration's `threads`, one
/// holds a service's child before its exec) are read from the
/// environment in every build: one
/// set for a real bus is named in its log, so an administrator can see why
/// it behaves so.
fn warn_of_test_hooks() {
    let hooks = [
        crate::restart::FAIL_RESTORE_FOR_TESTS,
        crate::restart::REFUSE_STATE_FOR_TESTS,
        crate::logging::TEST_SYSLOG_SOCKET_ENV,
        crate::server::LEAST_PARALLEL_FOR_TESTS,
        crate::server::THREADS_FOR_TESTS,
        crate::spawner::STALL_SPAWN_FOR_TESTS,
    ];
    for name in hooks {
        if let Some(value) = std::env::var_os(name) {
            warn!(
                "{name}={} is set: a hook for quickbus's tests, not for a real bus",
                value.to_string_lossy()
            );
        }
    }
}

/// Log the reason the daemon cannot run, and make sure whoever started it
/// sees it on standard error too.
fn fail(message: String) -> i32 {
    error!("{message}");
    if !crate::logging::stderr_is_text() {
        eprintln!("{message}");
    }
    1
}

/// Where to print: stdout, or an fd we now own.
enum Output {
    Stdout,
    Fd(File),
}

impl Output {
    /// One write of the whole line, then close: readers of the pipe wait
    /// for EOF or a newline, and must never see half an address.
    fn emit(self, line: &str) -> io::Result<()> {
        match self {
            Output::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(line.as_bytes())?;
                out.flush()
            }
            Output::Fd(mut file) => file.write_all(line.as_bytes()),
        }
    }
}

fn adopt_target(target: Option<PrintTarget>) -> io::Result<Option<Output>> {
    Ok(match target {
        None => None,
        Some(PrintTarget::Stdout) => Some(Output::Stdout),
        Some(PrintTarget::Fd(fd)) => Some(Output::Fd(crate::sys::adopt_inherited_fd(fd)?)),
    })
}

fn serve(
    opts: &Options,
    config: BusConfig,
    systemd_sockets: Vec<Listener>,
    print_address: Option<Output>,
    print_pid: Option<Output>,
) -> io::Result<()> {
    let guid = crate::sys::random_guid();
    let start_fd_limit = crate::fd_limit::StartLimit::now();
    let fd_limit = crate::fd_limit::raise();
    tracing::debug!(?fd_limit, "open-file limit");
    // Before anything listens, as in dbus-daemon.
    crate::auth::check_mechanism_names(&config.auth)
        .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, why))?;
    let from_systemd = !systemd_sockets.is_empty();
    let mut listeners = systemd_sockets;
    if !from_systemd {
        let addresses = match &opts.address {
            Some(a) => vec![a.clone()],
            None => config.listen.clone(),
        };
        if addresses.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no <listen> address in the configuration and no --address",
            ));
        }
        for address in &addresses {
            listeners.push(listen::bind_first(address)?);
        }
    }
    let address = listen::full_address(&listeners, from_systemd, &guid);

    let fork = if opts.nofork {
        false
    } else {
        opts.fork || config.fork
    };
    let ready = if fork { Some(daemonize()?) } else { None };

    // Before `<user>`, which may not be allowed to read /proc/self/exe,
    // and before anyone learns of the bus: a file renamed over or from the
    // daemon's path after that (an upgrade) must not change which path
    // a restart runs.
    let binary = crate::restart::Binary::open(None)
        .map_err(|e| warn!("cannot open the running binary, so no restart in place: {e}"))
        .ok();
    // From the first sign of life anyone can act on (the pid file, the
    // printed address or pid) until the loop's handlers are in place
    // (`Server::with_state` unblocks them), a SIGUSR2, SIGHUP or SIGTERM
    // waits in the kernel instead of ending the bus by default action.
    let _held = crate::restart::hold_handled_signals();
    let pidfile = if opts.nopidfile {
        None
    } else {
        config.pidfile.clone()
    };
    let pidfile = match &pidfile {
        Some(path) => Some(PidFile::write(path.clone())?),
        None => None,
    };
    if let Some(out) = print_address {
        out.emit(&format!("{address}\n"))?;
    }
    if let Some(out) = print_pid {
        out.emit(&format!("{}\n", std::process::id()))?;
    }
    // Sockets bound and pid file written: now `<user>`, as dbus-daemon.
    if let Some(user) = &config.user {
        become_configured_user(user)?;
    }
    // As the user the bus runs as, before it reports ready.
    crate::mac::start(&config)?;
    ensure_runtime_service_dir(&config);
    let services = service_file::scan(config.service_dirs(), |w| warn!("{w}"));
    // The mediators need the service files (AssumedAppArmorLabel=).
    let mediator = crate::mac::mediator(&config).map_err(io::Error::other)?;
    if let Some(ready) = ready {
        ready.signal()?;
    }

    let bus_type = config.bus_type.clone().unwrap_or_else(|| "session".into());
    let policy = bus_policy(&config).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let mut bus_opts = BusOptions {
        // Not the address's GUID: dbus-daemon's bus id is its own UUID.
        bus_id: crate::sys::random_guid(),
        machine_id: crate::sys::machine_id(),
        limits: LandedLimits::from_config(&config.limits).bus,
        activatable_names: services.iter().map(|s| s.name.clone()).collect(),
        bus_type: bus_type.clone(),
        systemd_activation: opts.systemd_activation,
        systemd_units: service_file::systemd_units(&services),
        assumed_apparmor_labels: service_file::assumed_apparmor_labels(&services),
        rescan_service_files: true,
        ..BusOptions::default()
    };
    // After any fork: the daemon's final pid.
    crate::bus_identity::fill_own_identity(&mut bus_opts);
    let mut bus = Bus::new(bus_opts);
    bus.set_policy(policy);
    crate::bus_identity::describe_self(&mut bus);
    bus.set_mediator(mediator);
    let table = ServiceTable::new(config.service_dirs().to_vec(), services);
    let mut launcher = Launcher::new(table, address.clone(), bus_type, start_fd_limit);
    launcher.set_helper(config.servicehelper.clone());
    let mut sockets = Vec::new();
    for listener in &mut listeners {
        for socket in std::mem::take(&mut listener.sockets) {
            sockets.push((socket, listener.nonce_bytes()));
        }
    }
    let setup = Setup {
        exe: binary.as_ref().map(|b| b.path.clone()).unwrap_or_default(),
        guid,
        address: address.clone(),
        forked: fork,
        config,
        reloaded: None,
        pidfile,
        listeners,
    };
    let server_opts = server_options(opts, setup, launcher, binary);
    let mut server = Server::new(sockets, bus, server_opts)?;
    info!("listening on {address}");
    // The socket and pid files go when the server does.
    server.run()?;
    Ok(())
}

/// The loop's options, from the configuration loaded at start-up (also
/// after a restart in place, which hands it over).
pub fn server_options(
    opts: &Options,
    setup: Setup,
    launcher: Launcher,
    binary: Option<crate::restart::Binary>,
) -> ServerOptions {
    let config = &setup.config;
    // A restart in place keeps the last reload's limits.
    let landed = LandedLimits::from_config(&setup.current_config().limits);
    ServerOptions {
        auth: AuthConfig::from_config(&config.auth, config.allow_anonymous, setup.guid.clone()),
        limits: landed.server,
        out_bounds: landed.out_bounds,
        reload: reloader(opts.clone()),
        launcher,
        // Here, in the process that serves: after --fork, the child.
        notifier: crate::notify::Notifier::from_env(setup.forked),
        status: format!("Listening on {}", setup.address),
        policies: config.policies.clone(),
        setup,
        binary,
    }
}

/// Switch to the `<user>` of the configuration with its groups from the
/// user database (dbus-daemon's `_dbus_change_to_daemon_user`).
fn become_configured_user(user: &str) -> io::Result<()> {
    let db = crate::userdb::UserDb::load();
    let Some((uid, gid)) = db.account(user) else {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("Could not get UID and GID for username \"{user}\""),
        ));
    };
    let groups = match db.groups_of(uid) {
        quickbus_bus::UserGroups::Known(groups) => groups,
        _ => vec![gid],
    };
    crate::sys::become_user(uid, gid, &groups)?;
    info!("running as {user} (uid {uid}, gid {gid})");
    Ok(())
}

/// Loads the configuration the daemon started from again and lists the
/// services its service directories now hold.
fn reloader(opts: Options) -> crate::server::Reloader {
    Box::new(move || {
        let config = crate::config::resolve(&opts).map_err(|e| e.to_string())?;
        ensure_runtime_service_dir(&config);
        let policy = bus_policy(&config)?;
        let services = service_file::scan(config.service_dirs(), |w| warn!("{w}"));
        let mediator = crate::mac::mediator(&config)?;
        Ok(Reloaded {
            service_dirs: config.service_dirs().to_vec(),
            services,
            policy,
            policies: config.policies.clone(),
            servicehelper: config.servicehelper.clone(),
            mediator,
            config,
        })
    })
}

/// `$XDG_RUNTIME_DIR/dbus-1/services`, when it is one of the service
/// directories, is created (mode 0700) as dbus-daemon does: programs drop
/// "transient" service files there without creating it.
fn ensure_runtime_service_dir(config: &BusConfig) {
    use std::os::unix::fs::DirBuilderExt;
    let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) else {
        return;
    };
    let dir = PathBuf::from(runtime).join("dbus-1/services");
    if !config.service_dirs().contains(&dir) || dir.is_dir() {
        return;
    }
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
    {
        warn!("cannot create {}: {e}", dir.display());
    }
}

/// The configuration's policy for the bus core, names resolved through
/// NSS.
fn bus_policy(config: &BusConfig) -> Result<quickbus_bus::PolicyConfig, String> {
    let db = crate::userdb::UserDb::load();
    crate::policy::bus_policy(&config.policies, &db, &mut |w| warn!("{w}"))
}

/// Removes the pid file when the daemon exits.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct PidFile(PathBuf);

impl PidFile {
    fn write(path: PathBuf) -> io::Result<PidFile> {
        std::fs::write(&path, format!("{}\n", std::process::id())).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot write pid file {}: {e}", path.display()),
            )
        })?;
        Ok(PidFile(path))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if crate::restart::trying_the_state() {
            return; // the bus's file, not a restart's trial reader's
        }
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The child's promise to tell the waiting parent it is ready.
struct Ready(File);

impl Ready {
    /// Release the parent, then let go of the terminal (after the address
    /// went out, which may have been to stdout). The lines logged so far
    /// are written first, while standard error is still what the daemon
    /// was started with and the parent still waits, as they were when
    /// each line was written at once. (A sink that takes nothing does not
    /// hold start-up up for more than the drain's wait.)
    fn signal(mut self) -> io::Result<()> {
        crate::logging::drain();
        let _ = self.0.write_all(b"R");
        if std::env::var_os("DBUS_DEBUG_OUTPUT").is_none() {
            crate::sys::detach_stdio()?;
        }
        Ok(())
    }
}

/// Fork: the parent waits until the child says it is ready (address
/// printed), then exits 0, or 1 if the child died first.
fn daemonize() -> io::Result<Ready> {
    let (read_end, write_end) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    match crate::sys::fork_daemon()? {
        Some(_child) => {
            drop(write_end);
            let mut byte = [0u8; 1];
            let code = match rustix::io::read(&read_end, &mut byte) {
                Ok(1) => 0,
                _ => 1,
            };
            std::process::exit(code);
        }
        None => {
            drop(read_end);
            Ok(Ready(File::from(write_end)))
        }
    }
}
