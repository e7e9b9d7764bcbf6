//! The `# -- text` comments of the chart's values.yaml, which document each value: read by
//! tests/chart.rs (the table of Helm values in docs/install.md) and tests/docs.rs (the Helm value
//! of each flag in docs/configuration.md).

use std::path::Path;

/// `# -- text` comments of values.yaml: (dotted key, description), in file order.
pub fn documented_values(values_yaml: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(values_yaml).unwrap();
    let mut path: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<String> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(doc) = trimmed.strip_prefix("# -- ") {
            pending = Some(doc.to_string());
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('-') || !trimmed.contains(':') {
            continue;
        }
        let key = trimmed.split(':').next().unwrap().to_string();
        while path.last().is_some_and(|(i, _)| *i >= indent) {
            path.pop();
        }
        path.push((indent, key));
        if let Some(doc) = pending.take() {
            out.push((path.iter().map(|(_, k)| k.as_str()).collect::<Vec<_>>().join("."), doc));
        }
    }
    out
}
