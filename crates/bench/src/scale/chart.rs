//! SVG line charts with linear axes from zero: a flat cost is a horizontal
//! line, a linear one a slope (log axes would hide both).

use crate::svg::{Canvas, LEFT, TOP};

/// One line of a chart: a name and (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Room on the right for the legend.
const RIGHT: f64 = 150.0;
const TICKS: usize = 5;

/// 1, 2 or 5 times a power of ten, at least `raw`: a round tick step.
fn nice_step(raw: f64) -> f64 {
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * power)
}

fn label(value: f64) -> String {
    match value.abs() {
        v if v >= 1e6 => format!("{}M", value / 1e6),
        v if v >= 1e3 => format!("{}k", value / 1e3),
        v if v >= 10.0 || v == 0.0 => format!("{value:.0}"),
        _ => format!("{value:.2}"),
    }
}

/// A chart titled `title`; None when no series has a point.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Option<String> {
    let points = || series.iter().flat_map(|s| &s.points);
    points().next()?;
    let x_max = points().map(|p| p.0).fold(0.0, f64::max).max(1.0);
    let y_top = points().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.1;
    let x_step = nice_step(x_max / TICKS as f64);
    let y_step = nice_step(y_top / TICKS as f64);
    let (x_hi, y_hi) = (
        (x_max / x_step).ceil() * x_step,
        (y_top / y_step).ceil() * y_step,
    );
    let mut canvas = Canvas::new(title, RIGHT);
    let (plot_w, plot_h) = (canvas.plot_w, canvas.plot_h);
    let sx = |x: f64| LEFT + x / x_hi * plot_w;
    let sy = |y: f64| TOP + plot_h - y / y_hi * plot_h;
    let mut y = 0.0;
    while y <= y_hi + y_step / 2.0 {
        canvas.y_tick(sy(y), &label(y));
        y += y_step;
    }
    let mut x = 0.0;
    while x <= x_hi + x_step / 2.0 {
        canvas.x_tick(sx(x), &label(x));
        x += x_step;
    }
    canvas.axis_names(x_label, y_label);
    for s in series {
        let path: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (sx(x), sy(y))).collect();
        canvas.series(&s.name, &path);
    }
    Some(canvas.finish())
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
    fn one_line_per_series_on_axes_from_zero() {
        let series = [
            Series {
                name: "quickbus".into(),
                points: vec![(10_000.0, 2.0), (100_000.0, 2.1)],
            },
            Series {
                name: "a<b".into(),
                points: vec![(10_000.0, 3.0)],
            },
        ];
        let svg = line_chart("names", "names installed", "µs", &series).unwrap();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains(">100k<") && svg.contains(">0<"), "{svg}");
        assert!(svg.contains("a&lt;b"));
        assert!(svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn no_points_no_chart() {
        assert!(line_chart("t", "x", "y", &[]).is_none());
    }
}
