//! quickbus-chart: SVG line charts, the one chart writer of the quickbus
//! report (rate and size over a capture) and of quickbus-bench (medians
//! against payload size, costs against bus size).
//!
//! ```
//! use quickbus_chart::{Axis, Chart, Series};
//! let chart = Chart {
//!     title: "names: wall µs per name",
//!     x_label: "names installed",
//!     y_label: "µs",
//!     x: Axis::Linear,
//!     y: Axis::Linear,
//!     dots: true,
//! };
//! let series = [Series { name: "quickbus".into(), points: vec![(1e4, 2.0), (1e5, 2.1)] }];
//! let svg = chart.draw(&series).unwrap();
//! assert!(svg.starts_with("<svg"));
//! ```

#![forbid(unsafe_code)]

mod axis;
mod canvas;

pub use axis::Axis;
pub use canvas::escape;

use axis::Scale;
use canvas::{Canvas, LEFT, TOP};

/// One line of a chart: a name for the legend and its (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// What a chart shows; [`Chart::draw`] draws it for some series.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub x: Axis,
    pub y: Axis,
    /// A dot on every point (for measurements; dense series read better
    /// as bare lines).
    pub dots: bool,
}

impl Chart<'_> {
    /// The SVG document, or None when no point can be drawn (a log axis
    /// drops the points it cannot show: zero and below).
    pub fn draw(&self, series: &[Series]) -> Option<String> {
        let shown = |p: &&(f64, f64)| self.x.shows(p.0) && self.y.shows(p.1);
        let points = || series.iter().flat_map(|s| &s.points).filter(shown);
        points().next()?;
        let x = Scale::fit(self.x, points().map(|p| p.0), false);
        let y = Scale::fit(self.y, points().map(|p| p.1), true);
        let mut canvas = Canvas::new(self.title);
        let (plot_w, plot_h) = (canvas.plot_w, canvas.plot_h);
        let sx = |v: f64| LEFT + x.fraction(v) * plot_w;
        let sy = |v: f64| TOP + plot_h - y.fraction(v) * plot_h;
        for (value, label) in y.ticks() {
            canvas.y_tick(sy(value), &label);
        }
        for (value, label) in x.ticks() {
            canvas.x_tick(sx(value), &label);
        }
        canvas.axis_names(self.x_label, self.y_label);
        for s in series {
            let path: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(shown)
                .map(|&(px, py)| (sx(px), sy(py)))
                .collect();
            canvas.series(&s.name, &path, self.dots);
        }
        Some(canvas.finish())
    }

    /// [`Chart::draw`] as an element of an HTML page, which needs no SVG
    /// namespace (and so names no URL).
    pub fn draw_inline(&self, series: &[Series]) -> Option<String> {
        let svg = self.draw(series)?;
        Some(svg.replacen(&format!(" xmlns=\"{}\"", canvas::SVG_NAMESPACE), "", 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(title: &str, x: Axis, y: Axis) -> Chart<'_> {
        Chart {
            title,
            x_label: "x",
            y_label: "y",
            x,
            y,
            dots: true,
        }
    }

    fn series(name: &str, points: &[(f64, f64)]) -> Series {
        Series {
            name: name.into(),
            points: points.to_vec(),
        }
    }

    #[test]
    fn sizes_against_decades_one_line_and_legend_entry_per_series() {
        let series = [
            series(
                "quickbus",
                &[(32.0, 300_000.0), (1024.0, 200_000.0), (131_072.0, 9_000.0)],
            ),
            series("a<b", &[(32.0, 100_000.0), (131_072.0, 0.0)]),
        ];
        let svg = chart("signal burst", Axis::Log2Sizes, Axis::Log10)
            .draw(&series)
            .unwrap();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 4, "0 is off a log axis");
        assert!(svg.contains(">quickbus<") && svg.contains("a&lt;b"));
        assert!(svg.contains(">128K<") && svg.contains(">1K<") && svg.contains(">32<"));
        assert!(svg.contains(">100k<") && svg.contains(">1M<"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn linear_axes_start_at_zero() {
        let series = [
            series("quickbus", &[(10_000.0, 2.0), (100_000.0, 2.1)]),
            series("dbus-daemon", &[(10_000.0, 3.0)]),
        ];
        let svg = chart("names", Axis::Linear, Axis::Linear)
            .draw(&series)
            .unwrap();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains(">100k<") && svg.contains(">0<"), "{svg}");
    }

    #[test]
    fn titles_labels_and_names_are_escaped() {
        let chart = Chart {
            title: "rate <b>&\"x\"",
            x_label: "a<x",
            y_label: "b&y",
            x: Axis::Linear,
            y: Axis::Linear,
            dots: false,
        };
        let svg = chart
            .draw(&[series("<script>", &[(1.0, 1.0), (2.0, 3.0)])])
            .unwrap();
        for raw in ["<b>", "&\"", "a<x", "b&y", "<script>"] {
            assert!(!svg.contains(raw), "{raw} unescaped in {svg}");
        }
        assert!(svg.contains("rate &lt;b&gt;&amp;&quot;x&quot;"), "{svg}");
        assert!(svg.contains("aria-label=\"rate &lt;b&gt;&amp;&quot;x&quot;\""));
        assert!(
            svg.contains("&lt;script&gt;") && svg.contains("a&lt;x") && svg.contains("b&amp;y")
        );
        assert_eq!(svg.matches("<circle").count(), 0, "no dots asked for");
    }

    #[test]
    fn inline_charts_name_no_url() {
        let chart = chart("t", Axis::Linear, Axis::Linear);
        let points = [series("s", &[(1.0, 1.0)])];
        assert!(chart.draw(&points).unwrap().contains("xmlns=\"http"));
        let inline = chart.draw_inline(&points).unwrap();
        assert!(
            inline.starts_with("<svg ") && !inline.contains("http"),
            "{inline}"
        );
    }

    #[test]
    fn nothing_drawable_draws_nothing() {
        assert!(chart("t", Axis::Linear, Axis::Linear).draw(&[]).is_none());
        let zero = [series("x", &[(32.0, 0.0)])];
        assert!(chart("t", Axis::Log2Sizes, Axis::Log10)
            .draw(&zero)
            .is_none());
        assert!(chart("t", Axis::Linear, Axis::Linear).draw(&zero).is_some());
    }
}
