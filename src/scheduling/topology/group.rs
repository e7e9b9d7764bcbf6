//! What a topology group is: the kind of constraint it enforces, the pods it selects (namespaces
//! and a label selector), the node filter it counts on, and its count of matching pods per domain,
//! with domain names interned per key (`Universe`) so the hot checks are array lookups.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::scheduling::requirements::Requirements;

/// What a group enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// Topology spread: at most `max_skew` more matching pods in a domain than in the emptiest.
    Spread,
    /// Pod affinity: only domains that already hold a matching pod.
    Affinity,
    /// Pod anti-affinity: only domains holding no matching pod.
    AntiAffinity,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Spread => "topology spread",
            Kind::Affinity => "pod affinity",
            Kind::AntiAffinity => "pod anti-affinity",
        }
    }
}

/// The namespaces a term looks at.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Namespaces {
    All,
    Some(BTreeSet<String>),
}

impl Namespaces {
    pub(super) fn contains(&self, ns: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Some(set) => set.contains(ns),
        }
    }
}

/// A parsed label selector. A missing selector selects nothing (Kubernetes' rule for spread
/// constraints and affinity terms); an empty one selects everything.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Selector {
    Nothing,
    Match {
        labels: Vec<(String, String)>,
        expressions: Vec<(String, String, BTreeSet<String>)>,
    },
}

impl Selector {
    pub fn new(s: Option<&LabelSelector>) -> Self {
        let Some(s) = s else {
            return Selector::Nothing;
        };
        Selector::Match {
            labels: s.match_labels.iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect(),
            expressions: s
                .match_expressions
                .iter()
                .flatten()
                .map(|e| (e.key.clone(), e.operator.clone(), e.values.iter().flatten().cloned().collect()))
                .collect(),
        }
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let Selector::Match { labels: want, expressions } = self else {
            return false;
        };
        want.iter().all(|(k, v)| labels.get(k) == Some(v))
            && expressions.iter().all(|(k, op, values)| {
                let actual = labels.get(k);
                match op.as_str() {
                    "In" => actual.is_some_and(|v| values.contains(v)),
                    "NotIn" => actual.is_none_or(|v| !values.contains(v)),
                    "Exists" => actual.is_some(),
                    "DoesNotExist" => actual.is_none(),
                    _ => false,
                }
            })
    }
}

/// The domains known for one key, interned: `names[id]`, `ids[name]`.
#[derive(Clone, Debug, Default)]
pub(super) struct Universe {
    pub(super) names: Vec<String>,
    pub(super) ids: HashMap<String, u32>,
}

impl Universe {
    pub(super) fn intern(&mut self, name: &str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = u32::try_from(self.names.len()).expect("fewer than 4 billion domains");
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }
}

/// One constraint's count of matching pods per domain, shared by every pod with that constraint.
#[derive(Clone, Debug)]
pub(super) struct Group {
    pub(super) kind: Kind,
    pub(super) key: String,
    pub(super) is_hostname: bool,
    pub(super) namespaces: Namespaces,
    pub(super) selector: Selector,
    pub(super) max_skew: i64,
    pub(super) node_filter: Vec<Requirements>,
    pub(super) counts: Vec<u32>,
    pub(super) nonzero: BTreeSet<u32>,
    /// How many placeholder hostnames (nodes planned in this run) have a non-zero count.
    pub(super) placeholders_hit: usize,
}

impl Group {
    pub(super) fn count(&self, id: u32) -> i64 {
        i64::from(self.counts.get(id as usize).copied().unwrap_or(0))
    }

    pub(super) fn record(&mut self, id: u32) {
        let i = id as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        self.nonzero.insert(id);
    }

    pub(super) fn selects(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespaces.contains(namespace) && self.selector.matches(labels)
    }

    pub(super) fn filter_matches(&self, node: &Requirements) -> bool {
        self.node_filter.is_empty() || self.node_filter.iter().any(|f| node.is_compatible(f))
    }

    pub(super) fn signature(&self) -> String {
        let filter: Vec<String> = self.node_filter.iter().map(|f| f.to_string()).collect();
        format!(
            "{:?}|{}|{:?}|{:?}|{}|{}",
            self.kind,
            self.key,
            self.namespaces,
            self.selector,
            self.max_skew,
            filter.join(" OR ")
        )
    }
}

#[cfg(test)]
mod tests;
