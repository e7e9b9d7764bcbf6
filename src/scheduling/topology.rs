//! Topology: pod topology spread, pod affinity and pod anti-affinity (including the inverse
//! direction, where a pod that is already placed repels the pods its required anti-affinity
//! selects). Each constraint becomes a group that counts matching pods per domain (zone, hostname,
//! capacity type or any key with known values); groups are shared by every pod with the same
//! constraint (what a group is and counts is in `group`). Domain names are interned per key so
//! the hot checks are array lookups. No I/O here.

mod group;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::PodAffinityTerm;

use crate::apis::v1alpha5::labels::HOSTNAME_LABEL;

use super::nodes::ExistingNode;
use super::pods::{PodKey, PodState};
use super::requirements::{Requirement, Requirements};
use group::{Group, Kind, Namespaces, Universe};
pub(crate) use group::Selector;

/// A group a pod must satisfy: one it owns, or an inverse anti-affinity group that selects it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GroupRef {
    Forward(usize),
    Inverse(usize),
}

/// Which group a pod cannot satisfy on a node (`explain` turns it into a message).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unsatisfiable(GroupRef);

/// Every topology group of a simulation run and the domains they count.
pub(crate) struct Topology<'a> {
    nodes: &'a [&'a ExistingNode],
    namespace_labels: &'a BTreeMap<String, BTreeMap<String, String>>,
    universes: HashMap<String, Universe>,
    groups: Vec<Group>,
    group_index: HashMap<String, usize>,
    inverse: Vec<Group>,
    inverse_index: HashMap<String, usize>,
    owned: Vec<Vec<usize>>,
    owned_inverse: Vec<Vec<usize>>,
    /// Hostname ids from here on are placeholders of planned nodes (see `start_placeholders`).
    placeholder_base: u32,
}

impl<'a> Topology<'a> {
    /// Topology over `nodes`, with the domain values each key may take on new nodes (`seeds`),
    /// tracking `pod_count` pending pods. Existing pods' required anti-affinity terms are counted
    /// at once.
    pub fn new(
        nodes: &'a [&'a ExistingNode],
        namespace_labels: &'a BTreeMap<String, BTreeMap<String, String>>,
        seeds: &BTreeMap<String, BTreeSet<String>>,
        pod_count: usize,
    ) -> Self {
        let mut universes: HashMap<String, Universe> = HashMap::new();
        for (key, values) in seeds {
            let u = universes.entry(key.clone()).or_default();
            for v in values {
                u.intern(v);
            }
        }
        let hosts = universes.entry(HOSTNAME_LABEL.to_string()).or_default();
        for n in nodes.iter().filter(|n| !n.marked_for_deletion) {
            hosts.intern(n.hostname());
        }
        let mut t = Topology {
            nodes,
            namespace_labels,
            universes,
            groups: Vec::new(),
            group_index: HashMap::new(),
            inverse: Vec::new(),
            inverse_index: HashMap::new(),
            owned: vec![Vec::new(); pod_count],
            owned_inverse: vec![Vec::new(); pod_count],
            placeholder_base: u32::MAX,
        };
        t.count_existing_anti_affinities();
        t
    }

    /// Marks every hostname registered from now on as a placeholder of a planned node. Call once,
    /// after the existing nodes' hostnames are registered.
    pub fn start_placeholders(&mut self) {
        self.placeholder_base = self.universes.get(HOSTNAME_LABEL).map_or(0, |u| u.names.len() as u32);
    }

    /// Whether a hostname anti-affinity group among `groups` already holds a pod on each of the
    /// `planned` nodes planned so far, so none of them can take this pod (saves trying them one by one).
    pub fn excludes_all_planned(&self, groups: &[GroupRef], planned: usize) -> bool {
        planned > 0
            && groups.iter().any(|r| {
                let g = self.group(*r);
                g.is_hostname && g.kind == Kind::AntiAffinity && g.placeholders_hit >= planned
            })
    }

    /// The interned id of a hostname (registering it as a domain).
    pub fn hostname_id(&mut self, hostname: &str) -> u32 {
        self.universes.entry(HOSTNAME_LABEL.to_string()).or_default().intern(hostname)
    }

    fn namespaces_of(&self, own: &str, term: &PodAffinityTerm) -> Namespaces {
        let listed: BTreeSet<String> = term.namespaces.iter().flatten().cloned().collect();
        match term.namespace_selector.as_ref() {
            None if listed.is_empty() => Namespaces::Some([own.to_string()].into()),
            None => Namespaces::Some(listed),
            Some(sel)
                if sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
                    && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty()) =>
            {
                Namespaces::All
            }
            Some(sel) => {
                let selector = Selector::new(Some(sel));
                let mut set = listed;
                set.extend(
                    self.namespace_labels
                        .iter()
                        .filter(|(_, labels)| selector.matches(labels))
                        .map(|(ns, _)| ns.clone()),
                );
                Namespaces::Some(set)
            }
        }
    }

    fn affinity_group(&self, kind: Kind, namespace: &str, term: &PodAffinityTerm) -> Group {
        Group {
            kind,
            key: term.topology_key.clone(),
            is_hostname: term.topology_key == HOSTNAME_LABEL,
            namespaces: self.namespaces_of(namespace, term),
            selector: Selector::new(term.label_selector.as_ref()),
            max_skew: i64::from(i32::MAX),
            node_filter: Vec::new(),
            counts: Vec::new(),
            nonzero: BTreeSet::new(),
            placeholders_hit: 0,
        }
    }

    fn domain_of(node: &ExistingNode, key: &str) -> Option<String> {
        if key == HOSTNAME_LABEL {
            Some(node.hostname().to_string())
        } else {
            node.labels.get(key).cloned()
        }
    }

    fn count_existing_anti_affinities(&mut self) {
        let nodes = self.nodes;
        for node in nodes.iter().filter(|n| !n.marked_for_deletion) {
            for p in node.active_pods() {
                let terms = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.affinity.as_ref())
                    .and_then(|a| a.pod_anti_affinity.as_ref())
                    .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
                let ns = PodKey::of(p).namespace;
                for term in terms.into_iter().flatten() {
                    let Some(domain) = Self::domain_of(node, &term.topology_key) else {
                        continue;
                    };
                    let g = self.affinity_group(Kind::AntiAffinity, &ns, term);
                    let i = self.intern_inverse(g);
                    let id = self.universes.entry(term.topology_key.clone()).or_default().intern(&domain);
                    self.inverse[i].record(id);
                }
            }
        }
    }

    fn intern_inverse(&mut self, g: Group) -> usize {
        let sig = g.signature();
        if let Some(i) = self.inverse_index.get(&sig) {
            return *i;
        }
        self.inverse.push(g);
        self.inverse_index.insert(sig, self.inverse.len() - 1);
        self.inverse.len() - 1
    }

    /// Counts the existing pods a new group selects, on nodes its filter admits.
    fn count_domains(&mut self, g: &mut Group) {
        for node in self.nodes.iter().filter(|n| !n.marked_for_deletion) {
            let Some(domain) = Self::domain_of(node, &g.key) else {
                continue;
            };
            if !g.node_filter.is_empty() && !g.filter_matches(&Requirements::from_labels(&node.labels)) {
                continue;
            }
            let matching = node
                .active_pods()
                .filter(|p| {
                    let ns = PodKey::of(p).namespace;
                    g.selects(&ns, p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
                })
                .count();
            if matching > 0 {
                let id = self.universes.entry(g.key.clone()).or_default().intern(&domain);
                for _ in 0..matching {
                    g.record(id);
                }
            }
        }
    }

    /// (Re)registers the groups pod `i` owns from its current constraints: after a relaxation
    /// the dropped preference no longer constrains it. Its required anti-affinity terms also
    /// become inverse groups, so pods they select avoid wherever it lands.
    pub fn update(&mut self, i: usize, pod: &PodState) {
        let ns = pod.key.namespace.as_str();
        let mut wanted: Vec<Group> = Vec::new();
        for c in &pod.spread {
            wanted.push(Group {
                kind: Kind::Spread,
                key: c.topology_key.clone(),
                is_hostname: c.topology_key == HOSTNAME_LABEL,
                namespaces: Namespaces::Some([ns.to_string()].into()),
                selector: Selector::new(c.label_selector.as_ref()),
                max_skew: i64::from(c.max_skew),
                node_filter: pod.node_filter.clone(),
                counts: Vec::new(),
                nonzero: BTreeSet::new(),
                placeholders_hit: 0,
            });
        }
        for t in pod.affinity.iter().chain(pod.preferred_affinity.iter().map(|(_, t)| t)) {
            wanted.push(self.affinity_group(Kind::Affinity, ns, t));
        }
        for t in pod.anti_affinity.iter().chain(pod.preferred_anti_affinity.iter().map(|(_, t)| t)) {
            wanted.push(self.affinity_group(Kind::AntiAffinity, ns, t));
        }
        let mut owned = Vec::with_capacity(wanted.len());
        for mut g in wanted {
            let sig = g.signature();
            let idx = match self.group_index.get(&sig) {
                Some(idx) => *idx,
                None => {
                    self.count_domains(&mut g);
                    self.groups.push(g);
                    self.group_index.insert(sig, self.groups.len() - 1);
                    self.groups.len() - 1
                }
            };
            if !owned.contains(&idx) {
                owned.push(idx);
            }
        }
        self.owned[i] = owned;
        if self.owned_inverse[i].is_empty() {
            let inverse: Vec<Group> = pod
                .anti_affinity
                .iter()
                .map(|t| self.affinity_group(Kind::AntiAffinity, ns, t))
                .collect();
            let mut ids: Vec<usize> = inverse.into_iter().map(|g| self.intern_inverse(g)).collect();
            ids.dedup();
            self.owned_inverse[i] = ids;
        }
    }

    /// The groups pod `i` must satisfy: those it owns and the inverse ones that select it.
    pub fn matching(&self, i: usize, pod: &PodState) -> Vec<GroupRef> {
        let mut out: Vec<GroupRef> = self.owned[i].iter().map(|g| GroupRef::Forward(*g)).collect();
        for (gi, g) in self.inverse.iter().enumerate() {
            if g.selects(&pod.key.namespace, &pod.labels) {
                out.push(GroupRef::Inverse(gi));
            }
        }
        out
    }

    fn group(&self, r: GroupRef) -> &Group {
        match r {
            GroupRef::Forward(i) => &self.groups[i],
            GroupRef::Inverse(i) => &self.inverse[i],
        }
    }

    /// The extra requirements the groups put on a node with `node_reqs` (already merged with the
    /// pod's) whose hostname has id `host`: each group narrows its key to the domains the pod may
    /// use there. Hostname groups only accept or reject (the node's hostname is already fixed).
    pub fn add_requirements(
        &self,
        groups: &[GroupRef],
        pod: &PodState,
        node_reqs: &Requirements,
        host: u32,
    ) -> Result<Requirements, Unsatisfiable> {
        let mut out = Requirements::new();
        let exists = Requirement::exists();
        for r in groups {
            let g = self.group(*r);
            let pod_domains = pod.requirements.get(&g.key);
            if g.is_hostname {
                if !self.host_allowed(g, pod, pod_domains, host) {
                    return Err(Unsatisfiable(*r));
                }
                continue;
            }
            let node_domains = node_reqs.get(&g.key).unwrap_or(&exists);
            let domains = self.next_domains(g, pod, pod_domains.unwrap_or(&exists), node_domains);
            if domains.is_empty() {
                return Err(Unsatisfiable(*r));
            }
            out.add(&g.key, domains);
        }
        Ok(out)
    }

    /// Whether the groups on keys other than the hostname certainly rule out, for a pod without
    /// node requirements of its own, every node whose requirements on `known` keys are
    /// `node_reqs`: `add_requirements` fails or narrows a key to nothing the node admits, with
    /// the same answer for all such nodes because only their requirements on those keys are
    /// read. False when a group's key is not among `known` (the answer would depend on more).
    pub fn rejects_domains(&self, groups: &[GroupRef], pod: &PodState, node_reqs: &Requirements, known: &[String]) -> bool {
        let mut extra = Requirements::new();
        let exists = Requirement::exists();
        for r in groups {
            let g = self.group(*r);
            if g.is_hostname {
                continue;
            }
            if !known.contains(&g.key) {
                return false;
            }
            let node_domains = node_reqs.get(&g.key).unwrap_or(&exists);
            let domains = self.next_domains(g, pod, pod.requirements.get(&g.key).unwrap_or(&exists), node_domains);
            if domains.is_empty() {
                return true;
            }
            extra.add(&g.key, domains);
        }
        !node_reqs.is_compatible(&extra)
    }

    fn host_allowed(&self, g: &Group, pod: &PodState, pod_domains: Option<&Requirement>, host: u32) -> bool {
        let name = |id: u32| self.universes[HOSTNAME_LABEL].names[id as usize].as_str();
        if pod_domains.is_some_and(|d| !d.has(name(host))) {
            return false;
        }
        let count = g.count(host);
        match g.kind {
            Kind::AntiAffinity => count == 0,
            Kind::Spread => count + i64::from(g.selects(&pod.key.namespace, &pod.labels)) <= g.max_skew,
            Kind::Affinity => {
                count > 0
                    || (g.selects(&pod.key.namespace, &pod.labels)
                        && !g.nonzero.iter().any(|id| pod_domains.is_none_or(|d| d.has(name(*id)))))
            }
        }
    }

    fn next_domains(&self, g: &Group, pod: &PodState, pod_domains: &Requirement, node_domains: &Requirement) -> Requirement {
        let empty = Universe::default();
        let u = self.universes.get(&g.key).unwrap_or(&empty);
        let selects = g.selects(&pod.key.namespace, &pod.labels);
        match g.kind {
            Kind::Spread => {
                let min = u
                    .names
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| pod_domains.has(n))
                    .map(|(id, _)| g.count(id as u32))
                    .min()
                    .unwrap_or(i64::from(i32::MAX));
                let candidates: Vec<u32> = if node_domains.is_complement() {
                    (0..u.names.len() as u32)
                        .filter(|id| node_domains.has(&u.names[*id as usize]))
                        .collect()
                } else {
                    node_domains.values().iter().filter_map(|v| u.ids.get(v).copied()).collect()
                };
                candidates
                    .into_iter()
                    .map(|id| (g.count(id) + i64::from(selects), id))
                    .filter(|(count, _)| count - min <= g.max_skew)
                    .min_by(|(ca, a), (cb, b)| ca.cmp(cb).then_with(|| u.names[*a as usize].cmp(&u.names[*b as usize])))
                    .map_or_else(Requirement::does_not_exist, |(_, id)| {
                        Requirement::in_values([u.names[id as usize].clone()])
                    })
            }
            Kind::Affinity => {
                let mut options: BTreeSet<String> = g
                    .nonzero
                    .iter()
                    .map(|id| &u.names[*id as usize])
                    .filter(|n| pod_domains.has(n))
                    .cloned()
                    .collect();
                if options.is_empty() && selects {
                    // Nothing to be near yet: a self-selecting group may start anywhere, preferably
                    // where this node already is.
                    let both = pod_domains.intersection(node_domains);
                    if let Some(n) = u.names.iter().filter(|n| both.has(n)).min() {
                        options.insert(n.clone());
                    }
                    if let Some(n) = u.names.iter().filter(|n| pod_domains.has(n)).min() {
                        options.insert(n.clone());
                    }
                }
                Requirement::in_values(options)
            }
            Kind::AntiAffinity => {
                let options: Vec<String> = if node_domains.is_complement() {
                    u.names
                        .iter()
                        .enumerate()
                        .filter(|(id, n)| node_domains.has(n) && pod_domains.has(n) && g.count(*id as u32) == 0)
                        .map(|(_, n)| n.clone())
                        .collect()
                } else {
                    node_domains
                        .values()
                        .iter()
                        .filter(|n| pod_domains.has(n) && u.ids.get(*n).is_none_or(|id| g.count(*id) == 0))
                        .cloned()
                        .collect()
                };
                Requirement::in_values(options)
            }
        }
    }

    /// Records that pod `i` landed on a node with `node_reqs` and hostname id `host`: every group
    /// that selects it counts it in the node's domain (anti-affinity groups in every domain the
    /// node may still be in), and its own inverse groups mark the node's domains as taken.
    pub fn record(&mut self, i: usize, pod: &PodState, node_reqs: &Requirements, host: u32) {
        let ids_for = |universes: &mut HashMap<String, Universe>, g: &Group, all: bool| -> Vec<u32> {
            if g.is_hostname {
                return vec![host];
            }
            let Some(r) = node_reqs.get(&g.key) else {
                return Vec::new();
            };
            if r.is_complement() || (!all && r.values().len() != 1) {
                return Vec::new();
            }
            let u = universes.entry(g.key.clone()).or_default();
            r.values().iter().map(|v| u.intern(v)).collect()
        };
        for gi in 0..self.groups.len() {
            let g = &self.groups[gi];
            if !g.selects(&pod.key.namespace, &pod.labels) || !g.filter_matches(node_reqs) {
                continue;
            }
            let ids = ids_for(&mut self.universes, g, g.kind == Kind::AntiAffinity);
            for id in ids {
                Self::record_placed(&mut self.groups[gi], id, self.placeholder_base);
            }
        }
        for k in 0..self.owned_inverse[i].len() {
            let gi = self.owned_inverse[i][k];
            let ids = ids_for(&mut self.universes, &self.inverse[gi], true);
            for id in ids {
                Self::record_placed(&mut self.inverse[gi], id, self.placeholder_base);
            }
        }
    }

    fn record_placed(g: &mut Group, id: u32, placeholder_base: u32) {
        if g.is_hostname && id >= placeholder_base && g.count(id) == 0 {
            g.placeholders_hit += 1;
        }
        g.record(id);
    }

    /// The message for an unsatisfiable constraint of `pod` on a node with `node_reqs`, with the
    /// group's counts per domain.
    pub fn explain(&self, e: &Unsatisfiable, pod: &PodState, node_reqs: &Requirements) -> String {
        let g = self.group(e.0);
        let empty = Universe::default();
        let u = self.universes.get(&g.key).unwrap_or(&empty);
        let mut counts: Vec<String> = g
            .nonzero
            .iter()
            .take(5)
            .map(|id| format!("{}={}", u.names[*id as usize], g.count(*id)))
            .collect();
        if g.nonzero.len() > 5 {
            counts.push(format!("and {} more", g.nonzero.len() - 5));
        }
        let direction = match e.0 {
            GroupRef::Forward(_) => "",
            GroupRef::Inverse(_) => "inverse ",
        };
        let show = |r: Option<&Requirement>| r.map_or_else(|| "Exists".to_string(), ToString::to_string);
        format!(
            "unsatisfiable {direction}{} constraint on {} (counts: {{{}}}, pod domains: {}, node domains: {})",
            g.kind.name(),
            g.key,
            counts.join(", "),
            show(pod.requirements.get(&g.key)),
            show(node_reqs.get(&g.key))
        )
    }
}

#[cfg(test)]
mod tests;
