//! Carrying out the bus's flow control (the rule and the decisions are
//! the bus core's: [`quickbus_bus::overflow`]): queueing deliveries,
//! holding senders back and releasing them; and the fds a peer sends ahead
//! of their message (`max_incoming_unix_fds`, `pending_fd_timeout`).

use std::cmp::Reverse;
use std::time::Instant;

use quickbus_bus::flow::Kind;
use quickbus_bus::ConnId;
use tracing::warn;

use super::Server;

impl Server {
    /// The bus queued a message of `kind` for `to`: write it this turn.
    /// `behind`: it went in behind messages not written yet.
    pub(super) fn deliver(&mut self, to: ConnId, kind: Kind, behind: bool) {
        // A signal behind others needs nothing: its connection was listed
        // when its queue got its first message, and stays listed until
        // it is written, or is watched for room after a write that left
        // some behind (`Server::flush_dirty`, `watch_writable`). In a
        // burst of broadcasts, this spares a look-up per delivery.
        if behind && kind == Kind::Signal {
            return;
        }
        let Some(conn) = self.conns.get_mut(&to) else {
            return;
        };
        // A call it must answer (not a copy for a monitor or an
        // eavesdropper, which the bus marks a signal): it never sits out
        // until it has replied (see `fair_share`).
        conn.answering |= kind == Kind::Call;
        self.hand_off.delivered(kind);
        conn.listed.list(to, &mut self.dirty);
    }

    /// Stop reading `id` until the bus releases it.
    pub(super) fn hold(&mut self, id: ConnId) {
        if let Some(conn) = self.conns.get_mut(&id) {
            conn.held = true;
        }
    }

    /// Read `id` again, on the next turn.
    pub(super) fn release(&mut self, id: ConnId) {
        if let Some(conn) = self.conns.get_mut(&id) {
            if std::mem::take(&mut conn.held) {
                let hung_up = std::mem::take(&mut conn.hung_up_while_held);
                self.unfinished_reads.push((id, hung_up));
            }
        }
    }

    /// A warning the bus has about connection `id`, which peers could
    /// repeat at will: rate-limited per kind.
    pub(super) fn warn_about(&mut self, id: ConnId, kind: &'static str, message: &str) {
        if !self.log_limiter.admits(kind) {
            return;
        }
        let name = self.bus.unique_name(id).unwrap_or("(no name)");
        let creds = self.bus.credentials(id);
        warn!(
            dbus_unique_name = name,
            dbus_peer_uid = creds.map(|c| c.uid),
            dbus_peer_pid = creds.and_then(|c| c.pid),
            dbus_peer_comm = creds.and_then(|c| c.comm.as_deref()),
            "{message}"
        );
    }

    /// After reading: fds that came ahead of their message are bounded in
    /// number (`max_incoming_unix_fds`) and in time (`pending_fd_timeout`).
    pub(super) fn check_pending_fds(&mut self, id: ConnId) -> Result<(), String> {
        let Some(conn) = self.conns.get_mut(&id) else {
            return Ok(());
        };
        let pending = conn.transport.pending_fds();
        if pending == 0 {
            conn.fd_deadline = None;
            return Ok(());
        }
        if pending > self.opts.limits.max_incoming_unix_fds {
            return Err(format!(
                "{pending} file descriptors sent ahead of their message, more than \
                 max_incoming_unix_fds={}",
                self.opts.limits.max_incoming_unix_fds
            ));
        }
        if conn.fd_deadline.is_none() {
            let deadline = Instant::now() + self.opts.limits.pending_fd_timeout;
            conn.fd_deadline = Some(deadline);
            self.fd_deadlines.push(Reverse((deadline, id)));
        }
        Ok(())
    }

    /// Close connections whose early fds waited past `pending_fd_timeout`.
    pub(super) fn expire_pending_fds(&mut self, now: Instant) {
        while let Some(&Reverse((deadline, id))) = self.fd_deadlines.peek() {
            if deadline > now {
                break;
            }
            self.fd_deadlines.pop();
            let expired = self
                .conns
                .get(&id)
                .is_some_and(|c| c.fd_deadline == Some(deadline));
            if expired {
                let reason = format!(
                    "file descriptors pending for too long without their message \
                     (pending_fd_timeout={} ms)",
                    self.opts.limits.pending_fd_timeout.as_millis()
                );
                self.close(id, &reason);
            }
        }
    }
}
