//! The Node object karpenter-rs creates right after an instance is launched (Karpenter v0.27's
//! model, `core@v0.27.0:pkg/controllers/provisioning/provisioner.go` `Launch`, kept on purpose where
//! v0.28+ lets the kubelet register the Node): named after the instance, with its provider ID,
//! labels, taints, startup taints and the termination finalizer, so in-flight capacity is visible
//! at once and survives restarts. Pure; no I/O here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::apis::hash::{node_template_hash, provisioner_hash, NODE_TEMPLATE_HASH_ANNOTATION, PROVISIONER_HASH_ANNOTATION};
use crate::apis::v1alpha1::AwsNodeTemplateSpec;
use crate::apis::v1alpha5::labels::{
    CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, PRICE_ANNOTATION, PRICE_CAPACITY_TYPE_ANNOTATION, PRICE_ZONE_ANNOTATION, PROVISIONER_NAME_LABEL,
    REGION_LABEL, TERMINATION_FINALIZER, ZONE_LABEL,
};
use crate::apis::v1alpha5::Provisioner;
use crate::cloudprovider::Instance;
use crate::scheduling::InstanceType;

/// What the cloud reported about a launched instance, and what its instance type offers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaunchedInstance {
    /// EC2 instance id.
    pub id: String,
    /// Availability zone it runs in.
    pub zone: String,
    /// Region.
    pub region: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
    /// Private DNS name (`ip-10-0-1-23.ap-northeast-2.compute.internal`), empty if unknown.
    pub private_dns_name: String,
    /// Single-valued labels of its instance type (instance type, arch, os, category, ...).
    pub instance_type_labels: BTreeMap<String, String>,
    /// USD per hour of the offering it was launched as, when known.
    pub price: Option<f64>,
}

impl LaunchedInstance {
    /// `aws:///<zone>/<instance-id>`.
    pub fn provider_id(&self) -> String {
        format!("aws:///{}/{}", self.zone, self.id)
    }

    /// The node name: the lowercased private DNS name, or the instance id when there is none.
    pub fn node_name(&self) -> String {
        if self.private_dns_name.is_empty() {
            self.id.clone()
        } else {
            self.private_dns_name.to_lowercase()
        }
    }
}

/// The launched instance as its Node will describe it.
pub fn launched(instance: &Instance, instance_type: Option<&InstanceType>, region: &str, price: Option<f64>) -> LaunchedInstance {
    let mut labels = instance_type.map(|it| it.requirements.labels()).unwrap_or_default();
    // The instance's own zone and capacity type replace whatever the type offers.
    labels.remove(ZONE_LABEL);
    labels.remove(CAPACITY_TYPE_LABEL);
    LaunchedInstance {
        id: instance.id.clone(),
        zone: instance.zone.clone(),
        region: region.to_string(),
        capacity_type: instance.capacity_type.clone(),
        private_dns_name: instance.private_dns_name.clone(),
        instance_type_labels: labels,
        price,
    }
}

/// The Node for `instance`, launched for `provisioner` with the AWSNodeTemplate `template` (its
/// `spec.providerRef`, if it has one). `requirement_labels` are the labels the planned node takes
/// from custom requirement keys (one value each). It carries the static-drift hashes of both
/// (`apis::hash`).
pub fn node_for(
    provisioner: &Provisioner,
    template: Option<&AwsNodeTemplateSpec>,
    instance: &LaunchedInstance,
    requirement_labels: &BTreeMap<String, String>,
) -> Node {
    let provisioner_name = provisioner.metadata.name.clone().unwrap_or_default();
    let spec = &provisioner.spec;
    // Later entries win: requirement-derived labels, then the Provisioner's labels, then what
    // the cloud knows for certain about the instance.
    let mut labels = requirement_labels.clone();
    labels.extend(spec.labels.clone().unwrap_or_default());
    labels.extend(instance.instance_type_labels.clone());
    labels.insert(ZONE_LABEL.into(), instance.zone.clone());
    if !instance.region.is_empty() {
        labels.insert(REGION_LABEL.into(), instance.region.clone());
    }
    labels.insert(CAPACITY_TYPE_LABEL.into(), instance.capacity_type.clone());
    labels.insert(PROVISIONER_NAME_LABEL.into(), provisioner_name.clone());
    labels.insert(HOSTNAME_LABEL.into(), instance.node_name());

    let mut taints: Vec<Taint> = spec.taints.clone().unwrap_or_default();
    for t in spec.startup_taints.iter().flatten() {
        if !taints.iter().any(|x| x.key == t.key && x.effect == t.effect) {
            taints.push(t.clone());
        }
    }
    let owner = provisioner.metadata.uid.as_ref().map(|uid| OwnerReference {
        api_version: Provisioner::api_version(&()).into_owned(),
        kind: Provisioner::kind(&()).into_owned(),
        name: provisioner_name.clone(),
        uid: uid.clone(),
        block_owner_deletion: Some(true),
        controller: None,
    });
    // The Provisioner's annotations, then the price the offering was chosen at (what the node
    // viewer and the price metric read).
    let mut annotations = spec.annotations.clone().unwrap_or_default();
    if let Some(price) = instance.price.filter(|p| p.is_finite() && *p >= 0.0) {
        annotations.insert(PRICE_ANNOTATION.into(), format!("{price}"));
        annotations.insert(PRICE_CAPACITY_TYPE_ANNOTATION.into(), instance.capacity_type.clone());
        annotations.insert(PRICE_ZONE_ANNOTATION.into(), instance.zone.clone());
    }
    annotations.insert(PROVISIONER_HASH_ANNOTATION.into(), provisioner_hash(spec));
    if let Some(template) = template {
        annotations.insert(NODE_TEMPLATE_HASH_ANNOTATION.into(), node_template_hash(template));
    }
    Node {
        metadata: ObjectMeta {
            name: Some(instance.node_name()),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: Some(vec![TERMINATION_FINALIZER.into()]),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(instance.provider_id()),
            taints: (!taints.is_empty()).then_some(taints),
            ..Default::default()
        }),
        // No status: only the kubelet reports what the node has (as in Karpenter v0.27), so
        // kube-scheduler places nothing here before the kubelet runs. The simulation counts
        // what the instance type offers meanwhile (`scheduling::ExistingNode::expect`).
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service() -> Provisioner {
        let mut p: Provisioner =
            serde_yaml_ng::from_str(include_str!("../../../tests/fixtures/first-writeup/provisioner.yaml")).expect("fixture parses");
        p.metadata.uid = Some("uid-1".into());
        p.spec.startup_taints = Some(vec![Taint {
            key: "cni".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]);
        p
    }

    fn instance() -> LaunchedInstance {
        LaunchedInstance {
            id: "i-0abc".into(),
            zone: "ap-northeast-2a".into(),
            region: "ap-northeast-2".into(),
            capacity_type: "on-demand".into(),
            private_dns_name: "IP-10-0-1-23.ap-northeast-2.compute.internal".into(),
            instance_type_labels: BTreeMap::from([("node.kubernetes.io/instance-type".into(), "t3.large".into())]),
            price: Some(0.104),
        }
    }

    #[test]
    fn node_carries_identity_labels_taints_and_finalizer() {
        let node = node_for(&service(), None, &instance(), &BTreeMap::new());
        let v = serde_json::to_value(&node).unwrap();
        assert_eq!(v["metadata"]["name"], "ip-10-0-1-23.ap-northeast-2.compute.internal");
        assert_eq!(v["spec"]["providerID"], "aws:///ap-northeast-2a/i-0abc");
        let labels = &v["metadata"]["labels"];
        assert_eq!(labels["nodeType"], "service-2023");
        assert_eq!(labels["karpenter.sh/provisioner-name"], "service");
        assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
        assert_eq!(labels["topology.kubernetes.io/zone"], "ap-northeast-2a");
        assert_eq!(labels["node.kubernetes.io/instance-type"], "t3.large");
        assert_eq!(
            v["spec"]["taints"],
            json!([{"key": "service", "value": "true", "effect": "NoSchedule"}, {"key": "cni", "effect": "NoSchedule"}])
        );
        assert_eq!(v["metadata"]["finalizers"], json!(["karpenter.sh/termination"]));
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Provisioner");
        assert!(v.get("status").is_none(), "only the kubelet reports capacity: {}", v["status"]);
    }

    #[test]
    fn the_node_carries_its_launch_price_beside_the_provisioners_annotations() {
        let mut p = service();
        p.spec.annotations = Some(BTreeMap::from([("team".to_string(), "a".to_string())]));
        let node = node_for(&p, None, &instance(), &BTreeMap::new());
        let annotations = node.metadata.annotations.clone().unwrap();
        assert_eq!(annotations["team"], "a");
        assert_eq!(annotations[PRICE_ANNOTATION], "0.104");
        assert_eq!(annotations[PRICE_CAPACITY_TYPE_ANNOTATION], "on-demand");
        assert_eq!(annotations[PRICE_ZONE_ANNOTATION], "ap-northeast-2a");
        let read = crate::controllers::status::node_metrics::launch_price(&node).unwrap();
        assert_eq!((read.usd_per_hour, read.zone.as_str()), (0.104, "ap-northeast-2a"));

        let mut unpriced = instance();
        unpriced.price = None;
        let annotations = node_for(&service(), None, &unpriced, &BTreeMap::new())
            .metadata
            .annotations
            .unwrap();
        assert!(!annotations.contains_key(PRICE_ANNOTATION), "{annotations:?}");
    }

    #[test]
    fn the_node_carries_the_static_drift_hashes_of_its_provisioner_and_template() {
        let template: AwsNodeTemplateSpec = serde_json::from_value(json!({"subnetSelector": {"a": "b"}, "tags": {"x": "y"}})).unwrap();
        let node = node_for(&service(), Some(&template), &instance(), &BTreeMap::new());
        let annotations = node.metadata.annotations.unwrap();
        assert_eq!(annotations[PROVISIONER_HASH_ANNOTATION], provisioner_hash(&service().spec));
        assert_eq!(annotations[NODE_TEMPLATE_HASH_ANNOTATION], node_template_hash(&template));
        // An inline provider has no template hash.
        let inline = node_for(&service(), None, &instance(), &BTreeMap::new());
        assert!(!inline.metadata.annotations.unwrap().contains_key(NODE_TEMPLATE_HASH_ANNOTATION));
    }

    #[test]
    fn falls_back_to_the_instance_id_for_the_name() {
        let mut i = instance();
        i.private_dns_name.clear();
        assert_eq!(
            node_for(&service(), None, &i, &BTreeMap::new()).metadata.name.as_deref(),
            Some("i-0abc")
        );
    }

    #[test]
    fn the_cloud_wins_over_user_labels_for_what_it_knows() {
        let mut p = service();
        p.spec
            .labels
            .get_or_insert_with(Default::default)
            .insert("topology.kubernetes.io/zone".into(), "elsewhere".into());
        let node = node_for(&p, None, &instance(), &BTreeMap::from([("team".to_string(), "a".to_string())]));
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["topology.kubernetes.io/zone"], "ap-northeast-2a");
        assert_eq!(labels["team"], "a");
    }
}
