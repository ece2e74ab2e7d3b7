//! Rate and size over time as inline SVG (drawn once, no script needed).

use std::fmt::Write;

use crate::analysis::Analysis;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 160.0;
const BINS: usize = 120;

/// Per time bin: message count, bytes and largest message.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bin {
    pub messages: u64,
    pub bytes: u64,
    pub largest: u64,
}

/// The capture cut into equal time bins; also the width of one bin in
/// seconds.
pub fn bins(analysis: &Analysis) -> (Vec<Bin>, f64) {
    let Some(first) = analysis.entries.first() else {
        return (Vec::new(), 0.0);
    };
    let span = analysis.duration().as_secs_f64().max(1e-6);
    let width = span / BINS as f64;
    let mut bins = vec![Bin::default(); BINS];
    for e in &analysis.entries {
        let t = e
            .time
            .duration_since(first.time)
            .unwrap_or_default()
            .as_secs_f64();
        let i = ((t / width) as usize).min(BINS - 1);
        let b = &mut bins[i];
        b.messages += 1;
        b.bytes += e.size as u64;
        b.largest = b.largest.max(e.size as u64);
    }
    (bins, width)
}

/// A line chart of `series` (each a colour, a legend and values per bin).
fn line_chart(
    title: &str,
    unit: &str,
    series: &[(&str, &str, Vec<f64>)],
    bin_seconds: f64,
) -> String {
    let max = series
        .iter()
        .flat_map(|(_, _, v)| v.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<figure class=\"chart\"><figcaption>{title}</figcaption><svg viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"{title}\">",
        w = WIDTH + 60.0,
        h = HEIGHT + 30.0
    );
    let _ = write!(
        svg,
        "<line x1=\"50\" y1=\"{HEIGHT}\" x2=\"{}\" y2=\"{HEIGHT}\" class=\"axis\"/><line x1=\"50\" y1=\"0\" x2=\"50\" y2=\"{HEIGHT}\" class=\"axis\"/>",
        WIDTH + 50.0
    );
    let _ = write!(
        svg,
        "<text x=\"46\" y=\"10\" text-anchor=\"end\">{}</text><text x=\"46\" y=\"{HEIGHT}\" text-anchor=\"end\">0</text>",
        short_number(max)
    );
    let span = bin_seconds * BINS as f64;
    let _ = write!(
        svg,
        "<text x=\"50\" y=\"{y}\">0 s</text><text x=\"{x}\" y=\"{y}\" text-anchor=\"end\">{span:.3} s</text><text x=\"{mid}\" y=\"{y}\" text-anchor=\"middle\">{unit}</text>",
        x = WIDTH + 50.0,
        y = HEIGHT + 20.0,
        mid = 50.0 + WIDTH / 2.0
    );
    for (i, (colour, legend, values)) in series.iter().enumerate() {
        let step = WIDTH / values.len().max(1) as f64;
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(j, v)| {
                format!(
                    "{:.1},{:.1}",
                    50.0 + (j as f64 + 0.5) * step,
                    HEIGHT - v / max * (HEIGHT - 4.0)
                )
            })
            .collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/><text x=\"{}\" y=\"12\" fill=\"{colour}\">{legend}</text>",
            points.join(" "),
            60.0 + 120.0 * i as f64 + 10.0
        );
    }
    svg.push_str("</svg></figure>");
    svg
}

fn short_number(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// Both charts: messages per second, and mean and largest size.
pub fn charts(analysis: &Analysis) -> String {
    let (bins, width) = bins(analysis);
    if bins.is_empty() {
        return "<p>No messages.</p>".into();
    }
    let rate: Vec<f64> = bins.iter().map(|b| b.messages as f64 / width).collect();
    let mean: Vec<f64> = bins
        .iter()
        .map(|b| {
            if b.messages > 0 {
                b.bytes as f64 / b.messages as f64
            } else {
                0.0
            }
        })
        .collect();
    let largest: Vec<f64> = bins.iter().map(|b| b.largest as f64).collect();
    let mut out = line_chart(
        "Message rate",
        "messages per second",
        &[("#2563eb", "messages/s", rate)],
        width,
    );
    out.push_str(&line_chart(
        "Message size",
        "bytes",
        &[("#059669", "mean", mean), ("#dc2626", "largest", largest)],
        width,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{load, tests::sample_capture};

    #[test]
    fn bins_hold_every_message() {
        let a = load(&sample_capture()[..]).unwrap();
        let (bins, width) = bins(&a);
        assert_eq!(bins.len(), BINS);
        assert!((width * BINS as f64 - 0.05).abs() < 1e-9);
        assert_eq!(bins.iter().map(|b| b.messages).sum::<u64>(), 9);
        assert_eq!(bins[0].messages, 1);
        assert_eq!(
            bins[BINS - 1].messages,
            1,
            "the last message lands in the last bin"
        );
        let svg = charts(&a);
        assert_eq!(svg.matches("<svg").count(), 2);
        assert!(svg.contains("messages/s") && svg.contains("largest"));
    }
}
