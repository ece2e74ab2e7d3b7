//! `SO_SNDBUF`/`SO_RCVBUF` of accepted connections (seed 002: the socket
//! buffer size alone can change stream throughput several times over, and
//! the right size is found by a measured sweep; see docs/performance.md).
//!
//! On a Unix stream socket the sender's `SO_SNDBUF` bounds the bytes in
//! flight towards the peer, so the daemon's value sets how much it can hand
//! a slow reader in one `sendmsg` before queueing. The kernel doubles the
//! value asked for and caps it at `net.core.wmem_max`/`rmem_max`.

use std::io;
use std::os::fd::AsFd;

use rustix::net::sockopt;

/// Ask for `bytes` of send and receive buffer on `socket`; 0 keeps the
/// kernel's defaults (`net.core.wmem_default`/`rmem_default`).
pub fn apply(socket: impl AsFd, bytes: usize) -> io::Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    sockopt::set_socket_send_buffer_size(&socket, bytes)?;
    sockopt::set_socket_recv_buffer_size(&socket, bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn zero_keeps_the_kernel_default() {
        let (a, _b) = UnixStream::pair().unwrap();
        let before = sockopt::get_socket_send_buffer_size(&a).unwrap();
        apply(&a, 0).unwrap();
        assert_eq!(sockopt::get_socket_send_buffer_size(&a).unwrap(), before);
    }

    #[test]
    fn both_buffers_take_the_size_asked_for() {
        let (a, _b) = UnixStream::pair().unwrap();
        // Small enough to sit under any wmem_max/rmem_max, and distinct
        // from the usual 208 KiB default.
        let want = 48 * 1024;
        apply(&a, want).unwrap();
        // The kernel doubles the value for its bookkeeping overhead.
        assert_eq!(sockopt::get_socket_send_buffer_size(&a).unwrap(), 2 * want);
        assert_eq!(sockopt::get_socket_recv_buffer_size(&a).unwrap(), 2 * want);
    }
}
