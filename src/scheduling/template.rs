//! Node templates: what a Provisioner would launch. Requirements (its requirements ∩ its labels ∩
//! its name), taints (startup taints kept apart), the instance types it may choose from, the
//! DaemonSet overhead every node it launches starts with, and what its limits still allow.
//! No I/O here.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Taint};

use crate::apis::quantity::parse_quantity;
use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_LABEL, CAPACITY_TYPE_SPOT, PROVISIONER_NAME_LABEL, ZONE_LABEL};
use crate::apis::v1alpha5::Provisioner;

use super::instance_types::InstanceType;
use super::nodes::{provisioner_usage, ExistingNode};
use super::pods::daemon_requirement_alternatives;
use super::requirements::{Requirement, Requirements};
use super::resources::{format_amount, pod_requests, to_units, Resources};
use super::taints::{first_untolerated, PREFER_NO_SCHEDULE};

/// An instance type a template may launch, with its allocatable computed once.
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    pub it: Arc<InstanceType>,
    pub allocatable: Resources,
}

/// What one Provisioner would launch.
#[derive(Clone, Debug)]
pub(crate) struct NodeTemplate {
    pub provisioner: String,
    pub requirements: Requirements,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    /// Instance types compatible with `requirements` that have an offering it allows, in input order.
    pub candidates: Vec<Candidate>,
    /// Every label key some candidate carries: only changes to these keys re-filter candidates.
    pub instance_type_keys: BTreeSet<String>,
    /// Requests of the DaemonSet pods that would run on every node of this template.
    pub daemon_overhead: Resources,
    /// `spec.limits.resources`, in the units `remaining` counts.
    pub limits: Option<BTreeMap<String, i64>>,
    /// Per limited resource: limit − capacity of the Provisioner's nodes − what planned nodes may take.
    pub remaining: Option<BTreeMap<String, i64>>,
    /// Per limited resource (in `limits` order), each candidate's capacity of it: the limit
    /// checks of every new node read these instead of looking each resource up by name.
    limited_capacity: Vec<Vec<i64>>,
    /// `spec.provider.spotPrice`: dearer spot offerings count as unavailable.
    pub max_spot_price: Option<f64>,
}

impl NodeTemplate {
    /// The template of `provisioner` over `instance_types`, with `nodes` counting against its
    /// limits and `daemonset_pods` making up its overhead. Spot offerings above
    /// `spec.provider.spotPrice` are treated as unavailable.
    #[cfg(test)]
    pub fn new(provisioner: &Provisioner, instance_types: &[Arc<InstanceType>], nodes: &[&ExistingNode], daemonset_pods: &[Pod]) -> Self {
        Self::unlimited(provisioner, instance_types, daemonset_pods).with_usage(nodes)
    }

    /// The template with its full limits left (`with_usage` counts the nodes against them).
    pub fn unlimited(provisioner: &Provisioner, instance_types: &[Arc<InstanceType>], daemonset_pods: &[Pod]) -> Self {
        let name = provisioner.metadata.name.clone().unwrap_or_default();
        let spec = &provisioner.spec;
        let requirements = provisioner_requirements(provisioner);
        let taints = spec.taints.clone().unwrap_or_default();
        let max_spot_price = spec
            .provider
            .as_ref()
            .and_then(|p| p.get("spotPrice"))
            .and_then(|v| v.as_str())
            .and_then(|s| s.parse::<f64>().ok());
        let candidates: Vec<Candidate> = instance_types
            .iter()
            .map(|it| cap_spot_price(it, max_spot_price))
            .filter(|it| it.requirements.overlaps(&requirements) && it.has_matching_offering(&requirements))
            .map(|it| Candidate {
                allocatable: it.allocatable(),
                it,
            })
            .collect();
        let mut instance_type_keys = BTreeSet::new();
        for (k, _) in candidates.iter().flat_map(|c| c.it.requirements.iter()) {
            if !instance_type_keys.contains(k) {
                instance_type_keys.insert(k.to_string());
            }
        }
        let mut daemon_overhead = Resources::zero();
        for d in daemonset_pods {
            let tolerations = d.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
            if first_untolerated(&tolerations, &taints).is_some() {
                continue;
            }
            if daemon_requirement_alternatives(d).iter().any(|r| requirements.is_compatible(r)) {
                daemon_overhead.add(&pod_requests(d));
            }
        }
        let limits: Option<BTreeMap<String, i64>> = spec.limits.as_ref().and_then(|l| l.resources.as_ref()).map(|limits| {
            limits
                .iter()
                .filter_map(|(res, q)| parse_quantity(&q.0).map(|v| (res.clone(), to_units(res, v))))
                .collect()
        });
        let limited_capacity = limits
            .iter()
            .flat_map(BTreeMap::keys)
            .map(|res| candidates.iter().map(|c| c.it.capacity.get(res)).collect())
            .collect();
        NodeTemplate {
            provisioner: name,
            requirements,
            startup_taints: spec.startup_taints.clone().unwrap_or_default(),
            taints,
            candidates,
            instance_type_keys,
            daemon_overhead,
            remaining: limits.clone(),
            limits,
            limited_capacity,
            max_spot_price,
        }
    }

    /// The template with the capacity of its Provisioner's `nodes` counted against its limits.
    pub fn with_usage(mut self, nodes: &[&ExistingNode]) -> Self {
        if let Some(limits) = &self.limits {
            let usage = provisioner_usage(nodes.iter().copied(), &self.provisioner);
            self.remaining = Some(limits.iter().map(|(res, limit)| (res.clone(), limit.saturating_sub(usage.get(res)))).collect());
        }
        self
    }

    /// Whether a node of candidate `c` would stay within the remaining limits.
    pub fn within_limits(&self, c: usize) -> bool {
        self.remaining
            .as_ref()
            .is_none_or(|rem| rem.values().zip(&self.limited_capacity).all(|(left, caps)| caps[c] <= *left))
    }

    /// Why no candidate stays within the limits, with the figures: per limited resource that
    /// every candidate exceeds, the limit, what the Provisioner's nodes and the nodes planned
    /// before take of it, what is left, and what the smallest candidate would add
    /// (`cpu: limit 10, 8 in use or planned, 2 left; the smallest type, t3.xlarge, has 4`).
    pub fn limits_exceeded(&self) -> String {
        let (Some(limits), Some(remaining)) = (&self.limits, &self.remaining) else {
            return String::new();
        };
        let mut parts = Vec::new();
        for ((resource, limit), caps) in limits.iter().zip(&self.limited_capacity) {
            let left = remaining.get(resource).copied().unwrap_or(*limit);
            let Some((smallest, cap)) = caps.iter().enumerate().min_by_key(|(_, cap)| **cap) else {
                continue;
            };
            if *cap <= left {
                continue;
            }
            parts.push(format!(
                "{resource}: limit {}, {} in use or planned, {} left; the smallest type, {}, has {}",
                format_amount(resource, *limit),
                format_amount(resource, limit.saturating_sub(left)),
                format_amount(resource, left.max(0)),
                self.candidates[smallest].it.name,
                format_amount(resource, *cap)
            ));
        }
        parts.join("; ")
    }

    /// Reserves the largest capacity among the candidates `options` against the remaining
    /// limits (pessimistic: the launch may pick any of them).
    pub fn reserve(&mut self, options: &[usize]) {
        let Some(rem) = self.remaining.as_mut() else {
            return;
        };
        for (left, caps) in rem.values_mut().zip(&self.limited_capacity) {
            *left = left.saturating_sub(options.iter().map(|o| caps[*o]).max().unwrap_or(0));
        }
    }

    /// Whether the Provisioner has a `PreferNoSchedule` taint (enables the last relaxation step).
    pub fn has_prefer_no_schedule_taint(&self) -> bool {
        self.taints.iter().any(|t| t.effect == PREFER_NO_SCHEDULE)
    }
}

/// What every node of `provisioner` carries, as requirements: its requirements ∩ its labels ∩
/// its name. An instance type whose labels do not overlap these is never a candidate.
pub fn provisioner_requirements(provisioner: &Provisioner) -> Requirements {
    let spec = &provisioner.spec;
    let mut requirements = Requirements::from_node_selector_requirements(spec.requirements.as_deref().unwrap_or_default());
    requirements.add_all(&Requirements::from_labels(spec.labels.iter().flatten()));
    requirements.add(
        PROVISIONER_NAME_LABEL,
        Requirement::in_values([provisioner.metadata.name.clone().unwrap_or_default()]),
    );
    requirements
}

/// Which of a template's candidates have labels and an available offering that given
/// requirements allow, remembered by the requirements on the keys that decide it (those the
/// candidates carry, zone and capacity type): the pods of one pass share a handful of them (a
/// zone, a capacity type), so each set is worked out over the candidates once.
#[derive(Default)]
pub(crate) struct CandidateMatches {
    by_requirements: HashMap<(usize, Requirements), Rc<[bool]>>,
}

impl CandidateMatches {
    /// Per candidate of `template` (the `index`th template), whether `requirements` allow it.
    pub fn of(&mut self, index: usize, template: &NodeTemplate, requirements: &Requirements) -> Rc<[bool]> {
        let mut deciding = Requirements::new();
        for (k, r) in requirements.iter() {
            if template.instance_type_keys.contains(k) || k == ZONE_LABEL || k == CAPACITY_TYPE_LABEL {
                deciding.add(k, r.clone());
            }
        }
        self.by_requirements
            .entry((index, deciding))
            .or_insert_with_key(|(_, deciding)| {
                template
                    .candidates
                    .iter()
                    .map(|c| c.it.requirements.overlaps(deciding) && c.it.has_matching_offering(deciding))
                    .collect()
            })
            .clone()
    }
}

fn cap_spot_price(it: &Arc<InstanceType>, max_spot_price: Option<f64>) -> Arc<InstanceType> {
    let Some(max) = max_spot_price else {
        return it.clone();
    };
    let too_dear = |o: &super::instance_types::Offering| o.available && o.capacity_type == CAPACITY_TYPE_SPOT && o.price > max;
    if !it.offerings.iter().any(too_dear) {
        return it.clone();
    }
    let mut capped = (**it).clone();
    for o in capped.offerings.iter_mut() {
        if too_dear(o) {
            o.available = false;
        }
    }
    Arc::new(capped)
}

/// The values each topology key can take on new nodes: for every template, its requirement on the
/// key intersected with each candidate's labels, plus the values the template lists with `In`.
pub(crate) fn domain_seeds(templates: &[NodeTemplate], keys: &BTreeSet<String>) -> BTreeMap<String, BTreeSet<String>> {
    let exists = Requirement::exists();
    let mut out = BTreeMap::new();
    for key in keys {
        let mut values = BTreeSet::new();
        for t in templates {
            let tr = t.requirements.get(key).unwrap_or(&exists);
            if !tr.is_complement() {
                values.extend(tr.values().iter().cloned());
            }
            for c in &t.candidates {
                let Some(ir) = c.it.requirements.get(key) else {
                    continue;
                };
                let both = tr.intersection(ir);
                if !both.is_complement() {
                    values.extend(both.values().iter().cloned());
                }
            }
        }
        out.insert(key.clone(), values);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::v1alpha5::labels::CAPACITY_TYPE_LABEL;
    use crate::scheduling::testing::{catalogue, node, pod, provisioner, service};

    #[test]
    fn template_combines_requirements_labels_and_name() {
        let t = NodeTemplate::new(&service(), &catalogue(), &[], &[]);
        assert_eq!(
            t.requirements.to_string(),
            "karpenter.sh/capacity-type In [on-demand], karpenter.sh/provisioner-name In [service], \
             node.kubernetes.io/instance-type In [t3.large t3.xlarge], nodeType In [service-2023], \
             topology.kubernetes.io/zone In [ap-northeast-2a ap-northeast-2c]"
        );
        let names: Vec<&str> = t.candidates.iter().map(|c| c.it.name.as_str()).collect();
        assert_eq!(names, ["t3.large", "t3.xlarge"]);
    }

    #[test]
    fn daemonset_overhead_counts_daemons_that_would_run_there() {
        let daemons = [
            pod("everywhere").cpu("100m").memory("128Mi").daemonset("logs").build(),
            pod("tolerant")
                .cpu("50m")
                .tolerate("service", "true", "NoSchedule")
                .daemonset("agent")
                .build(),
            pod("gpu-only")
                .cpu("1")
                .node_selector("karpenter.k8s.aws/instance-gpu-manufacturer", "nvidia")
                .tolerate("service", "true", "NoSchedule")
                .daemonset("nvidia")
                .build(),
            pod("elsewhere")
                .cpu("1")
                .node_selector("team", "a")
                .tolerate("service", "true", "NoSchedule")
                .daemonset("team")
                .build(),
        ];
        let t = NodeTemplate::new(&service(), &catalogue(), &[], &daemons);
        // Only "tolerant" tolerates the taint; "gpu-only" needs a GPU label the template cannot
        // rule out, so it counts (as in Karpenter); "elsewhere" needs an undeclared custom label.
        assert_eq!(t.daemon_overhead.to_string(), "cpu=1050m, pods=2");
    }

    #[test]
    fn remaining_limits_subtract_the_provisioners_nodes() {
        let p = provisioner("default").limit("cpu", "10").build();
        let mut mine = node("n1", "4", "16Gi", 58);
        mine.labels.insert(PROVISIONER_NAME_LABEL.into(), "default".into());
        let theirs = node("n2", "4", "16Gi", 58);
        let mut t = NodeTemplate::new(&p, &catalogue(), &[&mine, &theirs], &[]);
        assert_eq!(t.remaining.as_ref().and_then(|r| r.get("cpu")), Some(&6000));
        let big = t.candidates.iter().position(|c| c.it.name == "m5.2xlarge").expect("in catalogue");
        assert!(!t.within_limits(big));
        let small = t.candidates.iter().position(|c| c.it.name == "m5.xlarge").expect("in catalogue");
        assert!(t.within_limits(small));
        t.reserve(&[small]);
        assert_eq!(t.remaining.as_ref().and_then(|r| r.get("cpu")), Some(&2000));
    }

    #[test]
    fn spot_price_cap_makes_dearer_spot_offerings_unavailable() {
        let p = provisioner("spot")
            .requirement(CAPACITY_TYPE_LABEL, "In", &["spot"])
            .spot_price("0.05")
            .build();
        let t = NodeTemplate::new(&p, &catalogue(), &[], &[]);
        let names: Vec<&str> = t.candidates.iter().map(|c| c.it.name.as_str()).collect();
        // Spot is 30% of on-demand (35% for c5): only types under $0.05/h remain.
        assert_eq!(names, ["t3.large", "m5.large", "c5.large", "r5.large"]);
    }
}
