//! The requirement algebra: per label key, the set of values a node may carry (In, NotIn,
//! Exists, DoesNotExist, Gt, Lt), intersected as constraints pile up from the Provisioner, the
//! pod and topology. Also the rule that decides whether a pod's constraints are compatible with a
//! node's: custom labels must be declared by the node side, well-known ones only need to overlap.
//! No I/O here.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use crate::apis::keys::EBS_CSI_ZONE_LABEL;
use crate::apis::v1alpha5::labels::{self, HOSTNAME_LABEL, WELL_KNOWN_LABELS, ZONE_LABEL};


/// The stable spelling of a key: deprecated beta keys and the EBS CSI zone key are mapped.
pub fn normalize_key(key: &str) -> &str {
    if key == EBS_CSI_ZONE_LABEL {
        ZONE_LABEL
    } else {
        labels::normalize(key)
    }
}

/// The values one label key may take: a set (In) or the complement of a set (NotIn; Exists is the
/// complement of nothing), optionally bounded by integer `Gt`/`Lt`. DoesNotExist is the empty set.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    complement: bool,
    values: BTreeSet<String>,
    greater_than: Option<i64>,
    less_than: Option<i64>,
}

impl Requirement {
    /// `In [values]`.
    pub fn in_values<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Requirement {
            complement: false,
            values: values.into_iter().map(Into::into).collect(),
            greater_than: None,
            less_than: None,
        }
    }

    /// `NotIn [values]`.
    pub fn not_in<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Requirement {
            complement: true,
            ..Requirement::in_values(values)
        }
    }

    /// `Exists`: any value, as long as the label is there.
    pub fn exists() -> Self {
        Requirement::not_in(Vec::<String>::new())
    }

    /// `DoesNotExist`: no value at all.
    pub fn does_not_exist() -> Self {
        Requirement::in_values(Vec::<String>::new())
    }

    /// The requirement a Kubernetes node selector requirement states. An unknown operator or a
    /// `Gt`/`Lt` without one integer admits no value (the API server rejects both anyway).
    pub fn from_operator(operator: &str, values: &[String]) -> Self {
        let bound = || match values {
            [v] => v.parse::<i64>().ok(),
            _ => None,
        };
        match operator {
            "In" => Requirement::in_values(values.iter().cloned()),
            "NotIn" => Requirement::not_in(values.iter().cloned()),
            "Exists" => Requirement::exists(),
            "Gt" => match bound() {
                Some(b) => Requirement {
                    greater_than: Some(b),
                    ..Requirement::exists()
                },
                None => Requirement::does_not_exist(),
            },
            "Lt" => match bound() {
                Some(b) => Requirement {
                    less_than: Some(b),
                    ..Requirement::exists()
                },
                None => Requirement::does_not_exist(),
            },
            _ => Requirement::does_not_exist(),
        }
    }

    /// The operator this requirement reads as: In, NotIn, Exists, DoesNotExist, Gt or Lt.
    pub fn operator(&self) -> &'static str {
        match (self.complement, self.values.is_empty()) {
            (true, false) => "NotIn",
            (true, true) if self.greater_than.is_some() => "Gt",
            (true, true) if self.less_than.is_some() => "Lt",
            (true, true) => "Exists",
            (false, false) => "In",
            (false, true) => "DoesNotExist",
        }
    }

    /// True for NotIn, Exists, Gt and Lt: an open-ended set of values.
    pub fn is_complement(&self) -> bool {
        self.complement
    }

    /// The listed values: those admitted for In, those excluded for NotIn.
    pub fn values(&self) -> &BTreeSet<String> {
        &self.values
    }

    /// Whether a node labelled with `value` satisfies this requirement.
    pub fn has(&self, value: &str) -> bool {
        if self.complement {
            !self.values.contains(value) && self.within_bounds(value)
        } else {
            self.values.contains(value) && self.within_bounds(value)
        }
    }

    fn within_bounds(&self, value: &str) -> bool {
        within(value, self.greater_than, self.less_than)
    }

    /// How many values are admitted; open-ended sets count as `usize::MAX` minus their exclusions.
    pub fn len(&self) -> usize {
        if self.complement {
            usize::MAX - self.values.len()
        } else {
            self.values.len()
        }
    }

    /// True when no value is admitted (DoesNotExist, or an intersection that came out empty).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One admitted value when the set is finite and non-empty (the smallest, so it is stable).
    pub fn any(&self) -> Option<&str> {
        if self.complement {
            None
        } else {
            self.values.iter().next().map(String::as_str)
        }
    }

    /// A value that satisfies this requirement, for a node label (Karpenter's `Any()`,
    /// `core@v0.27.0:pkg/scheduling/requirement.go`): the smallest admitted value of an `In` set;
    /// for `Exists`, `NotIn`, `Gt` and `Lt`, the smallest non-negative integer that is within the
    /// bounds and not excluded (Karpenter picks a random one; the smallest keeps node labels
    /// stable). `None` when nothing is admitted.
    pub fn sample(&self) -> Option<String> {
        if !self.complement {
            return self.values.iter().find(|v| self.within_bounds(v)).cloned();
        }
        let low = self.greater_than.map_or(0, |g| g.saturating_add(1)).max(0);
        let high = self.less_than.unwrap_or(i64::MAX);
        // At most `values.len()` candidates are excluded, so this ends within that many steps.
        (low..high).map(|n| n.to_string()).find(|v| !self.values.contains(v))
    }

    /// The values admitted by both.
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        let complement = self.complement && other.complement;
        let greater_than = max_opt(self.greater_than, other.greater_than);
        let less_than = min_opt(self.less_than, other.less_than);
        if let (Some(g), Some(l)) = (greater_than, less_than) {
            if g >= l {
                return Requirement::does_not_exist();
            }
        }
        let values: BTreeSet<String> = match (self.complement, other.complement) {
            (true, true) => self.values.union(&other.values).cloned().collect(),
            (true, false) => other.values.difference(&self.values).cloned().collect(),
            (false, true) => self.values.difference(&other.values).cloned().collect(),
            (false, false) => self.values.intersection(&other.values).cloned().collect(),
        };
        let values = values.into_iter().filter(|v| within(v, greater_than, less_than)).collect();
        if complement {
            Requirement {
                complement,
                values,
                greater_than,
                less_than,
            }
        } else {
            Requirement {
                complement,
                values,
                greater_than: None,
                less_than: None,
            }
        }
    }

    /// Whether the intersection with `other` admits at least one value, without building it.
    pub fn overlaps(&self, other: &Requirement) -> bool {
        let greater_than = max_opt(self.greater_than, other.greater_than);
        let less_than = min_opt(self.less_than, other.less_than);
        if let (Some(g), Some(l)) = (greater_than, less_than) {
            if g >= l {
                return false;
            }
        }
        match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => other
                .values
                .iter()
                .any(|v| !self.values.contains(v) && within(v, greater_than, less_than)),
            (false, true) => self
                .values
                .iter()
                .any(|v| !other.values.contains(v) && within(v, greater_than, less_than)),
            (false, false) => {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (&self.values, &other.values)
                } else {
                    (&other.values, &self.values)
                };
                small.iter().any(|v| large.contains(v) && within(v, greater_than, less_than))
            }
        }
    }

    /// The requirement as Kubernetes writes it (`Gt`/`Lt` bounds become their own entries).
    pub fn to_node_selector_requirements(&self, key: &str) -> Vec<NodeSelectorRequirement> {
        let nsr = |op: &str, values: Vec<String>| NodeSelectorRequirement {
            key: key.to_string(),
            operator: op.to_string(),
            values: if values.is_empty() { None } else { Some(values) },
        };
        let mut out = Vec::new();
        match (self.complement, self.values.is_empty()) {
            (true, false) => out.push(nsr("NotIn", self.values.iter().cloned().collect())),
            (true, true) if self.greater_than.is_none() && self.less_than.is_none() => out.push(nsr("Exists", vec![])),
            (true, true) => {}
            (false, false) => out.push(nsr("In", self.values.iter().cloned().collect())),
            (false, true) => out.push(nsr("DoesNotExist", vec![])),
        }
        if self.complement {
            if let Some(g) = self.greater_than {
                out.push(nsr("Gt", vec![g.to_string()]));
            }
            if let Some(l) = self.less_than {
                out.push(nsr("Lt", vec![l.to_string()]));
            }
        }
        out
    }
}

impl fmt::Display for Requirement {
    /// `In [a b]`, `NotIn [x]`, `Exists`, `DoesNotExist`, `Gt 4`, `Exists >4 <8`; long value lists
    /// are cut after five values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.complement && self.values.is_empty() {
            match (self.greater_than, self.less_than) {
                (Some(g), None) => return write!(f, "Gt {g}"),
                (None, Some(l)) => return write!(f, "Lt {l}"),
                _ => {}
            }
        }
        let base = match (self.complement, self.values.is_empty()) {
            (true, false) => "NotIn",
            (true, true) => "Exists",
            (false, false) => "In",
            (false, true) => "DoesNotExist",
        };
        f.write_str(base)?;
        if !self.values.is_empty() {
            let shown: Vec<&str> = self.values.iter().take(5).map(String::as_str).collect();
            write!(f, " [{}", shown.join(" "))?;
            if self.values.len() > 5 {
                write!(f, " and {} others", self.values.len() - 5)?;
            }
            f.write_str("]")?;
        }
        if let Some(g) = self.greater_than {
            write!(f, " >{g}")?;
        }
        if let Some(l) = self.less_than {
            write!(f, " <{l}")?;
        }
        Ok(())
    }
}

fn within(value: &str, greater_than: Option<i64>, less_than: Option<i64>) -> bool {
    if greater_than.is_none() && less_than.is_none() {
        return true;
    }
    let Ok(n) = value.parse::<i64>() else {
        return false;
    };
    greater_than.is_none_or(|g| n > g) && less_than.is_none_or(|l| n < l)
}

/// NotIn and DoesNotExist only say where a node must *not* be.
fn excludes_only(r: &Requirement) -> bool {
    matches!(r.operator(), "NotIn" | "DoesNotExist")
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) | (None, x) => x,
    }
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) | (None, x) => x,
    }
}

/// Requirements on many keys; a key that is absent is unconstrained.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Requirements(BTreeMap<String, Requirement>);

impl Requirements {
    /// No constraint at all.
    pub fn new() -> Self {
        Requirements::default()
    }

    /// Kubernetes node selector requirements (keys normalised), intersected per key.
    pub fn from_node_selector_requirements(reqs: &[NodeSelectorRequirement]) -> Self {
        let mut out = Requirements::new();
        for r in reqs {
            let values = r.values.as_deref().unwrap_or_default();
            out.add(&r.key, Requirement::from_operator(&r.operator, values));
        }
        out
    }

    /// `key In [value]` for every label (keys normalised).
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut out = Requirements::new();
        for (k, v) in labels {
            out.add(k, Requirement::in_values([v.clone()]));
        }
        out
    }

    /// Builder form of `add`.
    pub fn with(mut self, key: &str, requirement: Requirement) -> Self {
        self.add(key, requirement);
        self
    }

    /// Intersects the requirement on `key` (normalised) with `requirement`. Returns whether
    /// anything changed.
    pub fn add(&mut self, key: &str, requirement: Requirement) -> bool {
        let key = normalize_key(key);
        match self.0.get_mut(key) {
            Some(existing) => {
                let merged = existing.intersection(&requirement);
                if merged == *existing {
                    false
                } else {
                    *existing = merged;
                    true
                }
            }
            None => {
                self.0.insert(key.to_string(), requirement);
                true
            }
        }
    }

    /// Intersects every requirement of `other` into `self`. Returns whether anything changed.
    pub fn add_all(&mut self, other: &Requirements) -> bool {
        let mut changed = false;
        for (k, r) in &other.0 {
            changed |= self.add(k, r.clone());
        }
        changed
    }

    /// Removes the requirement on `key`.
    pub fn remove(&mut self, key: &str) {
        self.0.remove(key);
    }

    /// The requirement on `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.0.get(key)
    }

    /// Whether `key` is constrained.
    pub fn has_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// Whether a node labelled `key=value` satisfies these requirements (an unconstrained key
    /// admits every value).
    pub fn allows(&self, key: &str, value: &str) -> bool {
        self.0.get(key).is_none_or(|r| r.has(value))
    }

    /// Every constrained key with its requirement, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Requirement)> {
        self.0.iter().map(|(k, r)| (k.as_str(), r))
    }

    /// True when no key is constrained.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `pod` (the constraints of something that wants to run) may land on a node with
    /// these requirements (`self`). A custom key the pod constrains must be declared here, unless
    /// the pod only excludes values (NotIn, DoesNotExist); then every key both sides constrain
    /// must overlap (`intersects`).
    pub fn compatible(&self, pod: &Requirements) -> Result<(), String> {
        let mut errs = Vec::new();
        for (key, r) in &pod.0 {
            if WELL_KNOWN_LABELS.contains(&key.as_str()) || self.0.contains_key(key) {
                continue;
            }
            if excludes_only(r) {
                continue;
            }
            errs.push(format!("label {key:?} does not have known values{}", self.typo_hint(key)));
        }
        if let Err(e) = self.intersects(pod) {
            errs.push(e);
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("; "))
        }
    }

    /// `compatible` as a yes/no, without building messages (the hot path of fitting pods).
    pub fn is_compatible(&self, pod: &Requirements) -> bool {
        pod.0.iter().all(|(key, r)| match self.0.get(key) {
            None => WELL_KNOWN_LABELS.contains(&key.as_str()) || excludes_only(r),
            Some(existing) => existing.overlaps(r) || (excludes_only(r) && excludes_only(existing)),
        })
    }

    /// Whether every key constrained on both sides admits a common value; two requirements that
    /// both only exclude values never conflict.
    pub fn intersects(&self, other: &Requirements) -> Result<(), String> {
        let mut errs = Vec::new();
        for (key, incoming) in &other.0 {
            let Some(existing) = self.0.get(key) else {
                continue;
            };
            if existing.overlaps(incoming) {
                continue;
            }
            if excludes_only(incoming) && excludes_only(existing) {
                continue;
            }
            errs.push(format!("key {key}, {incoming} not in {existing}"));
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("; "))
        }
    }

    /// `intersects` as a yes/no, without building messages (the hot path of instance-type filtering).
    pub fn overlaps(&self, other: &Requirements) -> bool {
        let (small, large) = if self.0.len() <= other.0.len() {
            (self, other)
        } else {
            (other, self)
        };
        small.0.iter().all(|(key, a)| match large.0.get(key) {
            None => true,
            Some(b) => a.overlaps(b) || (excludes_only(a) && excludes_only(b)),
        })
    }

    fn typo_hint(&self, key: &str) -> String {
        let lower = key.to_lowercase();
        self.0
            .keys()
            .map(String::as_str)
            .chain(WELL_KNOWN_LABELS.iter().copied())
            .map(|k| (crate::apis::decode::edit_distance(&lower, &k.to_lowercase()), k))
            .filter(|(d, _)| *d <= 2)
            .min()
            .map(|(_, k)| format!(" (typo of {k:?}?)"))
            .unwrap_or_default()
    }

    /// The labels a node meeting these requirements carries for sure: every key with exactly one
    /// admitted value, except keys users may not set on nodes (`kubernetes.io/hostname` and other
    /// restricted keys that are not well-known).
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .filter(|(k, _)| k.as_str() != HOSTNAME_LABEL && labels::restriction(k).is_none())
            .filter_map(|(k, r)| match (r.complement, r.values.len()) {
                (false, 1) => r.any().map(|v| (k.clone(), v.to_string())),
                _ => None,
            })
            .collect()
    }

    /// Whether a node with `labels` satisfies every requirement, as kube-scheduler reads a node
    /// selector term: an absent label satisfies only `NotIn` and `DoesNotExist`. The first key
    /// that fails is the error.
    pub fn matched_by(&self, labels: &BTreeMap<String, String>) -> Result<(), String> {
        for (key, requirement) in &self.0 {
            let value = labels
                .get(key)
                .or_else(|| labels.iter().find(|(k, _)| normalize_key(k) == key).map(|(_, v)| v));
            let ok = match value {
                Some(v) => requirement.has(v),
                None => excludes_only(requirement),
            };
            if !ok {
                return Err(key.clone());
            }
        }
        Ok(())
    }

    /// The labels of a node launched for these requirements (the Provisioner's, the instance
    /// type's and the pods'; Karpenter's `Requirements.Labels()` in
    /// `core@v0.27.0:pkg/scheduling/requirements.go`, as `core@v0.27.0:.../provisioner.go` `Launch`
    /// uses them): every key users may set on nodes gets a value that satisfies it (`sample`), so
    /// the pods it was launched for, whose node affinity demands the key, can run there. The
    /// cloud's labels (zone, instance type, capacity type...) are laid over these at launch.
    pub fn node_labels(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .filter(|(k, _)| k.as_str() != HOSTNAME_LABEL && labels::restriction(k).is_none())
            .filter_map(|(k, r)| r.sample().map(|v| (k.clone(), v)))
            .collect()
    }

    /// The requirements as Kubernetes node selector requirements, by key.
    pub fn to_node_selector_requirements(&self) -> Vec<NodeSelectorRequirement> {
        self.0.iter().flat_map(|(k, r)| r.to_node_selector_requirements(k)).collect()
    }
}

impl fmt::Display for Requirements {
    /// `key In [a b], other Exists`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, r)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k} {r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
