//! `SummaryVec`: a Prometheus summary with labels, which the `prometheus` crate does not have.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary};

/// The quantiles of every summary, as Karpenter's (`core@v0.31.0:pkg/metrics/constants.go`).
pub const SUMMARY_QUANTILES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];

/// How long an observation counts towards a summary's quantiles (Go's default `MaxAge`).
const SUMMARY_MAX_AGE: Duration = Duration::from_secs(10 * 60);

/// The most observations a summary series keeps for its quantiles (the oldest go first), so
/// that a burst cannot grow it without bound.
const SUMMARY_MAX_KEPT: usize = 4096;

/// A Prometheus summary with labels (the `prometheus` crate has none): `_count` and `_sum` over
/// the process's life, and `SUMMARY_QUANTILES` over the observations of the last 10 minutes
/// (exact ranks of at most the last 4,096; NaN when there were none, as Go reports them).
#[derive(Clone)]
pub struct SummaryVec {
    desc: Desc,
    series: Arc<Mutex<HashMap<Vec<String>, SummarySeries>>>,
}

#[derive(Default)]
struct SummarySeries {
    count: u64,
    sum: f64,
    recent: VecDeque<(Instant, f64)>,
}

impl SummaryVec {
    /// A summary family named `name` with the given label names.
    pub fn new(name: &str, help: &str, labels: &[&str]) -> Self {
        let summary = SummaryVec {
            desc: Desc::new(
                name.into(),
                help.into(),
                labels.iter().map(|l| l.to_string()).collect(),
                HashMap::new(),
            )
            .expect("metric options are valid"),
            series: Arc::default(),
        };
        // An unlabelled summary is exposed from the start (count 0, quantiles NaN), as Go's are.
        if labels.is_empty() {
            summary
                .series
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(vec![], SummarySeries::default());
        }
        summary
    }

    /// Records `value` for the series of `labels` (one value per label name, in order).
    pub fn observe(&self, labels: &[&str], value: f64) {
        self.observe_at(labels, value, Instant::now());
    }

    /// `observe` at `now`.
    pub fn observe_at(&self, labels: &[&str], value: f64, now: Instant) {
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let s = series.entry(labels.iter().map(|l| l.to_string()).collect()).or_default();
        s.count += 1;
        s.sum += value;
        s.recent.push_back((now, value));
        while s.recent.len() > SUMMARY_MAX_KEPT {
            s.recent.pop_front();
        }
    }

    /// Forgets the series of `labels`.
    pub fn remove(&self, labels: &[&str]) {
        let key: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        self.series.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
    }

    /// Observations of the series of `labels` so far.
    pub fn sample_count(&self, labels: &[&str]) -> u64 {
        let key: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        self.series
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .map_or(0, |s| s.count)
    }

    /// The family as of `now`.
    pub fn collect_at(&self, now: Instant) -> MetricFamily {
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let mut metrics = Vec::with_capacity(series.len());
        for (values, s) in series.iter_mut() {
            while s
                .recent
                .front()
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) > SUMMARY_MAX_AGE)
            {
                s.recent.pop_front();
            }
            let mut recent: Vec<f64> = s.recent.iter().map(|(_, v)| *v).collect();
            recent.sort_by(f64::total_cmp);
            let quantiles = SUMMARY_QUANTILES
                .iter()
                .map(|&q| {
                    let mut quantile = Quantile::default();
                    quantile.set_quantile(q);
                    quantile.set_value(rank_quantile(&recent, q));
                    quantile
                })
                .collect();
            let mut summary = Summary::default();
            summary.set_sample_count(s.count);
            summary.set_sample_sum(s.sum);
            summary.set_quantile(quantiles);
            let mut metric = Metric::default();
            metric.set_label(
                self.desc
                    .variable_labels
                    .iter()
                    .zip(values)
                    .map(|(name, value)| {
                        let mut pair = LabelPair::default();
                        pair.set_name(name.clone());
                        pair.set_value(value.clone());
                        pair
                    })
                    .collect(),
            );
            metric.set_summary(summary);
            metrics.push(metric);
        }
        // A stable order for the text format (labels sort like Prometheus's own output).
        metrics.sort_by(|a, b| {
            let key = |m: &Metric| m.get_label().iter().map(|l| l.value().to_string()).collect::<Vec<_>>();
            key(a).cmp(&key(b))
        });
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::SUMMARY);
        family.set_metric(metrics);
        family
    }
}

/// The value of rank ⌈q·n⌉ of `sorted` (the smallest for q = 0); NaN when it is empty.
fn rank_quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Collector for SummaryVec {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let family = self.collect_at(Instant::now());
        if family.get_metric().is_empty() {
            return vec![];
        }
        vec![family]
    }
}
