//! `simulate`: pending pods × Provisioners × instance types × existing nodes → `Plan`. The solve
//! loop takes pods largest first, tries existing and in-flight nodes, then nodes planned in this
//! run (fewest pods first, skipping those whose zone, or other topology domain, the pod's
//! constraints rule out), then a new node from each Provisioner in weight order; a pod that fits
//! nowhere has one preference relaxed and goes to the back of the queue, until a full pass makes no
//! progress. Pure and deterministic: the same input gives the same plan. No I/O here.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};

use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, ZONE_LABEL};
use crate::apis::v1alpha5::Provisioner;

use super::binpack::{add_to_existing, add_to_planned, new_node, ExistingState, PlannedNode, Refusal};
use super::instance_types::{InstanceType, Offering};
use super::nodes::ExistingNode;
use super::pods::{daemon_requirement_alternatives, validate_pod, PodKey, PodState};
use super::preferences::relax;
use super::requirements::{normalize_key, Requirement, Requirements};
use super::resources::{pod_requests, Resources};
use super::taints::first_untolerated;
use super::template::{domain_seeds, CandidateMatches, NodeTemplate};
use super::topology::Topology;

/// Most instance types a node request carries (Karpenter core's cap; the AWS launch caps at 60).
pub const MAX_INSTANCE_TYPE_OPTIONS: usize = 100;

/// Everything one scheduling pass looks at.
#[derive(Clone, Debug, Default)]
pub struct SimulationInput {
    /// Pending, provisionable pods (the controller applies `is_provisionable`), plus pods of
    /// nodes being deleted that need a new home. Shared with the controller's cache: a pass
    /// never copies the pods it simulates.
    pub pods: Vec<Arc<Pod>>,
    /// Provisioners with the instance types each may launch; any order (sorted here by weight,
    /// then name). Provisioners being deleted are skipped.
    pub provisioners: Vec<ProvisionerInput>,
    /// Existing and in-flight nodes with their bound pods. Also the source of each Provisioner's
    /// usage: the capacity of nodes labelled `karpenter.sh/provisioner-name=<name>` and not marked
    /// for deletion counts against its limits.
    pub nodes: Vec<ExistingNode>,
    /// One pod per DaemonSet (a live one, or one built from the pod template): their requests are
    /// the overhead of every new node they would run on.
    pub daemonset_pods: Vec<Pod>,
    /// Namespace labels, for pod-affinity terms with a `namespaceSelector`.
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
}

/// A Provisioner and the instance types it may launch (typically the cloud provider's answer
/// for it: every type, including those with no available offering).
#[derive(Clone, Debug)]
pub struct ProvisionerInput {
    /// The Provisioner as stored (defaults applied).
    pub provisioner: Provisioner,
    /// Its instance types.
    pub instance_types: Vec<Arc<InstanceType>>,
}

/// A node to launch.
#[derive(Clone, Debug)]
pub struct NodeRequest {
    /// The Provisioner that launches it.
    pub provisioner: String,
    /// What the node must satisfy: the Provisioner's requirements and labels, the pods'
    /// requirements, topology pins (e.g. one zone), and `node.kubernetes.io/instance-type In`
    /// the options below.
    pub requirements: Requirements,
    /// Instance types that hold all its pods and have an offering the requirements allow,
    /// cheapest first (by that offering), at most `MAX_INSTANCE_TYPE_OPTIONS`.
    pub instance_type_options: Vec<Arc<InstanceType>>,
    /// The pods planned onto it.
    pub pods: Vec<PodKey>,
    /// DaemonSet overhead + the pods' requests.
    pub requests: Resources,
    /// Labels the node gets: a satisfying value for every settable requirement key
    /// (`Requirements::node_labels`: Provisioner labels, custom keys the pods require, pinned
    /// zone or capacity type...).
    pub labels: BTreeMap<String, String>,
    /// The Provisioner's taints.
    pub taints: Vec<Taint>,
    /// The Provisioner's startup taints.
    pub startup_taints: Vec<Taint>,
}

impl NodeRequest {
    /// The cheapest instance type and offering the requirements allow.
    pub fn cheapest(&self) -> Option<(&InstanceType, &Offering)> {
        self.instance_type_options
            .iter()
            .filter_map(|it| it.cheapest_matching(&self.requirements).map(|o| (it.as_ref(), o)))
            .min_by(|(a, oa), (b, ob)| oa.price.total_cmp(&ob.price).then_with(|| a.name.cmp(&b.name)))
    }
}

/// The outcome of a scheduling pass.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Nodes to launch, in the order they were planned.
    pub new_nodes: Vec<NodeRequest>,
    /// Pods expected to land on an existing or in-flight node, with that node's name.
    pub existing_assignments: Vec<(PodKey, String)>,
    /// Pods nothing can hold, with the reason (for the `FailedScheduling` event).
    pub unschedulable: Vec<(PodKey, String)>,
    /// Pods Karpenter does not provision for at all (see `validate_pod`), with the reason.
    pub ignored: Vec<(PodKey, String)>,
    /// Provisioners that turned a compatible pod away because of their `spec.limits`.
    pub limited: BTreeSet<String>,
    /// Provisioners a pod left unschedulable was compatible with, but none of whose instance
    /// types has room for it (or an available offering), with one such pod and the reason.
    pub unfit: BTreeMap<String, (PodKey, String)>,
    /// Unschedulable pods counted by (Provisioner, why), for `karpenter_rs_pods_unschedulable`:
    /// a pod some Provisioner was compatible with counts once for each such Provisioner, by its
    /// refusal (`limits`, `no_room`, `no_offering`); a pod none was compatible with counts once
    /// as (``, `incompatible`), or (``, `no_provisioner`) when no Provisioner can launch.
    pub unschedulable_by: BTreeMap<(String, String), usize>,
    /// Per unschedulable pod, each Provisioner's refusal from its last attempt: (Provisioner,
    /// kind, the first rule that excluded it); empty when no Provisioner could launch.
    pub refusals: BTreeMap<PodKey, Vec<(String, Refusal, String)>>,
}

/// Runs the scheduling simulation. See the module documentation for the algorithm.
pub fn simulate(input: &SimulationInput) -> Plan {
    // Simulated once: the templates are handed over rather than copied.
    let Simulator { input, templates, daemons } = Simulator::new(input);
    solve(input, templates, &daemons, &HashSet::new(), &[])
}

/// One cluster simulated again and again with different nodes taken away: consolidation's
/// question (would these nodes' pods fit elsewhere?) for every set of nodes it tries. What does
/// not depend on the nodes, each Provisioner's template over its instance types, is prepared
/// once, and the cluster is never copied.
pub struct Simulator<'a> {
    input: &'a SimulationInput,
    /// Templates of the Provisioners not being deleted, by weight then name, without their
    /// nodes' usage counted against their limits.
    templates: Vec<NodeTemplate>,
    /// The DaemonSet pods, read once.
    daemons: Vec<Daemon>,
}

/// A DaemonSet pod as the existing nodes' overhead needs it.
struct Daemon {
    tolerations: Vec<Toleration>,
    /// Node requirements it may run under (one per required node-affinity term).
    alternatives: Vec<Requirements>,
    requests: Resources,
}

impl<'a> Simulator<'a> {
    /// Prepares `input` for simulations.
    pub fn new(input: &'a SimulationInput) -> Self {
        let mut provisioners: Vec<&ProvisionerInput> = input
            .provisioners
            .iter()
            .filter(|p| p.provisioner.metadata.deletion_timestamp.is_none())
            .collect();
        provisioners.sort_by(|a, b| {
            let weight = |p: &ProvisionerInput| p.provisioner.spec.weight.unwrap_or(0);
            weight(b)
                .cmp(&weight(a))
                .then_with(|| a.provisioner.metadata.name.cmp(&b.provisioner.metadata.name))
        });
        let templates = provisioners
            .iter()
            .map(|p| NodeTemplate::unlimited(&p.provisioner, &p.instance_types, &input.daemonset_pods))
            .collect();
        let daemons = input
            .daemonset_pods
            .iter()
            .map(|d| Daemon {
                tolerations: d.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default(),
                alternatives: daemon_requirement_alternatives(d),
                requests: pod_requests(d),
            })
            .collect();
        Simulator { input, templates, daemons }
    }

    /// The cluster simulated.
    pub fn input(&self) -> &'a SimulationInput {
        self.input
    }

    /// `simulate` as if the nodes named in `removed` were gone and the `moved` pods were pending
    /// too.
    pub fn simulate_without(&self, removed: &HashSet<&str>, moved: &[&Pod]) -> Plan {
        solve(self.input, self.templates.clone(), &self.daemons, removed, moved)
    }
}

fn solve(input: &SimulationInput, templates: Vec<NodeTemplate>, daemons: &[Daemon], removed: &HashSet<&str>, moved: &[&Pod]) -> Plan {
    let mut plan = Plan::default();
    let nodes: Vec<&ExistingNode> = input.nodes.iter().filter(|n| !removed.contains(n.name.as_str())).collect();
    let mut pods: Vec<PodState> = Vec::new();
    for p in input.pods.iter().map(Arc::as_ref).chain(moved.iter().copied()) {
        match validate_pod(p) {
            Ok(()) => pods.push(PodState::new(p)),
            Err(reason) => plan.ignored.push((PodKey::of(p), reason)),
        }
    }
    let templates: Vec<NodeTemplate> = templates.into_iter().map(|t| t.with_usage(&nodes)).collect();

    let mut keys = BTreeSet::new();
    for p in &pods {
        keys.extend(p.spread.iter().map(|c| c.topology_key.clone()));
        for t in p.affinity.iter().chain(p.anti_affinity.iter()) {
            keys.insert(t.topology_key.clone());
        }
        for (_, t) in p.preferred_affinity.iter().chain(p.preferred_anti_affinity.iter()) {
            keys.insert(t.topology_key.clone());
        }
    }
    keys.remove(HOSTNAME_LABEL);
    let seeds = domain_seeds(&templates, &keys);
    let mut topology = Topology::new(&nodes, &input.namespace_labels, &seeds, pods.len());
    for (i, p) in pods.iter().enumerate() {
        topology.update(i, p);
    }
    let existing = existing_states(&nodes, daemons, &mut topology);
    topology.start_placeholders();

    let mut s = Solver {
        tolerate_prefer_no_schedule: templates.iter().any(NodeTemplate::has_prefer_no_schedule_taint),
        pods,
        templates,
        topology,
        existing,
        planned: Vec::new(),
        // A key spelled other than normalised is left out: nodes store requirements under the
        // normalised key, so their bucket could not answer for it.
        domain_keys: keys.into_iter().filter(|k| normalize_key(k) == k).collect(),
        buckets: Vec::new(),
        bucket_of: Vec::new(),
        price_orders: HashMap::new(),
        matches: CandidateMatches::default(),
        limited: BTreeSet::new(),
        unfit: HashMap::new(),
        refused: HashMap::new(),
    };
    let unschedulable = s.solve();

    for e in &s.existing {
        for i in &e.pods {
            plan.existing_assignments.push((s.pods[*i].key.clone(), e.name.clone()));
        }
    }
    plan.existing_assignments.sort();
    plan.unschedulable = unschedulable;
    plan.limited = std::mem::take(&mut s.limited);
    for (key, _) in &plan.unschedulable {
        let Some(i) = s.pods.iter().position(|p| p.key == *key) else {
            continue;
        };
        for (provisioner, reason) in s.unfit.remove(&i).unwrap_or_default() {
            plan.unfit.entry(provisioner).or_insert_with(|| (key.clone(), reason));
        }
    }
    for (key, _) in &plan.unschedulable {
        let refused = s
            .pods
            .iter()
            .position(|p| p.key == *key)
            .and_then(|i| s.refused.get(&i))
            .cloned()
            .unwrap_or_default();
        let compatible: BTreeSet<(String, &str)> = refused
            .iter()
            .filter(|(_, kind, _)| *kind != Refusal::Incompatible)
            .map(|(p, kind, _)| (p.clone(), kind.label()))
            .collect();
        let counted: Vec<(String, String)> = if !compatible.is_empty() {
            compatible.into_iter().map(|(p, why)| (p, why.to_string())).collect()
        } else if refused.is_empty() {
            vec![(String::new(), "no_provisioner".to_string())]
        } else {
            vec![(String::new(), Refusal::Incompatible.label().to_string())]
        };
        for counted in counted {
            *plan.unschedulable_by.entry(counted).or_default() += 1;
        }
        plan.refusals.insert(key.clone(), refused);
    }
    plan.unschedulable.sort();
    plan.new_nodes = (0..s.planned.len()).map(|n| s.node_request(n)).collect();
    plan
}

/// Existing and in-flight nodes that can take pods, initialised ones first.
fn existing_states(nodes: &[&ExistingNode], daemons: &[Daemon], topology: &mut Topology) -> Vec<ExistingState> {
    let mut usable: Vec<&ExistingNode> = nodes.iter().copied().filter(|n| !n.marked_for_deletion).collect();
    usable.sort_by_key(|n| !n.initialized);
    usable
        .into_iter()
        .map(|n| {
            let basis = n.basis();
            let mut expected_daemons = Resources::zero();
            for d in daemons {
                if first_untolerated(&d.tolerations, &basis.taints).is_none()
                    && d.alternatives.iter().any(|r| basis.requirements.is_compatible(r))
                {
                    expected_daemons.add(&d.requests);
                }
            }
            ExistingState {
                name: n.name.clone(),
                host: topology.hostname_id(n.hostname()),
                requirements: basis.requirements.clone(),
                taints: basis.taints.clone(),
                available: n.available(),
                requests: expected_daemons.minus(&basis.running_daemons).clamp_non_negative(),
                host_ports: basis.host_ports.clone(),
                pods: Vec::new(),
            }
        })
        .collect()
}

/// Planned nodes that agree on every `Solver::domain_keys` requirement.
struct Bucket {
    /// The requirement on each domain key, in `domain_keys` order (None: unconstrained).
    on_keys: Vec<Option<Requirement>>,
    /// The same, as requirements to test pods against.
    requirements: Requirements,
    /// (pods placed, index into `planned`).
    nodes: BTreeSet<(usize, usize)>,
}

struct Solver<'a> {
    tolerate_prefer_no_schedule: bool,
    pods: Vec<PodState>,
    templates: Vec<NodeTemplate>,
    topology: Topology<'a>,
    existing: Vec<ExistingState>,
    planned: Vec<PlannedNode>,
    /// Topology keys other than the hostname: planned nodes are bucketed by their requirements
    /// on these, so a pod whose zone (say) rules a bucket out skips its nodes without trying each.
    domain_keys: Vec<String>,
    /// Planned nodes by their requirements on `domain_keys`; each bucket orders its nodes by
    /// (pods, index): fewest pods first, ties planned earlier first.
    buckets: Vec<Bucket>,
    /// Per planned node, its bucket.
    bucket_of: Vec<usize>,
    /// Per (template, zone requirement, capacity-type requirement): candidate indices with an
    /// allowed offering, cheapest first.
    price_orders: HashMap<(usize, Option<Requirement>, Option<Requirement>), Vec<usize>>,
    /// Which candidates of each template given requirements allow.
    matches: CandidateMatches,
    /// Provisioners whose limits turned a compatible pod away.
    limited: BTreeSet<String>,
    /// Per pod, from its last attempt: (Provisioner, reason) of the compatible Provisioners
    /// that had no instance type with room or an available offering.
    unfit: HashMap<usize, Vec<(String, String)>>,
    /// Per pod, from its last attempt: each Provisioner's refusal, with its message.
    refused: HashMap<usize, Vec<(String, Refusal, String)>>,
}

impl Solver<'_> {
    /// Runs the queue; returns the pods left unschedulable with their last error.
    fn solve(&mut self) -> Vec<(PodKey, String)> {
        let mut sorted: Vec<usize> = (0..self.pods.len()).collect();
        sorted.sort_by(|a, b| {
            let (pa, pb) = (&self.pods[*a], &self.pods[*b]);
            pb.requests
                .cpu_millis
                .cmp(&pa.requests.cpu_millis)
                .then_with(|| pb.requests.memory_bytes.cmp(&pa.requests.memory_bytes))
                .then_with(|| pa.created.as_ref().map(|t| t.0).cmp(&pb.created.as_ref().map(|t| t.0)))
                .then_with(|| pa.uid.cmp(&pb.uid))
                .then_with(|| pa.key.cmp(&pb.key))
        });
        let mut queue: VecDeque<usize> = sorted.into();
        let mut errors: Vec<String> = vec![String::new(); self.pods.len()];
        // A pod pushed back without relaxation remembers the queue length and the relaxation
        // generation; meeting it again with both unchanged means a full pass made no progress.
        let mut generation = 0usize;
        let mut last_seen: Vec<Option<(usize, usize)>> = vec![None; self.pods.len()];
        while let Some(&i) = queue.front() {
            if last_seen[i] == Some((generation, queue.len())) {
                break;
            }
            queue.pop_front();
            match self.add(i) {
                Ok(()) => continue,
                Err(e) => errors[i] = e,
            }
            let relaxed = relax(&mut self.pods[i], self.tolerate_prefer_no_schedule);
            queue.push_back(i);
            if relaxed.is_some() {
                generation += 1;
                self.topology.update(i, &self.pods[i]);
            } else {
                last_seen[i] = Some((generation, queue.len()));
            }
        }
        queue
            .into_iter()
            .map(|i| (self.pods[i].key.clone(), std::mem::take(&mut errors[i])))
            .collect()
    }

    fn add(&mut self, i: usize) -> Result<(), String> {
        let pod = &self.pods[i];
        let groups = self.topology.matching(i, pod);
        for node in self.existing.iter_mut() {
            if add_to_existing(node, i, pod, &groups, &mut self.topology) {
                return Ok(());
            }
        }
        let skip_planned = self.topology.excludes_all_planned(&groups, self.planned.len());
        if !skip_planned {
            // Planned nodes fewest pods first: the buckets' orders merged, leaving out buckets
            // whose domains the pod's topology rules out (each of their nodes would refuse it).
            let test_domains = !groups.is_empty() && pod.requirements.is_empty();
            let mut open: Vec<std::iter::Peekable<std::collections::btree_set::Iter<'_, (usize, usize)>>> = self
                .buckets
                .iter()
                .filter(|b| !b.nodes.is_empty())
                .filter(|b| !test_domains || !self.topology.rejects_domains(&groups, pod, &b.requirements, &self.domain_keys))
                .map(|b| b.nodes.iter().peekable())
                .collect();
            let mut placed = None;
            loop {
                let next = open.iter_mut().enumerate().filter_map(|(k, it)| it.peek().map(|e| (**e, k))).min();
                let Some(((_, n), k)) = next else {
                    break;
                };
                open[k].next();
                let node = &mut self.planned[n];
                if add_to_planned(
                    node,
                    &self.templates[node.template],
                    &mut self.matches,
                    i,
                    pod,
                    &groups,
                    &mut self.topology,
                ) {
                    placed = Some(n);
                    break;
                }
            }
            drop(open);
            if let Some(n) = placed {
                let b = self.bucket_of[n];
                self.buckets[b].nodes.remove(&(self.planned[n].pods.len() - 1, n));
                self.file(n);
                return Ok(());
            }
        }
        if self.templates.is_empty() {
            return Err("no Provisioner can launch a node (none exist or all are being deleted)".to_string());
        }
        let hostname = format!("hostname-placeholder-{:04}", self.planned.len() + 1);
        let host = self.topology.hostname_id(&hostname);
        let mut errs = Vec::new();
        self.unfit.remove(&i);
        self.refused.remove(&i);
        for t in 0..self.templates.len() {
            match new_node(
                &self.templates[t],
                t,
                &mut self.matches,
                i,
                pod,
                &groups,
                &mut self.topology,
                &hostname,
                host,
            ) {
                Ok(node) => {
                    self.templates[t].reserve(&node.options);
                    self.planned.push(node);
                    self.bucket_of.push(0);
                    self.file(self.planned.len() - 1);
                    return Ok(());
                }
                Err(e) => {
                    let provisioner = self.templates[t].provisioner.clone();
                    self.refused.entry(i).or_default().push((provisioner, e.kind, e.message.clone()));
                    if e.kind == Refusal::Limits {
                        self.limited.insert(self.templates[t].provisioner.clone());
                    }
                    if matches!(e.kind, Refusal::NoRoom | Refusal::NoOffering) {
                        let provisioner = self.templates[t].provisioner.clone();
                        self.unfit.entry(i).or_default().push((provisioner, e.message.clone()));
                    }
                    let compatible = e.kind != Refusal::Incompatible;
                    errs.push((
                        compatible,
                        format!("incompatible with provisioner {:?}, {}", self.templates[t].provisioner, e.message),
                    ));
                }
            }
        }
        // A Provisioner the pod is compatible with but that refused it (limits, no room) says
        // why the pod waits; the others' incompatibilities are only listed when none is.
        let any_compatible = errs.iter().any(|(compatible, _)| *compatible);
        Err(errs
            .into_iter()
            .filter(|(compatible, _)| *compatible || !any_compatible)
            .map(|(_, message)| message)
            .collect::<Vec<_>>()
            .join("; "))
    }

    /// Files planned node `n` (new, or just taken out of its bucket after gaining a pod) in the
    /// bucket of its current requirements on the domain keys, by its pod count.
    fn file(&mut self, n: usize) {
        let node = &self.planned[n];
        let on_keys = |b: &Bucket| {
            self.domain_keys
                .iter()
                .zip(&b.on_keys)
                .all(|(k, r)| node.requirements.get(k) == r.as_ref())
        };
        let b = match self.buckets.iter().position(on_keys) {
            Some(b) => b,
            None => {
                let on_keys: Vec<Option<Requirement>> = self.domain_keys.iter().map(|k| node.requirements.get(k).cloned()).collect();
                let mut requirements = Requirements::new();
                for (k, r) in self.domain_keys.iter().zip(&on_keys) {
                    if let Some(r) = r {
                        requirements.add(k, r.clone());
                    }
                }
                self.buckets.push(Bucket {
                    on_keys,
                    requirements,
                    nodes: BTreeSet::new(),
                });
                self.buckets.len() - 1
            }
        };
        self.buckets[b].nodes.insert((node.pods.len(), n));
        self.bucket_of[n] = b;
    }

    /// The launch request for a planned node: placeholder hostname dropped, options ordered by
    /// their cheapest allowed offering (ties by name) and capped, instance types added to the
    /// requirements.
    fn node_request(&mut self, n: usize) -> NodeRequest {
        let node = &self.planned[n];
        let t = &self.templates[node.template];
        let mut requirements = node.requirements.clone();
        requirements.remove(HOSTNAME_LABEL);
        // Nodes with the same zone and capacity-type requirements share one price order.
        let key = (
            node.template,
            requirements.get(ZONE_LABEL).cloned(),
            requirements.get(CAPACITY_TYPE_LABEL).cloned(),
        );
        let order = self.price_orders.entry(key).or_insert_with(|| {
            let mut priced: Vec<(f64, usize)> = t
                .candidates
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.it.cheapest_matching(&requirements).map(|o| (o.price, i)))
                .collect();
            priced.sort_by(|(pa, a), (pb, b)| {
                pa.total_cmp(pb)
                    .then_with(|| t.candidates[*a].it.name.cmp(&t.candidates[*b].it.name))
            });
            priced.into_iter().map(|(_, i)| i).collect()
        });
        let mut chosen = vec![false; t.candidates.len()];
        for o in &node.options {
            chosen[*o] = true;
        }
        let options: Vec<Arc<InstanceType>> = order
            .iter()
            .filter(|i| chosen[**i])
            .take(MAX_INSTANCE_TYPE_OPTIONS)
            .map(|i| t.candidates[*i].it.clone())
            .collect();
        requirements.add(
            INSTANCE_TYPE_LABEL,
            Requirement::in_values(options.iter().map(|it| it.name.clone())),
        );
        NodeRequest {
            provisioner: t.provisioner.clone(),
            labels: requirements.node_labels(),
            requirements,
            instance_type_options: options,
            pods: node.pods.iter().map(|i| self.pods[*i].key.clone()).collect(),
            requests: node.requests.clone(),
            taints: t.taints.clone(),
            startup_taints: t.startup_taints.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
