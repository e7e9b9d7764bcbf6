//! What `simulate` reports, as data (the stable shape of `--output json|yaml`) and as the
//! human-readable table. Pure: the CLI prints the string.

use serde::Serialize;

/// Hours in the month of the `$/month` figure (AWS's own convention).
pub const HOURS_PER_MONTH: f64 = 730.0;

/// How many instance types a table row names before `+N more`.
const TYPES_SHOWN: usize = 3;

/// Everything `karpenter-rs simulate` found. Field names are the JSON/YAML keys; they are stable.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The region simulated.
    pub region: String,
    /// The catalogue the instance types and prices come from.
    pub catalogue: CatalogueSummary,
    /// What the simulation could not know offline.
    pub notes: Vec<String>,
    /// Objects not simulated, Provisioners that cannot launch, admission warnings.
    pub warnings: Vec<String>,
    /// The nodes it would launch, in the order planned.
    pub nodes: Vec<NewNode>,
    /// Their price.
    pub total: Total,
    /// Where every pending pod goes, in input order.
    pub pods: Vec<Placement>,
    /// Pods nothing can hold, with the simulation's reason.
    pub unschedulable: Vec<Unplaced>,
    /// Pods Karpenter does not provision for at all, with the reason.
    pub ignored: Vec<Unplaced>,
}

/// Where the catalogue comes from.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CatalogueSummary {
    /// `snapshot`, `file` or `live`.
    pub kind: String,
    /// Its source, as the snapshot says or `--live`.
    pub source: String,
    /// When the snapshot was taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taken: Option<String>,
    /// Whether the prices are estimates.
    pub prices_estimated: bool,
}

/// One node the simulation would launch.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NewNode {
    /// 1-based, as `new node #1` in `pods`.
    pub index: usize,
    /// The Provisioner launching it.
    pub provisioner: String,
    /// Every instance type the launch would offer EC2, cheapest first.
    pub instance_types: Vec<String>,
    /// Zones of those options.
    pub zones: Vec<String>,
    /// Capacity types of those options.
    pub capacity_types: Vec<String>,
    /// The cheapest option: what an unconstrained launch gets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cheapest: Option<LaunchOption>,
    /// The pods planned onto it (`namespace/name`).
    pub pods: Vec<String>,
}

/// One (instance type, zone, capacity type) with its price.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LaunchOption {
    /// `t3.large`.
    pub instance_type: String,
    /// Availability zone.
    pub zone: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
    /// USD per hour.
    pub price_per_hour: f64,
}

/// The price of every new node at its cheapest option.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Total {
    /// How many nodes.
    pub nodes: usize,
    /// USD per hour.
    pub price_per_hour: f64,
    /// USD per month of `HOURS_PER_MONTH` hours.
    pub price_per_month: f64,
}

/// Where one pod goes: exactly one of the three is set.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// `namespace/name`.
    pub pod: String,
    /// `index` of the new node it is planned onto.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_node: Option<usize>,
    /// The existing node it fits on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub existing_node: Option<String>,
    /// Why it goes nowhere (unschedulable or ignored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unplaced: Option<String>,
}

/// A pod that goes nowhere.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Unplaced {
    /// `namespace/name`.
    pub pod: String,
    /// The simulation's reason.
    pub reason: String,
}

impl Report {
    /// The report as the human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let c = &self.catalogue;
        let taken = c.taken.as_deref().map(|t| format!(" of {t}")).unwrap_or_default();
        out.push_str(&format!("Region:    {}\n", self.region));
        out.push_str(&format!("Catalogue: {}{taken}: {}\n", c.kind, c.source));
        for note in &self.notes {
            out.push_str(&format!("Note: {note}\n"));
        }
        for warning in &self.warnings {
            out.push_str(&format!("Warning: {warning}\n"));
        }
        out.push_str("\nNEW NODES\n");
        if self.nodes.is_empty() {
            out.push_str("none\n");
        } else {
            let mut rows = vec![[
                "#".to_string(),
                "PROVISIONER".into(),
                "INSTANCE TYPES (CHEAPEST FIRST)".into(),
                "ZONES".into(),
                "CAPACITY".into(),
                "$/HOUR".into(),
                "PODS".into(),
            ]];
            for n in &self.nodes {
                let mut types = n.instance_types.iter().take(TYPES_SHOWN).cloned().collect::<Vec<_>>().join(", ");
                if n.instance_types.len() > TYPES_SHOWN {
                    types.push_str(&format!(" +{} more", n.instance_types.len() - TYPES_SHOWN));
                }
                let price = n.cheapest.as_ref().map_or("-".to_string(), |o| format!("{:.4}", o.price_per_hour));
                rows.push([
                    n.index.to_string(),
                    n.provisioner.clone(),
                    types,
                    n.zones.join(", "),
                    n.capacity_types.join(", "),
                    price,
                    n.pods.len().to_string(),
                ]);
            }
            columns(&mut out, &rows);
        }
        let t = &self.total;
        out.push_str(&format!(
            "\nTOTAL {} node{}: ${:.4}/hour, ${:.2}/month ({} h), each node at its cheapest option{}\n",
            t.nodes,
            if t.nodes == 1 { "" } else { "s" },
            t.price_per_hour,
            t.price_per_month,
            HOURS_PER_MONTH,
            if c.prices_estimated { " (estimated prices)" } else { "" }
        ));
        out.push_str("\nPODS\n");
        if self.pods.is_empty() {
            out.push_str("none\n");
        } else {
            let mut rows = vec![["POD".to_string(), "GOES TO".to_string()]];
            for p in &self.pods {
                let to = match (&p.new_node, &p.existing_node) {
                    (Some(i), _) => {
                        let cheapest = self.nodes.get(i - 1).and_then(|n| n.cheapest.as_ref());
                        match cheapest {
                            Some(o) => format!("new node #{i} ({})", o.instance_type),
                            None => format!("new node #{i}"),
                        }
                    }
                    (None, Some(node)) => format!("existing node {node}"),
                    (None, None) => "nowhere (below)".to_string(),
                };
                rows.push([p.pod.clone(), to]);
            }
            columns(&mut out, &rows);
        }
        out.push_str("\nUNSCHEDULABLE\n");
        if self.unschedulable.is_empty() {
            out.push_str("none\n");
        }
        for u in &self.unschedulable {
            out.push_str(&format!("{}: {}\n", u.pod, u.reason));
        }
        if !self.ignored.is_empty() {
            out.push_str("\nIGNORED (not provisioned for)\n");
            for u in &self.ignored {
                out.push_str(&format!("{}: {}\n", u.pod, u.reason));
            }
        }
        out
    }
}

/// Writes `rows` as left-aligned columns two spaces apart.
fn columns<const N: usize>(out: &mut String, rows: &[[String; N]]) {
    let mut widths = [0; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}
