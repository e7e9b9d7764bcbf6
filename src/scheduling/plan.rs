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
            .filter(|(_, kind)| *kind != Refusal::Incompatible)
            .map(|(p, kind)| (p.clone(), kind.label()))
            .collect();
        let counted: Vec<(String, String)> = if !compatible.is_empty() {
            compatible.into_iter().map(|(p, why)| (p, why.to_string())).collect()
        } else if refused.is_empty() {
            vec![(String::new(), "no_provisioner".to_string())]
        } else {
            vec![(String::new(), Refusal::Incompatible.label().to_string())]
        };
        for key in counted {
            *plan.unschedulable_by.entry(key).or_default() += 1;
        }
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
    /// Per pod, from its last attempt: each Provisioner's refusal.
    refused: HashMap<usize, Vec<(String, Refusal)>>,
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
                    self.refused.entry(i).or_default().push((provisioner, e.kind));
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
mod tests {
    use super::*;
    use crate::apis::v1alpha5::labels::PROVISIONER_NAME_LABEL;
    use crate::scheduling::nodes::ExistingNode;
    use crate::scheduling::testing::{catalogue, instance_type, node, pod, provisioner, service, taint, PodBuilder};

    fn input(provisioners: Vec<Provisioner>, pods: Vec<PodBuilder>) -> SimulationInput {
        SimulationInput {
            pods: pods.into_iter().map(|p| Arc::new(p.build())).collect(),
            provisioners: provisioners
                .into_iter()
                .map(|p| ProvisionerInput {
                    provisioner: p,
                    instance_types: catalogue(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn nginx(name: &str) -> PodBuilder {
        pod(name)
            .label("app", "nginx-karpenter")
            .node_selector("nodeType", "service-2023")
            .tolerate("service", "true", "NoSchedule")
    }

    fn names(r: &NodeRequest) -> Vec<&str> {
        r.instance_type_options.iter().map(|it| it.name.as_str()).collect()
    }

    fn reason_of<'a>(plan: &'a Plan, pod: &str) -> &'a str {
        plan.unschedulable
            .iter()
            .find(|(k, _)| k.name == pod)
            .map(|(_, r)| r.as_str())
            .unwrap_or_else(|| panic!("{pod} is not unschedulable: {plan:?}"))
    }

    #[test]
    fn launches_one_node_for_pods_that_tolerate_the_taint() {
        let plan = simulate(&input(vec![service()], vec![nginx("nginx-1"), nginx("nginx-2")]));
        assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
        let [node] = plan.new_nodes.as_slice() else {
            panic!("want one node, got {:?}", plan.new_nodes)
        };
        assert_eq!(node.provisioner, "service");
        assert_eq!(node.pods.len(), 2);
        assert_eq!(names(node), ["t3.large", "t3.xlarge"]);
        let (it, offering) = node.cheapest().expect("an offering");
        assert_eq!(it.name, "t3.large");
        assert_eq!(offering.capacity_type, "on-demand");
        assert!(["ap-northeast-2a", "ap-northeast-2c"].contains(&offering.zone.as_str()));
        assert_eq!(node.requests.to_string(), "pods=2");
        assert_eq!(node.labels.get("nodeType").map(String::as_str), Some("service-2023"));
        assert_eq!(node.labels.get(PROVISIONER_NAME_LABEL).map(String::as_str), Some("service"));
        assert_eq!(node.labels.get(CAPACITY_TYPE_LABEL).map(String::as_str), Some("on-demand"));
        assert!(!node.requirements.has_key(HOSTNAME_LABEL), "placeholder hostnames stay internal");
        assert_eq!(
            node.requirements.get(INSTANCE_TYPE_LABEL).map(ToString::to_string).as_deref(),
            Some("In [t3.large t3.xlarge]")
        );
        assert_eq!(node.taints, vec![taint("service=true:NoSchedule")]);
    }

    #[test]
    fn explains_why_a_pod_cannot_be_scheduled() {
        let cases = [
            (
                pod("no-toleration").node_selector("nodeType", "service-2023"),
                "incompatible with provisioner \"service\", did not tolerate taint service=true:NoSchedule",
            ),
            (
                pod("undeclared-label")
                    .tolerate("service", "true", "NoSchedule")
                    .node_selector("team", "a"),
                "incompatible with provisioner \"service\", incompatible requirements, label \"team\" does not have known values",
            ),
            (
                nginx("other-zone").node_selector(ZONE_LABEL, "ap-northeast-2b"),
                "key topology.kubernetes.io/zone, In [ap-northeast-2b] not in In [ap-northeast-2a ap-northeast-2c]",
            ),
            (
                nginx("too-big").cpu("100"),
                "no instance type has room for requests cpu=100, pods=1 (of 2 instance types matching the requirements)",
            ),
            (
                nginx("gpu").gpu(1),
                "no instance type has room for requests pods=1, nvidia.com/gpu=1",
            ),
        ];
        for (p, want) in cases {
            let name = p.clone().build().metadata.name.expect("named");
            let plan = simulate(&input(vec![service()], vec![p]));
            let got = reason_of(&plan, &name);
            assert!(got.contains(want), "{name}: want {want:?} in {got:?}");
            assert!(plan.new_nodes.is_empty());
            let counted: usize = plan.unschedulable_by.values().sum();
            assert_eq!(counted, 1, "{name}: one pod counted once: {:?}", plan.unschedulable_by);
        }
    }

    #[test]
    fn reports_when_no_provisioner_exists() {
        let plan = simulate(&input(vec![], vec![pod("p")]));
        assert!(reason_of(&plan, "p").contains("no Provisioner can launch a node"));
        assert_eq!(
            plan.unschedulable_by,
            BTreeMap::from([((String::new(), "no_provisioner".to_string()), 1)])
        );
    }

    #[test]
    fn a_gpu_request_picks_a_gpu_instance_type() {
        let plan = simulate(&input(vec![provisioner("default").build()], vec![pod("train").gpu(1).cpu("2")]));
        let [node] = plan.new_nodes.as_slice() else {
            panic!("want one node: {plan:?}")
        };
        assert_eq!(names(node), ["g4dn.xlarge", "p3.2xlarge"]);
        assert_eq!(node.cheapest().map(|(it, _)| it.name.as_str()), Some("g4dn.xlarge"));
    }

    #[test]
    fn zonal_spread_over_two_zones_gives_two_nodes() {
        let spread = |n: &str| nginx(n).spread(ZONE_LABEL, 1, "DoNotSchedule", &[("app", "nginx-karpenter")]);
        let plan = simulate(&input(vec![service()], vec![spread("a"), spread("b")]));
        assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
        let zones: Vec<String> = plan
            .new_nodes
            .iter()
            .map(|n| n.labels.get(ZONE_LABEL).cloned().unwrap_or_default())
            .collect();
        assert_eq!(zones, ["ap-northeast-2a", "ap-northeast-2c"]);
    }

    #[test]
    fn packs_200_small_pods_into_few_nodes() {
        let pods: Vec<PodBuilder> = (0..200).map(|i| pod(&format!("p{i:03}")).cpu("100m").memory("128Mi")).collect();
        let plan = simulate(&input(vec![provisioner("default").build()], pods));
        assert!(plan.unschedulable.is_empty());
        let placed: usize = plan.new_nodes.iter().map(|n| n.pods.len()).sum();
        assert_eq!(placed, 200);
        // The largest catalogue types take 58 pods (ENI limit): ⌈200 / 58⌉ = 4 nodes.
        assert_eq!(
            plan.new_nodes.len(),
            4,
            "{:?}",
            plan.new_nodes.iter().map(|n| n.pods.len()).collect::<Vec<_>>()
        );
        for n in &plan.new_nodes {
            let cheapest = n.cheapest().map(|(it, _)| it);
            assert!(cheapest.is_some_and(|it| n.requests.fits(&it.allocatable())), "{n:?}");
        }
    }

    #[test]
    fn hostname_anti_affinity_gives_one_node_per_pod() {
        let pods: Vec<PodBuilder> = (0..5)
            .map(|i| {
                pod(&format!("web-{i}"))
                    .label("app", "web")
                    .cpu("100m")
                    .anti_affinity(HOSTNAME_LABEL, &[("app", "web")])
            })
            .collect();
        let plan = simulate(&input(vec![provisioner("default").build()], pods));
        assert_eq!(plan.new_nodes.len(), 5);
        assert!(plan.new_nodes.iter().all(|n| n.pods.len() == 1));
    }

    #[test]
    fn anti_affinity_groups_of_different_apps_share_nodes() {
        let pods: Vec<PodBuilder> = ["a", "b"]
            .iter()
            .flat_map(|app| {
                (0..3).map(move |i| {
                    pod(&format!("{app}{i}"))
                        .label("app", app)
                        .cpu("100m")
                        .anti_affinity(HOSTNAME_LABEL, &[("app", app)])
                })
            })
            .collect();
        let plan = simulate(&input(vec![provisioner("default").build()], pods));
        let apps: Vec<String> = plan
            .new_nodes
            .iter()
            .map(|n| n.pods.iter().map(|p| &p.name[..1]).collect::<Vec<_>>().join(""))
            .collect();
        assert_eq!(apps, ["ab", "ab", "ab"]);
    }

    #[test]
    fn pods_without_anti_affinity_share_nodes_with_those_that_have_it_unless_selected() {
        let plan = simulate(&input(
            vec![provisioner("default").build()],
            vec![
                pod("web").label("app", "web").anti_affinity(HOSTNAME_LABEL, &[("app", "web")]),
                pod("web-2").label("app", "web").cpu("10m"),
                pod("other").label("app", "other").cpu("10m"),
            ],
        ));
        // web-2 is selected by web's required anti-affinity (inverse direction): separate node.
        assert_eq!(plan.new_nodes.len(), 2, "{:?}", plan.new_nodes);
        let with_web = plan
            .new_nodes
            .iter()
            .find(|n| n.pods.iter().any(|p| p.name == "web"))
            .expect("web placed");
        assert!(!with_web.pods.iter().any(|p| p.name == "web-2"));
    }

    #[test]
    fn fills_existing_and_in_flight_nodes_before_launching() {
        let mut existing = node("ip-10-0-0-1", "2", "8Gi", 35);
        existing.labels.insert("nodeType".into(), "service-2023".into());
        existing.taints = vec![taint("service=true:NoSchedule")];
        existing.pods = vec![pod("running").cpu("1").build()].into_iter().map(Arc::new).collect();
        let mut in_flight = node("ip-10-0-0-2", "2", "8Gi", 35);
        in_flight.labels.insert("nodeType".into(), "service-2023".into());
        in_flight.initialized = false;
        in_flight.taints = vec![
            taint("service=true:NoSchedule"),
            taint("node.kubernetes.io/not-ready:NoSchedule"),
            taint("example.com/agent-not-ready:NoExecute"),
        ];
        in_flight.startup_taints = vec![taint("example.com/agent-not-ready:NoExecute")];
        let mut inp = input(
            vec![service()],
            vec![nginx("a").cpu("800m"), nginx("b").cpu("800m"), nginx("c").cpu("800m")],
        );
        inp.nodes = vec![in_flight, existing];
        let plan = simulate(&inp);
        assert!(plan.new_nodes.is_empty(), "{:?}", plan.new_nodes);
        let got: Vec<(String, String)> = plan.existing_assignments.iter().map(|(p, n)| (p.name.clone(), n.clone())).collect();
        // Initialised nodes first: ip-10-0-0-1 has 1 core left, so one pod; the in-flight node
        // takes the other two (its startup and not-ready taints are ignored).
        assert_eq!(
            got,
            [
                ("a".to_string(), "ip-10-0-0-1".to_string()),
                ("b".to_string(), "ip-10-0-0-2".to_string()),
                ("c".to_string(), "ip-10-0-0-2".to_string()),
            ]
        );
    }

    #[test]
    fn provisioner_limits_are_never_exceeded() {
        let limited = provisioner("small").limit("cpu", "4").build();
        let pods: Vec<PodBuilder> = (0..10).map(|i| pod(&format!("p{i}")).cpu("1")).collect();
        let plan = simulate(&input(vec![limited], pods));
        let max_cpu: i64 = plan
            .new_nodes
            .iter()
            .map(|n| n.instance_type_options.iter().map(|it| it.capacity.cpu_millis).max().unwrap_or(0))
            .sum();
        assert!(max_cpu <= 4000, "planned up to {max_cpu}m cpu");
        assert!(!plan.unschedulable.is_empty());
        assert!(plan
            .unschedulable
            .iter()
            .all(|(_, r)| r.contains("all available instance types exceed provisioner limits")));
        assert_eq!(plan.limited, BTreeSet::from(["small".to_string()]));
        assert!(plan.unfit.is_empty(), "limits are not a lack of room");
        assert_eq!(
            plan.unschedulable_by,
            BTreeMap::from([(("small".to_string(), "limits".to_string()), plan.unschedulable.len())])
        );
    }

    #[test]
    fn a_pod_no_instance_type_has_room_for_names_the_provisioner() {
        let plan = simulate(&input(vec![service()], vec![nginx("huge").cpu("64")]));
        let (pod, reason) = &plan.unfit["service"];
        assert_eq!(pod.name, "huge");
        assert!(reason.contains("no instance type has room"), "{reason}");
        // A pod that finds a node elsewhere leaves nothing behind.
        let plan = simulate(&input(vec![service()], vec![nginx("small").cpu("1")]));
        assert!(plan.unfit.is_empty());
    }

    #[test]
    fn existing_nodes_count_against_limits() {
        let limited = provisioner("small").limit("cpu", "4").build();
        let mut full = node("n1", "4", "16Gi", 58);
        full.labels.insert(PROVISIONER_NAME_LABEL.into(), "small".into());
        full.allocatable = Resources::zero();
        let mut inp = input(vec![limited], vec![pod("p").cpu("100m")]);
        inp.nodes = vec![full];
        let plan = simulate(&inp);
        assert!(plan.new_nodes.is_empty());
        assert!(reason_of(&plan, "p").contains("exceed provisioner limits"));
    }

    #[test]
    fn the_reason_names_the_provisioner_that_refused_a_compatible_pod() {
        // "a-other" sorts first and is incompatible (taint); "service" matches but is at its limit.
        let other = provisioner("a-other").taint("dedicated=db:NoSchedule").build();
        let limited = provisioner("service")
            .taint("service=true:NoSchedule")
            .label("nodeType", "service-2023")
            .limit("cpu", "1")
            .build();
        let plan = simulate(&input(vec![other.clone(), limited], vec![nginx("p").cpu("500m")]));
        let reason = reason_of(&plan, "p");
        assert!(reason.contains("provisioner \"service\""), "{reason}");
        assert!(reason.contains("exceed provisioner limits"), "{reason}");
        assert!(!reason.contains("a-other"), "{reason}");

        // With nothing compatible, every Provisioner's incompatibility is listed.
        let plan = simulate(&input(vec![other, service()], vec![pod("q")]));
        let reason = reason_of(&plan, "q");
        assert!(reason.contains("a-other") && reason.contains("service"), "{reason}");
    }

    #[test]
    fn heavier_provisioners_are_tried_first() {
        let light = provisioner("a-light").build();
        let heavy = provisioner("z-heavy").weight(50).build();
        let plan = simulate(&input(vec![light, heavy], vec![pod("p")]));
        assert_eq!(plan.new_nodes[0].provisioner, "z-heavy");
    }

    #[test]
    fn relaxes_preferences_that_cannot_be_met() {
        let cases = [
            pod("preferred-zone").preferred_term(10, &[(ZONE_LABEL, "In", &["us-east-1a"])]),
            pod("second-term")
                .required_term(&[(ZONE_LABEL, "In", &["us-east-1a"])])
                .required_term(&[(ZONE_LABEL, "In", &["ap-northeast-2b"])]),
            pod("preferred-anti")
                .label("app", "x")
                .preferred_anti_affinity(1, ZONE_LABEL, &[("app", "nothing-matches-yet")]),
        ];
        for p in cases {
            let name = p.clone().build().metadata.name.expect("named");
            let plan = simulate(&input(vec![provisioner("default").build()], vec![p]));
            assert!(plan.unschedulable.is_empty(), "{name}: {:?}", plan.unschedulable);
            assert_eq!(plan.new_nodes.len(), 1, "{name}");
        }
    }

    #[test]
    fn schedule_anyway_spread_is_relaxed_but_do_not_schedule_is_not() {
        let web = |n: &str, zone: &str| {
            let mut node = node(n, "1", "1Gi", 10);
            node.labels.insert(ZONE_LABEL.into(), zone.into());
            node.allocatable = Resources::zero();
            node
        };
        let running = |n: &str| pod(n).label("app", "web").build();
        let mut a = web("n-a", "ap-northeast-2a");
        a.pods = vec![running("w1"), running("w2"), running("w3")]
            .into_iter()
            .map(Arc::new)
            .collect();
        let mut c = web("n-c", "ap-northeast-2c");
        c.pods = vec![running("w4")].into_iter().map(Arc::new).collect();
        let only_2a = provisioner("default").requirement(ZONE_LABEL, "In", &["ap-northeast-2a"]).build();
        for (when, schedulable) in [("DoNotSchedule", false), ("ScheduleAnyway", true)] {
            let mut inp = input(
                vec![only_2a.clone()],
                vec![pod("new").label("app", "web").spread(ZONE_LABEL, 1, when, &[("app", "web")])],
            );
            inp.nodes = vec![a.clone(), c.clone()];
            let plan = simulate(&inp);
            assert_eq!(plan.unschedulable.is_empty(), schedulable, "{when}: {plan:?}");
            if !schedulable {
                assert!(reason_of(&plan, "new").contains("unsatisfiable topology spread constraint"));
            }
        }
    }

    #[test]
    fn daemonset_overhead_is_part_of_every_new_node() {
        let mut inp = input(vec![service()], vec![nginx("web").cpu("500m")]);
        inp.daemonset_pods = vec![pod("agent")
            .cpu("1500m")
            .tolerate("service", "true", "NoSchedule")
            .daemonset("agent")
            .build()];
        let plan = simulate(&inp);
        let node = &plan.new_nodes[0];
        // t3.large has 1830m allocatable: 1500m + 500m does not fit.
        assert_eq!(names(node), ["t3.xlarge"]);
        assert_eq!(node.requests.to_string(), "cpu=2, pods=2");
    }

    #[test]
    fn a_request_past_every_instance_type_fits_none_even_when_sums_would_overflow() {
        // The API server admits `8Ei` (2^63 bytes); with a DaemonSet's memory added, a wrapping
        // sum would turn negative and "fit" every type.
        let mut inp = input(vec![service()], vec![nginx("huge").memory("8Ei"), nginx("huge-cpu").cpu("1E")]);
        inp.daemonset_pods = vec![pod("agent")
            .cpu("100m")
            .memory("100Mi")
            .tolerate("service", "true", "NoSchedule")
            .daemonset("agent")
            .build()];
        let plan = simulate(&inp);
        assert!(plan.new_nodes.is_empty(), "{:?}", plan.new_nodes);
        assert!(reason_of(&plan, "huge").contains("no instance type has room"), "{plan:?}");
        assert!(reason_of(&plan, "huge-cpu").contains("no instance type has room"), "{plan:?}");
    }

    #[test]
    fn host_port_conflicts_need_separate_nodes() {
        let plan = simulate(&input(
            vec![provisioner("default").build()],
            vec![pod("a").host_port(8080), pod("b").host_port(8080), pod("c").host_port(9090)],
        ));
        assert_eq!(plan.new_nodes.len(), 2);
    }

    #[test]
    fn pod_affinity_follows_existing_pods_into_their_zone() {
        let mut db = node("db-node", "1", "1Gi", 10);
        db.labels.insert(ZONE_LABEL.into(), "ap-northeast-2b".into());
        db.allocatable = Resources::zero();
        db.pods = vec![pod("db-0").label("app", "db").build()].into_iter().map(Arc::new).collect();
        let mut inp = input(
            vec![provisioner("default").build()],
            vec![pod("api").pod_affinity(ZONE_LABEL, &[("app", "db")])],
        );
        inp.nodes = vec![db];
        let plan = simulate(&inp);
        assert_eq!(
            plan.new_nodes[0].labels.get(ZONE_LABEL).map(String::as_str),
            Some("ap-northeast-2b")
        );
    }

    #[test]
    fn pod_affinity_namespace_selector_matches_namespaces_by_their_labels() {
        let db_node = |name: &str, zone: &str, namespace: &str| {
            let mut n = node(name, "1", "1Gi", 10);
            n.labels.insert(ZONE_LABEL.into(), zone.into());
            n.allocatable = Resources::zero();
            n.pods = vec![pod(&format!("db-{namespace}")).namespace(namespace).label("app", "db").build()]
                .into_iter()
                .map(Arc::new)
                .collect();
            n
        };
        let mut inp = input(
            vec![provisioner("default").build()],
            vec![pod("api")
                .namespace("shop")
                .pod_affinity_in_namespaces(ZONE_LABEL, &[("app", "db")], &[("team", "data")])],
        );
        inp.nodes = vec![
            db_node("scratch-node", "ap-northeast-2a", "scratch"),
            db_node("data-node", "ap-northeast-2c", "data"),
        ];
        inp.namespace_labels = [
            ("data".to_string(), [("team".to_string(), "data".to_string())].into()),
            ("scratch".to_string(), [("team".to_string(), "scratch".to_string())].into()),
            ("shop".to_string(), BTreeMap::new()),
        ]
        .into();
        let plan = simulate(&inp);
        assert_eq!(
            plan.new_nodes[0].labels.get(ZONE_LABEL).map(String::as_str),
            Some("ap-northeast-2c"),
            "the zone of the db pod in the namespace labelled team=data"
        );
        // With no namespace labelled team=data, no pod matches and the pod cannot be placed.
        inp.namespace_labels.remove("data");
        let plan = simulate(&inp);
        assert!(plan.new_nodes.is_empty(), "{:?}", plan.new_nodes);
        assert_eq!(plan.unschedulable.len(), 1);
    }

    #[test]
    fn running_pods_anti_affinity_keeps_selected_pods_out_of_their_zone() {
        let mut n = node("n-a", "1", "1Gi", 10);
        n.labels.insert(ZONE_LABEL.into(), "ap-northeast-2a".into());
        n.allocatable = Resources::zero();
        n.pods = vec![pod("loner").anti_affinity(ZONE_LABEL, &[("app", "web")]).build()]
            .into_iter()
            .map(Arc::new)
            .collect();
        let mut inp = input(
            vec![provisioner("default")
                .requirement(ZONE_LABEL, "In", &["ap-northeast-2a", "ap-northeast-2b"])
                .build()],
            vec![pod("web").label("app", "web")],
        );
        inp.nodes = vec![n];
        let plan = simulate(&inp);
        let zone = plan.new_nodes[0].requirements.get(ZONE_LABEL).map(ToString::to_string);
        assert_eq!(zone.as_deref(), Some("In [ap-northeast-2b]"));
    }

    #[test]
    fn caps_instance_type_options_cheapest_first() {
        let base = instance_type("m5.large");
        let many: Vec<Arc<InstanceType>> = (0..150)
            .map(|i| {
                let mut it = base.clone();
                it.name = format!("x{i:03}.large");
                it.requirements.remove(INSTANCE_TYPE_LABEL);
                it.requirements.add(INSTANCE_TYPE_LABEL, Requirement::in_values([it.name.clone()]));
                for o in it.offerings.iter_mut() {
                    o.price = 1.0 + f64::from(150 - i) / 100.0;
                }
                Arc::new(it)
            })
            .collect();
        let inp = SimulationInput {
            pods: vec![Arc::new(pod("p").build())],
            provisioners: vec![ProvisionerInput {
                provisioner: provisioner("default").build(),
                instance_types: many,
            }],
            ..Default::default()
        };
        let plan = simulate(&inp);
        let node = &plan.new_nodes[0];
        assert_eq!(node.instance_type_options.len(), MAX_INSTANCE_TYPE_OPTIONS);
        assert_eq!(node.instance_type_options[0].name, "x149.large");
        assert_eq!(node.instance_type_options[99].name, "x050.large");
    }

    #[test]
    fn ignores_pods_karpenter_does_not_provision_for() {
        let plan = simulate(&input(
            vec![provisioner("default").build()],
            vec![pod("karpenter").required_term(&[(PROVISIONER_NAME_LABEL, "DoesNotExist", &[])])],
        ));
        assert!(plan.new_nodes.is_empty());
        assert_eq!(plan.ignored.len(), 1);
    }

    #[test]
    fn startup_taints_need_no_toleration_and_travel_with_the_request() {
        let p = provisioner("cilium")
            .startup_taint("node.cilium.io/agent-not-ready=true:NoExecute")
            .build();
        let plan = simulate(&input(vec![p], vec![pod("p")]));
        let [node] = plan.new_nodes.as_slice() else {
            panic!("want one node: {plan:?}")
        };
        assert_eq!(node.startup_taints, vec![taint("node.cilium.io/agent-not-ready=true:NoExecute")]);
        assert!(node.taints.is_empty());
    }

    #[test]
    fn tolerates_prefer_no_schedule_as_a_last_resort() {
        let p = provisioner("soft").taint("dedicated=batch:PreferNoSchedule").build();
        let plan = simulate(&input(vec![p], vec![pod("p")]));
        assert_eq!(plan.new_nodes.len(), 1, "{plan:?}");
    }

    #[test]
    fn plans_are_deterministic() {
        let pods = || -> Vec<PodBuilder> {
            (0..60)
                .map(|i| {
                    pod(&format!("p{i}"))
                        .cpu(["100m", "250m", "1"][i % 3])
                        .memory(["128Mi", "1Gi"][i % 2])
                        .label("app", "web")
                        .created(1_700_000_000 + (i as i64 % 7))
                        .spread(ZONE_LABEL, 1, "DoNotSchedule", &[("app", "web")])
                })
                .collect()
        };
        let a = simulate(&input(vec![provisioner("default").build()], pods()));
        let b = simulate(&input(vec![provisioner("default").build()], pods()));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert!(a.unschedulable.is_empty());
    }

    #[test]
    fn a_pod_in_another_namespace_is_not_repelled() {
        let plan = simulate(&input(
            vec![provisioner("default").build()],
            vec![
                pod("web").label("app", "web").anti_affinity(HOSTNAME_LABEL, &[("app", "web")]),
                pod("web-other-ns").namespace("other").label("app", "web"),
            ],
        ));
        assert_eq!(plan.new_nodes.len(), 1, "{:?}", plan.new_nodes);
    }

    #[test]
    fn existing_nodes_expect_their_missing_daemons() {
        let mut n: ExistingNode = node("n1", "2", "4Gi", 10);
        n.pods = vec![pod("logs-abc").cpu("100m").daemonset("logs").build()]
            .into_iter()
            .map(Arc::new)
            .collect();
        let mut inp = input(vec![provisioner("default").build()], vec![pod("p").cpu("1")]);
        inp.daemonset_pods = vec![
            pod("logs").cpu("100m").daemonset("logs").build(),
            pod("metrics").cpu("950m").daemonset("metrics").build(),
        ];
        inp.nodes = vec![n];
        // 2 cores − 100m running − 950m expected leaves 950m: the 1-core pod needs a new node.
        let plan = simulate(&inp);
        assert!(plan.existing_assignments.is_empty());
        assert_eq!(plan.new_nodes.len(), 1);
    }
}
