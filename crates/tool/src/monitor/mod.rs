//! `quickbus monitor`: print every message on the bus, in dbus-monitor's
//! formats (default and `--profile`), as pcap (`--pcap`), or as JSON lines
//! (`--json`).

mod fd_text;
mod json;
mod profile;
pub mod text;

use std::io::{self, Write};
use std::time::Duration;

use clap::{ArgGroup, Args};

use crate::bus_monitor::{epoch_parts, BusMonitor};
use crate::pcap::PcapWriter;
use crate::Failure;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("format").args(["profile", "pcap", "json"])))]
pub struct MonitorArgs {
    /// dbus-monitor's --profile format: one tab-separated line per message
    #[arg(long)]
    pub profile: bool,
    /// Write a pcap stream (link type 231) to standard output
    #[arg(long)]
    pub pcap: bool,
    /// One JSON object per message and line
    #[arg(long)]
    pub json: bool,
    /// Match rules (dbus-monitor's watch expressions); none: everything
    pub rules: Vec<String>,
}

enum Output {
    Text,
    Profile { header_done: bool },
    Json,
    Pcap(PcapWriter<io::StdoutLock<'static>>),
}

pub fn run(args: &MonitorArgs, address: &str, timeout: Duration) -> Result<(), Failure> {
    let mut monitor = BusMonitor::start(address, &args.rules, timeout)?;
    let mut output = if args.pcap {
        Output::Pcap(PcapWriter::new(io::stdout().lock()).map_err(write_failed)?)
    } else if args.profile {
        Output::Profile { header_done: false }
    } else if args.json {
        Output::Json
    } else {
        Output::Text
    };
    let mut stdout = io::stdout();
    while let Some(seen) = monitor.next()? {
        let (sec, usec) = epoch_parts(seen.time);
        let msg = &seen.message;
        let written = match &mut output {
            Output::Text => {
                stdout.write_all(text::format_message(msg, sec, usec, &seen.fds).as_bytes())
            }
            Output::Profile { header_done } => {
                if !*header_done {
                    *header_done = true;
                    stdout
                        .write_all(profile::HEADER.as_bytes())
                        .map_err(write_failed)?;
                }
                stdout.write_all(profile::format_line(msg, sec, usec).as_bytes())
            }
            Output::Json => stdout.write_all(json::format_line(msg, sec, usec).as_bytes()),
            Output::Pcap(writer) => writer
                .write(seen.time, msg.raw())
                .and_then(|()| writer.flush()),
        };
        // Flushed per message, like dbus-monitor's line buffering, so a
        // pipe sees each message as it happens.
        written
            .and_then(|()| stdout.flush())
            .map_err(write_failed)?;
    }
    Ok(())
}

/// A closed pipe (`quickbus monitor | head`) ends the monitor quietly.
fn write_failed(e: io::Error) -> Failure {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    Failure(format!("cannot write the output: {e}"))
}
