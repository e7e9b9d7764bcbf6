//! The text served at `/metrics`: the registry in the Prometheus text format, then the families
//! written straight into the text at scrape time (`TextGauge`).

use super::Metrics;

impl Metrics {
    /// The registry in Prometheus text format, then the families written at scrape time.
    pub fn render(&self) -> String {
        let families = self.registry.gather();
        // The text is about the same size every scrape (the instance types make most of it):
        // sized once from the last one, it is not copied over as it grows.
        let mut bytes = Vec::with_capacity(self.rendered_len.load(std::sync::atomic::Ordering::Relaxed) * 9 / 8);
        // The encoder writes through `io::Write`; it fails only on a writer that fails, and a
        // `Vec` does not.
        let _ = prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &families, &mut bytes);
        let mut text = String::from_utf8(bytes).expect("the text encoder writes UTF-8");
        self.instance_types.render(&mut text);
        self.pods_state.render(&mut text);
        self.rendered_len.store(text.len(), std::sync::atomic::Ordering::Relaxed);
        text
    }
}

/// One gauge family written in the text format, a line per series, as Prometheus' text encoder
/// writes it (labels in name order); the `HELP` and `TYPE` lines come with the first series, so
/// a family without series writes nothing.
pub(super) struct TextGauge<'a> {
    out: &'a mut String,
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    order: Vec<usize>,
    started: bool,
}

impl<'a> TextGauge<'a> {
    pub(super) fn new(out: &'a mut String, name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Self {
        let mut order: Vec<usize> = (0..labels.len()).collect();
        order.sort_by_key(|&i| labels[i]);
        TextGauge {
            out,
            name,
            help,
            labels,
            order,
            started: false,
        }
    }

    /// One series: label values in the family's label order.
    pub(super) fn sample(&mut self, values: &[&str], value: f64) {
        use std::fmt::Write as _;
        if !std::mem::replace(&mut self.started, true) {
            let _ = writeln!(self.out, "# HELP {} {}\n# TYPE {} gauge", self.name, self.help, self.name);
        }
        self.out.push_str(self.name);
        for (n, &i) in self.order.iter().enumerate() {
            self.out.push(if n == 0 { '{' } else { ',' });
            self.out.push_str(self.labels[i]);
            self.out.push_str("=\"");
            escape_label_value(values[i], self.out);
            self.out.push('"');
        }
        if !self.order.is_empty() {
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// A label value as the text format quotes it: backslash, double quote and newline escaped.
fn escape_label_value(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}
