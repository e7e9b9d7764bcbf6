//! `karpenter-rs nodes`: a live terminal view of the cluster's nodes, in the spirit of
//! eks-node-viewer. One row per node (instance type, capacity type, zone, price, pods, request
//! bars against allocatable, age, status) and totals above them.
//!
//! This module is pure: `view` turns Nodes and Pods (and the time) into a `View`, `render` draws a
//! `View` into a ratatui frame, `render_text` into plain lines. Watching the cluster, the live
//! prices and the terminal are in `live`; where unannotated nodes get a price is in `prices`.

pub mod live;
pub mod prices;

#[cfg(test)]
mod tests;

use std::cmp::Ordering;
use std::collections::HashMap;
use std::path::PathBuf;

use clap::Args;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use ratatui::backend::TestBackend;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use ratatui::{Frame, Terminal};

use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL, REGION_LABEL, ZONE_LABEL};
use crate::controllers::provisioning::status::node_metrics::launch_price;
use crate::scheduling::pods::is_terminal;
use crate::scheduling::resources::{format_amount, pod_requests, resource_list_lenient, Resources, CPU};

pub use prices::{Fallback, LivePrices, NoPrices, PriceBook, SnapshotPrices};

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
    /// Print one frame as text once the watches have listed, and exit (for scripts and captures).
    #[arg(long, env = "NODES_ONCE", default_value_t = false)]
    pub once: bool,
    /// Width in columns of the `--once` frame.
    #[arg(long, env = "NODES_WIDTH", default_value_t = 150)]
    pub width: u16,
}

/// What the rows are ordered by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SortBy {
    /// Creation time (as eks-node-viewer).
    Creation,
    /// Price per hour.
    Price,
    /// The largest share of any shown resource.
    Usage,
    /// Name, digits compared as numbers.
    Name,
    /// A label's value, digits compared as numbers (eks-node-viewer's `--node-sort LABEL`).
    Label(String),
}

impl SortBy {
    /// The order after this one (the `s` key); a label order goes back to creation.
    pub fn next(&self) -> SortBy {
        match self {
            SortBy::Creation => SortBy::Price,
            SortBy::Price => SortBy::Usage,
            SortBy::Usage => SortBy::Name,
            SortBy::Name | SortBy::Label(_) => SortBy::Creation,
        }
    }

    fn as_str(&self) -> &str {
        match self {
            SortBy::Creation => "creation",
            SortBy::Price => "price",
            SortBy::Usage => "usage",
            SortBy::Name => "name",
            SortBy::Label(key) => key,
        }
    }

    /// Dearest and most requested first; the others ascending.
    fn descends_by_default(&self) -> bool {
        matches!(self, SortBy::Price | SortBy::Usage)
    }
}

/// A row order and its direction (`--sort price=asc`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sort {
    /// What the rows are ordered by.
    pub by: SortBy,
    /// Largest first.
    pub descending: bool,
}

impl Sort {
    /// `by` in its usual direction.
    pub fn by(by: SortBy) -> Sort {
        let descending = by.descends_by_default();
        Sort { by, descending }
    }

    /// `creation`, `price`, `usage`, `name` or a label key, optionally followed by `=asc` or
    /// `=dsc` (`=desc` too).
    pub fn parse(value: &str) -> Result<Sort, String> {
        let (key, direction) = match value.rsplit_once('=') {
            Some((key, direction)) => (key, Some(direction)),
            None => (value, None),
        };
        let by = match key {
            "creation" => SortBy::Creation,
            "price" => SortBy::Price,
            "usage" => SortBy::Usage,
            "name" => SortBy::Name,
            label => SortBy::Label(
                parse_label_key(label)
                    .map_err(|e| format!("give creation, price, usage, name or a label key, optionally with =asc or =dsc: {e}"))?,
            ),
        };
        let descending = match direction {
            None => by.descends_by_default(),
            Some("asc") => false,
            Some("dsc" | "desc") => true,
            Some(other) => return Err(format!("the direction is asc or dsc, not {other:?}")),
        };
        Ok(Sort { by, descending })
    }

    /// The next order of the `s` key, in its usual direction.
    pub fn next(&self) -> Sort {
        Sort::by(self.by.next())
    }

    /// As the header shows it: the key, with its direction when not the usual one.
    pub fn text(&self) -> String {
        if self.descending == self.by.descends_by_default() {
            self.by.as_str().to_string()
        } else {
            format!("{}={}", self.by.as_str(), if self.descending { "dsc" } else { "asc" })
        }
    }
}

/// A label key as Kubernetes takes it (`[prefix/]name`).
pub fn parse_label_key(key: &str) -> Result<String, String> {
    if key.is_empty() {
        return Err("a label key cannot be empty".to_string());
    }
    crate::apis::names::check_qualified_name(key).map_err(|e| format!("label key {key:?}: {e}"))?;
    Ok(key.to_string())
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
    }
}

/// Orders `rows` by `sort`, names breaking ties; `nodes` are where label values are read (rows
/// without the label go last in either direction).
pub fn sort_rows(rows: &mut [NodeRow], sort: &Sort, nodes: &[&Node]) {
    let label_of: HashMap<&str, &str> = match &sort.by {
        SortBy::Label(key) => nodes
            .iter()
            .filter_map(|n| Some((n.metadata.name.as_deref()?, n.metadata.labels.as_ref()?.get(key)?.as_str())))
            .collect(),
        _ => HashMap::new(),
    };
    let direct = |o: Ordering| if sort.descending { o.reverse() } else { o };
    rows.sort_by(|a, b| {
        let primary = match &sort.by {
            SortBy::Creation => direct(a.created.cmp(&b.created)),
            SortBy::Price => {
                // Unpriced rows last in either direction.
                let p = |r: &NodeRow| r.price.map(|p| p.usd_per_hour);
                match (p(a), p(b)) {
                    (Some(x), Some(y)) => direct(x.total_cmp(&y)),
                    (x, y) => x.is_none().cmp(&y.is_none()),
                }
            }
            SortBy::Usage => direct(a.max_fraction().total_cmp(&b.max_fraction())),
            SortBy::Name => direct(natural_cmp(&a.name, &b.name)),
            SortBy::Label(_) => match (label_of.get(a.name.as_str()), label_of.get(b.name.as_str())) {
                (Some(x), Some(y)) => direct(natural_cmp(x, y)),
                (x, y) => x.is_none().cmp(&y.is_none()),
            },
        };
        primary.then_with(|| natural_cmp(&a.name, &b.name))
    });
}

/// Compares strings with runs of digits compared as numbers (`node-9` before `node-10`).
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a, b);
    loop {
        let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        match (a.chars().next(), b.chars().next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let (da, db) = (digits(a), digits(b));
                let (na, nb) = (a[..da].trim_start_matches('0'), b[..db].trim_start_matches('0'));
                let order = na.len().cmp(&nb.len()).then_with(|| na.cmp(nb)).then_with(|| da.cmp(&db));
                if order != Ordering::Equal {
                    return order;
                }
                (a, b) = (&a[da..], &b[db..]);
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(&y);
                }
                (a, b) = (&a[x.len_utf8()..], &b[y.len_utf8()..]);
            }
        }
    }
}

/// `kubectl`'s age: `42s`, `17m`, `5h`, `3d`.
pub fn age(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 120 * 60 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// A bar of `width` cells for `fraction` (clamped to 0..=1), `█` filled and `░` empty.
pub fn bar(fraction: f64, width: usize) -> String {
    let filled = ((fraction.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("{}{}", "█".repeat(filled), "░".repeat(width - filled))
}

/// `$0.1664`: four decimals (t3.nano's $0.0052 stays readable), `~` before an estimate.
fn price_text(price: Option<Price>) -> String {
    match price {
        Some(Price {
            usd_per_hour,
            estimated: false,
        }) => format!("${usd_per_hour:.4}"),
        Some(Price {
            usd_per_hour,
            estimated: true,
        }) => format!("~${usd_per_hour:.4}"),
        None => "-".to_string(),
    }
}

/// `1.9/3.9` cores, `4.6Gi/15.2Gi` bytes, plain numbers otherwise.
fn amounts_text(u: &Usage) -> String {
    let one = |units: i64| -> String {
        if u.resource == CPU {
            format!("{:.1}", units as f64 / 1000.0)
        } else if u.resource == "memory" || u.resource == "ephemeral-storage" {
            format!("{:.1}Gi", units as f64 / (1u64 << 30) as f64)
        } else {
            format_amount(&u.resource, units)
        }
    };
    format!("{}/{}", one(u.requested), one(u.allocatable))
}

const ROW_BAR: usize = 10;
/// Widest an extra label column gets (label keys with a prefix are long).
const EXTRA_WIDTH: usize = 40;

/// The value of the `i`th extra label, `-` when the node has none.
fn extra_text(row: &NodeRow, i: usize) -> &str {
    row.extra.get(i).and_then(Option::as_deref).unwrap_or("-")
}
const TOTAL_BAR: usize = 20;

fn usage_style(fraction: f64) -> Style {
    match fraction {
        f if f >= 0.9 => Style::new().fg(Color::Red),
        f if f >= 0.6 => Style::new().fg(Color::Yellow),
        _ => Style::new().fg(Color::Green),
    }
}

fn status_style(status: &NodeStatus) -> Style {
    if status.deleting || status.cordoned {
        Style::new().fg(Color::Yellow)
    } else if status.ready == Some(true) {
        Style::new().fg(Color::Green)
    } else {
        Style::new().fg(Color::Red)
    }
}

/// The lines above the table.
fn header(view: &View) -> Vec<Line<'static>> {
    let t = &view.totals;
    let mut price = format!("${:.4}/hour · ${:.2}/month", t.usd_per_hour, t.usd_per_hour * HOURS_PER_MONTH);
    if t.estimated > 0 {
        price.push_str(&format!(" ({} estimated)", t.estimated));
    }
    if t.unpriced > 0 {
        price.push_str(&format!(" ({} without a price)", t.unpriced));
    }
    let selector = if view.selector.is_empty() {
        "every node".to_string()
    } else {
        format!("-l {}", view.selector)
    };
    let mut lines = vec![Line::from(vec![
        Span::styled("karpenter-rs nodes", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!(
            "  {} node{} ({selector})  {price}",
            t.nodes,
            if t.nodes == 1 { "" } else { "s" }
        )),
    ])];
    let label_width = t.usage.iter().map(|u| u.resource.len() + 1).max().unwrap_or(0).max(8);
    for u in &t.usage {
        lines.push(Line::from(vec![
            Span::raw(format!("{:<label_width$}", u.resource)),
            Span::styled(bar(u.fraction(), TOTAL_BAR), usage_style(u.fraction())),
            Span::raw(format!(" {:>3.0}%  {} requested", u.fraction() * 100.0, amounts_text(u))),
        ]));
    }
    lines.push(Line::raw(format!(
        "{:<label_width$}{} running, {} bound to these nodes, {} pending    sort: {} (s)  quit: q",
        "pods",
        t.pods_running,
        t.pods_bound,
        t.pods_pending,
        view.sort.text()
    )));
    lines.push(Line::raw(format!(
        "{:<label_width$}the nodes' price annotations, else {}",
        "prices", view.prices
    )));
    if let Some(error) = &view.error {
        lines.push(Line::styled(format!("watch: {error}"), Style::new().fg(Color::Red)));
    }
    lines
}

/// Draws `view` into `frame`: the header, then one row per node.
pub fn render(frame: &mut Frame, view: &View) {
    let header = header(view);
    let [top, table] = Layout::vertical([Constraint::Length(header.len() as u16 + 1), Constraint::Min(0)]).areas(frame.area());
    frame.render_widget(Paragraph::new(header), top);
    render_table(frame, table, view);
}

fn render_table(frame: &mut Frame, area: Rect, view: &View) {
    let mut titles = vec!["NAME", "TYPE", "CAPACITY", "ZONE", "$/HOUR", "PODS"]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    titles.extend(view.totals.usage.iter().map(|u| u.resource.to_uppercase()));
    titles.extend(view.extra_labels.iter().cloned());
    titles.extend(["AGE".to_string(), "STATUS".to_string()]);
    let name_width = view.rows.iter().map(|r| r.name.len()).max().unwrap_or(4).clamp(4, 48) as u16;
    let text_width = |f: fn(&NodeRow) -> &str, min: usize| view.rows.iter().map(|r| f(r).len()).max().unwrap_or(0).max(min) as u16;
    let mut widths = vec![
        Constraint::Length(name_width),
        Constraint::Length(text_width(|r| &r.instance_type, 4)),
        Constraint::Length(text_width(|r| &r.capacity_type, 8)),
        Constraint::Length(text_width(|r| &r.zone, 4)),
        Constraint::Length(9),
        Constraint::Length(7),
    ];
    widths.extend(view.totals.usage.iter().map(|_| Constraint::Length(ROW_BAR as u16 + 5)));
    widths.extend(view.extra_labels.iter().enumerate().map(|(i, key)| {
        let values = view.rows.iter().map(|r| extra_text(r, i).chars().count());
        Constraint::Length(values.max().unwrap_or(0).max(key.chars().count()).min(EXTRA_WIDTH) as u16)
    }));
    widths.extend([Constraint::Length(4), Constraint::Min(8)]);

    let rows = view.rows.iter().map(|r| {
        let mut cells = vec![
            Cell::from(r.name.clone()),
            Cell::from(r.instance_type.clone()),
            Cell::from(r.capacity_type.clone()),
            Cell::from(r.zone.clone()),
            Cell::from(price_text(r.price)),
            Cell::from(format!("{}/{}", r.pods, r.max_pods)),
        ];
        cells.extend(r.usage.iter().map(|u| {
            Cell::from(Line::from(vec![
                Span::styled(bar(u.fraction(), ROW_BAR), usage_style(u.fraction())),
                Span::raw(format!(" {:>3.0}%", u.fraction() * 100.0)),
            ]))
        }));
        cells.extend((0..view.extra_labels.len()).map(|i| Cell::from(extra_text(r, i).to_string())));
        cells.push(Cell::from(age(r.age_seconds)));
        cells.push(Cell::from(Span::styled(r.status.text(), status_style(&r.status))));
        Row::new(cells)
    });
    let table = Table::new(rows, widths)
        .header(Row::new(titles).style(Style::new().add_modifier(Modifier::BOLD)))
        .column_spacing(1);
    frame.render_widget(table, area);
}

/// `view` drawn `width` columns wide, as plain lines without trailing spaces (`--once`, tests).
pub fn render_text(view: &View, width: u16) -> String {
    let height = header(view).len() as u16 + 2 + view.rows.len() as u16;
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("the test backend cannot fail");
    terminal.draw(|frame| render(frame, view)).expect("the test backend cannot fail");
    let buffer = terminal.backend().buffer();
    let mut lines: Vec<String> = (0..buffer.area.height)
        .map(|y| {
            let line: String = (0..buffer.area.width).map(|x| buffer[(x, y)].symbol()).collect();
            line.trim_end().to_string()
        })
        .collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.join("\n") + "\n"
}
