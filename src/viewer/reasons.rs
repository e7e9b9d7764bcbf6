//! The WHY column's cache: each node's last explanation and its one-line reason
//! (`NodeExplanation::reason`), when it was asked, and which node to explain next (round robin:
//! never-explained nodes first, then the one explained longest ago). Explaining costs about a
//! consolidation evaluation per node, so `live` explains one node at a time in the background and
//! every frame reads this cache. Pure: the time is passed in.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::explain::NodeExplanation;

/// A node's last answer.
#[derive(Clone, Debug)]
pub struct Known {
    /// The one line shown (the explanation's reason, or why there is none for this node).
    pub reason: String,
    /// The explanation, when there was one.
    pub explanation: Option<NodeExplanation>,
    /// When it was asked.
    pub at: Timestamp,
}

/// Every node's last answer and where answers come from.
#[derive(Clone, Debug, Default)]
pub struct Reasons {
    known: HashMap<String, Known>,
    /// Why nothing can be explained now (shown once, in the header; the rows show `-`).
    unavailable: Option<String>,
    /// Where the last answer came from, for the header.
    source: String,
}

impl Reasons {
    /// No answer yet; `source` says where answers will come from.
    pub fn new(source: String) -> Self {
        Self { source, ..Self::default() }
    }

    /// Node `node`'s explanation at `at`, from `source`.
    pub fn explained(&mut self, node: &str, explanation: NodeExplanation, at: Timestamp, source: String) {
        let known = Known {
            reason: explanation.reason(),
            explanation: Some(explanation),
            at,
        };
        self.known.insert(node.to_string(), known);
        self.unavailable = None;
        self.source = source;
    }

    /// Why `node` has no explanation (the controller does not know it yet, say), at `at`.
    pub fn unexplained(&mut self, node: &str, why: String, at: Timestamp) {
        let known = Known {
            reason: why,
            explanation: None,
            at,
        };
        self.known.insert(node.to_string(), known);
    }

    /// Nothing can be explained now, because of `why`.
    pub fn unavailable(&mut self, why: String) {
        self.unavailable = Some(why);
    }

    /// Whether nothing can be explained now.
    pub fn is_unavailable(&self) -> bool {
        self.unavailable.is_some()
    }

    /// `node`'s last answer.
    pub fn get(&self, node: &str) -> Option<&Known> {
        self.known.get(node)
    }

    /// The WHY cell of `node`: its reason; `-` when nothing can be explained and it has none;
    /// `…` until it is known.
    pub fn text(&self, node: &str) -> String {
        match (self.known.get(node), &self.unavailable) {
            (Some(k), _) => k.reason.clone(),
            (None, Some(_)) => "-".to_string(),
            (None, None) => "…".to_string(),
        }
    }

    /// The header's line: where the reasons come from, or why there are none.
    pub fn note(&self) -> String {
        match &self.unavailable {
            Some(why) => format!("- (no reasons: {why})"),
            None => self.source.clone(),
        }
    }

    /// Whether every node of `shown` has an answer.
    pub fn knows_all(&self, shown: &[String]) -> bool {
        shown.iter().all(|n| self.known.contains_key(n))
    }

    /// The node of `shown` to explain next: one never explained (in `shown`'s order), else the
    /// one explained longest ago if that is at least `min_age` before `now`. Forgets nodes no
    /// longer shown.
    pub fn next(&mut self, shown: &[String], now: Timestamp, min_age: Duration) -> Option<String> {
        let names: HashSet<&String> = shown.iter().collect();
        self.known.retain(|name, _| names.contains(name));
        if let Some(new) = shown.iter().find(|n| !self.known.contains_key(*n)) {
            return Some(new.clone());
        }
        let (name, oldest) = self.known.iter().min_by_key(|(name, k)| (k.at, (*name).clone()))?;
        let age = now.duration_since(oldest.at);
        (age.as_secs_f64() >= min_age.as_secs_f64()).then(|| name.clone())
    }
}
