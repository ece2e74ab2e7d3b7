//! quickbus-daemon: the I/O shell around `quickbus-bus`.
//!
//! [`startup`] turns the command line into a running [`server`]; the server
//! moves bytes between sockets ([`transport`]) and the sans-I/O bus core.

pub mod activation;
pub mod auth;
pub mod bus_identity;
pub mod cli;
pub mod config;
pub mod container_sockets;
pub mod dynamic_users;
pub mod fd_closer;
pub mod fd_limit;
pub mod handoff_clock;
pub mod handover_fields;
/// Flow control's rule and bounds, applied by the bus core.
pub use quickbus_bus::flow;
pub mod idle_buffers;
pub mod landed_limits;
pub mod late_users;
pub mod listen;
pub mod log_limit;
pub mod logging;
pub mod mac;
pub mod nonce;
pub mod notify;
pub mod peer;
pub mod policy;
pub mod quiet_thread;
pub mod restart;
pub mod server;
pub mod service_file;
pub mod socket;
pub mod socket_buffers;
pub mod spawner;
pub mod startup;
pub mod sys;
#[cfg(test)]
mod test_closer;
#[cfg(test)]
mod test_forks;
pub mod transport;
pub mod userdb;
