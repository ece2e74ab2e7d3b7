//! Every `<limit>` name in one table: its field in [`Limits`], how large
//! its value may be, where the daemon applies it ([`Target`]), and what a
//! reload (SIGHUP, `ReloadConfig`) does with a new value ([`Reload`]).
//!
//! dbus-daemon re-reads all its limits on reload (bus/bus.c,
//! `process_config_every_time`); quickbus applies each one on reload too,
//! to the part of the daemon this table names ([`crate::landed_limits`]
//! puts the values there, and its tests check the targets named here).
//! docs/quickbus-daemon-config.md has the table for administrators.

use super::{Limits, Width};

/// Where a limit takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// The bus core's `quickbus_bus::Limits` (`Bus::set_limits`).
    Bus,
    /// The outgoing queues' `flow::OutBounds` (`Bus::set_out_bounds`).
    OutBounds,
    /// The event loop's `server::ServerLimits`.
    Server,
}

/// What a reload does with a changed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// Every check from the reload on uses it, for every connection
    /// (what a connection already holds stays; its next request is
    /// judged by the new value).
    AtOnce,
    /// A timeout: whatever starts timing after the reload gets the new
    /// one; a deadline already set keeps its own.
    NewDeadlines,
    /// Connections accepted after the reload; the others keep what they
    /// got at accept (a restart in place keeps them too).
    NewConnections,
    /// quickbus has nothing it bounds with it: dbus-daemon's files set
    /// it, quickbus accepts and ignores it.
    NoEffect,
}

impl Reload {
    /// How the reload log line says it.
    pub fn describe(self) -> &'static str {
        match self {
            Reload::AtOnce => "applied at once",
            Reload::NewDeadlines => "applied to deadlines set from now on",
            Reload::NewConnections => {
                "applied to connections accepted from now on (the others keep theirs)"
            }
            Reload::NoEffect => "without effect in quickbus",
        }
    }
}

/// One `<limit>` name.
pub struct Entry {
    pub name: &'static str,
    pub(super) width: Width,
    /// Its value; None only for `reply_timeout` left unset (never).
    pub get: fn(&Limits) -> Option<u64>,
    pub(super) set: fn(&mut Limits, u64),
    /// Empty for [`Reload::NoEffect`].
    pub targets: &'static [Target],
    pub reload: Reload,
}

/// The entry of limit `name`, if there is one.
pub fn entry(name: &str) -> Option<&'static Entry> {
    TABLE.iter().find(|entry| entry.name == name)
}

/// A limit whose value differs between two configurations.
#[derive(Debug, PartialEq, Eq)]
pub struct Change {
    pub name: &'static str,
    pub reload: Reload,
    pub old: Option<u64>,
    pub new: Option<u64>,
}

/// The limits whose values differ from `old` to `new`, in table order.
pub fn changes(old: &Limits, new: &Limits) -> Vec<Change> {
    TABLE
        .iter()
        .filter_map(|entry| {
            let (old, new) = ((entry.get)(old), (entry.get)(new));
            (old != new).then_some(Change {
                name: entry.name,
                reload: entry.reload,
                old,
                new,
            })
        })
        .collect()
}

/// An entry for `Limits::$field`, a plain number.
macro_rules! limit {
    ($name:literal => $field:ident, $width:ident, [$($target:ident),*], $reload:ident) => {
        Entry {
            name: $name,
            width: Width::$width,
            get: |limits| Some(limits.$field),
            set: |limits, value| limits.$field = value,
            targets: &[$(Target::$target),*],
            reload: Reload::$reload,
        }
    };
}

/// dbus-daemon's limits in its own order (bus/config-parser.c), then
/// quickbus's. Widths: dbus-daemon keeps the byte and fd counts in a
/// `long`, the others in an `int`.
pub static TABLE: &[Entry] = &[
    // Nothing to bound: quickbus routes each message as soon as it is
    // complete (docs/reliability.md).
    limit!("max_incoming_bytes" => max_incoming_bytes, Long, [], NoEffect),
    limit!("max_incoming_unix_fds" => max_incoming_unix_fds, Long, [Server], AtOnce),
    limit!("max_outgoing_bytes" => max_outgoing_bytes, Long, [OutBounds], AtOnce),
    limit!("max_outgoing_unix_fds" => max_outgoing_unix_fds, Long, [OutBounds], AtOnce),
    // The loop refuses a frame by its header, the core a message.
    limit!("max_message_size" => max_message_size, Long, [Server, Bus], AtOnce),
    limit!("max_message_unix_fds" => max_message_unix_fds, Long, [Bus], AtOnce),
    limit!("service_start_timeout" => service_start_timeout_ms, Int, [Bus], NewDeadlines),
    // The deadlines of connections not yet past Hello move with it, as
    // dbus-daemon measures each against the current value.
    limit!("auth_timeout" => auth_timeout_ms, Int, [Server], AtOnce),
    limit!("pending_fd_timeout" => pending_fd_timeout_ms, Int, [Server], NewDeadlines),
    Entry {
        name: "reply_timeout",
        width: Width::Int,
        get: |limits| limits.reply_timeout_ms,
        set: |limits, value| limits.reply_timeout_ms = Some(value),
        targets: &[Target::Bus],
        // dbus-daemon keeps the value it started with (its pending-reply
        // list is made once); quickbus times each call with the current.
        reload: Reload::NewDeadlines,
    },
    // The loop refuses at accept when every slot is taken, the core a
    // Hello.
    limit!("max_completed_connections" => max_completed_connections, Int, [Server, Bus], AtOnce),
    limit!("max_incomplete_connections" => max_incomplete_connections, Int, [Server], AtOnce),
    limit!("max_connections_per_user" => max_connections_per_user, Int, [Bus], AtOnce),
    limit!("max_pending_service_starts" => max_pending_service_starts, Int, [Bus], AtOnce),
    limit!("max_names_per_connection" => max_names_per_connection, Int, [Bus], AtOnce),
    limit!("max_match_rules_per_connection" => max_match_rules_per_connection, Int, [Bus], AtOnce),
    limit!("max_replies_per_connection" => max_replies_per_connection, Int, [Bus], AtOnce),
    // Containers1: the core judges AddServer, the loop counts what a
    // container socket accepts. As dbus-daemon, instances and
    // connections already there stay when a reload lowers them.
    limit!("max_containers" => max_containers, Int, [Bus], AtOnce),
    limit!("max_containers_per_user" => max_containers_per_user, Int, [Bus], AtOnce),
    limit!("max_container_metadata_bytes" => max_container_metadata_bytes, Int, [Bus], AtOnce),
    limit!("max_connections_per_container" => max_connections_per_container, Int, [Server], AtOnce),
    // quickbus's own (docs/quickbus-daemon-config.md).
    limit!("socket_buffer_bytes" => socket_buffer_bytes, Int, [Server], NewConnections),
    limit!("pacing_bytes" => pacing_bytes, Long, [OutBounds], AtOnce),
    limit!("pacing_timeout" => pacing_timeout_ms, Int, [OutBounds], NewDeadlines),
    limit!("overflow_hold_timeout" => overflow_hold_timeout_ms, Int, [OutBounds], NewDeadlines),
    limit!("overflow_memory_timeout" => overflow_memory_timeout_ms, Int, [OutBounds], NewDeadlines),
    limit!("max_outgoing_queues_per_user" => max_outgoing_queues_per_user, Int, [OutBounds], AtOnce),
    limit!("max_hold_per_user_per_minute" => max_hold_per_user_per_minute, Int, [OutBounds], AtOnce),
    limit!("max_activation_environment_variables" => max_activation_environment_variables, Int, [Bus], AtOnce),
    limit!("max_activation_environment_bytes" => max_activation_environment_bytes, Long, [Bus], AtOnce),
    // The loop builds its workers anew when a reload changes it.
    limit!("threads" => threads, Int, [Server], AtOnce),
];

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The names dbus-daemon 1.14 knows (bus/config-parser.c,
    /// `set_limit`; `man dbus-daemon`).
    pub(crate) const DBUS_DAEMON_NAMES: [&str; 21] = [
        "max_incoming_bytes",
        "max_incoming_unix_fds",
        "max_outgoing_bytes",
        "max_outgoing_unix_fds",
        "max_message_size",
        "max_message_unix_fds",
        "service_start_timeout",
        "auth_timeout",
        "pending_fd_timeout",
        "reply_timeout",
        "max_completed_connections",
        "max_incomplete_connections",
        "max_connections_per_user",
        "max_pending_service_starts",
        "max_names_per_connection",
        "max_match_rules_per_connection",
        "max_replies_per_connection",
        "max_containers",
        "max_containers_per_user",
        "max_container_metadata_bytes",
        "max_connections_per_container",
    ];

    /// quickbus's own (docs/quickbus-daemon-config.md).
    const QUICKBUS_NAMES: [&str; 10] = [
        "socket_buffer_bytes",
        "pacing_bytes",
        "pacing_timeout",
        "overflow_hold_timeout",
        "overflow_memory_timeout",
        "max_outgoing_queues_per_user",
        "max_hold_per_user_per_minute",
        "max_activation_environment_variables",
        "max_activation_environment_bytes",
        "threads",
    ];

    #[test]
    fn every_limit_name_is_in_the_table_exactly_once() {
        for name in DBUS_DAEMON_NAMES.iter().chain(&QUICKBUS_NAMES) {
            let count = TABLE.iter().filter(|e| e.name == *name).count();
            assert_eq!(count, 1, "{name} is in the table {count} times");
        }
        assert_eq!(
            TABLE.len(),
            DBUS_DAEMON_NAMES.len() + QUICKBUS_NAMES.len(),
            "the table has names neither dbus-daemon nor quickbus documents"
        );
    }

    #[test]
    fn each_entry_reads_and_writes_its_own_field() {
        let mut limits = Limits::default();
        for (i, entry) in TABLE.iter().enumerate() {
            (entry.set)(&mut limits, 7000 + i as u64);
        }
        for (i, entry) in TABLE.iter().enumerate() {
            assert_eq!(
                (entry.get)(&limits),
                Some(7000 + i as u64),
                "{}",
                entry.name
            );
        }
    }

    #[test]
    fn the_reload_rule_of_each_limit() {
        use Reload::*;
        let expected = [
            ("max_incoming_bytes", NoEffect),
            ("max_incoming_unix_fds", AtOnce),
            ("max_outgoing_bytes", AtOnce),
            ("max_outgoing_unix_fds", AtOnce),
            ("max_message_size", AtOnce),
            ("max_message_unix_fds", AtOnce),
            ("service_start_timeout", NewDeadlines),
            ("auth_timeout", AtOnce),
            ("pending_fd_timeout", NewDeadlines),
            ("reply_timeout", NewDeadlines),
            ("max_completed_connections", AtOnce),
            ("max_incomplete_connections", AtOnce),
            ("max_connections_per_user", AtOnce),
            ("max_pending_service_starts", AtOnce),
            ("max_names_per_connection", AtOnce),
            ("max_match_rules_per_connection", AtOnce),
            ("max_replies_per_connection", AtOnce),
            ("max_containers", AtOnce),
            ("max_containers_per_user", AtOnce),
            ("max_container_metadata_bytes", AtOnce),
            ("max_connections_per_container", AtOnce),
            ("socket_buffer_bytes", NewConnections),
            ("pacing_bytes", AtOnce),
            ("pacing_timeout", NewDeadlines),
            ("overflow_hold_timeout", NewDeadlines),
            ("overflow_memory_timeout", NewDeadlines),
            ("max_outgoing_queues_per_user", AtOnce),
            ("max_hold_per_user_per_minute", AtOnce),
            ("max_activation_environment_variables", AtOnce),
            ("max_activation_environment_bytes", AtOnce),
            ("threads", AtOnce),
        ];
        assert_eq!(expected.len(), TABLE.len());
        for (name, reload) in expected {
            assert_eq!(entry(name).map(|e| e.reload), Some(reload), "{name}");
        }
    }

    #[test]
    fn a_limit_has_a_target_exactly_when_it_has_an_effect() {
        for entry in TABLE {
            let targets: HashSet<_> = entry.targets.iter().collect();
            assert_eq!(targets.len(), entry.targets.len(), "{}", entry.name);
            assert_eq!(
                entry.targets.is_empty(),
                entry.reload == Reload::NoEffect,
                "{}",
                entry.name
            );
        }
    }

    #[test]
    fn changes_name_what_differs_in_table_order() {
        let old = Limits::default();
        let mut new = old.clone();
        new.socket_buffer_bytes = 65536;
        new.reply_timeout_ms = Some(1000);
        new.max_incoming_bytes = old.max_incoming_bytes;
        assert_eq!(
            changes(&old, &new),
            vec![
                Change {
                    name: "reply_timeout",
                    reload: Reload::NewDeadlines,
                    old: None,
                    new: Some(1000)
                },
                Change {
                    name: "socket_buffer_bytes",
                    reload: Reload::NewConnections,
                    old: Some(0),
                    new: Some(65536)
                },
            ]
        );
        assert!(changes(&old, &old).is_empty());
    }
}
