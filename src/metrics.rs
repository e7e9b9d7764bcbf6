//! Every Prometheus metric karpenter-rs exports: names, help texts, labels and label values live
//! here and nowhere else. `Metrics::new` registers them in a registry of their own.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType, Quantile, Summary};
use prometheus::{GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use crate::apis::v1alpha5::labels::WELL_KNOWN_LABELS;

pub mod liveness;

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
    /// Replaced (or removed) because it no longer matches its Provisioner or AWSNodeTemplate.
    pub const DRIFT: &str = "drift";
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

/// The label names of the `karpenter_nodes_*` resource gauges (`allocatable`,
/// `total_pod_requests`, ...), in order: `resource_type`, `node_name`, `provisioner`, `phase`, then
/// one per well-known node label, named after the key's last path segment in snake case
/// (`topology.kubernetes.io/zone` → `zone`), as Karpenter names them
/// (`core@v0.31.0:pkg/controllers/metrics/node/controller.go`).
pub fn node_label_names() -> Vec<String> {
    let mut names: Vec<String> = ["resource_type", "node_name", "provisioner", "phase"].map(String::from).to_vec();
    names.extend(WELL_KNOWN_LABELS.iter().map(|key| node_label_name(key)));
    names
}

/// `karpenter.k8s.aws/instance-gpu-count` → `instance_gpu_count`.
pub fn node_label_name(key: &str) -> String {
    key.rsplit('/').next().unwrap_or(key).to_lowercase().replace('-', "_")
}

/// The label names of `karpenter_rs_node_price_per_hour`: the node gauges' without
/// `resource_type`.
pub fn node_price_label_names() -> Vec<String> {
    node_label_names().into_iter().skip(1).collect()
}

pub use crate::cloudprovider::ErrorKind;

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

    /// Sets the `karpenter_cloudprovider_instance_type_*` gauges to `catalogue` (types no longer
    /// in it go with the old one): vCPUs and memory per type, and each priced offering's price,
    /// on-demand once per type with `zone=""` (the region's price) and spot per zone, as Karpenter
    /// reports them (`aws@v0.31.0:pkg/providers/pricing/pricing.go`).
    pub fn set_instance_types(&self, catalogue: Arc<Vec<crate::cloudprovider::InstanceTypeInfo>>, region: &str) {
        *self.instance_types.catalogue.lock().unwrap_or_else(|e| e.into_inner()) = Some((catalogue, region.to_string()));
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

/// Label values of one pod's `karpenter_pods_state` series, in `POD_STATE_LABELS` order.
pub type PodStateLabels<'a> = [std::borrow::Cow<'a, str>; 10];

/// Hands each pod's label values to the sink it is given.
type PodStateSource = Box<dyn Fn(&mut dyn FnMut(&PodStateLabels<'_>)) + Send + Sync>;

/// `karpenter_pods_state`, written straight from the cluster view at scrape time, a line per pod.
/// Kept as a gauge family it held a series per pod (a copy of the metric's description, ten label
/// pairs and the label values: 3 to 4 KiB a pod, more than the pod in the cache), refreshed every
/// 10 s; written at scrape time it holds nothing and is never stale.
#[derive(Clone, Default)]
pub struct PodStates {
    source: Arc<std::sync::OnceLock<PodStateSource>>,
}

impl PodStates {
    const NAME: &'static str = "karpenter_pods_state";
    const HELP: &'static str = "Pods by where they run and their phase; the value is 1.";

    /// Sets where the pods come from (the provisioning controller, which knows the cluster view
    /// and whether this replica leads). Only the first call counts.
    pub fn set_source(&self, source: impl Fn(&mut dyn FnMut(&PodStateLabels<'_>)) + Send + Sync + 'static) {
        let _ = self.source.set(Box::new(source));
    }

    /// Appends the family in the text format (nothing without pods).
    pub fn render(&self, out: &mut String) {
        let Some(source) = self.source.get() else { return };
        let mut family = TextGauge::new(out, Self::NAME, Self::HELP, &POD_STATE_LABELS);
        source(&mut |values| family.sample(&values.each_ref().map(|v| v.as_ref()), 1.0));
    }
}

/// A catalogue and the region it is of.
type RegionCatalogue = (Arc<Vec<crate::cloudprovider::InstanceTypeInfo>>, String);

/// The instance-type gauges, from the catalogue last set.
#[derive(Clone, Default)]
pub struct InstanceTypeGauges {
    catalogue: Arc<Mutex<Option<RegionCatalogue>>>,
}

impl InstanceTypeGauges {
    /// Appends the three families in the text format (nothing before a catalogue is set).
    pub fn render(&self, out: &mut String) {
        let Some((catalogue, region)) = self.catalogue.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
            return;
        };
        type Fact = fn(&crate::cloudprovider::InstanceTypeInfo) -> f64;
        let facts: [(&'static str, &'static str, Fact); 2] = [
            (
                "karpenter_cloudprovider_instance_type_cpu_cores",
                "vCPUs of an instance type.",
                |t| t.facts.vcpus as f64,
            ),
            (
                "karpenter_cloudprovider_instance_type_memory_bytes",
                "Memory of an instance type, in bytes.",
                |t| t.facts.memory_mib as f64 * 1024.0 * 1024.0,
            ),
        ];
        for (name, help, fact) in facts {
            let mut family = TextGauge::new(out, name, help, &["instance_type"]);
            for t in catalogue.iter() {
                family.sample(&[&t.facts.name], fact(t));
            }
        }
        let mut price = TextGauge::new(
            out,
            "karpenter_cloudprovider_instance_type_price_estimate",
            "USD per hour used to rank an offering: on-demand per region (zone empty), spot per zone.",
            &["instance_type", "capacity_type", "region", "zone"],
        );
        for t in catalogue.iter() {
            let mut on_demand_done = false;
            for o in t.offerings.iter().filter(|o| o.price.is_finite() && o.price > 0.0) {
                // One on-demand series per type (the region's price), one spot series per zone.
                let zone = if o.capacity_type == "spot" {
                    o.zone.as_str()
                } else if std::mem::replace(&mut on_demand_done, true) {
                    continue;
                } else {
                    ""
                };
                price.sample(&[&t.facts.name, &o.capacity_type, &region, zone], o.price);
            }
        }
    }
}

/// One gauge family written in the text format, a line per series, as Prometheus' text encoder
/// writes it (labels in name order); the `HELP` and `TYPE` lines come with the first series, so
/// a family without series writes nothing.
struct TextGauge<'a> {
    out: &'a mut String,
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    order: Vec<usize>,
    started: bool,
}

impl<'a> TextGauge<'a> {
    fn new(out: &'a mut String, name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Self {
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
    fn sample(&mut self, values: &[&str], value: f64) {
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

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests;
