//! `karpenter-rs nodes`: a live terminal view of the cluster's nodes, in the spirit of
//! eks-node-viewer. One row per node (instance type, capacity type, zone, price, pods, request
//! bars against allocatable, age, status, and why it stays or what happens to it next) and totals
//! above them; Enter opens the selected node's full explanation.
//!
//! This module is pure: `view` turns Nodes and Pods (and the time) into a `View`, `render` draws a
//! `View` into a ratatui frame, `render_text` into plain lines (both in `render`); the order of
//! the rows is in `sort`, what a key does in `keys`, the cache of each node's reason in `reasons`
//! (the reasons are `explain`'s, never decided here). Watching the cluster, the live prices and the terminal are in `live`;
//! where unannotated nodes get a price is in `prices`.

pub mod keys;
pub mod live;
pub mod prices;
pub mod reasons;
mod render;
mod sort;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::PathBuf;

use clap::Args;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};

use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL, REGION_LABEL, ZONE_LABEL};
use crate::controllers::status::node_metrics::launch_price;
use crate::scheduling::pods::is_terminal;
use crate::scheduling::resources::{pod_requests, resource_list_lenient, Resources};

pub use keys::{Effect, Key, Screen, Ui};
pub use prices::{Fallback, LivePrices, NoPrices, PriceBook, SnapshotPrices};
pub use reasons::Reasons;
pub use render::{age, bar, explanation_scroll_limit, render, render_text, truncate};
pub use sort::{natural_cmp, parse_label_key, sort_rows, Sort, SortBy};

/// Hours in the month `$/month` is counted for (AWS's 730).
pub const HOURS_PER_MONTH: f64 = 730.0;

/// Settings of `nodes`.
#[derive(Args, Debug, Clone)]
pub struct NodesArgs {
    /// Label selector of the nodes shown, as `kubectl get nodes -l` takes it; the default shows
    /// the nodes karpenter-rs (or Karpenter) launched; an empty selector shows every node.
    #[arg(short = 'l', long, env = "NODES_NODE_SELECTOR", default_value = PROVISIONER_NAME_LABEL)]
    pub node_selector: String,
    /// Resources drawn as request bars against allocatable (`cpu`, `memory`, `ephemeral-storage`,
    /// `nvidia.com/gpu`, ...), comma-separated.
    #[arg(long, env = "NODES_RESOURCES", value_delimiter = ',', default_value = "cpu,memory")]
    pub resources: Vec<String>,
    /// Order of the rows: `creation` (oldest first), `price` (dearest first), `usage` (most
    /// requested first), `name`, or a label key (by its value, nodes without it last); `=asc` or
    /// `=dsc` after it sets the direction. `s` cycles creation, price, usage and name while running.
    #[arg(long, env = "NODES_SORT", default_value = "creation", value_parser = Sort::parse)]
    pub sort: Sort,
    /// Label keys shown as extra columns, one per key, with each node's value (`-` without it),
    /// comma-separated.
    #[arg(long, env = "NODES_EXTRA_LABELS", value_delimiter = ',', value_parser = parse_label_key)]
    pub extra_labels: Vec<String>,
    /// Price nodes without a price annotation from EC2 and the AWS Pricing API (on-demand) and the
    /// spot price history, as `run` does, with the usual AWS credentials; re-read every 5 minutes.
    /// When AWS cannot be reached the built-in snapshot's estimates are shown (marked `~`) and the
    /// header says why.
    #[arg(long, env = "NODES_LIVE_PRICES", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub live_prices: bool,
    /// Region of the live prices; empty: the region of the shown nodes, else the AWS SDK's.
    #[arg(long, env = "NODES_REGION", default_value = "", requires = "live_prices")]
    pub region: String,
    /// YAML or JSON file of instance type → USD per hour (or `{onDemand, spot}`) that wins over
    /// the live prices, as for `run`.
    #[arg(long, env = "PRICE_OVERRIDES", requires = "live_prices")]
    pub price_overrides: Option<PathBuf>,
    /// The kubeconfig context to use; default: the current one (`KUBECONFIG` is honoured).
    #[arg(long, env = "NODES_CONTEXT")]
    pub context: Option<String>,
    /// Print one frame as text once the watches have listed and the shown nodes' reasons are known
    /// (at most 30 s more), and exit (for scripts and captures).
    #[arg(long, env = "NODES_ONCE", default_value_t = false)]
    pub once: bool,
    /// Width in columns of the `--once` frame.
    #[arg(long, env = "NODES_WIDTH", default_value_t = 150)]
    pub width: u16,
    /// The running controller's metrics address (`http://HOST:PORT`, e.g. through `kubectl
    /// port-forward`) that the WHY column and Enter's explanation ask, as `explain --controller`;
    /// without it, or when it does not answer, a view of the command's own explains (as `explain`
    /// does, with `run`'s settings from their environment variables, `CLUSTER_NAME` at least).
    #[arg(long, env = "NODES_CONTROLLER")]
    pub controller: Option<String>,
    /// No WHY column: do not explain the nodes in the background (`--once` then prints as soon as
    /// the nodes are listed; Enter still explains the selected node).
    #[arg(long, env = "NODES_NO_REASONS", default_value_t = false)]
    pub no_reasons: bool,
}

/// A node's price per hour.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Price {
    /// USD per hour.
    pub usd_per_hour: f64,
    /// True when it is not the node's price annotation but the catalogue's price for its type,
    /// capacity type and zone (nodes launched by something else, or before the annotation).
    pub estimated: bool,
}

/// One resource's requests against what a node (or all of them) can give.
#[derive(Clone, Debug, PartialEq)]
pub struct Usage {
    /// `cpu`, `memory`, ...
    pub resource: String,
    /// Requested, in `Resources` units (millicores for cpu).
    pub requested: i64,
    /// Allocatable, in the same units.
    pub allocatable: i64,
}

impl Usage {
    /// Requested / allocatable (0 when nothing is allocatable).
    pub fn fraction(&self) -> f64 {
        if self.allocatable <= 0 {
            0.0
        } else {
            self.requested as f64 / self.allocatable as f64
        }
    }
}

/// What a node is doing, in the order shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    /// Its `Ready` condition: `Some(true)` True, `Some(false)` False, `None` Unknown or absent.
    pub ready: Option<bool>,
    /// `spec.unschedulable`.
    pub cordoned: bool,
    /// It has a deletion timestamp.
    pub deleting: bool,
}

impl NodeStatus {
    /// `Ready`, `NotReady` or `Unknown`, then `Cordoned` and `Deleting` as they apply.
    pub fn text(&self) -> String {
        let mut parts = vec![match self.ready {
            Some(true) => "Ready",
            Some(false) => "NotReady",
            None => "Unknown",
        }];
        if self.cordoned {
            parts.push("Cordoned");
        }
        if self.deleting {
            parts.push("Deleting");
        }
        parts.join(",")
    }
}

/// One node's row.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRow {
    pub name: String,
    pub provisioner: String,
    pub instance_type: String,
    pub capacity_type: String,
    pub zone: String,
    pub price: Option<Price>,
    /// The values of the extra labels, in their order (`None`: the node has no such label).
    pub extra: Vec<Option<String>>,
    /// Pods bound to it that have not finished.
    pub pods: usize,
    /// Its allocatable `pods`.
    pub max_pods: i64,
    /// One entry per shown resource.
    pub usage: Vec<Usage>,
    pub created: Option<Timestamp>,
    /// Seconds since it was created.
    pub age_seconds: i64,
    pub status: NodeStatus,
    /// Why the node stays or what happens to it next (`Reasons::text`); empty until filled.
    pub why: String,
}

impl NodeRow {
    /// The largest share of any shown resource (for `SortBy::Usage`).
    pub fn max_fraction(&self) -> f64 {
        self.usage.iter().map(Usage::fraction).fold(0.0, f64::max)
    }
}

/// The figures above the rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Totals {
    pub nodes: usize,
    /// The sum of the known prices.
    pub usd_per_hour: f64,
    /// Nodes whose price is neither annotated nor in the catalogue.
    pub unpriced: usize,
    /// Nodes whose price is the catalogue's estimate.
    pub estimated: usize,
    /// One entry per shown resource, over every shown node.
    pub usage: Vec<Usage>,
    /// Running pods on the shown nodes.
    pub pods_running: usize,
    /// Unfinished pods bound to the shown nodes.
    pub pods_bound: usize,
    /// Pods no node has been chosen for (cluster-wide).
    pub pods_pending: usize,
}

/// Everything the screen shows.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    pub rows: Vec<NodeRow>,
    pub totals: Totals,
    pub sort: Sort,
    pub selector: String,
    /// The keys of the extra label columns.
    pub extra_labels: Vec<String>,
    /// Where unannotated nodes' prices come from (`PriceBook::source`).
    pub prices: String,
    /// The latest watch error, shown until a watch recovers.
    pub error: Option<String>,
    /// Where the WHY column's reasons come from (`Reasons::note`); none: no WHY column.
    pub reasons: Option<String>,
    /// The selected row, highlighted (none with `--once`).
    pub selected: Option<usize>,
    /// The full explanation open over the table.
    pub explanation: Option<Pane>,
}

/// A node's full explanation, as `explain node` prints it.
#[derive(Clone, Debug, PartialEq)]
pub struct Pane {
    pub node: String,
    /// The text; none while it is being asked for.
    pub text: Option<String>,
    /// The first line shown.
    pub scroll: u16,
}

impl View {
    /// The node names in the order shown.
    pub fn names(&self) -> Vec<String> {
        self.rows.iter().map(|r| r.name.clone()).collect()
    }

    /// Fills the WHY column from `reasons`.
    pub fn with_reasons(mut self, reasons: &Reasons) -> Self {
        for row in &mut self.rows {
            row.why = reasons.text(&row.name);
        }
        self.reasons = Some(reasons.note());
        self
    }
}

/// What `view` needs besides the objects.
pub struct ViewOptions<'a> {
    pub resources: &'a [String],
    pub sort: Sort,
    pub selector: &'a str,
    /// Label keys shown as extra columns.
    pub extra_labels: &'a [String],
}

/// The view of `nodes` (already those the selector chose) and `pods` (all of the cluster's) at
/// `now`.
pub fn view(nodes: &[&Node], pods: &[&Pod], options: &ViewOptions, now: Timestamp, prices: &dyn PriceBook) -> View {
    let mut on_node: HashMap<&str, Vec<&Pod>> = HashMap::new();
    let mut pods_pending = 0;
    for pod in pods.iter().copied().filter(|p| !is_terminal(p)) {
        match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            Some(node) if !node.is_empty() => on_node.entry(node).or_default().push(pod),
            _ => pods_pending += 1,
        }
    }
    let mut rows: Vec<NodeRow> = nodes
        .iter()
        .map(|node| {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            row(node, on_node.get(name).map(Vec::as_slice).unwrap_or_default(), options, now, prices)
        })
        .collect();
    sort_rows(&mut rows, &options.sort, nodes);

    let pods_running = nodes
        .iter()
        .filter_map(|n| on_node.get(n.metadata.name.as_deref().unwrap_or_default()))
        .flatten()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count();
    // Every row's `usage` follows `options.resources`, in order.
    let usage = options
        .resources
        .iter()
        .enumerate()
        .map(|(i, resource)| Usage {
            resource: resource.clone(),
            requested: rows.iter().map(|r| r.usage[i].requested).sum(),
            allocatable: rows.iter().map(|r| r.usage[i].allocatable).sum(),
        })
        .collect();
    let totals = Totals {
        nodes: rows.len(),
        usd_per_hour: rows.iter().filter_map(|r| r.price).fold(0.0, |sum, p| sum + p.usd_per_hour),
        unpriced: rows.iter().filter(|r| r.price.is_none()).count(),
        estimated: rows.iter().filter(|r| r.price.is_some_and(|p| p.estimated)).count(),
        usage,
        pods_running,
        pods_bound: rows.iter().map(|r| r.pods).sum(),
        pods_pending,
    };
    View {
        rows,
        totals,
        sort: options.sort.clone(),
        selector: options.selector.to_string(),
        extra_labels: options.extra_labels.to_vec(),
        prices: prices.source(),
        error: None,
        reasons: None,
        selected: None,
        explanation: None,
    }
}

fn row(node: &Node, pods: &[&Pod], options: &ViewOptions, now: Timestamp, prices: &dyn PriceBook) -> NodeRow {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(resource_list_lenient)
        .unwrap_or_else(Resources::zero);
    let mut requested = Resources::zero();
    for pod in pods {
        requested.add(&pod_requests(pod));
    }
    let (instance_type, capacity_type, zone) = (label(INSTANCE_TYPE_LABEL), label(CAPACITY_TYPE_LABEL), label(ZONE_LABEL));
    let price = launch_price(node)
        .map(|p| Price {
            usd_per_hour: p.usd_per_hour,
            estimated: false,
        })
        .or_else(|| {
            let region = labels
                .get(REGION_LABEL)
                .cloned()
                .or_else(|| crate::simulate::catalogue::region_of_zone(&zone).map(str::to_string))?;
            prices.price(&region, &instance_type, &capacity_type, &zone)
        });
    let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| match c.status.as_str() {
            "True" => Some(true),
            "False" => Some(false),
            _ => None,
        });
    NodeRow {
        name: node.metadata.name.clone().unwrap_or_default(),
        provisioner: label(PROVISIONER_NAME_LABEL),
        instance_type,
        capacity_type,
        zone,
        price,
        extra: options.extra_labels.iter().map(|k| labels.get(k).cloned()).collect(),
        pods: pods.len(),
        max_pods: allocatable.pods,
        usage: options
            .resources
            .iter()
            .map(|r| Usage {
                resource: r.clone(),
                requested: requested.get(r),
                allocatable: allocatable.get(r),
            })
            .collect(),
        created,
        age_seconds: created.map(|c| now.duration_since(c).as_secs().max(0)).unwrap_or(0),
        status: NodeStatus {
            ready,
            cordoned: node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
            deleting: node.metadata.deletion_timestamp.is_some(),
        },
        why: String::new(),
    }
}
