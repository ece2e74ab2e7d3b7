//! The frame every chart shares: title, grid lines with their labels, axis
//! names, and one polyline (with dots, if asked) and a legend entry per
//! series. Everything it writes from a caller's text is escaped.

use std::fmt::Write;

pub const WIDTH: f64 = 760.0;
pub const HEIGHT: f64 = 420.0;
pub const LEFT: f64 = 80.0;
pub const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// Room on the right for the legend.
const RIGHT: f64 = 170.0;
pub const SVG_NAMESPACE: &str = "http://www.w3.org/2000/svg";
const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#7f7f7f", "#ff7f0e",
];

/// `text` made safe inside an XML (SVG or HTML) element or a quoted
/// attribute.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A chart being drawn.
pub struct Canvas {
    svg: String,
    pub plot_w: f64,
    pub plot_h: f64,
    series: usize,
}

impl Canvas {
    pub fn new(title: &str) -> Canvas {
        let plot_w = WIDTH - LEFT - RIGHT;
        let title = escape(title);
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="{SVG_NAMESPACE}" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12" role="img" aria-label="{title}">"#
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="22" font-size="15" text-anchor="middle">{title}</text>"#,
            LEFT + plot_w / 2.0,
        );
        Canvas {
            svg,
            plot_w,
            plot_h: HEIGHT - TOP - BOTTOM,
            series: 0,
        }
    }

    /// A horizontal grid line at height `y` (in pixels), labelled on the left.
    pub fn y_tick(&mut self, y: f64, label: &str) {
        let _ = writeln!(
            self.svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + self.plot_w,
            LEFT - 6.0,
            y + 4.0,
            escape(label)
        );
    }

    /// A vertical grid line at `x` (in pixels), labelled below the plot.
    pub fn x_tick(&mut self, x: f64, label: &str) {
        let _ = writeln!(
            self.svg,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + self.plot_h,
            TOP + self.plot_h + 16.0,
            escape(label)
        );
    }

    pub fn axis_names(&mut self, x_label: &str, y_label: &str) {
        let _ = writeln!(
            self.svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + self.plot_w / 2.0,
            HEIGHT - 12.0,
            escape(x_label)
        );
        let _ = writeln!(
            self.svg,
            r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + self.plot_h / 2.0,
            escape(y_label)
        );
    }

    /// One series, its points already in pixels, with a dot on each point
    /// when `dots`; it keeps its colour and legend place even when it has
    /// no point to draw.
    pub fn series(&mut self, name: &str, points: &[(f64, f64)], dots: bool) {
        let i = self.series;
        self.series += 1;
        if points.is_empty() {
            return;
        }
        let color = COLORS[i % COLORS.len()];
        let line: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            self.svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            line.join(" ")
        );
        for (x, y) in points.iter().filter(|_| dots) {
            let _ = writeln!(
                self.svg,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{color}"/>"#
            );
        }
        let legend_y = TOP + 10.0 + 20.0 * i as f64;
        let legend_x = LEFT + self.plot_w + 15.0;
        let _ = writeln!(
            self.svg,
            r#"<line x1="{legend_x}" y1="{legend_y}" x2="{:.1}" y2="{legend_y}" stroke="{color}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            legend_x + 20.0,
            legend_x + 26.0,
            legend_y + 4.0,
            escape(name)
        );
    }

    pub fn finish(mut self) -> String {
        self.svg.push_str("</svg>\n");
        self.svg
    }
}
