//! The differential harness: scripted scenarios run against the reference
//! dbus-daemon and against quickbus-daemon with the same configuration; a
//! monitor on each bus and every scenario client record what they receive,
//! normalised (see [`normalize`]), and the two records are compared. Every
//! difference must be listed, with its reason, in `differences.toml`.

pub mod answering;
pub mod client;
pub mod compare;
pub mod daemon;
pub mod differences;
pub mod normalize;
pub mod raw;
pub mod sandbox;
pub mod sasl;
pub mod scenarios;
pub mod script;

use std::time::Duration;

/// The longest any single wait may take: a reply, a close, an
/// announcement. Generous: the machines are small and shared. Only ever
/// used to give up, never asserted on.
pub const TIMEOUT: Duration = Duration::from_secs(20);
