//! `quickbus capture -o FILE`: record the bus to a pcap file that
//! Wireshark, tshark and Bustle open. Whole messages, never truncated; at
//! the start it records who owns which name the way Bustle's recorder does
//! (a second connection asks GetNameOwner for every well-known name, and
//! the monitor captures the calls and replies).

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use quickbus_client::{bus_call, Connection, Value};

use crate::bus_monitor::{BusMonitor, Event};
use crate::pcap::PcapWriter;
use crate::Failure;

/// Bustle's prefix for the name its helper connection holds, so viewers
/// can leave it out of their diagrams.
const HELPER_NAME_PREFIX: &str = "org.freedesktop.Bustle.Monitor.";

#[derive(Args, Debug)]
pub struct CaptureArgs {
    /// The pcap file to write
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Match rules; none: every message
    pub rules: Vec<String>,
}

pub fn run(args: &CaptureArgs, address: &str, timeout: Duration) -> Result<(), Failure> {
    let file = File::create(&args.output)
        .map_err(|e| Failure(format!("cannot create {}: {e}", args.output.display())))?;
    let write_failed =
        |e: std::io::Error| Failure(format!("cannot write {}: {e}", args.output.display()));
    let mut pcap = PcapWriter::new(BufWriter::new(file)).map_err(write_failed)?;
    let mut monitor = BusMonitor::start(address, &args.rules, timeout)?;
    // The helper stays connected until the capture ends, like Bustle's, so
    // its name stays valid in the diagram.
    let _helper = record_name_owners(address, timeout)?;
    eprintln!("capturing to {} (Ctrl-C to stop)", args.output.display());
    let mut count: u64 = 0;
    loop {
        match monitor.next_event()? {
            Event::Message(seen) => {
                pcap.write(seen.time, seen.message.raw())
                    .map_err(write_failed)?;
                count += 1;
            }
            Event::Idle => pcap.flush().map_err(write_failed)?,
            Event::End => break,
        }
    }
    pcap.flush().map_err(write_failed)?;
    eprintln!("{count} messages captured to {}", args.output.display());
    Ok(())
}

/// ":1.42" -> "org.freedesktop.Bustle.Monitor._1_42".
fn helper_name(unique: &str) -> String {
    let mangled: String = unique
        .chars()
        .map(|c| if c.is_ascii_digit() { c } else { '_' })
        .collect();
    format!("{HELPER_NAME_PREFIX}{mangled}")
}

/// Ask the owner of every well-known name over a second connection, so the
/// capture starts knowing who is who.
fn record_name_owners(address: &str, timeout: Duration) -> Result<Connection, Failure> {
    let mut conn = Connection::connect_with_timeout(address, timeout)?;
    let name = helper_name(conn.unique_name());
    // Not fatal: a system bus policy may refuse the name.
    let _ = conn.request_name(&name, 0);
    let reply = conn.call(bus_call("ListNames"))?;
    let names = match reply.body_values()?.into_iter().next() {
        Some(Value::Array { items, .. }) => items,
        _ => Vec::new(),
    };
    for name in names {
        let Value::String(name) = name else { continue };
        if name.starts_with(':') || name == quickbus_client::BUS_NAME {
            continue;
        }
        // An error means the owner left meanwhile; its NameOwnerChanged is
        // in the capture.
        let _ = conn.get_name_owner(&name);
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_names_follow_bustle() {
        assert_eq!(helper_name(":1.42"), "org.freedesktop.Bustle.Monitor._1_42");
        assert!(quickbus_wire::names::is_valid_bus_name(&helper_name(
            ":3.14"
        )));
    }
}
