//! The configured `<limit>`s put where they apply: the bus core's
//! `quickbus_bus::Limits`, the outgoing queues' [`OutBounds`] and the
//! loop's [`ServerLimits`], at start-up, on each reload and after a
//! restart in place alike. `config::limit_table` names each limit's
//! target and reload rule; the tests here check that every limit lands
//! where the table says and nowhere else. Also the line a reload logs
//! about the limits it changed.

use std::time::Duration;

use crate::config::limit_table::{self, Reload};
use crate::config::Limits;
use crate::flow::{OutBounds, Pacing};
use crate::server::ServerLimits;

/// Every configured limit, in the structs that apply it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandedLimits {
    pub bus: quickbus_bus::Limits,
    pub out_bounds: OutBounds,
    pub server: ServerLimits,
}

/// A count or size as the targets hold it (a value past `usize` is no
/// bound at all).
fn size(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

fn millis(value: u64) -> Duration {
    Duration::from_millis(value)
}

impl LandedLimits {
    pub fn from_config(limits: &Limits) -> LandedLimits {
        LandedLimits {
            bus: bus_limits(limits),
            out_bounds: out_bounds(limits),
            server: server_limits(limits),
        }
    }
}

/// What the bus core enforces.
fn bus_limits(limits: &Limits) -> quickbus_bus::Limits {
    quickbus_bus::Limits {
        max_names_per_connection: size(limits.max_names_per_connection),
        max_match_rules_per_connection: size(limits.max_match_rules_per_connection),
        max_replies_per_connection: size(limits.max_replies_per_connection),
        // 0 is no time-out, as in dbus-daemon (its expiry list skips a
        // zero), not an immediate NoReply.
        reply_timeout: limits.reply_timeout_ms.filter(|&ms| ms > 0).map(millis),
        max_message_size: size(limits.max_message_size),
        // One sendmsg carries at most SCM_MAX_FD fds and the transport
        // sends a message's fds in one: a larger limit could not be honoured.
        max_message_unix_fds: size(limits.max_message_unix_fds).min(crate::transport::SCM_MAX_FD),
        max_completed_connections: size(limits.max_completed_connections),
        max_connections_per_user: size(limits.max_connections_per_user),
        service_start_timeout: millis(limits.service_start_timeout_ms),
        max_pending_service_starts: size(limits.max_pending_service_starts),
        max_activation_environment_variables: size(limits.max_activation_environment_variables),
        max_activation_environment_bytes: size(limits.max_activation_environment_bytes),
        max_containers: size(limits.max_containers),
        max_containers_per_user: size(limits.max_containers_per_user),
        max_container_metadata_bytes: size(limits.max_container_metadata_bytes),
    }
}

/// The bounds of every connection's outgoing queue (see [`crate::flow`]).
fn out_bounds(limits: &Limits) -> OutBounds {
    OutBounds {
        max_bytes: size(limits.max_outgoing_bytes),
        max_fds: size(limits.max_outgoing_unix_fds),
        hold: millis(limits.overflow_hold_timeout_ms),
        pacing: Pacing {
            bytes: size(limits.pacing_bytes),
            timeout: millis(limits.pacing_timeout_ms),
        },
        memory: millis(limits.overflow_memory_timeout_ms),
        queues_per_user: size(limits.max_outgoing_queues_per_user),
        hold_budget: millis(limits.max_hold_per_user_per_minute),
    }
}

/// What the event loop applies itself.
fn server_limits(limits: &Limits) -> ServerLimits {
    ServerLimits {
        auth_timeout: millis(limits.auth_timeout_ms),
        max_incomplete_connections: size(limits.max_incomplete_connections),
        max_connections: size(limits.max_completed_connections),
        max_message_size: size(limits.max_message_size),
        max_incoming_unix_fds: size(limits.max_incoming_unix_fds),
        pending_fd_timeout: millis(limits.pending_fd_timeout_ms),
        socket_buffer_bytes: size(limits.socket_buffer_bytes),
        max_connections_per_container: size(limits.max_connections_per_container),
        threads: size(limits.threads),
    }
}

/// The line a reload logs about the limits it changed, grouped by how
/// they take effect (`config::limit_table`), each with its new and old
/// value; None when it changed none.
pub fn reload_report(old: &Limits, new: &Limits) -> Option<String> {
    let changes = limit_table::changes(old, new);
    if changes.is_empty() {
        return None;
    }
    let value = |v: Option<u64>| v.map_or_else(|| "none".to_owned(), |v| v.to_string());
    let groups: Vec<String> = [
        Reload::AtOnce,
        Reload::NewDeadlines,
        Reload::NewConnections,
        Reload::NoEffect,
    ]
    .into_iter()
    .filter_map(|reload| {
        let named: Vec<String> = changes
            .iter()
            .filter(|c| c.reload == reload)
            .map(|c| format!("{}={} (was {})", c.name, value(c.new), value(c.old)))
            .collect();
        (!named.is_empty()).then(|| format!("{}: {}", reload.describe(), named.join(", ")))
    })
    .collect();
    Some(format!(
        "Limits changed by the reload, {}",
        groups.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::limit_table::{Target, TABLE};

    /// The targets whose landed values differ between `a` and `b`.
    fn differing(a: &LandedLimits, b: &LandedLimits) -> Vec<Target> {
        let mut targets = Vec::new();
        if a.bus != b.bus {
            targets.push(Target::Bus);
        }
        if a.out_bounds != b.out_bounds {
            targets.push(Target::OutBounds);
        }
        if a.server != b.server {
            targets.push(Target::Server);
        }
        targets
    }

    #[test]
    fn each_limit_lands_where_the_table_says_and_nowhere_else() {
        let defaults = Limits::default();
        let landed_defaults = LandedLimits::from_config(&defaults);
        for entry in TABLE {
            // A value no default has, small enough for every width and
            // below SCM_MAX_FD (max_message_unix_fds is capped there).
            let mut limits = defaults.clone();
            limits.set(entry.name, "7").unwrap();
            let mut expected = entry.targets.to_vec();
            expected.sort_by_key(|t| *t as u8);
            assert_eq!(
                differing(&landed_defaults, &LandedLimits::from_config(&limits)),
                expected,
                "{}",
                entry.name
            );
        }
    }

    #[test]
    fn a_zero_reply_timeout_is_none_as_in_dbus_daemon() {
        let mut limits = Limits {
            reply_timeout_ms: Some(0),
            ..Limits::default()
        };
        assert_eq!(LandedLimits::from_config(&limits).bus.reply_timeout, None);
        limits.reply_timeout_ms = Some(1500);
        assert_eq!(
            LandedLimits::from_config(&limits).bus.reply_timeout,
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn the_reload_report_names_each_changed_limit_under_its_rule() {
        let old = Limits::default();
        assert_eq!(reload_report(&old, &old), None);
        let mut new = old.clone();
        new.max_match_rules_per_connection = 3;
        new.max_outgoing_bytes = 65536;
        new.reply_timeout_ms = Some(1000);
        new.socket_buffer_bytes = 65536;
        new.max_incoming_bytes = 1000;
        assert_eq!(
            reload_report(&old, &new).as_deref(),
            Some(
                "Limits changed by the reload, applied at once: \
                 max_outgoing_bytes=65536 (was 133169152), \
                 max_match_rules_per_connection=3 (was 512); \
                 applied to deadlines set from now on: reply_timeout=1000 (was none); \
                 applied to connections accepted from now on (the others keep theirs): \
                 socket_buffer_bytes=65536 (was 0); \
                 without effect in quickbus: max_incoming_bytes=1000 (was 133169152)"
            )
        );
    }
}
