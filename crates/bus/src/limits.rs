//! Resource bounds, with dbus-daemon's session-bus defaults.
//!
//! Owns: the bounds as plain data; touches nothing.

use std::time::Duration;

/// What one connection may make the bus hold. The defaults are those of
/// dbus-daemon's `session.conf` (with its built-in values for what that file
/// leaves unset); the daemon overrides them from its configuration file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Names a connection may own or be queued for, its unique name
    /// included (`max_names_per_connection`).
    pub max_names_per_connection: usize,
    /// `max_match_rules_per_connection`.
    pub max_match_rules_per_connection: usize,
    /// Method calls a connection may have waiting for a reply
    /// (`max_replies_per_connection`).
    pub max_replies_per_connection: usize,
    /// How long the bus waits for a reply before it answers the caller with
    /// `NoReply` itself; `None` is dbus-daemon's default: never.
    pub reply_timeout: Option<Duration>,
    /// Largest message, in bytes (`max_message_size`). The bus drops a
    /// connection that sends a larger one (the daemon should refuse it
    /// before reading it all).
    pub max_message_size: usize,
    /// Most fds in one message (`max_message_unix_fds`). The bus drops a
    /// connection that sends more (the daemon may refuse them earlier).
    pub max_message_unix_fds: usize,
    /// Connections that completed Hello (`max_completed_connections`).
    pub max_completed_connections: usize,
    /// Connections that completed Hello, per uid (`max_connections_per_user`).
    pub max_connections_per_user: usize,
    /// How long an activated service has to take its name
    /// (`service_start_timeout`).
    pub service_start_timeout: Duration,
    /// Messages and StartServiceByName calls waiting for services to start,
    /// over all names (`max_pending_service_starts`).
    pub max_pending_service_starts: usize,
    /// quickbus's own: variables UpdateActivationEnvironment may set in
    /// all (`max_activation_environment_variables`), and their names and
    /// values together, in bytes (`max_activation_environment_bytes`).
    /// dbus-daemon lets it grow without bound.
    pub max_activation_environment_variables: usize,
    pub max_activation_environment_bytes: usize,
    /// Container instances on the bus (`max_containers`), per uid
    /// (`max_containers_per_user`), and the bytes of type, name and
    /// metadata one may keep (`max_container_metadata_bytes`).
    pub max_containers: usize,
    pub max_containers_per_user: usize,
    pub max_container_metadata_bytes: usize,
}

/// Default `max_activation_environment_variables`: far more than a desktop
/// session exports (dbus-update-activation-environment --all sends some
/// 100).
pub const DEFAULT_ACTIVATION_ENVIRONMENT_VARIABLES: usize = 1024;
/// Default `max_activation_environment_bytes`: half of what Linux lets
/// exec take for arguments and environment together (2 MiB with the
/// default stack limit), so an activated service can still be started.
pub const DEFAULT_ACTIVATION_ENVIRONMENT_BYTES: usize = 1024 * 1024;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_names_per_connection: 50_000,
            max_match_rules_per_connection: 50_000,
            max_replies_per_connection: 50_000,
            reply_timeout: None,
            max_message_size: 1_000_000_000,
            max_message_unix_fds: 16,
            max_completed_connections: 2048,
            max_connections_per_user: 256,
            service_start_timeout: Duration::from_secs(25),
            max_pending_service_starts: 10_000,
            max_activation_environment_variables: DEFAULT_ACTIVATION_ENVIRONMENT_VARIABLES,
            max_activation_environment_bytes: DEFAULT_ACTIVATION_ENVIRONMENT_BYTES,
            max_containers: 512,
            max_containers_per_user: 16,
            max_container_metadata_bytes: 4096,
        }
    }
}

impl Limits {
    /// dbus-daemon's built-in defaults, which `system.conf` keeps.
    pub fn system() -> Limits {
        Limits {
            max_names_per_connection: 512,
            max_match_rules_per_connection: 512,
            max_replies_per_connection: 128,
            reply_timeout: None,
            max_message_size: 32 * 1024 * 1024,
            max_message_unix_fds: 16,
            max_completed_connections: 2048,
            max_connections_per_user: 256,
            service_start_timeout: Duration::from_secs(25),
            max_pending_service_starts: 512,
            max_activation_environment_variables: DEFAULT_ACTIVATION_ENVIRONMENT_VARIABLES,
            max_activation_environment_bytes: DEFAULT_ACTIVATION_ENVIRONMENT_BYTES,
            max_containers: 512,
            max_containers_per_user: 16,
            max_container_metadata_bytes: 4096,
        }
    }
}
