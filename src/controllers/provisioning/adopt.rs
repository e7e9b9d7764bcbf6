//! Adopting an instance launched for a need whose Node was never created: a controller that
//! stopped (crashed, lost the Lease, was restarted) between CreateFleet and the Node leaves an
//! instance that runs and that no Node names. The next term's launches take such an instance for
//! a node of the same configuration instead of launching another (Karpenter v0.28+ links its
//! Machines to their instances the same way,
//! `aws@v0.28.0:pkg/controllers/machine/link/controller.go`): its
//! Node is created and its pods are bound as for a fresh launch. The garbage collector spares
//! these instances until the registration TTL, and collects only those nobody adopted by then.
//!
//! The candidates are listed once per term, before the term's first launch, so an instance
//! this term launched is never one of them. `orphans` and `pick` are pure.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;
use tracing::info;

use super::Context;
use crate::apis::v1alpha5::labels::PROVISIONER_NAME_LABEL;
use crate::cloudprovider::{self, instances_named_by, Instance, LaunchRequest, LAUNCH_CONFIG_TAG};

/// Instances a launch may adopt: pending or running, tagged with a launch configuration, named
/// by no Node, launched less than `ttl` ago (an older one's node would be past its registration
/// TTL). Oldest first.
pub fn orphans(instances: Vec<Instance>, nodes: &[Arc<Node>], ttl: Duration, now: SystemTime) -> Vec<Instance> {
    let named = instances_named_by(nodes.iter().map(|n| n.as_ref()));
    let mut found: Vec<Instance> = instances
        .into_iter()
        .filter(|i| i.state == "pending" || i.state == "running")
        .filter(|i| i.tags.contains_key(LAUNCH_CONFIG_TAG) && !named.contains(i.id.as_str()))
        .filter(|i| i.launch_time.is_some_and(|t| now.duration_since(t).unwrap_or_default() < ttl))
        .collect();
    found.sort_by(|a, b| a.launch_time.cmp(&b.launch_time).then_with(|| a.id.cmp(&b.id)));
    found
}

/// Which of `orphans` a launch of `request` adopts: the first of its Provisioner and launch
/// configuration whose type, zone and capacity type are one of the request's options.
pub fn pick(orphans: &[Instance], request: &LaunchRequest) -> Option<usize> {
    let identity = request.identity.as_ref()?;
    orphans.iter().position(|i| {
        i.tags.get(LAUNCH_CONFIG_TAG) == Some(&identity.config)
            && i.tags.get(PROVISIONER_NAME_LABEL) == Some(&request.provisioner_name)
            && request
                .instance_options
                .iter()
                .any(|o| o.instance_type == i.instance_type && o.zone == i.zone && o.capacity_type == i.capacity_type)
    })
}

/// The instance `request` adopts, if any: the term's candidates are listed from the cloud at its
/// first launch. A failed listing fails the launch (a launch now could be the second one for its
/// need); the next pass lists again.
pub(super) async fn adopt(ctx: &Context, request: &LaunchRequest) -> Result<Option<Instance>, cloudprovider::Error> {
    if request.identity.is_none() {
        return Ok(None);
    }
    let mut candidates = ctx.adoptable.lock().await;
    let pool = match &mut *candidates {
        Some(pool) => pool,
        None => {
            let instances = ctx.metrics.cloud_call("list", ctx.cloud.list()).await?;
            let found = orphans(
                instances,
                &ctx.state.nodes.state(),
                ctx.config.registration_ttl,
                ctx.clock.now().into(),
            );
            if !found.is_empty() {
                let ids: Vec<&str> = found.iter().map(|i| i.id.as_str()).collect();
                info!(instances = ?ids, "instances launched without a node before this term; launches of the same configuration adopt them");
            }
            candidates.insert(found)
        }
    };
    Ok(pick(pool, request).map(|i| pool.remove(i)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloudprovider::{InstanceOption, KubernetesVersion, LaunchIdentity, NodeTemplate};
    use serde_json::json;
    use std::collections::BTreeMap;

    const NOW: u64 = 1_700_000_000;

    fn instance(id: &str, config: Option<&str>, age: u64, zone: &str) -> Instance {
        let mut tags = BTreeMap::from([(PROVISIONER_NAME_LABEL.to_string(), "service".to_string())]);
        if let Some(config) = config {
            tags.insert(LAUNCH_CONFIG_TAG.to_string(), config.to_string());
        }
        Instance {
            id: id.into(),
            instance_type: "t3.large".into(),
            zone: zone.into(),
            capacity_type: "on-demand".into(),
            private_dns_name: format!("ip-{id}.ec2.internal"),
            private_ip: None,
            launch_time: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(NOW - age)),
            state: "running".into(),
            tags,
            image_id: None,
            subnet_id: None,
            security_group_ids: Vec::new(),
        }
    }

    fn node(instance: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": instance}, "spec": {"providerID": format!("aws:///ap-northeast-2a/{instance}")}}),
            )
            .unwrap(),
        )
    }

    fn request(config: &str, zones: &[&str]) -> LaunchRequest {
        let template = NodeTemplate::from_provider(&Default::default(), "c", KubernetesVersion { major: 1, minor: 33 }).unwrap();
        LaunchRequest {
            provisioner_name: "service".into(),
            node_name: None,
            template,
            instance_options: zones
                .iter()
                .map(|z| InstanceOption {
                    instance_type: "t3.large".into(),
                    zone: z.to_string(),
                    capacity_type: "on-demand".into(),
                    price: 0.1,
                })
                .collect(),
            labels: BTreeMap::new(),
            taints: vec![],
            startup_taints: vec![],
            kubelet: Default::default(),
            max_pods: BTreeMap::new(),
            spot_max_price: None,
            identity: Some(LaunchIdentity {
                config: config.into(),
                need: "n".into(),
            }),
        }
    }

    #[test]
    fn orphans_are_live_tagged_instances_no_node_names_within_the_ttl_oldest_first() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(NOW);
        let mut stopping = instance("i-stopping", Some("1"), 60, "ap-northeast-2a");
        stopping.state = "shutting-down".into();
        let found = orphans(
            vec![
                instance("i-young", Some("1"), 30, "ap-northeast-2a"),
                instance("i-old", Some("1"), 300, "ap-northeast-2a"),
                instance("i-named", Some("1"), 60, "ap-northeast-2a"),
                instance("i-untagged", None, 60, "ap-northeast-2a"),
                instance("i-expired", Some("1"), 16 * 60, "ap-northeast-2a"),
                stopping,
            ],
            &[node("i-named")],
            Duration::from_secs(15 * 60),
            now,
        );
        let ids: Vec<&str> = found.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["i-old", "i-young"]);
    }

    #[test]
    fn a_launch_adopts_only_an_orphan_of_its_configuration_on_one_of_its_options() {
        let pool = [
            instance("i-other-config", Some("2"), 60, "ap-northeast-2a"),
            instance("i-other-zone", Some("1"), 60, "ap-northeast-2b"),
            instance("i-fits", Some("1"), 60, "ap-northeast-2c"),
        ];
        assert_eq!(pick(&pool, &request("1", &["ap-northeast-2a", "ap-northeast-2c"])), Some(2));
        assert_eq!(pick(&pool, &request("1", &["ap-northeast-2a"])), None, "no option in 2b or 2c");
        assert_eq!(
            pick(&pool, &request("3", &["ap-northeast-2a", "ap-northeast-2b"])),
            None,
            "another configuration"
        );
        let mut other_provisioner = request("1", &["ap-northeast-2c"]);
        other_provisioner.provisioner_name = "batch".into();
        assert_eq!(pick(&pool, &other_provisioner), None);
        let mut bare = request("1", &["ap-northeast-2c"]);
        bare.identity = None;
        assert_eq!(pick(&pool, &bare), None, "a bare launch adopts nothing");
    }
}
