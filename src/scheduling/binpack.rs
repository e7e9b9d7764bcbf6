//! Fitting one pod onto one node: an existing (or in-flight) node, a node already planned in this
//! run, or a brand-new node from a template. A planned node keeps every instance type that can
//! still hold all its pods; it is full when none can take the next pod. No I/O here.

use k8s_openapi::api::core::v1::Taint;

use crate::apis::v1alpha5::labels::HOSTNAME_LABEL;

use super::pods::{HostPort, PodState};
use super::requirements::{Requirement, Requirements};
use super::resources::Resources;
use super::taints::{first_untolerated, tolerates_all};
use super::template::{CandidateMatches, NodeTemplate};
use super::topology::{GroupRef, Topology};

/// The largest cpu, memory, pods and ephemeral-storage among a node's options: a pod that does
/// not fit under these cannot fit any option (extended resources are checked per option).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Ceiling([i64; 4]);

impl Ceiling {
    fn of<'a>(allocatables: impl Iterator<Item = &'a Resources>) -> Self {
        let mut c = [0i64; 4];
        for a in allocatables {
            c[0] = c[0].max(a.cpu_millis);
            c[1] = c[1].max(a.memory_bytes);
            c[2] = c[2].max(a.pods);
            c[3] = c[3].max(a.ephemeral_storage_bytes);
        }
        Ceiling(c)
    }

    fn admits(&self, used: &Resources, pod: &Resources) -> bool {
        used.cpu_millis + pod.cpu_millis <= self.0[0]
            && used.memory_bytes + pod.memory_bytes <= self.0[1]
            && used.pods + pod.pods <= self.0[2]
            && used.ephemeral_storage_bytes + pod.ephemeral_storage_bytes <= self.0[3]
    }
}

/// A node planned in this run.
#[derive(Clone, Debug)]
pub(crate) struct PlannedNode {
    pub template: usize,
    pub host: u32,
    pub requirements: Requirements,
    /// Indices into the template's candidates that can hold every pod placed so far.
    pub options: Vec<usize>,
    /// DaemonSet overhead + the placed pods' requests.
    pub requests: Resources,
    pub ceiling: Ceiling,
    pub pods: Vec<usize>,
    pub host_ports: Vec<HostPort>,
}

/// An existing or in-flight node during the run.
#[derive(Clone, Debug)]
pub(crate) struct ExistingState {
    pub name: String,
    pub host: u32,
    pub requirements: Requirements,
    pub taints: Vec<Taint>,
    /// allocatable − requests of the pods already bound.
    pub available: Resources,
    /// DaemonSet requests still expected on the node + pods placed in this run.
    pub requests: Resources,
    pub host_ports: Vec<HostPort>,
    pub pods: Vec<usize>,
}

fn ports_conflict(used: &[HostPort], wanted: &[HostPort]) -> bool {
    wanted.iter().any(|w| used.iter().any(|u| u.conflicts(w)))
}

/// `node` merged with the pod's requirements and what topology adds; None when the pod adds no
/// constraint, Err(()) when they cannot be met.
fn merge_requirements(
    node: &Requirements,
    pod: &PodState,
    groups: &[GroupRef],
    topology: &Topology,
    host: u32,
) -> Result<Option<Requirements>, ()> {
    if !node.is_compatible(&pod.requirements) {
        return Err(());
    }
    if pod.requirements.is_empty() {
        // The node's requirements stand as they are unless topology narrows them; checking
        // before cloning keeps rejections (e.g. hostname anti-affinity) cheap.
        if groups.is_empty() {
            return Ok(None);
        }
        let extra = topology.add_requirements(groups, pod, node, host).map_err(|_| ())?;
        if extra.is_empty() {
            return Ok(None);
        }
        if !node.is_compatible(&extra) {
            return Err(());
        }
        let mut merged = node.clone();
        return Ok(merged.add_all(&extra).then_some(merged));
    }
    let mut merged = node.clone();
    merged.add_all(&pod.requirements);
    if !groups.is_empty() {
        let extra = topology.add_requirements(groups, pod, &merged, host).map_err(|_| ())?;
        if !merged.is_compatible(&extra) {
            return Err(());
        }
        merged.add_all(&extra);
    }
    Ok(Some(merged))
}

/// Whether `merged` narrows `base` on a key instance types carry (only then must options be
/// re-checked against requirements and offerings).
fn narrows_instance_types(merged: &Requirements, base: &Requirements, template: &NodeTemplate) -> bool {
    merged
        .iter()
        .any(|(k, r)| template.instance_type_keys.contains(k) && base.get(k) != Some(r))
}

/// Places pod `i` on an existing node if it fits there.
pub(crate) fn add_to_existing(node: &mut ExistingState, i: usize, pod: &PodState, groups: &[GroupRef], topology: &mut Topology) -> bool {
    // The cheapest test first: in a busy cluster most nodes have no room (consolidation
    // simulates moving pods across every node).
    if node.requests.cpu_millis + pod.requests.cpu_millis > node.available.cpu_millis
        || node.requests.memory_bytes + pod.requests.memory_bytes > node.available.memory_bytes
        || node.requests.pods + pod.requests.pods > node.available.pods
    {
        return false;
    }
    if first_untolerated(&pod.tolerations, &node.taints).is_some() || ports_conflict(&node.host_ports, &pod.host_ports) {
        return false;
    }
    let requests = node.requests.plus(&pod.requests);
    if !requests.fits(&node.available) {
        return false;
    }
    let Ok(merged) = merge_requirements(&node.requirements, pod, groups, topology, node.host) else {
        return false;
    };
    node.requests = requests;
    if let Some(m) = merged {
        node.requirements = m;
    }
    node.pods.push(i);
    node.host_ports.extend(pod.host_ports.iter().cloned());
    topology.record(i, pod, &node.requirements, node.host);
    true
}

/// Places pod `i` on a node planned earlier in this run if some remaining option holds it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_to_planned(
    node: &mut PlannedNode,
    template: &NodeTemplate,
    matches: &mut CandidateMatches,
    i: usize,
    pod: &PodState,
    groups: &[GroupRef],
    topology: &mut Topology,
) -> bool {
    if !node.ceiling.admits(&node.requests, &pod.requests)
        || first_untolerated(&pod.tolerations, &template.taints).is_some()
        || ports_conflict(&node.host_ports, &pod.host_ports)
    {
        return false;
    }
    let Ok(merged) = merge_requirements(&node.requirements, pod, groups, topology, node.host) else {
        return false;
    };
    let requests = node.requests.plus(&pod.requests);
    let allowed = merged
        .as_ref()
        .filter(|m| narrows_instance_types(m, &node.requirements, template))
        .map(|m| matches.of(node.template, template, m));
    let options: Vec<usize> = node
        .options
        .iter()
        .copied()
        .filter(|o| requests.fits(&template.candidates[*o].allocatable) && allowed.as_ref().is_none_or(|a| a[*o]))
        .collect();
    if options.is_empty() {
        return false;
    }
    if options.len() != node.options.len() {
        node.ceiling = Ceiling::of(options.iter().map(|o| &template.candidates[*o].allocatable));
        node.options = options;
    }
    node.requests = requests;
    if let Some(m) = merged {
        node.requirements = m;
    }
    node.pods.push(i);
    node.host_ports.extend(pod.host_ports.iter().cloned());
    topology.record(i, pod, &node.requirements, node.host);
    true
}

/// Why a template cannot launch a node for a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NewNodeError {
    /// What kind of refusal.
    pub kind: Refusal,
    /// Why, for the pod's event.
    pub message: String,
}

/// The kinds of `NewNodeError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Taints, requirements or topology rule the template out.
    Incompatible,
    /// The pod is compatible, but no instance type satisfies the combined requirements with an
    /// available offering.
    NoOffering,
    /// The pod is compatible, but every instance type would exceed the Provisioner's limits.
    Limits,
    /// The pod is compatible, but no instance type within the limits has room for it.
    NoRoom,
}

impl Refusal {
    /// The refusal as a metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Incompatible => "incompatible",
            Refusal::NoOffering => "no_offering",
            Refusal::Limits => "limits",
            Refusal::NoRoom => "no_room",
        }
    }
}

/// Plans a new node from `template` for pod `i`, or says why the template cannot serve it.
/// `hostname`/`host` name the placeholder hostname of the would-be node. Compatibility (taints,
/// requirements, topology) is checked before capacity (limits, instance types with room).
#[allow(clippy::too_many_arguments)]
pub(crate) fn new_node(
    template: &NodeTemplate,
    template_index: usize,
    matches: &mut CandidateMatches,
    i: usize,
    pod: &PodState,
    groups: &[GroupRef],
    topology: &mut Topology,
    hostname: &str,
    host: u32,
) -> Result<PlannedNode, NewNodeError> {
    let spot_note = template
        .max_spot_price
        .map(|max| format!(" (spot offerings above spec.provider.spotPrice {max} count as unavailable)"))
        .unwrap_or_default();
    let incompatible = |message: String| NewNodeError {
        kind: Refusal::Incompatible,
        message,
    };
    let no_offering = |message: String| NewNodeError {
        kind: Refusal::NoOffering,
        message,
    };
    let refused = |message: String| NewNodeError {
        kind: Refusal::NoRoom,
        message,
    };
    tolerates_all(&pod.tolerations, &template.taints).map_err(incompatible)?;
    let mut reqs = template.requirements.clone();
    reqs.add(HOSTNAME_LABEL, Requirement::in_values([hostname.to_string()]));
    reqs.compatible(&pod.requirements)
        .map_err(|e| incompatible(format!("incompatible requirements, {e}")))?;
    reqs.add_all(&pod.requirements);
    if !groups.is_empty() {
        let extra = topology
            .add_requirements(groups, pod, &reqs, host)
            .map_err(|e| incompatible(topology.explain(&e, pod, &reqs)))?;
        reqs.compatible(&extra)
            .map_err(|e| incompatible(format!("incompatible topology requirements, {e}")))?;
        reqs.add_all(&extra);
    }
    let within_limits: Vec<usize> = (0..template.candidates.len()).filter(|c| template.within_limits(*c)).collect();
    if within_limits.is_empty() {
        return Err(if template.candidates.is_empty() {
            no_offering(format!(
                "no instance type matches its requirements and has an available offering{spot_note}"
            ))
        } else {
            NewNodeError {
                kind: Refusal::Limits,
                message: format!(
                    "all available instance types exceed provisioner limits ({})",
                    template.limits_exceeded()
                ),
            }
        });
    }
    let requests = template.daemon_overhead.plus(&pod.requests);
    let allowed = narrows_instance_types(&reqs, &template.requirements, template).then(|| matches.of(template_index, template, &reqs));
    let matches = |c: usize| allowed.as_ref().is_none_or(|a| a[c]);
    let options: Vec<usize> = within_limits
        .iter()
        .copied()
        .filter(|c| matches(*c) && requests.fits(&template.candidates[*c].allocatable))
        .collect();
    if options.is_empty() {
        let mut shown = reqs.clone();
        shown.remove(HOSTNAME_LABEL);
        let matching = within_limits.iter().filter(|c| matches(**c)).count();
        // The type that came closest: the smallest overshoot of its allocatable.
        let closest = within_limits
            .iter()
            .filter(|c| matches(**c))
            .map(|c| &template.candidates[*c])
            .min_by(|a, b| requests.overshoot(&a.allocatable).total_cmp(&requests.overshoot(&b.allocatable)))
            .map(|c| {
                format!(
                    "; the closest, {}, is short of {}",
                    c.it.name,
                    requests.excesses(&c.allocatable).join(", ")
                )
            })
            .unwrap_or_default();
        return Err(if matching == 0 {
            no_offering(format!("no instance type satisfied requirements {shown}{spot_note}"))
        } else if template.daemon_overhead.is_zero() {
            refused(format!(
                "no instance type has room for requests {} (of {matching} instance types matching the requirements){closest}",
                pod.requests
            ))
        } else {
            refused(format!(
                "no instance type has room for requests {} plus daemonset overhead {} (of {matching} instance types matching the requirements){closest}",
                pod.requests, template.daemon_overhead
            ))
        });
    }
    topology.record(i, pod, &reqs, host);
    Ok(PlannedNode {
        template: template_index,
        host,
        requirements: reqs,
        ceiling: Ceiling::of(options.iter().map(|o| &template.candidates[*o].allocatable)),
        options,
        requests,
        pods: vec![i],
        host_ports: pod.host_ports.clone(),
    })
}
