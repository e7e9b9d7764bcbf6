//! An explanation as the table people read (`-o text`, the default), or JSON and YAML for tools.
//! Colour (bold headings) only when asked, which the CLI does only on a terminal.

use std::fmt::Write;

use super::node::{Destination, NodeExplanation};
use super::pod::PodExplanation;
use super::{dollars, Explanation};

/// The output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Tables.
    Text,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// `explanation` in `format`; `colour` makes headings bold (text only).
pub fn render(explanation: &Explanation, format: Format, colour: bool) -> String {
    match format {
        Format::Json => serde_json::to_string_pretty(explanation).unwrap_or_default() + "\n",
        Format::Yaml => serde_yaml_ng::to_string(explanation).unwrap_or_default(),
        Format::Text => match explanation {
            Explanation::Node(n) => node_text(n, colour),
            Explanation::Pod(p) => pod_text(p, colour),
        },
    }
}

fn heading(text: &str, colour: bool) -> String {
    if colour {
        format!("\x1b[1m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The text of `explain node`.
pub fn node_text(n: &NodeExplanation, colour: bool) -> String {
    let mut out = String::new();
    let none = || "-".to_string();
    let _ = writeln!(out, "{}", heading(&format!("Node {}", n.node), colour));
    let _ = writeln!(
        out,
        "  Provisioner  {}",
        n.provisioner.clone().unwrap_or_else(|| "- (not launched by a Provisioner)".into())
    );
    let _ = writeln!(
        out,
        "  Type         {} ({}, {}) at {}",
        n.instance_type.clone().unwrap_or_else(none),
        n.capacity_type.clone().unwrap_or_else(none),
        n.zone.clone().unwrap_or_else(none),
        n.price_text()
    );
    let _ = writeln!(
        out,
        "  Age          {} (created {})",
        n.age_text(),
        n.created.clone().unwrap_or_else(none)
    );
    let _ = writeln!(out, "  Pods         {}", n.pods.len());
    let _ = writeln!(out, "  Why          {}", n.summary);
    let _ = writeln!(out);
    let width = n.methods.iter().map(|m| m.method.len()).max().unwrap_or(6).max(6);
    let _ = writeln!(out, "{}", heading(&format!("{:width$}  ACTS  STATE", "METHOD"), colour));
    for m in &n.methods {
        let _ = writeln!(out, "{:width$}  {:4}  {}", m.method, yes(m.acts), m.state);
        for b in m.blockers.iter().filter(|b| !m.state.ends_with(b.as_str())) {
            let _ = writeln!(out, "{:width$}        - {b}", "");
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", heading("Removing it", colour));
    if n.removal.moves.is_empty() {
        let _ = writeln!(out, "  no pod would move");
    } else {
        let width = n.removal.moves.iter().map(|m| m.pod.len()).max().unwrap_or(3).max(3);
        let _ = writeln!(out, "{}", heading(&format!("  {:width$}  GOES TO", "POD"), colour));
        for m in &n.removal.moves {
            let to = match &m.to {
                Destination::Node { name } => format!("node {name}"),
                Destination::NewNode {
                    instance_type,
                    price_per_hour,
                } => format!("a new node: {instance_type} at {}", dollars(*price_per_hour)),
                Destination::Unschedulable { reason } => format!("nowhere: {reason}"),
            };
            let _ = writeln!(out, "  {:width$}  {to}", m.pod);
        }
    }
    let _ = writeln!(
        out,
        "  cluster {} → {}{}",
        dollars(n.removal.cluster_price_before),
        dollars(n.removal.cluster_price_after),
        if n.removal.every_pod_placed {
            ""
        } else {
            " (some pods would have nowhere to go)"
        }
    );
    out
}

/// The text of `explain pod`.
pub fn pod_text(p: &PodExplanation, colour: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", heading(&format!("Pod {}", p.pod), colour));
    let _ = writeln!(out, "  Phase        {}", p.phase.clone().unwrap_or_else(|| "-".into()));
    if let Some(node) = &p.node {
        let _ = writeln!(out, "  Node         {node}");
    }
    if let Some(node) = &p.nominated_node {
        let _ = writeln!(out, "  Nominated    {node}");
    }
    let _ = writeln!(out, "  Why          {}", p.summary);
    if !p.cheapest_types.is_empty() {
        let types: Vec<String> = p
            .cheapest_types
            .iter()
            .map(|t| format!("{} {}", t.instance_type, dollars(t.price_per_hour)))
            .collect();
        let _ = writeln!(out, "  Cheapest     {}", types.join(", "));
    }
    for u in &p.unavailable_offerings {
        let _ = writeln!(
            out,
            "  No capacity  {} {} in {} (insufficient capacity at the last launch), retried from {}",
            u.capacity_type,
            u.instance_type,
            u.zone,
            u.until.strftime("%Y-%m-%dT%H:%M:%SZ")
        );
    }
    if !p.provisioners.is_empty() {
        let _ = writeln!(out);
        let width = p.provisioners.iter().map(|v| v.provisioner.len()).max().unwrap_or(11).max(11);
        let outcome = p.provisioners.iter().map(|v| v.outcome.len()).max().unwrap_or(7).max(7);
        let _ = writeln!(
            out,
            "{}",
            heading(&format!("{:width$}  {:outcome$}  REASON", "PROVISIONER", "OUTCOME"), colour)
        );
        for v in &p.provisioners {
            let _ = writeln!(out, "{:width$}  {:outcome$}  {}", v.provisioner, v.outcome, v.reason);
        }
    }
    out
}
