//! busconfig XML: dbus-daemon's configuration files, read with dbus-daemon's
//! rules (`man dbus-daemon`, "CONFIGURATION FILE").
//!
//! [`load`] reads a file, [`parse_str`] a text, [`resolve`] picks the file
//! the command line asks for. A bad configuration is refused with an error
//! that reads `FILE:LINE: reason`.

mod limits;
mod loader;
mod policy;
mod servicedirs;
mod xml;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};

pub use limits::{table as limit_table, LimitError, Limits};
pub use policy::{Policy, PolicyScope, Rule};

use crate::cli::{ConfigSource, Options};

/// Where `--session` looks first.
pub const SESSION_CONFIG_FILE: &str = "/usr/share/dbus-1/session.conf";
/// What `--system` reads.
pub const SYSTEM_CONFIG_FILE: &str = "/usr/share/dbus-1/system.conf";
/// The session configuration used when [`SESSION_CONFIG_FILE`] is absent.
pub const BUILTIN_SESSION_CONFIG: &str = include_str!("session.conf");
/// The name the built-in configuration goes by in messages.
pub const BUILTIN_SESSION_NAME: &str = "(built-in session.conf)";

/// A whole configuration, includes merged.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct BusConfig {
    /// `<type>`: "session", "system", ... (last one wins).
    pub bus_type: Option<String>,
    /// `<user>`: the user to run as.
    pub user: Option<String>,
    pub fork: bool,
    pub keep_umask: bool,
    pub syslog: bool,
    pub pidfile: Option<PathBuf>,
    /// `<listen>` addresses, in order, as written (not yet parsed: an
    /// address is checked when it is bound, as dbus-daemon does).
    pub listen: Vec<String>,
    /// `<auth>` mechanisms allowed; empty means all.
    pub auth: Vec<String>,
    pub allow_anonymous: bool,
    /// Service directories in search order, duplicates removed, relative
    /// ones made absolute, standard ones expanded.
    pub servicedirs: Vec<PathBuf>,
    pub servicehelper: Option<PathBuf>,
    pub limits: Limits,
    /// Every `<policy>`, in document order (includes in place).
    pub policies: Vec<Policy>,
    /// `<selinux><associate own= context=/>` pairs (SELinux is not
    /// supported: kept for completeness).
    pub selinux_associations: Vec<(String, String)>,
    /// `<apparmor mode=...>`, read once at start (`mac::start`).
    pub apparmor: Option<String>,
    /// Directories of `<includedir>`, to watch for reloads.
    pub conf_dirs: Vec<PathBuf>,
    /// Every file read, the main one first.
    pub files: Vec<PathBuf>,
    /// Problems dbus-daemon also forgives (a bad file in an includedir):
    /// to be logged by the caller.
    pub warnings: Vec<String>,
}

impl BusConfig {
    /// The service directories, in search order.
    pub fn service_dirs(&self) -> &[PathBuf] {
        &self.servicedirs
    }
}

/// A configuration refused: `FILE:LINE: reason`, or `FILE: reason` when
/// the problem has no line (an unreadable file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based; 0 when the error is about the whole file.
    pub line: usize,
    pub reason: String,
}

impl ConfigError {
    fn at(file: &Path, line: usize, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.to_path_buf(),
            line,
            reason: reason.into(),
        }
    }

    fn file(file: &Path, reason: impl Into<String>) -> ConfigError {
        ConfigError::at(file, 0, reason)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.reason)
        } else {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Read the configuration file `path` and everything it includes.
pub fn load(path: impl AsRef<Path>) -> Result<BusConfig, ConfigError> {
    let path = path.as_ref();
    let mut config = BusConfig::default();
    loader::Loader::new().load_file(path, &mut config)?;
    finish(path, config)
}

/// Read a configuration given as text; `origin` names it in messages and
/// relative paths in it are relative to `origin`'s directory.
pub fn parse_str(text: &str, origin: impl AsRef<Path>) -> Result<BusConfig, ConfigError> {
    let origin = origin.as_ref();
    let mut config = BusConfig::default();
    loader::Loader::new().load_text(text, origin, &mut config)?;
    finish(origin, config)
}

/// The checks dbus-daemon makes once the whole configuration is read.
fn finish(origin: &Path, config: BusConfig) -> Result<BusConfig, ConfigError> {
    if config.listen.is_empty() {
        return Err(ConfigError::file(
            origin,
            "the configuration needs one or more <listen> elements giving addresses",
        ));
    }
    Ok(config)
}

/// The configuration the command line asks for: `--config-file` as
/// given; `--session` the installed session.conf, or the built-in one when
/// dbus is not installed; `--system` the installed system.conf.
pub fn resolve(options: &Options) -> Result<BusConfig, ConfigError> {
    resolve_with(&options.config, Path::new(SESSION_CONFIG_FILE))
}

fn resolve_with(source: &ConfigSource, session_file: &Path) -> Result<BusConfig, ConfigError> {
    match source {
        ConfigSource::File(path) => load(path),
        ConfigSource::System => load(SYSTEM_CONFIG_FILE),
        ConfigSource::Session if session_file.exists() => load(session_file),
        ConfigSource::Session => builtin_session(),
    }
}

/// The built-in session configuration.
pub fn builtin_session() -> Result<BusConfig, ConfigError> {
    parse_str(BUILTIN_SESSION_CONFIG, BUILTIN_SESSION_NAME)
}
