//! Every Prometheus metric karpenter-rs exports: names, help texts, labels and label values live
//! here and nowhere else. `Metrics::new` registers them in a registry of their own.

use prometheus::{GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

/// Latency buckets of admission requests, in seconds (1 ms .. 10 s).
const WEBHOOK_BUCKETS: &[f64] = &[0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Buckets of controller and cloud durations, in seconds (Karpenter's `DurationBuckets`).
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0,
    3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

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

/// `reason` label values of `karpenter_nodes_terminated`; the deprovisioning methods also name
/// the `action` of `karpenter_deprovisioning_actions_performed` (`<method>/delete`).
pub mod reason {
    /// Empty for `ttlSecondsAfterEmpty`.
    pub const EMPTINESS: &str = "emptiness";
    /// Older than `ttlSecondsUntilExpired`.
    pub const EXPIRATION: &str = "expiration";
    /// Removed (or replaced by a cheaper node) by consolidation.
    pub const CONSOLIDATION: &str = "consolidation";
    /// Its instance is gone.
    pub const GARBAGE_COLLECTED: &str = "garbage_collected";
    /// Not Ready within the registration TTL (Karpenter v0.28's machine liveness).
    pub const LIVENESS: &str = "liveness";
}

/// The label names of `karpenter_pods_state`, in order.
pub const POD_STATE_LABELS: [&str; 10] = [
    "name",
    "namespace",
    "owner",
    "node",
    "provisioner",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "phase",
];

/// What a failed call is, as `karpenter_cloudprovider_errors_total{error}` names it.
pub trait ErrorKind {
    /// The label value.
    fn kind(&self) -> &'static str;
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
    /// `karpenter_nodes_created{provisioner, zone, instance_type, capacity_type}`.
    pub nodes_created: IntCounterVec,
    /// `karpenter_provisioner_scheduling_duration_seconds`: one provisioning pass.
    pub scheduling_duration: Histogram,
    /// `karpenter_cloudprovider_duration_seconds{method}`.
    pub cloudprovider_duration: HistogramVec,
    /// `karpenter_cloudprovider_errors_total{method, error}`.
    pub cloudprovider_errors: IntCounterVec,
    /// `karpenter_pods_bound_total{result}` (`bound`, `already_bound`, `gone`).
    pub pods_bound: IntCounterVec,
    /// `karpenter_nodes_terminated{provisioner, reason}`: Nodes deleted by karpenter-rs.
    pub nodes_terminated: IntCounterVec,
    /// `karpenter_deprovisioning_actions_performed{action}` (`<method>/delete`, `<method>/replace`).
    pub deprovisioning_actions: IntCounterVec,
    /// `karpenter_nodes_termination_time_seconds{provisioner}`: from the Node's deletion
    /// timestamp to its finalizer removed (Karpenter's is a summary; a histogram aggregates).
    pub termination_time: HistogramVec,
    /// `karpenter_deprovisioning_replacement_node_initialized_seconds`: from launching the
    /// replacements of an expired node to all of them Ready.
    pub replacement_initialized: Histogram,
    /// `karpenter_eviction_queue_depth`: pods of draining nodes still waiting to be evicted.
    pub eviction_queue_depth: IntGauge,
    /// `karpenter_provisioner_usage{provisioner, resource_type}`: capacity of the Provisioner's
    /// nodes (CPU in cores, other resources in their base units).
    pub provisioner_usage: GaugeVec,
    /// `karpenter_provisioner_limit{provisioner, resource_type}`: its `spec.limits.resources`.
    pub provisioner_limit: GaugeVec,
    /// `karpenter_provisioner_usage_pct{provisioner, resource_type}`: usage over limit, 0..100.
    pub provisioner_usage_pct: GaugeVec,
    /// `karpenter_provisioner_batch_duration_seconds`: how long each batch of pending pods stayed
    /// open (from its first pod to the idle or max window closing it).
    pub batch_duration: Histogram,
    /// `karpenter_deprovisioning_evaluation_duration_seconds{method}`: time to evaluate (and act
    /// on) one deprovisioning method in a pass.
    pub deprovisioning_evaluation: HistogramVec,
    /// `karpenter_deprovisioning_consolidation_timeouts{consolidation_type}`: consolidation
    /// evaluations cut off by their time limit (multi-node 1 min, single-node 3 min).
    pub consolidation_timeouts: IntCounterVec,
    /// `karpenter_pods_state{name, namespace, owner, node, provisioner, zone, arch, capacity_type,
    /// instance_type, phase}`: 1 per pod.
    pub pods_state: GaugeVec,
    /// `karpenter_interruption_received_messages{message_type}`: interruption queue messages
    /// received, by kind (`unknown` for one that does not parse).
    pub interruption_received_messages: IntCounterVec,
    /// `karpenter_interruption_deleted_messages`: interruption queue messages deleted.
    pub interruption_deleted_messages: IntCounter,
    /// `karpenter_interruption_message_latency_time_seconds`: from an interruption event's time
    /// to its message handled.
    pub interruption_message_latency: Histogram,
    /// `karpenter_interruption_actions_performed{action_type}`: `CordonAndDrain` or `NoAction`,
    /// per node a message named.
    pub interruption_actions_performed: IntCounterVec,
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
        let nodes_created = IntCounterVec::new(
            Opts::new(
                "karpenter_nodes_created",
                "Nodes launched, by provisioner, zone, instance type and capacity type.",
            ),
            &["provisioner", "zone", "instance_type", "capacity_type"],
        )
        .expect("metric options are valid");
        let scheduling_duration = Histogram::with_opts(
            HistogramOpts::new(
                "karpenter_provisioner_scheduling_duration_seconds",
                "Duration of a provisioning pass: snapshot, simulation and launches.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
        )
        .expect("metric options are valid");
        let cloudprovider_duration = HistogramVec::new(
            HistogramOpts::new(
                "karpenter_cloudprovider_duration_seconds",
                "Duration of cloud provider calls, by method.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["method"],
        )
        .expect("metric options are valid");
        let cloudprovider_errors = IntCounterVec::new(
            Opts::new(
                "karpenter_cloudprovider_errors_total",
                "Failed cloud provider calls, by method and error kind.",
            ),
            &["method", "error"],
        )
        .expect("metric options are valid");
        let pods_bound = IntCounterVec::new(
            Opts::new("karpenter_pods_bound_total", "Planned pods bound to their new node, by result."),
            &["result"],
        )
        .expect("metric options are valid");
        let nodes_terminated = IntCounterVec::new(
            Opts::new(
                "karpenter_nodes_terminated",
                "Nodes deleted by karpenter-rs, by provisioner and reason.",
            ),
            &["provisioner", "reason"],
        )
        .expect("metric options are valid");
        let deprovisioning_actions = IntCounterVec::new(
            Opts::new(
                "karpenter_deprovisioning_actions_performed",
                "Deprovisioning actions performed, by action (<method>/delete, <method>/replace).",
            ),
            &["action"],
        )
        .expect("metric options are valid");
        let termination_time = HistogramVec::new(
            HistogramOpts::new(
                "karpenter_nodes_termination_time_seconds",
                "Time from a Node's deletion to its finalizer removed (drained, instance terminated), by provisioner.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["provisioner"],
        )
        .expect("metric options are valid");
        let replacement_initialized = Histogram::with_opts(
            HistogramOpts::new(
                "karpenter_deprovisioning_replacement_node_initialized_seconds",
                "Time from launching the replacements of a node being deprovisioned to all of them Ready.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
        )
        .expect("metric options are valid");
        let eviction_queue_depth = IntGauge::new(
            "karpenter_eviction_queue_depth",
            "Pods of draining nodes still waiting to be evicted.",
        )
        .expect("metric options are valid");
        let provisioner_gauge = |name: &str, help: &str| {
            GaugeVec::new(Opts::new(name, help), &["provisioner", "resource_type"]).expect("metric options are valid")
        };
        let provisioner_usage = provisioner_gauge(
            "karpenter_provisioner_usage",
            "Capacity of the nodes a Provisioner launched, by resource (CPU in cores, others in base units).",
        );
        let provisioner_limit = provisioner_gauge(
            "karpenter_provisioner_limit",
            "A Provisioner's spec.limits.resources, by resource (CPU in cores, others in base units).",
        );
        let provisioner_usage_pct = provisioner_gauge(
            "karpenter_provisioner_usage_pct",
            "A Provisioner's usage as a percentage of its limit, by resource.",
        );
        let batch_duration = Histogram::with_opts(
            HistogramOpts::new(
                "karpenter_provisioner_batch_duration_seconds",
                "How long each batch of pending pods stayed open before its provisioning pass.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
        )
        .expect("metric options are valid");
        let deprovisioning_evaluation = HistogramVec::new(
            HistogramOpts::new(
                "karpenter_deprovisioning_evaluation_duration_seconds",
                "Time to evaluate and act on one deprovisioning method in a pass, by method.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["method"],
        )
        .expect("metric options are valid");
        let consolidation_timeouts = IntCounterVec::new(
            Opts::new(
                "karpenter_deprovisioning_consolidation_timeouts",
                "Consolidation evaluations cut off by their time limit, by consolidation type.",
            ),
            &["consolidation_type"],
        )
        .expect("metric options are valid");
        let pods_state = GaugeVec::new(
            Opts::new("karpenter_pods_state", "Pods by where they run and their phase; the value is 1."),
            &POD_STATE_LABELS,
        )
        .expect("metric options are valid");
        let interruption_received_messages = IntCounterVec::new(
            Opts::new(
                "karpenter_interruption_received_messages",
                "Messages received from the interruption queue, by message type.",
            ),
            &["message_type"],
        )
        .expect("metric options are valid");
        let interruption_deleted_messages = IntCounter::new(
            "karpenter_interruption_deleted_messages",
            "Messages deleted from the interruption queue.",
        )
        .expect("metric options are valid");
        let interruption_message_latency = Histogram::with_opts(
            HistogramOpts::new(
                "karpenter_interruption_message_latency_time_seconds",
                "Time from an interruption event to its message being handled.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
        )
        .expect("metric options are valid");
        let interruption_actions_performed = IntCounterVec::new(
            Opts::new(
                "karpenter_interruption_actions_performed",
                "Actions taken on the nodes interruption messages named, by action type.",
            ),
            &["action_type"],
        )
        .expect("metric options are valid");
        for collector in [
            Box::new(webhook_requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(webhook_duration.clone()),
            Box::new(certificate_reloads.clone()),
            Box::new(nodes_created.clone()),
            Box::new(scheduling_duration.clone()),
            Box::new(cloudprovider_duration.clone()),
            Box::new(cloudprovider_errors.clone()),
            Box::new(pods_bound.clone()),
            Box::new(nodes_terminated.clone()),
            Box::new(deprovisioning_actions.clone()),
            Box::new(termination_time.clone()),
            Box::new(replacement_initialized.clone()),
            Box::new(eviction_queue_depth.clone()),
            Box::new(provisioner_usage.clone()),
            Box::new(provisioner_limit.clone()),
            Box::new(provisioner_usage_pct.clone()),
            Box::new(pods_state.clone()),
            Box::new(batch_duration.clone()),
            Box::new(deprovisioning_evaluation.clone()),
            Box::new(consolidation_timeouts.clone()),
            Box::new(interruption_received_messages.clone()),
            Box::new(interruption_deleted_messages.clone()),
            Box::new(interruption_message_latency.clone()),
            Box::new(interruption_actions_performed.clone()),
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
            nodes_created,
            scheduling_duration,
            cloudprovider_duration,
            cloudprovider_errors,
            pods_bound,
            nodes_terminated,
            deprovisioning_actions,
            termination_time,
            replacement_initialized,
            eviction_queue_depth,
            provisioner_usage,
            provisioner_limit,
            provisioner_usage_pct,
            pods_state,
            batch_duration,
            deprovisioning_evaluation,
            consolidation_timeouts,
            interruption_received_messages,
            interruption_deleted_messages,
            interruption_message_latency,
            interruption_actions_performed,
        }
    }

    /// The registry in Prometheus text format.
    pub fn render(&self) -> String {
        let families = self.registry.gather();
        prometheus::TextEncoder::new()
            .encode_to_string(&families)
            .expect("text encoding cannot fail")
    }

    /// Runs one cloud-provider call: its duration goes to `karpenter_cloudprovider_duration_seconds`
    /// and its error, if any, to `karpenter_cloudprovider_errors_total`, both under `method`.
    pub async fn cloud_call<T, E: ErrorKind>(&self, method: &str, call: impl std::future::Future<Output = Result<T, E>>) -> Result<T, E> {
        let result = {
            let _timer = self.cloudprovider_duration.with_label_values(&[method]).start_timer();
            call.await
        };
        if let Err(e) = &result {
            self.cloudprovider_errors.with_label_values(&[method, e.kind()]).inc();
        }
        result
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    enum Error {
        NotFound,
    }

    impl ErrorKind for Error {
        fn kind(&self) -> &'static str {
            "not_found"
        }
    }

    #[tokio::test]
    async fn a_cloud_call_is_timed_and_its_error_counted_by_kind() {
        let metrics = Metrics::new();
        let ok: Result<u32, Error> = metrics.cloud_call("list", async { Ok(1) }).await;
        assert_eq!(ok.unwrap(), 1);
        let failed: Result<(), Error> = metrics.cloud_call("get", async { Err(Error::NotFound) }).await;
        let kind = failed.unwrap_err().kind();
        assert_eq!(metrics.cloudprovider_duration.with_label_values(&["list"]).get_sample_count(), 1);
        assert_eq!(metrics.cloudprovider_duration.with_label_values(&["get"]).get_sample_count(), 1);
        assert_eq!(metrics.cloudprovider_errors.with_label_values(&["list", kind]).get(), 0);
        assert_eq!(metrics.cloudprovider_errors.with_label_values(&["get", kind]).get(), 1);
    }
}
