//! `quickbus top`: a live view of the bus from Debug.Stats, refreshed
//! every second: per connection its names, messages and bytes per second
//! in and out, queued bytes, match rules and pending replies; sortable by
//! key press.

mod sample;
mod term;
mod view;

use std::time::{Duration, Instant};

use clap::Args;
use quickbus_client::Connection;

use crate::Failure;
use term::Terminal;
use view::SortBy;

#[derive(Args, Debug)]
pub struct TopArgs {
    /// Seconds between refreshes
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub interval: f64,
    /// Print this many refreshes as plain text and exit (no terminal control)
    #[arg(long, value_name = "N")]
    pub iterations: Option<u32>,
}

pub fn run(args: &TopArgs, address: &str, timeout: Duration) -> Result<(), Failure> {
    if !(args.interval.is_finite() && args.interval >= 0.1) {
        return Err(Failure(format!(
            "invalid --interval {}: at least 0.1 seconds",
            args.interval
        )));
    }
    let interval = Duration::from_secs_f64(args.interval);
    let mut bus = Connection::connect_with_timeout(address, timeout)?;
    let mut previous = sample::take(&mut bus)?;
    if let Some(n) = args.iterations {
        return print_plain(&mut bus, previous, n, interval);
    }
    let terminal =
        Terminal::open().map_err(|e| Failure(format!("cannot use the terminal: {e}")))?;
    let mut sort_by = SortBy::MessagesIn;
    let mut shown: Option<sample::Sample> = None;
    let mut next_refresh = Instant::now();
    loop {
        let now = Instant::now();
        if now >= next_refresh {
            let current = sample::take(&mut bus)?;
            shown = Some(std::mem::replace(&mut previous, current));
            next_refresh = now + interval;
        }
        let mut rows = view::rows(shown.as_ref(), &previous);
        view::sort(&mut rows, sort_by);
        let (width, height) = terminal.size();
        terminal
            .draw(&view::render(&rows, sort_by, width, height))
            .map_err(|e| Failure(format!("cannot draw: {e}")))?;
        let wait = next_refresh.saturating_duration_since(Instant::now());
        match terminal
            .key(wait)
            .map_err(|e| Failure(format!("cannot read keys: {e}")))?
        {
            // q, Ctrl-C, Ctrl-D
            Some(b'q' | 3 | 4) => return Ok(()),
            Some(key) => {
                if let Some(by) = SortBy::from_key(key) {
                    sort_by = by;
                }
            }
            None => {}
        }
    }
}

/// `--iterations N`: N tables one after the other, for scripts and logs.
fn print_plain(
    bus: &mut Connection,
    mut previous: sample::Sample,
    iterations: u32,
    interval: Duration,
) -> Result<(), Failure> {
    for i in 0..iterations {
        std::thread::sleep(interval);
        let current = sample::take(bus)?;
        let mut rows = view::rows(Some(&previous), &current);
        view::sort(&mut rows, SortBy::MessagesIn);
        if i > 0 {
            println!();
        }
        for line in view::render(&rows, SortBy::MessagesIn, usize::MAX, usize::MAX) {
            println!("{line}");
        }
        previous = current;
    }
    Ok(())
}
