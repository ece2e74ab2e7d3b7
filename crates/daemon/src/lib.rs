//! quickbus-daemon: the I/O shell around `quickbus-bus`.

pub mod auth;
pub mod cli;
pub mod config;
