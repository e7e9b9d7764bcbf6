//! Every Prometheus metric karpenter-rs exports: names, help texts, labels and label values live
//! here and nowhere else. `Metrics::new` registers them in a registry of their own.
//!
//! The label names and values are in `labels`; `summary` (`SummaryVec`) and `gauge_series`
//! (`GaugeSeries`) are the families the `prometheus` crate lacks; `scrape` renders the text
//! served at `/metrics`, with the families written at scrape time (`instance_types`,
//! `pod_states`); `liveness` is what `/healthz` knows of the controllers.

use std::sync::Arc;
use std::time::Instant;

use prometheus::{GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

mod gauge_series;
mod instance_types;
mod labels;
pub mod liveness;
mod pod_states;
mod scrape;
mod summary;

pub use crate::cloudprovider::ErrorKind;
pub use gauge_series::GaugeSeries;
pub use instance_types::InstanceTypeGauges;
pub use labels::{node_label_name, node_label_names, node_price_label_names, reason, result, POD_STATE_LABELS};
pub use pod_states::{PodStateLabels, PodStates};
pub use summary::{SummaryVec, SUMMARY_QUANTILES};

/// Latency buckets of admission requests, in seconds (1 ms .. 10 s).
const WEBHOOK_BUCKETS: &[f64] = &[0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// Buckets of controller and cloud durations, in seconds (Karpenter's `DurationBuckets`).
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0,
    3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

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
    /// `karpenter_rs_webhook_certificate_expiration_timestamp_seconds`: when the serving
    /// certificate in use expires (Unix seconds).
    pub certificate_expiration: prometheus::Gauge,
    /// `karpenter_rs_pods_unschedulable{provisioner, reason}`: pods the last provisioning pass could
    /// not place (`scheduling::Plan::unschedulable_by`).
    pub pods_unschedulable: prometheus::IntGaugeVec,
    /// `karpenter_rs_nodes_consolidation_blocked{reason}`: nodes the last consolidation pass could
    /// not consider, by what the user can change (`opted_out`, `do_not_evict_pod`, `pdb`,
    /// `nominated`, `not_initialized`, `other`).
    pub consolidation_blocked: prometheus::IntGaugeVec,
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
    /// `karpenter_nodes_drifted{type}`: nodes of ours drifted now (`ami`, `subnet`,
    /// `securitygroup`, `static`, `requirements`), as the last deprovisioning pass found them.
    pub nodes_drifted: GaugeVec,
    /// `karpenter_nodes_termination_time_seconds{provisioner}`: from the Node's deletion
    /// timestamp to its finalizer removed; a summary as Karpenter's.
    pub termination_time: SummaryVec,
    /// `karpenter_pods_startup_time_seconds`: from a pod's creation to its Ready condition, for
    /// pods seen pending (a summary as Karpenter's).
    pub pod_startup_time: SummaryVec,
    /// `karpenter_nodes_allocatable{node labels}`: the Node's `status.allocatable`.
    pub nodes_allocatable: GaugeVec,
    /// `karpenter_nodes_total_pod_requests{node labels}`: requests of its non-DaemonSet pods.
    pub nodes_pod_requests: GaugeVec,
    /// `karpenter_nodes_total_pod_limits{node labels}`: limits of its non-DaemonSet pods.
    pub nodes_pod_limits: GaugeVec,
    /// `karpenter_nodes_total_daemon_requests{node labels}`: requests of its DaemonSet pods.
    pub nodes_daemon_requests: GaugeVec,
    /// `karpenter_nodes_total_daemon_limits{node labels}`: limits of its DaemonSet pods.
    pub nodes_daemon_limits: GaugeVec,
    /// `karpenter_nodes_system_overhead{node labels}`: capacity minus allocatable.
    pub nodes_system_overhead: GaugeVec,
    /// `karpenter_rs_node_price_per_hour{node labels but resource_type}`: what the node's
    /// offering cost per hour at launch (its price annotation), else the catalogue's price now.
    pub node_price: GaugeVec,
    /// `karpenter_cloudprovider_instance_type_cpu_cores{instance_type}`,
    /// `karpenter_cloudprovider_instance_type_memory_bytes{instance_type}` and
    /// `karpenter_cloudprovider_instance_type_price_estimate{instance_type, capacity_type, region,
    /// zone}`, written at scrape time from the catalogue (`InstanceTypeGauges`).
    pub instance_types: InstanceTypeGauges,
    /// `karpenter_provisioner_scheduling_simulation_duration_seconds`: one scheduling simulation.
    pub simulation_duration: Histogram,
    /// `controller_runtime_reconcile_total{controller, result}` (`success`, `error`).
    pub reconcile_total: IntCounterVec,
    /// `karpenter_controller_panics_total{controller}`: panics caught by the supervisor, each
    /// followed by a restart of that controller.
    pub controller_panics: IntCounterVec,
    /// The controllers' passes and panics, for `/healthz` (here because every controller
    /// already holds the metrics).
    pub liveness: liveness::Liveness,
    /// `controller_runtime_reconcile_errors_total{controller}`.
    pub reconcile_errors: IntCounterVec,
    /// `controller_runtime_reconcile_time_seconds{controller}`: one pass of a controller.
    pub reconcile_time: HistogramVec,
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
    /// instance_type, phase}`: 1 per pod, written at scrape time (`PodStates`).
    pub pods_state: PodStates,
    /// Length of the last text rendered.
    rendered_len: Arc<std::sync::atomic::AtomicUsize>,
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
        let nodes_drifted = GaugeVec::new(
            Opts::new(
                "karpenter_nodes_drifted",
                "Nodes of ours drifted now, by type of drift (ami, subnet, securitygroup, static, requirements).",
            ),
            &["type"],
        )
        .expect("metric options are valid");
        let termination_time = SummaryVec::new(
            "karpenter_nodes_termination_time_seconds",
            "Time from a Node's deletion to its finalizer removed (drained, instance terminated), by provisioner.",
            &["provisioner"],
        );
        let pod_startup_time = SummaryVec::new(
            "karpenter_pods_startup_time_seconds",
            "Time from a pod's creation to its Ready condition, for pods seen pending.",
            &[],
        );
        let node_labels = node_label_names();
        let node_labels: Vec<&str> = node_labels.iter().map(String::as_str).collect();
        let node_gauge = |name: &str, help: &str| GaugeVec::new(Opts::new(name, help), &node_labels).expect("metric options are valid");
        let nodes_allocatable = node_gauge(
            "karpenter_nodes_allocatable",
            "Resources the node can give pods (status.allocatable; CPU in cores, others in base units).",
        );
        let nodes_pod_requests = node_gauge(
            "karpenter_nodes_total_pod_requests",
            "Resources requested by the non-DaemonSet pods bound to the node.",
        );
        let nodes_pod_limits = node_gauge(
            "karpenter_nodes_total_pod_limits",
            "Resource limits of the non-DaemonSet pods bound to the node.",
        );
        let nodes_daemon_requests = node_gauge(
            "karpenter_nodes_total_daemon_requests",
            "Resources requested by the DaemonSet pods bound to the node.",
        );
        let nodes_daemon_limits = node_gauge(
            "karpenter_nodes_total_daemon_limits",
            "Resource limits of the DaemonSet pods bound to the node.",
        );
        let nodes_system_overhead = node_gauge(
            "karpenter_nodes_system_overhead",
            "Resources reserved for the system: the node's capacity minus its allocatable.",
        );
        let price_labels = node_price_label_names();
        let price_labels: Vec<&str> = price_labels.iter().map(String::as_str).collect();
        let node_price = GaugeVec::new(
            Opts::new(
                "karpenter_rs_node_price_per_hour",
                "USD per hour of the node's offering: its price at launch, else the catalogue's price now.",
            ),
            &price_labels,
        )
        .expect("metric options are valid");
        let certificate_expiration = prometheus::Gauge::with_opts(Opts::new(
            "karpenter_rs_webhook_certificate_expiration_timestamp_seconds",
            "When the webhook's serving certificate in use expires, in Unix seconds.",
        ))
        .expect("metric options are valid");
        let pods_unschedulable = prometheus::IntGaugeVec::new(
            Opts::new(
                "karpenter_rs_pods_unschedulable",
                "Pods the last provisioning pass could not place, by Provisioner and why (limits, no_room, no_offering; incompatible or no_provisioner with no Provisioner).",
            ),
            &["provisioner", "reason"],
        )
        .expect("metric options are valid");
        let consolidation_blocked = prometheus::IntGaugeVec::new(
            Opts::new(
                "karpenter_rs_nodes_consolidation_blocked",
                "Nodes of consolidating Provisioners the last consolidation pass could not consider, by what blocks them.",
            ),
            &["reason"],
        )
        .expect("metric options are valid");
        let simulation_duration = Histogram::with_opts(
            HistogramOpts::new(
                "karpenter_provisioner_scheduling_simulation_duration_seconds",
                "Duration of one scheduling simulation of a provisioning pass.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
        )
        .expect("metric options are valid");
        let controller_panics = IntCounterVec::new(
            Opts::new(
                "karpenter_controller_panics_total",
                "Panics of each controller, each followed by a restart of that controller.",
            ),
            &["controller"],
        )
        .expect("metric options are valid");
        let reconcile_total = IntCounterVec::new(
            Opts::new("controller_runtime_reconcile_total", "Passes of each controller, by result."),
            &["controller", "result"],
        )
        .expect("metric options are valid");
        let reconcile_errors = IntCounterVec::new(
            Opts::new("controller_runtime_reconcile_errors_total", "Failed passes of each controller."),
            &["controller"],
        )
        .expect("metric options are valid");
        let reconcile_time = HistogramVec::new(
            HistogramOpts::new(
                "controller_runtime_reconcile_time_seconds",
                "Duration of one pass of each controller.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["controller"],
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
        let pods_state = PodStates::default();
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
            Box::new(certificate_expiration.clone()),
            Box::new(pods_unschedulable.clone()),
            Box::new(consolidation_blocked.clone()),
            Box::new(nodes_created.clone()),
            Box::new(scheduling_duration.clone()),
            Box::new(cloudprovider_duration.clone()),
            Box::new(cloudprovider_errors.clone()),
            Box::new(pods_bound.clone()),
            Box::new(nodes_terminated.clone()),
            Box::new(deprovisioning_actions.clone()),
            Box::new(nodes_drifted.clone()),
            Box::new(termination_time.clone()),
            Box::new(replacement_initialized.clone()),
            Box::new(eviction_queue_depth.clone()),
            Box::new(provisioner_usage.clone()),
            Box::new(provisioner_limit.clone()),
            Box::new(provisioner_usage_pct.clone()),
            Box::new(batch_duration.clone()),
            Box::new(deprovisioning_evaluation.clone()),
            Box::new(consolidation_timeouts.clone()),
            Box::new(interruption_received_messages.clone()),
            Box::new(interruption_deleted_messages.clone()),
            Box::new(interruption_message_latency.clone()),
            Box::new(interruption_actions_performed.clone()),
            Box::new(pod_startup_time.clone()),
            Box::new(nodes_allocatable.clone()),
            Box::new(nodes_pod_requests.clone()),
            Box::new(nodes_pod_limits.clone()),
            Box::new(nodes_daemon_requests.clone()),
            Box::new(nodes_daemon_limits.clone()),
            Box::new(nodes_system_overhead.clone()),
            Box::new(node_price.clone()),
            Box::new(simulation_duration.clone()),
            Box::new(reconcile_total.clone()),
            Box::new(controller_panics.clone()),
            Box::new(reconcile_errors.clone()),
            Box::new(reconcile_time.clone()),
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
            certificate_expiration,
            pods_unschedulable,
            consolidation_blocked,
            nodes_created,
            scheduling_duration,
            cloudprovider_duration,
            cloudprovider_errors,
            pods_bound,
            nodes_terminated,
            deprovisioning_actions,
            nodes_drifted,
            termination_time,
            replacement_initialized,
            eviction_queue_depth,
            provisioner_usage,
            provisioner_limit,
            provisioner_usage_pct,
            pods_state,
            rendered_len: Arc::default(),
            batch_duration,
            deprovisioning_evaluation,
            consolidation_timeouts,
            interruption_received_messages,
            interruption_deleted_messages,
            interruption_message_latency,
            interruption_actions_performed,
            pod_startup_time,
            nodes_allocatable,
            nodes_pod_requests,
            nodes_pod_limits,
            nodes_daemon_requests,
            nodes_daemon_limits,
            nodes_system_overhead,
            node_price,
            instance_types: InstanceTypeGauges::default(),
            simulation_duration,
            reconcile_total,
            controller_panics,
            liveness: Default::default(),
            reconcile_errors,
            reconcile_time,
        }
    }

    /// Creates `controller`'s reconcile series at zero, when it starts: a rate over them then
    /// shows its first passes too (a series born at its first pass never rises).
    pub fn controller_started(&self, controller: &str) {
        self.reconcile_time.with_label_values(&[controller]);
        self.reconcile_errors.with_label_values(&[controller]);
        for result in ["success", "error"] {
            self.reconcile_total.with_label_values(&[controller, result]);
        }
    }

    /// Counts and times one pass of `controller` (`controller_runtime_reconcile_*`, the names
    /// Karpenter's dashboards read for every controller).
    pub fn reconciled(&self, controller: &str, started: Instant, ok: bool) {
        self.reconcile_time
            .with_label_values(&[controller])
            .observe(started.elapsed().as_secs_f64());
        let result = if ok { "success" } else { "error" };
        self.reconcile_total.with_label_values(&[controller, result]).inc();
        if !ok {
            self.reconcile_errors.with_label_values(&[controller]).inc();
        }
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
mod tests;
