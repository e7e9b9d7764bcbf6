//! `GaugeSeries`: a gauge family whose series are replaced as a whole each time.

use std::collections::BTreeSet;

use prometheus::GaugeVec;

/// One gauge family set as a whole each time: `replace_all` sets the series given and removes
/// every series the previous call set that is not among them (a deleted node's or pod's series
/// go with it). Karpenter's `metrics.Store` `ReplaceAll`.
pub struct GaugeSeries {
    gauge: GaugeVec,
    reported: BTreeSet<Vec<String>>,
}

impl GaugeSeries {
    /// Tracks the series of `gauge`.
    pub fn new(gauge: GaugeVec) -> Self {
        GaugeSeries {
            gauge,
            reported: BTreeSet::new(),
        }
    }

    /// Sets exactly `series` (label values in the gauge's label order, value).
    pub fn replace_all(&mut self, series: impl IntoIterator<Item = (Vec<String>, f64)>) {
        let mut now = BTreeSet::new();
        for (labels, value) in series {
            let values: Vec<&str> = labels.iter().map(String::as_str).collect();
            self.gauge.with_label_values(&values).set(value);
            now.insert(labels);
        }
        for gone in self.reported.difference(&now) {
            let values: Vec<&str> = gone.iter().map(String::as_str).collect();
            let _ = self.gauge.remove_label_values(&values);
        }
        self.reported = now;
    }
}
