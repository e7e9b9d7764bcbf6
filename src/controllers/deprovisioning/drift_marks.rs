//! Drift, the second method of a pass: its I/O (the checks are pure, in `drift.rs`). Detection on
//! the live cluster gathers what `drift::check` compares (the instances' image, subnet and
//! security groups from EC2; what each Provisioner's template resolves to now; the hashes and
//! requirements of the objects in the shared state), then writes the outcome on
//! the nodes: the `karpenter.sh/voluntary-disruption: drifted` mark with a `Drifted` event when a
//! node drifts, the mark's removal when it no longer holds (or drift is turned off), and the hash
//! annotations a node launched before them lacks. Then `replace_drifted` replaces at most one
//! drifted node, oldest first, past the same blockers as expiration (`decide::first_unblocked`),
//! with `replace` in `mod.rs`.
//!
//! EC2 is asked little: an instance's image and subnet never change, so what DescribeInstances
//! said is kept per instance and read again only after `INSTANCE_FACTS_TTL` (security groups can
//! be changed by hand), in one call for every instance of the cluster, at most every
//! `LIST_INTERVAL`. The template's subnets, security groups and AMI come from the cloud
//! provider's caches (a minute), so an SSM parameter moved to a new AMI is seen within a minute.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use tracing::{debug, info};

use super::decide::{self, Candidate};
use super::drift::{self, Current, Drift, InstanceFacts, Kind};
use super::{publish_blocked, replace, Context, DeprovisioningError, Disruption, VOLUNTARY_DISRUPTION_ANNOTATION};
use crate::apis::hash::{node_template_hash, provisioner_hash};
use crate::apis::v1alpha5::labels::{INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL};
use crate::apis::v1alpha5::Provisioner;
use crate::cloudprovider::{instance_id_from_provider_id, NodeTemplate};
use crate::controllers::events::publish;
use crate::controllers::node_ops::{self, Cordon, Written};
use crate::scheduling::nodes::{is_cordoned, is_labelled_initialized};
use crate::scheduling::provisioner_requirements;

/// The `karpenter.sh/voluntary-disruption` value of a drifted node.
pub const DRIFTED: &str = "drifted";

/// How long what EC2 said about an instance is used before it is asked again.
const INSTANCE_FACTS_TTL: Duration = Duration::from_secs(5 * 60);
/// At most one DescribeInstances of the cluster's instances this often.
const LIST_INTERVAL: Duration = Duration::from_secs(30);

/// What EC2 said about the cluster's instances, by instance id, and when it was last asked.
#[derive(Default)]
pub struct InstanceCache {
    facts: HashMap<String, (InstanceFacts, Instant)>,
    listed: Option<Instant>,
}

fn instance_id(node: &Node) -> Option<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(instance_id_from_provider_id)
        .map(str::to_string)
}

fn mark(node: &Node) -> Option<&str> {
    node.annotations().get(VOLUNTARY_DISRUPTION_ANNOTATION).map(String::as_str)
}

/// Checks every node of `nodes` for drift and writes marks and hashes; returns the drifted ones
/// by name. With drift off, removes every drift mark and returns none.
pub async fn detect(
    ctx: &Context,
    nodes: &[Arc<Node>],
    provisioners: &HashMap<String, Arc<Provisioner>>,
) -> Result<BTreeMap<String, Drift>, DeprovisioningError> {
    let live: Vec<&Arc<Node>> = nodes.iter().filter(|n| n.metadata.deletion_timestamp.is_none()).collect();
    if !ctx.config.drift_enabled {
        for node in live.iter().filter(|n| mark(n) == Some(DRIFTED)) {
            unmark(ctx, node, "drift is turned off").await?;
        }
        for kind in Kind::ALL {
            ctx.metrics.nodes_drifted.with_label_values(&[kind.as_str()]).set(0.0);
        }
        return Ok(BTreeMap::new());
    }
    let instances = instance_facts(ctx, &live).await;
    let mut current: HashMap<String, Option<(Current, NodeTemplate)>> = HashMap::new();
    let mut images: HashMap<(String, String), Option<Option<String>>> = HashMap::new();
    let mut drifted = BTreeMap::new();
    let mut counts: BTreeMap<Kind, usize> = BTreeMap::new();
    for node in live {
        let Some(provisioner) = node.labels().get(PROVISIONER_NAME_LABEL).and_then(|p| provisioners.get(p)) else {
            continue;
        };
        // A node in flight is not compared yet: its labels and instance are still settling.
        if !is_labelled_initialized(node) {
            continue;
        }
        let name = provisioner.name_any();
        if !current.contains_key(&name) {
            let resolved = resolve(ctx, provisioner).await;
            current.insert(name.clone(), resolved);
        }
        let Some(Some((now, template))) = current.get(&name) else {
            continue;
        };
        let mut now = now.clone();
        if let Some(instance_type) = node.labels().get(INSTANCE_TYPE_LABEL).cloned() {
            let key = (name.clone(), instance_type.clone());
            if !images.contains_key(&key) {
                let image = match ctx.cloud.image_for(template, &instance_type).await {
                    Ok(image) => Some(image),
                    Err(e) => {
                        debug!(provisioner = %name, instance_type, error = %e, "the image for drift is not known now");
                        None
                    }
                };
                images.insert(key.clone(), image);
            }
            now.image = images[&key].clone();
        }
        let facts = instance_id(node).and_then(|id| instances.get(&id).cloned());
        let check = drift::check(node.annotations(), node.labels(), facts.as_ref(), &now);
        if !check.write.is_empty() {
            let writes: Vec<(&str, Option<&str>)> = check.write.iter().map(|(k, v)| (*k, Some(v.as_str()))).collect();
            match node_ops::annotate(&ctx.client, node, &writes).await {
                Ok(_) => debug!(node = %node.name_any(), "wrote the static-drift hashes of a node launched before them"),
                Err(source) => {
                    return Err(DeprovisioningError::Annotate {
                        node: node.name_any(),
                        source,
                    })
                }
            }
        }
        match (check.drift, mark(node)) {
            (Some(found), m) => {
                *counts.entry(found.kind).or_default() += 1;
                if m.is_none() {
                    mark_drifted(ctx, node, &found).await?;
                }
                drifted.insert(node.name_any(), found);
            }
            (None, Some(DRIFTED)) => unmark(ctx, node, "it matches its Provisioner and AWSNodeTemplate again").await?,
            (None, _) => {}
        }
    }
    for kind in Kind::ALL {
        let count = counts.get(&kind).copied().unwrap_or_default();
        ctx.metrics.nodes_drifted.with_label_values(&[kind.as_str()]).set(count as f64);
    }
    Ok(drifted)
}

/// Drift, the second method of a pass: checks every node of `nodes` and writes the marks
/// (`detect`); then, unless the pass is `waiting` for a deletion of its own, replaces at most one
/// drifted node of `candidates`, the oldest that nothing blocks, and uncordons a drifted node a
/// replacement cordoned that is not replaced now. True when a node was replaced: the pass ends
/// there.
pub(super) async fn replace_drifted(
    ctx: &Context,
    nodes: &[Arc<Node>],
    provisioners: &HashMap<String, Arc<Provisioner>>,
    candidates: &[Candidate<'_>],
    pdbs: &[PodDisruptionBudget],
    waiting: bool,
) -> Result<bool, DeprovisioningError> {
    let drifted = detect(ctx, nodes, provisioners).await?;
    if !waiting {
        let mut eligible: Vec<&Candidate<'_>> = candidates
            .iter()
            .filter(|c| drifted.contains_key(&c.node.name_any()) && c.node.metadata.deletion_timestamp.is_none())
            .collect();
        eligible.sort_by_key(|c| (c.node.metadata.creation_timestamp.clone(), c.node.name_any()));
        let outcome = decide::first_unblocked(eligible, pdbs);
        publish_blocked(ctx, nodes, &outcome.blocked, "drifted").await;
        // A drifted node a replacement cordoned that did not finish (a restart, a blocker since)
        // and that is not the one replaced now goes back into service; it keeps its mark.
        for node in nodes.iter().filter(|n| {
            n.annotations().get(VOLUNTARY_DISRUPTION_ANNOTATION).map(String::as_str) == Some(DRIFTED)
                && is_cordoned(n)
                && n.metadata.deletion_timestamp.is_none()
                && outcome.expire.as_deref() != Some(n.name_any().as_str())
        }) {
            match node_ops::cordon(&ctx.client, node, Cordon::Uncordon).await {
                Ok(_) => info!(node = %node.name_any(), "uncordoned drifted node: not being replaced now"),
                Err(source) => {
                    return Err(DeprovisioningError::Cordon {
                        node: node.name_any(),
                        source,
                    })
                }
            }
        }
        if let Some(name) = &outcome.expire {
            let node = nodes
                .iter()
                .find(|n| n.name_any() == *name)
                .expect("the drifted node comes from this list");
            replace(ctx, &ctx.state, node, Disruption::Drifted(&drifted[name])).await?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// What `provisioner` and its template stand for now, as far as it can be known, and the
/// template; `None` when the Provisioner has no usable template at all (a missing
/// AWSNodeTemplate): its nodes are left alone rather than judged against nothing.
async fn resolve(ctx: &Context, provisioner: &Provisioner) -> Option<(Current, NodeTemplate)> {
    let template = match ctx.provisioning.node_template_of(provisioner).await {
        Ok(t) => t,
        Err(e) => {
            debug!(provisioner = %provisioner.name_any(), error = %e, "no template to compare nodes with");
            return None;
        }
    };
    let template_spec = ctx
        .state
        .node_template_of(provisioner)
        .map(|t| (t.name_any(), node_template_hash(&t.spec)));
    let (subnets, security_groups) = match ctx.cloud.resolve(&template).await {
        Ok(status) => {
            let subnets: BTreeSet<String> = status.subnets.iter().flatten().map(|s| s.id.clone()).collect();
            let groups: BTreeSet<String> = status.security_groups.iter().flatten().map(|g| g.id.clone()).collect();
            // A template with its own launch template takes the groups from it: not compared.
            let groups = template.launch_template.is_none().then_some(groups);
            (Some(subnets).filter(|s| !s.is_empty()), groups.filter(|g| !g.is_empty()))
        }
        Err(e) => {
            debug!(provisioner = %provisioner.name_any(), error = %e, "the template's subnets and security groups are not known now");
            (None, None)
        }
    };
    let current = Current {
        provisioner: provisioner.name_any(),
        provisioner_hash: provisioner_hash(&provisioner.spec),
        template: template_spec,
        requirements: drift::comparable(provisioner_requirements(provisioner)),
        image: None,
        subnets,
        security_groups,
    };
    Some((current, template))
}

/// What EC2 says about the instances of `nodes`: cached, with one DescribeInstances of the
/// cluster's instances when one is missing or stale (at most every `LIST_INTERVAL`).
async fn instance_facts(ctx: &Context, nodes: &[&Arc<Node>]) -> HashMap<String, InstanceFacts> {
    let ids: BTreeSet<String> = nodes.iter().filter_map(|n| instance_id(n)).collect();
    let now = ctx.clock.instant();
    let needs_list = {
        let cache = ctx.instances.lock().unwrap_or_else(|e| e.into_inner());
        let stale = ids.iter().any(|id| {
            cache
                .facts
                .get(id)
                .is_none_or(|(_, at)| now.duration_since(*at) > INSTANCE_FACTS_TTL)
        });
        stale && cache.listed.is_none_or(|at| now.duration_since(at) >= LIST_INTERVAL)
    };
    if needs_list {
        let listed = ctx.cloud.list().await;
        let mut cache = ctx.instances.lock().unwrap_or_else(|e| e.into_inner());
        cache.listed = Some(now);
        match listed {
            Ok(instances) => {
                for i in instances {
                    let facts = InstanceFacts {
                        image_id: i.image_id.clone(),
                        subnet_id: i.subnet_id.clone(),
                        security_group_ids: i.security_group_ids.iter().cloned().collect(),
                    };
                    cache.facts.insert(i.id.clone(), (facts, now));
                }
            }
            Err(e) => debug!(error = %e, "listing instances for drift; their facts are not known now"),
        }
    }
    let mut cache = ctx.instances.lock().unwrap_or_else(|e| e.into_inner());
    cache.facts.retain(|id, _| ids.contains(id));
    cache.facts.iter().map(|(id, (facts, _))| (id.clone(), facts.clone())).collect()
}

/// Marks `node` drifted, with a `Drifted` event naming the drift.
async fn mark_drifted(ctx: &Context, node: &Node, found: &Drift) -> Result<(), DeprovisioningError> {
    let name = node.name_any();
    match node_ops::annotate(&ctx.client, node, &[(VOLUNTARY_DISRUPTION_ANNOTATION, Some(DRIFTED))]).await {
        Ok(Written::Written) => {}
        Ok(Written::Gone) => return Ok(()),
        Err(source) => return Err(DeprovisioningError::Annotate { node: name, source }),
    }
    info!(node = %name, drift = found.kind.as_str(), detail = %found.detail, "node drifted");
    let note = format!("Node drifted ({}): {}; it will be replaced", found.kind.as_str(), found.detail);
    publish(&ctx.recorder, node, EventType::Normal, "Drifted", "Deprovisioning", &note).await;
    Ok(())
}

/// Removes the drift mark from `node` (and the cordon of a replacement that did not finish).
async fn unmark(ctx: &Context, node: &Node, why: &str) -> Result<(), DeprovisioningError> {
    let name = node.name_any();
    let result = if is_cordoned(node) {
        node_ops::cordon(&ctx.client, node, Cordon::Lift).await
    } else {
        node_ops::annotate(&ctx.client, node, &[(VOLUNTARY_DISRUPTION_ANNOTATION, None)]).await
    };
    match result {
        Ok(Written::Written) => info!(node = %name, reason = why, "removed the drift mark"),
        Ok(Written::Gone) => {}
        Err(source) => return Err(DeprovisioningError::Annotate { node: name, source }),
    }
    Ok(())
}
