//! Each AWSNodeTemplate's `status`: the subnets, security groups and AMIs its selectors resolve
//! to now, as Karpenter's AWSNodeTemplate controller writes them
//! (`aws@v0.31.0:pkg/controllers/nodetemplate/controller.go`), so `kubectl get awsnodetemplate
//! -o yaml` shows what the nodes will get. Written on the leader from provisioning's warm-up, which resolves the same templates,
//! every minute and only when something changed. The comparison is pure (`status_patch`).

use kube::{Api, ResourceExt};
use tracing::{debug, warn};

use super::{Context, Stores};
use crate::apis::v1alpha1::{AwsNodeTemplate, AwsNodeTemplateStatus};
use crate::cloudprovider::{KubernetesVersion, NodeTemplate};

/// The merge patch that makes `stored` show `resolved` (subnets, security groups and AMIs, each
/// sorted by id), or None when it already does. Other status fields (conditions) are left alone.
pub fn status_patch(stored: Option<&AwsNodeTemplateStatus>, resolved: &AwsNodeTemplateStatus) -> Option<serde_json::Value> {
    let mut subnets = resolved.subnets.clone().unwrap_or_default();
    subnets.sort_by(|a, b| a.id.cmp(&b.id));
    let mut groups = resolved.security_groups.clone().unwrap_or_default();
    groups.sort_by(|a, b| a.id.cmp(&b.id));
    let mut amis = resolved.amis.clone().unwrap_or_default();
    amis.sort_by(|a, b| a.id.cmp(&b.id));
    let unchanged = stored.is_some_and(|s| {
        s.subnets.as_ref() == Some(&subnets) && s.security_groups.as_ref() == Some(&groups) && s.amis.as_ref() == Some(&amis)
    });
    (!unchanged).then(|| serde_json::json!({"status": {"subnets": subnets, "securityGroups": groups, "amis": amis}}))
}

/// Resolves every AWSNodeTemplate for nodes of `version` and writes the status of those whose
/// resolution changed. A template that does not resolve (a selector matching nothing) keeps its
/// last status; the provisioning pass that uses it reports why.
pub(in crate::controllers::provisioning) async fn write(ctx: &Context, stores: &Stores, version: KubernetesVersion) {
    let api: Api<AwsNodeTemplate> = Api::all(ctx.client.clone());
    for template in stores.templates.state() {
        let name = template.name_any();
        let Ok(node_template) = NodeTemplate::from_node_template(&template.spec, &ctx.config.cluster_name, version) else {
            continue;
        };
        let resolved = match ctx.cloud.resolve(&node_template).await {
            Ok(resolved) => resolved,
            Err(e) => {
                debug!(template = %name, error = %e, "the AWSNodeTemplate does not resolve; its status is left as it was");
                continue;
            }
        };
        let Some(patch) = status_patch(template.status.as_ref(), &resolved) else {
            continue;
        };
        match api
            .patch_status(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
            .await
        {
            Ok(_) => debug!(template = %name, "updated the AWSNodeTemplate's status"),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => warn!(template = %name, error = %e, "writing the AWSNodeTemplate's status; retrying in a minute"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::v1alpha1::{AmiStatus, SecurityGroupStatus, SubnetStatus};

    fn resolved(subnets: &[&str]) -> AwsNodeTemplateStatus {
        AwsNodeTemplateStatus {
            subnets: Some(
                subnets
                    .iter()
                    .map(|id| SubnetStatus {
                        id: id.to_string(),
                        zone: Some("ap-northeast-2a".into()),
                    })
                    .collect(),
            ),
            security_groups: Some(vec![SecurityGroupStatus {
                id: "sg-1".into(),
                name: Some("nodes".into()),
            }]),
            amis: Some(vec![AmiStatus {
                id: "ami-1".into(),
                name: None,
                requirements: None,
            }]),
            conditions: None,
        }
    }

    /// A first resolution is written sorted; the same one again (in any order) is not; a changed
    /// one is; the conditions are never part of the patch.
    #[test]
    fn the_status_is_written_when_the_resolution_changes_and_only_then() {
        let patch = status_patch(None, &resolved(&["subnet-b", "subnet-a"])).unwrap();
        assert_eq!(patch["status"]["subnets"][0]["id"], "subnet-a");
        assert_eq!(patch["status"]["subnets"][1]["id"], "subnet-b");
        assert_eq!(patch["status"]["securityGroups"][0]["id"], "sg-1");
        assert_eq!(patch["status"]["amis"][0]["id"], "ami-1");
        assert!(patch["status"].get("conditions").is_none());

        let stored: AwsNodeTemplateStatus = serde_json::from_value(patch["status"].clone()).unwrap();
        assert_eq!(status_patch(Some(&stored), &resolved(&["subnet-a", "subnet-b"])), None);
        assert_eq!(
            status_patch(Some(&stored), &resolved(&["subnet-b", "subnet-a"])),
            None,
            "order does not matter"
        );
        let changed = status_patch(Some(&stored), &resolved(&["subnet-a"])).unwrap();
        assert_eq!(changed["status"]["subnets"].as_array().unwrap().len(), 1);
    }
}
