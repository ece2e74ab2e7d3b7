//! SVG line charts of the medians: one chart per workload and metric,
//! payload size on a log2 x axis, the metric on a log10 y axis, one line
//! per bus (and floor).

use std::fmt::Write;

/// One line of a chart: a name and (payload size, value) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(usize, f64)>,
}

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#7f7f7f", "#ff7f0e",
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

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
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let sx = |size: usize| LEFT + ((size.max(1) as f64).log2() - x_min) / x_span * plot_w;
    let sy = |v: f64| TOP + plot_h - (v.log10() - y_lo) / (y_hi - y_lo) * plot_h;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        escape(title)
    );
    // Decades on the y axis.
    let mut decade = y_lo;
    while decade <= y_hi {
        let y = sy(10f64.powf(decade));
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            y + 4.0,
            format_decade(decade)
        );
        decade += 1.0;
    }
    // Every measured size on the x axis.
    let mut sizes: Vec<usize> = points().map(|p| p.0).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for size in sizes {
        let x = sx(size);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 16.0,
            size_label(size)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">payload bytes</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 12.0
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = s
            .points
            .iter()
            .filter(|p| p.1 > 0.0)
            .map(|&(size, v)| format!("{:.1},{:.1}", sx(size), sy(v)))
            .collect();
        if path.is_empty() {
            continue;
        }
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for point in &path {
            let (x, y) = point.split_once(',').expect("x,y");
            let _ = writeln!(svg, r#"<circle cx="{x}" cy="{y}" r="3" fill="{color}"/>"#);
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
