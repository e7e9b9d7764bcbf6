//! Every Prometheus metric karpenter-rs exports: names, help texts, labels and label values live
//! here and nowhere else. `Metrics::new` registers them in a registry of their own.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// Latency buckets of admission requests, in seconds (1 ms .. 10 s).
const WEBHOOK_BUCKETS: &[f64] = &[0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// `result` label values of admission requests.
pub mod result {
    /// Allowed without changes.
    pub const ALLOWED: &str = "allowed";
    /// Allowed with a patch of defaults.
    pub const PATCHED: &str = "patched";
    /// Denied: the object breaks a rule.
    pub const DENIED: &str = "denied";
    /// The AdmissionReview itself could not be read.
    pub const INVALID: &str = "invalid";
}

/// The metrics of one process.
#[derive(Clone)]
pub struct Metrics {
    /// The registry served at `/metrics`.
    pub registry: Registry,
    /// `karpenter_webhook_requests_total{path, kind, operation, result}`.
    pub webhook_requests: IntCounterVec,
    /// `karpenter_webhook_request_duration_seconds{path, kind}`.
    pub webhook_duration: HistogramVec,
    /// `karpenter_webhook_certificate_reloads_total{result}` (`success` or `error`).
    pub certificate_reloads: IntCounterVec,
}

impl Metrics {
    /// Creates and registers every metric, plus the process collector (CPU, memory, open files).
    pub fn new() -> Self {
        let registry = Registry::new();
        let webhook_requests = IntCounterVec::new(
            Opts::new(
                "karpenter_webhook_requests_total",
                "Admission requests served, by path, kind, operation and result.",
            ),
            &["path", "kind", "operation", "result"],
        )
        .expect("metric options are valid");
        let webhook_duration = HistogramVec::new(
            HistogramOpts::new(
                "karpenter_webhook_request_duration_seconds",
                "Time to answer an admission request, from its first byte read to the response built.",
            )
            .buckets(WEBHOOK_BUCKETS.to_vec()),
            &["path", "kind"],
        )
        .expect("metric options are valid");
        let certificate_reloads = IntCounterVec::new(
            Opts::new(
                "karpenter_webhook_certificate_reloads_total",
                "Serving certificate reloads after the files changed, by result.",
            ),
            &["result"],
        )
        .expect("metric options are valid");
        for collector in [
            Box::new(webhook_requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(webhook_duration.clone()),
            Box::new(certificate_reloads.clone()),
        ] {
            registry.register(collector).expect("metric names are unique");
        }
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))
            .expect("the process collector registers once");
        Metrics {
            registry,
            webhook_requests,
            webhook_duration,
            certificate_reloads,
        }
    }

    /// The registry in Prometheus text format.
    pub fn render(&self) -> String {
        let families = self.registry.gather();
        prometheus::TextEncoder::new()
            .encode_to_string(&families)
            .expect("text encoding cannot fail")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
