//! The CPU that carries a workload's messages (a bus's daemon, a proxy in
//! front of it) over a stretch of wall time, both read at the same two
//! moments: what the many-clients tables' `bus cores` divide, and what
//! a burst's CPU per message counts.

use std::time::Instant;

/// A stretch over which a meter's CPU seconds are counted. The wall clock
/// starts right after the first reading and stops right after the last,
/// so the CPU seconds and the wall seconds they are divided by cover the
/// same stretch, whatever the caller does in between.
///
/// A window may also read quickbus's loop thread, one part of that CPU
/// ([`super::buses::RunningBus::loop_cpu_seconds`]): its readings fall
/// within the whole's (right after the whole's first, right before its
/// last), so the loop never counts more than the whole.
pub struct CpuWindow<M, L = fn() -> Option<f64>>
where
    M: Fn() -> f64,
    L: Fn() -> Option<f64>,
{
    /// CPU seconds so far, e.g. [`super::buses::RunningBus::cpu_seconds`].
    meter: M,
    cpu_before: f64,
    opened: Instant,
    /// The loop thread's CPU seconds so far, None where unreadable.
    loop_meter: Option<L>,
    loop_before: Option<f64>,
}

/// What a [`CpuWindow`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuSpan {
    pub cpu_seconds: f64,
    pub wall_seconds: f64,
    /// The loop thread's CPU seconds over the same stretch (None: no
    /// loop meter, or one of its readings failed).
    pub loop_cpu_seconds: Option<f64>,
}

impl<M: Fn() -> f64> CpuWindow<M> {
    /// A window over `meter` alone.
    pub fn open(meter: M) -> CpuWindow<M> {
        CpuWindow::open_with_loop(meter, None)
    }
}

impl<M: Fn() -> f64, L: Fn() -> Option<f64>> CpuWindow<M, L> {
    /// A window over `meter` that also reads `loop_meter` (None: as
    /// [`CpuWindow::open`]).
    pub fn open_with_loop(meter: M, loop_meter: Option<L>) -> CpuWindow<M, L> {
        let cpu_before = meter();
        let opened = Instant::now();
        let loop_before = loop_meter.as_ref().and_then(|read| read());
        CpuWindow {
            meter,
            cpu_before,
            opened,
            loop_meter,
            loop_before,
        }
    }

    pub fn close(self) -> CpuSpan {
        let loop_after = self.loop_meter.as_ref().and_then(|read| read());
        CpuSpan {
            cpu_seconds: cpu_between(self.cpu_before, (self.meter)()),
            wall_seconds: self.opened.elapsed().as_secs_f64(),
            loop_cpu_seconds: self
                .loop_before
                .zip(loop_after)
                .map(|(before, after)| cpu_between(before, after)),
        }
    }
}

/// The CPU seconds between two readings of a meter. A process that ended
/// between the two takes its CPU seconds with it: never below 0.
fn cpu_between(before: f64, after: f64) -> f64 {
    (after - before).max(0.0)
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
    use std::cell::{Cell, RefCell};

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
    fn a_window_reads_the_loop_within_the_whole_and_counts_both() {
        let reads = RefCell::new(Vec::new());
        let whole = [10.0, 10.5];
        let meter = || {
            let mut reads = reads.borrow_mut();
            reads.push("whole");
            whole[reads.iter().filter(|&&r| r == "whole").count() - 1]
        };
        let loop_values = [Some(3.0), Some(3.25)];
        let loop_meter = || {
            let mut reads = reads.borrow_mut();
            reads.push("loop");
            loop_values[reads.iter().filter(|&&r| r == "loop").count() - 1]
        };
        let span = CpuWindow::open_with_loop(meter, Some(loop_meter)).close();
        assert_eq!(span.cpu_seconds, 0.5);
        assert_eq!(span.loop_cpu_seconds, Some(0.25));
        assert_eq!(*reads.borrow(), ["whole", "loop", "loop", "whole"]);
    }

    #[test]
    fn a_loop_reading_that_fails_or_no_loop_meter_counts_no_loop() {
        let failing = [Some(1.0), None];
        let read = Cell::new(0);
        let loop_meter = || {
            read.set(read.get() + 1);
            failing[read.get() - 1]
        };
        let span = CpuWindow::open_with_loop(|| 1.0, Some(loop_meter)).close();
        assert_eq!(span.loop_cpu_seconds, None);
        assert_eq!(CpuWindow::open(|| 1.0).close().loop_cpu_seconds, None);
    }

    #[test]
    fn cores_divide_by_the_wall_of_the_same_span() {
        assert_eq!(cores(1.5, 2.0), 0.75);
        assert_eq!(cores(1.0, 0.0), 0.0);
    }
}
