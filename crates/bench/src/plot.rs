//! SVG line charts of the medians: one chart per workload and metric,
//! payload size on a log2 x axis, the metric on a log10 y axis, one line
//! per bus (and floor).

use super::svg::{Canvas, LEFT, TOP};

/// One line of a chart: a name and (payload size, value) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(usize, f64)>,
}

/// Room on the right for the legend.
const RIGHT: f64 = 170.0;

fn size_label(size: usize) -> String {
    if size >= 1024 {
        format!("{}K", size / 1024)
    } else {
        size.to_string()
    }
}

/// A chart titled `title` with `y_label` on the y axis; None when no
/// series has a positive value (a log axis needs one).
pub fn line_chart(title: &str, y_label: &str, series: &[Series]) -> Option<String> {
    let points = || series.iter().flat_map(|s| &s.points).filter(|p| p.1 > 0.0);
    let (x_min, x_max) = points().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        let x = (p.0.max(1) as f64).log2();
        (lo.min(x), hi.max(x))
    });
    let (y_min, y_max) = points().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.1.log10()), hi.max(p.1.log10()))
    });
    if x_min > x_max {
        return None;
    }
    let (y_lo, y_hi) = (y_min.floor(), y_max.ceil().max(y_min.floor() + 1.0));
    let x_span = (x_max - x_min).max(1.0);
    let mut canvas = Canvas::new(title, RIGHT);
    let (plot_w, plot_h) = (canvas.plot_w, canvas.plot_h);
    let sx = |size: usize| LEFT + ((size.max(1) as f64).log2() - x_min) / x_span * plot_w;
    let sy = |v: f64| TOP + plot_h - (v.log10() - y_lo) / (y_hi - y_lo) * plot_h;
    // Decades on the y axis.
    let mut decade = y_lo;
    while decade <= y_hi {
        canvas.y_tick(sy(10f64.powf(decade)), &format_decade(decade));
        decade += 1.0;
    }
    // Every measured size on the x axis.
    let mut sizes: Vec<usize> = points().map(|p| p.0).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for size in sizes {
        canvas.x_tick(sx(size), &size_label(size));
    }
    canvas.axis_names("payload bytes", y_label);
    for s in series {
        let path: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|p| p.1 > 0.0)
            .map(|&(size, v)| (sx(size), sy(v)))
            .collect();
        canvas.series(&s.name, &path);
    }
    Some(canvas.finish())
}

fn format_decade(decade: f64) -> String {
    let value = 10f64.powf(decade);
    match value {
        v if v >= 1e6 => format!("{}M", v / 1e6),
        v if v >= 1e3 => format!("{}k", v / 1e3),
        v => format!("{v}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_has_one_line_and_legend_entry_per_series() {
        let series = [
            Series {
                name: "quickbus".into(),
                points: vec![(32, 300_000.0), (1024, 200_000.0), (131_072, 9_000.0)],
            },
            Series {
                name: "a<b".into(),
                points: vec![(32, 100_000.0), (131_072, 0.0)],
            },
        ];
        let svg = line_chart("signal burst", "messages/s", &series).unwrap();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 4);
        assert!(svg.contains(">quickbus<") && svg.contains("a&lt;b"));
        assert!(svg.contains(">128K<") && svg.contains(">1K<") && svg.contains(">32<"));
        assert!(svg.contains(">100k<") && svg.contains(">1M<"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn nothing_positive_draws_nothing() {
        let series = [Series {
            name: "x".into(),
            points: vec![(32, 0.0)],
        }];
        assert!(line_chart("t", "y", &series).is_none());
    }
}
