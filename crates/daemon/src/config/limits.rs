//! `<limit name="...">N</limit>`: dbus-daemon's resource limits, with its
//! defaults, its names and its range checks. [`table`] has every name,
//! where it applies and how it reloads.

pub mod table;

/// Every limit dbus-daemon 1.14 knows. Timeouts are in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
/// (`ConfigLimits` for serde: the bus has `Limits` too, and the
/// handover's layout test, restart/layout.rs, tells types by that name;
/// postcard writes no names.)
#[serde(rename = "ConfigLimits")]
pub struct Limits {
    pub max_incoming_bytes: u64,
    pub max_incoming_unix_fds: u64,
    pub max_outgoing_bytes: u64,
    pub max_outgoing_unix_fds: u64,
    pub max_message_size: u64,
    pub max_message_unix_fds: u64,
    pub service_start_timeout_ms: u64,
    pub auth_timeout_ms: u64,
    pub pending_fd_timeout_ms: u64,
    /// None: replies are waited for forever (dbus-daemon's default).
    pub reply_timeout_ms: Option<u64>,
    pub max_completed_connections: u64,
    pub max_incomplete_connections: u64,
    pub max_connections_per_user: u64,
    pub max_pending_service_starts: u64,
    pub max_names_per_connection: u64,
    pub max_match_rules_per_connection: u64,
    pub max_replies_per_connection: u64,
    pub max_containers: u64,
    pub max_containers_per_user: u64,
    pub max_container_metadata_bytes: u64,
    pub max_connections_per_container: u64,
    /// quickbus's own: SO_SNDBUF/SO_RCVBUF of accepted connections, 0 for
    /// the kernel's default. dbus-daemon refuses a file that sets it.
    pub socket_buffer_bytes: u64,
    /// quickbus's own: a receiver's queue length beyond which the sender
    /// is paused until the receiver catches up, 0 for never (see
    /// crate::flow).
    pub pacing_bytes: u64,
    /// quickbus's own: the longest such pause, in milliseconds.
    pub pacing_timeout_ms: u64,
    /// quickbus's own: how long a signal's sender is held back for a full
    /// receiver, in milliseconds (crate::flow).
    pub overflow_hold_timeout_ms: u64,
    /// quickbus's own: how long after an overflow episode a receiver holds
    /// and paces nobody, in milliseconds.
    pub overflow_memory_timeout_ms: u64,
    /// quickbus's own: how many connections' worth of outgoing queues
    /// (`max_outgoing_bytes`, `max_outgoing_unix_fds`) all of one user's
    /// connections may hold together.
    pub max_outgoing_queues_per_user: u64,
    /// quickbus's own: milliseconds per minute for which one user's
    /// receivers may hold other users' senders back.
    pub max_hold_per_user_per_minute: u64,
    /// quickbus's own: variables, and bytes of names and values, the
    /// activation environment (UpdateActivationEnvironment) may hold.
    pub max_activation_environment_variables: u64,
    pub max_activation_environment_bytes: u64,
    /// quickbus's own: the threads that read and write the connections'
    /// sockets around the one routing core, 0 for as many as the core
    /// count suggests (crate::server::workers).
    pub threads: u64,
}

/// Descriptors one message may carry by default (dbus-daemon's
/// DBUS_DEFAULT_MESSAGE_UNIX_FDS on Linux).
const DEFAULT_MESSAGE_UNIX_FDS: u64 = 16;
const MIB: u64 = 1024 * 1024;
/// The socket buffer size the sweep in docs/performance.md measured best.
pub const DEFAULT_SOCKET_BUFFER_BYTES: u64 = 0;

/// dbus-daemon's built-in values, used for every limit a file leaves out.
impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_incoming_bytes: 127 * MIB,
            max_incoming_unix_fds: DEFAULT_MESSAGE_UNIX_FDS * 4,
            max_outgoing_bytes: 127 * MIB,
            max_outgoing_unix_fds: DEFAULT_MESSAGE_UNIX_FDS * 4,
            max_message_size: 32 * MIB,
            max_message_unix_fds: DEFAULT_MESSAGE_UNIX_FDS,
            service_start_timeout_ms: 25_000,
            auth_timeout_ms: 30_000,
            pending_fd_timeout_ms: 150_000,
            reply_timeout_ms: None,
            max_completed_connections: 2048,
            max_incomplete_connections: 64,
            max_connections_per_user: 256,
            max_pending_service_starts: 512,
            max_names_per_connection: 512,
            max_match_rules_per_connection: 512,
            max_replies_per_connection: 128,
            max_containers: 512,
            max_containers_per_user: 16,
            max_container_metadata_bytes: 4096,
            max_connections_per_container: 8,
            socket_buffer_bytes: DEFAULT_SOCKET_BUFFER_BYTES,
            pacing_bytes: crate::flow::DEFAULT_PACING_BYTES,
            pacing_timeout_ms: crate::flow::DEFAULT_PACING_TIMEOUT_MS,
            overflow_hold_timeout_ms: crate::flow::DEFAULT_HOLD_MS,
            overflow_memory_timeout_ms: crate::flow::DEFAULT_MEMORY_MS,
            max_outgoing_queues_per_user: crate::flow::DEFAULT_QUEUES_PER_USER,
            max_hold_per_user_per_minute: crate::flow::DEFAULT_HOLD_BUDGET_MS,
            max_activation_environment_variables:
                quickbus_bus::DEFAULT_ACTIVATION_ENVIRONMENT_VARIABLES as u64,
            max_activation_environment_bytes: quickbus_bus::DEFAULT_ACTIVATION_ENVIRONMENT_BYTES
                as u64,
            threads: 0,
        }
    }
}

/// A `<limit>` element [`Limits::set`] refuses, each carrying the limit's
/// name; the texts are dbus-daemon's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("there is no limit called \"{0}\"")]
    Unknown(String),
    #[error("<limit name=\"{0}\"> element has invalid value (could not parse as integer)")]
    NotAnInteger(String),
    #[error("<limit name=\"{0}\"> must be a positive number")]
    Negative(String),
    /// Past a C `int` for the counts dbus-daemon stores in one, past
    /// `i64` for the others.
    #[error("<limit name=\"{0}\"> value is too large")]
    TooLarge(String),
}

/// How large a limit's value may be: dbus-daemon stores some in an `int`,
/// the byte and fd counts in a `long`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Width {
    Int,
    Long,
}

impl Limits {
    /// Set limit `name` from the element's text. Errors print as
    /// dbus-daemon's.
    pub fn set(&mut self, name: &str, text: &str) -> Result<(), LimitError> {
        let Some(entry) = table::entry(name) else {
            return Err(LimitError::Unknown(name.to_owned()));
        };
        let value = parse_integer(text).ok_or_else(|| LimitError::NotAnInteger(name.to_owned()))?;
        if value < 0 {
            return Err(LimitError::Negative(name.to_owned()));
        }
        if entry.width == Width::Int && value > i128::from(i32::MAX) {
            return Err(LimitError::TooLarge(name.to_owned()));
        }
        // The parse bounded the value to i64, so it fits in u64.
        let value = u64::try_from(value).map_err(|_| LimitError::TooLarge(name.to_owned()))?;
        (entry.set)(self, value);
        Ok(())
    }
}

/// A decimal integer with an optional sign that fits in a C `long`
/// (64 bits here). Stricter than dbus-daemon, which stops at the first
/// non-digit: "10 seconds" is refused rather than read as 10.
fn parse_integer(text: &str) -> Option<i128> {
    let value: i64 = text.trim().parse().ok()?;
    Some(i128::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dbus_daemon_limit_name_is_known() {
        let names = table::tests::DBUS_DAEMON_NAMES;
        let mut limits = Limits::default();
        for (i, name) in names.iter().enumerate() {
            limits.set(name, &(1000 + i).to_string()).unwrap();
        }
        // Each name reached its own field.
        assert_eq!(limits.max_incoming_bytes, 1000);
        assert_eq!(limits.service_start_timeout_ms, 1006);
        assert_eq!(limits.auth_timeout_ms, 1007);
        assert_eq!(limits.reply_timeout_ms, Some(1009));
        assert_eq!(limits.max_completed_connections, 1010);
        assert_eq!(limits.max_incomplete_connections, 1011);
        assert_eq!(limits.max_names_per_connection, 1014);
        assert_eq!(limits.max_connections_per_container, 1020);
    }

    #[test]
    fn defaults_are_dbus_daemons() {
        let limits = Limits::default();
        assert_eq!(limits.max_message_size, 32 * 1024 * 1024);
        assert_eq!(limits.auth_timeout_ms, 30_000);
        assert_eq!(limits.max_incomplete_connections, 64);
        assert_eq!(limits.max_completed_connections, 2048);
        assert_eq!(limits.max_match_rules_per_connection, 512);
        assert_eq!(limits.reply_timeout_ms, None);
    }

    #[test]
    fn values_are_checked_as_dbus_daemon_does() {
        let mut limits = Limits::default();
        let refused = |limits: &mut Limits, name: &str, text: &str| {
            let error = limits.set(name, text).unwrap_err();
            (error.clone(), error.to_string())
        };
        assert_eq!(
            refused(&mut limits, "max_bees", "5"),
            (
                LimitError::Unknown("max_bees".into()),
                "there is no limit called \"max_bees\"".into()
            )
        );
        assert_eq!(
            refused(&mut limits, "auth_timeout", "bees"),
            (
                LimitError::NotAnInteger("auth_timeout".into()),
                "<limit name=\"auth_timeout\"> element has invalid value (could not parse as integer)"
                    .into()
            )
        );
        assert_eq!(
            refused(&mut limits, "auth_timeout", "-1"),
            (
                LimitError::Negative("auth_timeout".into()),
                "<limit name=\"auth_timeout\"> must be a positive number".into()
            )
        );
        assert_eq!(
            refused(&mut limits, "max_names_per_connection", "3123123123"),
            (
                LimitError::TooLarge("max_names_per_connection".into()),
                "<limit name=\"max_names_per_connection\"> value is too large".into()
            )
        );
        // Byte counts are C longs: large values are fine, past i64 is not.
        limits.set("max_incoming_bytes", "3123123123").unwrap();
        assert_eq!(limits.max_incoming_bytes, 3_123_123_123);
        assert!(limits
            .set("max_incoming_bytes", "99999999999999999999")
            .is_err());
        // Surrounding blanks and a sign are accepted.
        limits.set("auth_timeout", " +42 ").unwrap();
        assert_eq!(limits.auth_timeout_ms, 42);
        assert!(limits.set("auth_timeout", "10 seconds").is_err());
    }

    #[test]
    fn pacing_is_quickbus_own_limit() {
        let mut limits = Limits::default();
        assert_eq!(limits.pacing_bytes, crate::flow::DEFAULT_PACING_BYTES);
        assert_eq!(
            limits.pacing_timeout_ms,
            crate::flow::DEFAULT_PACING_TIMEOUT_MS
        );
        limits.set("pacing_bytes", "0").unwrap();
        assert_eq!(limits.pacing_bytes, 0);
        limits.set("pacing_timeout", "60000").unwrap();
        assert_eq!(limits.pacing_timeout_ms, 60_000);
        assert!(limits.set("pacing_timeout", "4294967296").is_err());
        assert!(limits.set("pacing_bytes", "-1").is_err());
    }

    #[test]
    fn the_overflow_rule_has_quickbus_own_limits() {
        let mut limits = Limits::default();
        assert_eq!(limits.overflow_hold_timeout_ms, 1000);
        assert_eq!(limits.overflow_memory_timeout_ms, 60_000);
        assert_eq!(limits.max_outgoing_queues_per_user, 4);
        assert_eq!(limits.max_hold_per_user_per_minute, 100);
        limits.set("overflow_hold_timeout", "250").unwrap();
        limits.set("overflow_memory_timeout", "0").unwrap();
        limits.set("max_outgoing_queues_per_user", "1").unwrap();
        limits.set("max_hold_per_user_per_minute", "60000").unwrap();
        assert_eq!(limits.overflow_hold_timeout_ms, 250);
        assert_eq!(limits.overflow_memory_timeout_ms, 0);
        assert_eq!(limits.max_outgoing_queues_per_user, 1);
        assert_eq!(limits.max_hold_per_user_per_minute, 60_000);
        assert!(limits.set("overflow_hold_timeout", "-1").is_err());
        assert!(limits
            .set("max_hold_per_user_per_minute", "4294967296")
            .is_err());
    }

    #[test]
    fn the_activation_environment_has_quickbus_own_bounds() {
        let mut limits = Limits::default();
        assert_eq!(limits.max_activation_environment_variables, 1024);
        assert_eq!(limits.max_activation_environment_bytes, 1024 * 1024);
        limits
            .set("max_activation_environment_variables", "10")
            .unwrap();
        limits
            .set("max_activation_environment_bytes", "3123123123")
            .unwrap();
        assert_eq!(limits.max_activation_environment_variables, 10);
        assert_eq!(limits.max_activation_environment_bytes, 3_123_123_123);
        assert!(limits
            .set("max_activation_environment_variables", "3123123123")
            .is_err());
    }

    #[test]
    fn socket_buffer_size_is_quickbus_own_limit() {
        let mut limits = Limits::default();
        assert_eq!(limits.socket_buffer_bytes, DEFAULT_SOCKET_BUFFER_BYTES);
        limits.set("socket_buffer_bytes", "1048576").unwrap();
        assert_eq!(limits.socket_buffer_bytes, 1 << 20);
        limits.set("socket_buffer_bytes", "0").unwrap();
        assert_eq!(limits.socket_buffer_bytes, 0);
        // setsockopt takes an int.
        assert!(limits.set("socket_buffer_bytes", "4294967296").is_err());
        assert!(limits.set("socket_buffer_bytes", "-1").is_err());
    }
}
