//! Rate and size over time as inline SVG (drawn once, no script needed).

use quickbus_chart::{escape, Axis, Chart, Series};

use crate::analysis::Analysis;

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

/// One chart of values per bin against time, as an HTML figure whose
/// caption is its title.
fn figure(title: &str, unit: &str, series: &[(&str, Vec<f64>)], bin_seconds: f64) -> String {
    let series: Vec<Series> = series
        .iter()
        .map(|(name, values)| Series {
            name: (*name).to_owned(),
            points: values
                .iter()
                .enumerate()
                .map(|(i, &v)| ((i as f64 + 0.5) * bin_seconds, v))
                .collect(),
        })
        .collect();
    let chart = Chart {
        title,
        x_label: "seconds since the first message",
        y_label: unit,
        x: Axis::Linear,
        y: Axis::Linear,
        dots: false,
    };
    let svg = chart.draw_inline(&series).unwrap_or_default();
    format!(
        "<figure class=\"chart\"><figcaption>{}</figcaption>{svg}</figure>",
        escape(title)
    )
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
    let mut out = figure(
        "Message rate",
        "messages per second",
        &[("messages/s", rate)],
        width,
    );
    out.push_str(&figure(
        "Message size",
        "bytes",
        &[("mean", mean), ("largest", largest)],
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

    /// The caption and the chart's title are text in the page: escaped.
    #[test]
    fn titles_are_escaped() {
        let html = figure(
            "<b>rate</b> & \"size\"",
            "a<b",
            &[("x<y", vec![1.0, 2.0])],
            0.5,
        );
        assert!(
            html.contains(
                "<figcaption>&lt;b&gt;rate&lt;/b&gt; &amp; &quot;size&quot;</figcaption>"
            ),
            "{html}"
        );
        for raw in ["<b>", "& \"", "a<b", "x<y"] {
            assert!(!html.contains(raw), "{raw} unescaped in {html}");
        }
        assert_eq!(html.matches("<polyline").count(), 1);
    }
}
