//! The CPU that carries a workload's messages (a bus's daemon, a proxy in
//! front of it) over a stretch of wall time, both read at the same two
//! moments: what the many-clients tables' `bus cores` divide, and what
//! a burst's CPU per message counts.

use std::time::Instant;

/// A stretch over which a meter's CPU seconds are counted. The wall clock
/// starts right after the first reading and stops right after the last,
/// so the CPU seconds and the wall seconds they are divided by cover the
/// same stretch, whatever the caller does in between.
pub struct CpuWindow<M: Fn() -> f64> {
    /// CPU seconds so far, e.g. [`super::buses::RunningBus::cpu_seconds`].
    meter: M,
    cpu_before: f64,
    opened: Instant,
}

/// What a [`CpuWindow`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuSpan {
    pub cpu_seconds: f64,
    pub wall_seconds: f64,
}

impl<M: Fn() -> f64> CpuWindow<M> {
    pub fn open(meter: M) -> CpuWindow<M> {
        let cpu_before = meter();
        CpuWindow {
            meter,
            cpu_before,
            opened: Instant::now(),
        }
    }

    pub fn close(self) -> CpuSpan {
        // A process that ended between the two readings takes its CPU
        // seconds with it: never below 0.
        let cpu_seconds = ((self.meter)() - self.cpu_before).max(0.0);
        CpuSpan {
            cpu_seconds,
            wall_seconds: self.opened.elapsed().as_secs_f64(),
        }
    }
}

/// The CPU seconds between two readings of a meter that may fail (None
/// when either did): never below 0, as in [`CpuWindow::close`].
pub fn cpu_between(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    before
        .zip(after)
        .map(|(before, after)| (after - before).max(0.0))
}

/// The cores busy on average: CPU seconds ÷ the wall seconds they were
/// counted over (0 over no time). Both must come from one [`CpuSpan`]:
/// divided by any other stretch (e.g. a burst's first send to its last
/// receive) the figure is off by the difference.
pub fn cores(cpu_seconds: f64, wall_seconds: f64) -> f64 {
    per_second(cpu_seconds, wall_seconds)
}

/// `amount` per second of `seconds` (0 over no time).
pub fn per_second(amount: f64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        amount / seconds
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_window_counts_the_cpu_between_its_two_readings_and_never_below_zero() {
        let readings = Cell::new(0);
        let meter = |values: [f64; 2]| {
            let readings = &readings;
            move || {
                readings.set(readings.get() + 1);
                values[readings.get() - 1]
            }
        };
        let span = CpuWindow::open(meter([1.25, 2.0])).close();
        assert_eq!(span.cpu_seconds, 0.75);
        readings.set(0);
        assert_eq!(CpuWindow::open(meter([2.0, 1.0])).close().cpu_seconds, 0.0);
    }

    #[test]
    fn cores_divide_by_the_wall_of_the_same_span() {
        assert_eq!(cores(1.5, 2.0), 0.75);
        assert_eq!(cores(1.0, 0.0), 0.0);
    }
}
