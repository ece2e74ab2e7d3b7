//! Axes: which values they show, where a value falls (0 to 1 along the
//! axis), and their ticks.

/// How an axis maps its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// From zero, with round steps: a flat cost is a horizontal line, a
    /// linear one a slope (log axes would hide both).
    Linear,
    /// Sizes in bytes on powers of two, a tick at every size that has a
    /// point (32, 1K, 128K).
    Log2Sizes,
    /// Decades (10k, 100k, 1M); values of zero and below are not shown.
    Log10,
}

impl Axis {
    /// Whether a point with `value` on this axis can be drawn.
    pub(crate) fn shows(self, value: f64) -> bool {
        value.is_finite() && (self != Axis::Log10 || value > 0.0)
    }

    /// Where `value` sits before scaling: itself or its logarithm.
    fn position(self, value: f64) -> f64 {
        match self {
            Axis::Linear => value,
            Axis::Log2Sizes => value.max(1.0).log2(),
            Axis::Log10 => value.log10(),
        }
    }
}

/// Ticks a linear axis aims for.
const TICKS: usize = 5;

/// An axis fitted to the values it shows.
pub(crate) struct Scale {
    axis: Axis,
    /// The ends, as positions ([`Axis::position`]).
    lo: f64,
    hi: f64,
    ticks: Vec<(f64, String)>,
}

impl Scale {
    /// Fit `axis` to `values` (at least one, all shown); `headroom` keeps
    /// a tenth above the highest on a linear axis (for y).
    pub(crate) fn fit(axis: Axis, values: impl Iterator<Item = f64>, headroom: bool) -> Scale {
        let values: Vec<f64> = values.collect();
        let positions = values.iter().map(|&v| axis.position(v));
        let min = positions.clone().fold(f64::MAX, f64::min);
        let max = positions.fold(f64::MIN, f64::max);
        match axis {
            Axis::Linear => {
                let max = values.iter().copied().fold(0.0, f64::max);
                let top = if headroom {
                    max.max(1e-9) * 1.1
                } else {
                    max.max(1.0)
                };
                let step = nice_step(top / TICKS as f64);
                let hi = (top / step).ceil() * step;
                let mut ticks = Vec::new();
                let mut at = 0.0;
                while at <= hi + step / 2.0 {
                    ticks.push((at, short_number(at)));
                    at += step;
                }
                Scale {
                    axis,
                    lo: 0.0,
                    hi,
                    ticks,
                }
            }
            Axis::Log2Sizes => {
                let mut sizes = values;
                sizes.sort_by(f64::total_cmp);
                sizes.dedup();
                let ticks = sizes.into_iter().map(|s| (s, size_label(s))).collect();
                Scale {
                    axis,
                    lo: min,
                    hi: min + (max - min).max(1.0),
                    ticks,
                }
            }
            Axis::Log10 => {
                let (lo, hi) = (min.floor(), max.ceil().max(min.floor() + 1.0));
                let mut ticks = Vec::new();
                let mut decade = lo;
                while decade <= hi {
                    let value = 10f64.powf(decade);
                    ticks.push((value, short_number(value)));
                    decade += 1.0;
                }
                Scale {
                    axis,
                    lo,
                    hi,
                    ticks,
                }
            }
        }
    }

    /// Where `value` falls along the axis, 0 at its start, 1 at its end.
    pub(crate) fn fraction(&self, value: f64) -> f64 {
        (self.axis.position(value) - self.lo) / (self.hi - self.lo)
    }

    /// Each tick's value and label.
    pub(crate) fn ticks(&self) -> impl Iterator<Item = (f64, String)> + '_ {
        self.ticks.iter().cloned()
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`: a round tick step.
fn nice_step(raw: f64) -> f64 {
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * power)
}

/// 100k, 1M, 20, 0.25.
fn short_number(value: f64) -> String {
    match value.abs() {
        v if v >= 1e6 => format!("{}M", value / 1e6),
        v if v >= 1e3 => format!("{}k", value / 1e3),
        v if v >= 10.0 || v == 0.0 => format!("{value:.0}"),
        v if v >= 1.0 && value.fract() == 0.0 => format!("{value:.0}"),
        _ => format!("{value:.2}"),
    }
}

/// 32, 1K, 128K: sizes in bytes.
fn size_label(size: f64) -> String {
    let size = size as u64;
    if size >= 1024 {
        format!("{}K", size / 1024)
    } else {
        size.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(20_000.0), 20_000.0);
        assert_eq!(nice_step(21_000.0), 50_000.0);
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(7.0), 10.0);
    }

    #[test]
    fn labels_are_short() {
        assert_eq!(short_number(1e6), "1M");
        assert_eq!(short_number(20_000.0), "20k");
        assert_eq!(short_number(50.0), "50");
        assert_eq!(short_number(1.0), "1");
        assert_eq!(short_number(0.5), "0.50");
        assert_eq!(size_label(131_072.0), "128K");
        assert_eq!(size_label(512.0), "512");
    }

    #[test]
    fn a_linear_axis_spans_zero_to_a_round_top() {
        let x = Scale::fit(Axis::Linear, [10_000.0, 100_000.0].into_iter(), false);
        assert_eq!((x.lo, x.hi), (0.0, 100_000.0));
        assert_eq!(x.fraction(50_000.0), 0.5);
        let y = Scale::fit(Axis::Linear, [10.0].into_iter(), true);
        assert_eq!(
            y.hi, 15.0,
            "11 (a tenth of headroom) up to the next step of 5"
        );
    }

    #[test]
    fn log_axes_fit_powers() {
        let y = Scale::fit(Axis::Log10, [9_000.0, 300_000.0].into_iter(), true);
        assert_eq!((y.lo, y.hi), (3.0, 6.0));
        let labels: Vec<String> = y.ticks().map(|(_, l)| l).collect();
        assert_eq!(labels, ["1k", "10k", "100k", "1M"]);
        let x = Scale::fit(Axis::Log2Sizes, [32.0, 1024.0, 32.0].into_iter(), false);
        assert_eq!(x.fraction(32.0), 0.0);
        assert_eq!(x.fraction(1024.0), 1.0);
        assert_eq!(x.ticks().count(), 2);
    }
}
