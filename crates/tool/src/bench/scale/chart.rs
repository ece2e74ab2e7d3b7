//! SVG line charts with linear axes from zero: a flat cost is a horizontal
//! line, a linear one a slope (log axes would hide both).

use std::fmt::Write;

/// One line of a chart: a name and (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const TICKS: usize = 5;
const COLORS: [&str; 4] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
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
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let sx = |x: f64| LEFT + x / x_hi * plot_w;
    let sy = |y: f64| TOP + plot_h - y / y_hi * plot_h;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        escape(title)
    );
    let mut y = 0.0;
    while y <= y_hi + y_step / 2.0 {
        let py = sy(y);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            py + 4.0,
            label(y)
        );
        y += y_step;
    }
    let mut x = 0.0;
    while x <= x_hi + x_step / 2.0 {
        let px = sx(x);
        let _ = writeln!(
            svg,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#eee"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 16.0,
            label(x)
        );
        x += x_step;
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 12.0,
        escape(x_label)
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (sx(x), sy(y))).collect();
        if path.is_empty() {
            continue;
        }
        let line: Vec<String> = path.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            line.join(" ")
        );
        for (x, y) in &path {
            let _ = writeln!(
                svg,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{color}"/>"#
            );
        }
        let legend_y = TOP + 10.0 + 20.0 * i as f64;
        let legend_x = LEFT + plot_w + 15.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{legend_x}" y1="{legend_y}" x2="{:.1}" y2="{legend_y}" stroke="{color}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            legend_x + 20.0,
            legend_x + 26.0,
            legend_y + 4.0,
            escape(&s.name)
        );
    }
    svg.push_str("</svg>\n");
    Some(svg)
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
