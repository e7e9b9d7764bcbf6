//! Volume topology (`core@v0.27.0:pkg/controllers/provisioning/volumetopology.go`): a pod whose
//! PersistentVolumeClaim is bound to a zonal volume can only run in that volume's zone, so the
//! volume's node affinity (or, for an unbound claim, its StorageClass's `allowedTopologies`)
//! becomes part of the pod's required node affinity before the simulation sees it. The
//! requirements go into every required term, so relaxing preferences never removes them. A pod
//! whose claim, claim's StorageClass or bound volume does not exist is not provisioned for at all
//! (`validate`, as Karpenter's `validatePersistentVolumeClaims`): a node launched for it could not
//! run it. Pure; the caller passes the objects it has cached.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::storage::v1::StorageClass;

/// The cached volume objects: claims by `namespace/name`, volumes and StorageClasses by name.
#[derive(Clone, Debug, Default)]
pub struct Volumes {
    /// PersistentVolumeClaims by `namespace/name`.
    pub claims: HashMap<String, PersistentVolumeClaim>,
    /// PersistentVolumes by name.
    pub volumes: HashMap<String, PersistentVolume>,
    /// StorageClasses by name.
    pub storage_classes: HashMap<String, StorageClass>,
}

impl Volumes {
    /// The node requirements the pod's claims impose: per claim, the first node-selector term of
    /// its bound volume's required node affinity, or else the first `allowedTopologies` entry of
    /// its StorageClass as `In` requirements. Claims not cached yet impose nothing.
    pub fn requirements(&self, pod: &Pod) -> Vec<NodeSelectorRequirement> {
        let mut out = Vec::new();
        for (_, claim) in self.claims_of(pod) {
            let Some(claim) = claim else {
                continue;
            };
            let spec = claim.spec.as_ref();
            let bound = spec
                .and_then(|s| s.volume_name.as_ref())
                .filter(|n| !n.is_empty())
                .and_then(|n| self.volumes.get(n));
            if let Some(volume) = bound {
                let term = volume
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_affinity.as_ref())
                    .and_then(|a| a.required.as_ref())
                    .and_then(|r| r.node_selector_terms.first());
                out.extend(term.iter().flat_map(|t| t.match_expressions.iter().flatten()).cloned());
                continue;
            }
            let class = spec
                .and_then(|s| s.storage_class_name.as_ref())
                .and_then(|n| self.storage_classes.get(n));
            let topology = class.and_then(|c| c.allowed_topologies.as_ref()).and_then(|t| t.first());
            for expression in topology.iter().flat_map(|t| t.match_label_expressions.iter().flatten()) {
                out.push(NodeSelectorRequirement {
                    key: expression.key.clone(),
                    operator: "In".to_string(),
                    values: Some(expression.values.clone()),
                });
            }
        }
        out
    }

    /// Whether every PersistentVolumeClaim the pod mounts exists, and with it the StorageClass
    /// it names and the volume it is bound to (`core@v0.27.0:pkg/controllers/provisioning/volumetopology.go`
    /// `validatePersistentVolumeClaims`). The error names the first missing object as the API
    /// server would: `persistentvolumeclaim "data" not found`. A claim without a class name, or
    /// with `""` (no dynamic provisioning), names no StorageClass.
    pub fn validate(&self, pod: &Pod) -> Result<(), Missing> {
        for (claim_name, claim) in self.claims_of(pod) {
            let claim = claim.ok_or_else(|| Missing::Claim(claim_name.to_string()))?;
            let spec = claim.spec.as_ref();
            if let Some(class) = spec.and_then(|s| s.storage_class_name.as_deref()).filter(|n| !n.is_empty()) {
                if !self.storage_classes.contains_key(class) {
                    return Err(Missing::StorageClass(class.to_string()));
                }
            }
            if let Some(volume) = spec.and_then(|s| s.volume_name.as_deref()).filter(|n| !n.is_empty()) {
                if !self.volumes.contains_key(volume) {
                    return Err(Missing::Volume(volume.to_string()));
                }
            }
        }
        Ok(())
    }

    /// The claims the pod's volumes name, each with the cached claim (in the pod's namespace) if any.
    fn claims_of<'a>(&'a self, pod: &'a Pod) -> impl Iterator<Item = (&'a str, Option<&'a PersistentVolumeClaim>)> + 'a {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        pod.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| v.persistent_volume_claim.as_ref().map(|c| c.claim_name.as_str()))
            .map(move |name| (name, self.claims.get(&format!("{namespace}/{name}"))))
    }

    /// `constrain` on a shared pod: copied only when its volumes add requirements.
    pub fn constrain_shared(&self, pod: Arc<Pod>) -> Arc<Pod> {
        let requirements = self.requirements(&pod);
        if requirements.is_empty() {
            return pod;
        }
        Arc::new(with_requirements(Arc::unwrap_or_clone(pod), &requirements))
    }

    /// `pod` with its volumes' requirements added to every required node-affinity term (one
    /// term holding only them when it has none). A pod without such volumes is returned as is.
    pub fn constrain(&self, pod: Pod) -> Pod {
        let requirements = self.requirements(&pod);
        if requirements.is_empty() {
            return pod;
        }
        with_requirements(pod, &requirements)
    }
}

/// What a pod's volumes name that does not exist, in the API server's words.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Missing {
    /// The PersistentVolumeClaim.
    #[error("persistentvolumeclaim {0:?} not found")]
    Claim(String),
    /// The StorageClass its claim names.
    #[error("storageclass {0:?} not found")]
    StorageClass(String),
    /// The PersistentVolume its claim is bound to.
    #[error("persistentvolume {0:?} not found")]
    Volume(String),
}

/// `pod` with `requirements` added to every required node-affinity term (one term holding only
/// them when it has none).
fn with_requirements(mut pod: Pod, requirements: &[NodeSelectorRequirement]) -> Pod {
    let spec = pod.spec.get_or_insert_with(Default::default);
    let required = spec
        .affinity
        .get_or_insert_with(Affinity::default)
        .node_affinity
        .get_or_insert_with(NodeAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(NodeSelector::default);
    if required.node_selector_terms.is_empty() {
        required.node_selector_terms.push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_expressions
            .get_or_insert_with(Vec::new)
            .extend(requirements.iter().cloned());
    }
    pod
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ZONE: &str = "topology.kubernetes.io/zone";

    fn pod_with_claims(claims: &[&str], affinity: serde_json::Value) -> Pod {
        let volumes: Vec<serde_json::Value> = claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "shop"},
            "spec": {"containers": [], "volumes": volumes, "affinity": affinity}
        }))
        .unwrap()
    }

    fn volumes() -> Volumes {
        let claim = |name: &str, spec: serde_json::Value| -> (String, PersistentVolumeClaim) {
            (
                format!("shop/{name}"),
                serde_json::from_value(json!({"metadata": {"name": name, "namespace": "shop"}, "spec": spec})).unwrap(),
            )
        };
        Volumes {
            claims: [
                claim("bound", json!({"volumeName": "pv-2c"})),
                claim("unbound", json!({"storageClassName": "zonal"})),
                claim("anywhere", json!({"storageClassName": "standard"})),
            ]
            .into(),
            volumes: [(
                "pv-2c".to_string(),
                serde_json::from_value(json!({
                    "metadata": {"name": "pv-2c"},
                    "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["ap-northeast-2c"]}]},
                        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["ap-northeast-2a"]}]}
                    ]}}}
                }))
                .unwrap(),
            )]
            .into(),
            storage_classes: [
                (
                    "zonal".to_string(),
                    serde_json::from_value(json!({
                        "metadata": {"name": "zonal"}, "provisioner": "ebs.csi.aws.com",
                        "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE, "values": ["ap-northeast-2a"]}]}]
                    }))
                    .unwrap(),
                ),
                (
                    "standard".to_string(),
                    serde_json::from_value(json!({"metadata": {"name": "standard"}, "provisioner": "ebs.csi.aws.com"})).unwrap(),
                ),
            ]
            .into(),
        }
    }

    fn zones(requirements: &[NodeSelectorRequirement]) -> Vec<String> {
        requirements
            .iter()
            .filter(|r| r.key == ZONE)
            .flat_map(|r| r.values.clone().unwrap_or_default())
            .collect()
    }

    fn required_terms(pod: Pod) -> Vec<NodeSelectorTerm> {
        pod.spec
            .and_then(|s| s.affinity)
            .and_then(|a| a.node_affinity)
            .and_then(|n| n.required_during_scheduling_ignored_during_execution)
            .map(|r| r.node_selector_terms)
            .unwrap_or_default()
    }

    #[test]
    fn a_bound_claim_pins_the_zone_of_its_volume() {
        let pod = pod_with_claims(&["bound"], json!(null));
        assert_eq!(zones(&volumes().requirements(&pod)), ["ap-northeast-2c"], "the first term only");
    }

    #[test]
    fn an_unbound_claim_uses_its_storage_class_topology() {
        let pod = pod_with_claims(&["unbound"], json!(null));
        let requirements = volumes().requirements(&pod);
        assert_eq!(zones(&requirements), ["ap-northeast-2a"]);
        assert_eq!(requirements[0].operator, "In");
    }

    #[test]
    fn claims_without_topology_or_not_cached_add_nothing() {
        let pod = pod_with_claims(&["anywhere", "missing"], json!(null));
        assert!(volumes().requirements(&pod).is_empty());
        assert_eq!(volumes().constrain(pod.clone()), pod);
    }

    #[test]
    fn a_pod_whose_claim_class_or_volume_is_missing_is_invalid_naming_it() {
        let mut v = volumes();
        let claim = |spec: serde_json::Value| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "x", "namespace": "shop"}, "spec": spec})).unwrap()
        };
        v.claims.insert("shop/fast".into(), claim(json!({"storageClassName": "fast"})));
        v.claims.insert("shop/lost".into(), claim(json!({"volumeName": "pv-gone"})));
        v.claims.insert("shop/static".into(), claim(json!({"storageClassName": ""})));
        v.claims.insert("shop/default".into(), claim(json!({})));
        let cases = [
            (vec!["bound", "unbound", "anywhere"], Ok(())),
            (vec!["static", "default"], Ok(())),
            (vec!["bound", "data"], Err(r#"persistentvolumeclaim "data" not found"#)),
            (vec!["fast"], Err(r#"storageclass "fast" not found"#)),
            (vec!["lost"], Err(r#"persistentvolume "pv-gone" not found"#)),
        ];
        for (claims, want) in cases {
            let pod = pod_with_claims(&claims, json!(null));
            assert_eq!(
                v.validate(&pod).map_err(|e| e.to_string()),
                want.map_err(String::from),
                "{claims:?}"
            );
        }
        // Claims are looked up in the pod's own namespace.
        let mut elsewhere = pod_with_claims(&["bound"], json!(null));
        elsewhere.metadata.namespace = Some("other".into());
        assert_eq!(v.validate(&elsewhere), Err(Missing::Claim("bound".into())));
        assert_eq!(
            Missing::Claim("bound".into()).to_string(),
            r#"persistentvolumeclaim "bound" not found"#
        );
    }

    #[test]
    fn the_requirements_go_into_every_required_term() {
        let affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]},
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}
        ]}}});
        let pod = volumes().constrain(pod_with_claims(&["bound"], affinity));
        let terms = required_terms(pod);
        assert_eq!(terms.len(), 2);
        for term in terms {
            let expressions = term.match_expressions.unwrap();
            assert_eq!(zones(&expressions), ["ap-northeast-2c"]);
            assert_eq!(expressions.len(), 2);
        }
    }

    #[test]
    fn a_pod_without_affinity_gets_one_term() {
        let pod = volumes().constrain(pod_with_claims(&["bound"], json!(null)));
        let terms = required_terms(pod);
        assert_eq!(terms.len(), 1);
        assert_eq!(zones(terms[0].match_expressions.as_ref().unwrap()), ["ap-northeast-2c"]);
    }
}
