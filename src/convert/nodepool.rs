//! A defaulted, valid Provisioner → a Karpenter v1 NodePool document (core@v1.6.4:
//! pkg/apis/v1/nodepool.go, nodeclaim.go and the CRD's CEL rules), with comments where a
//! setting moved, was a karpenter-rs default, or has no v1 equivalent. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::yaml::{Document, Item, MapBuilder, Node};
use super::class_plan::ClassRef;
use super::duration;
use crate::apis::keys::LAST_APPLIED_ANNOTATION;
use crate::apis::v1alpha5::labels::{
    CAPACITY_TYPE_LABEL, DO_NOT_CONSOLIDATE_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION, HOSTNAME_LABEL,
};
use crate::apis::v1alpha5::{Provisioner, ProvisionerSpec};

/// Keys of the `karpenter.k8s.aws` domain that Karpenter v1's NodePool accepts as labels and
/// requirements (aws@v1.6.3:pkg/apis/crds/karpenter.sh_nodepools.yaml).
pub const V1_AWS_WELL_KNOWN_LABELS: &[&str] = &[
    "karpenter.k8s.aws/capacity-reservation-type",
    "karpenter.k8s.aws/capacity-reservation-id",
    "karpenter.k8s.aws/ec2nodeclass",
    "karpenter.k8s.aws/instance-encryption-in-transit-supported",
    "karpenter.k8s.aws/instance-category",
    "karpenter.k8s.aws/instance-hypervisor",
    "karpenter.k8s.aws/instance-family",
    "karpenter.k8s.aws/instance-generation",
    "karpenter.k8s.aws/instance-local-nvme",
    "karpenter.k8s.aws/instance-size",
    "karpenter.k8s.aws/instance-cpu",
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    "karpenter.k8s.aws/instance-memory",
    "karpenter.k8s.aws/instance-ebs-bandwidth",
    "karpenter.k8s.aws/instance-network-bandwidth",
    "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
];

/// `kubernetes.io` keys Karpenter v1's NodePool accepts outside the `node.kubernetes.io` and
/// `node-restriction.kubernetes.io` domains (core@v1.6.4:pkg/apis/crds/karpenter.sh_nodepools.yaml).
const V1_KUBERNETES_IO_LABELS: &[&str] = &[
    "beta.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/windows-build",
];

/// Why Karpenter v1's NodePool refuses `key` as a label or requirement key, in its CRD's words,
/// or `None`. Its domain rules are plain suffix matches (`notkubernetes.io/a` is restricted),
/// where karpenter-rs's v1alpha5 rules match the domain and its subdomains only.
pub fn v1_label_restriction(key: &str) -> Option<&'static str> {
    let domain = key.split('/').next().unwrap_or_default();
    if key == "karpenter.sh/nodepool" {
        return Some("label \"karpenter.sh/nodepool\" is restricted");
    }
    if key == HOSTNAME_LABEL {
        return Some("label \"kubernetes.io/hostname\" is restricted");
    }
    if domain.ends_with("kubernetes.io")
        && !V1_KUBERNETES_IO_LABELS.contains(&key)
        && !domain.ends_with("node.kubernetes.io")
        && !domain.ends_with("node-restriction.kubernetes.io")
    {
        return Some("label domain \"kubernetes.io\" is restricted");
    }
    if domain.ends_with("k8s.io") && !domain.ends_with("kops.k8s.io") {
        return Some("label domain \"k8s.io\" is restricted");
    }
    if domain.ends_with("karpenter.sh") && key != CAPACITY_TYPE_LABEL {
        return Some("label domain \"karpenter.sh\" is restricted");
    }
    if domain.ends_with("karpenter.k8s.aws") && !V1_AWS_WELL_KNOWN_LABELS.contains(&key) {
        return Some("label domain \"karpenter.k8s.aws\" is restricted");
    }
    None
}

/// The NodePool of a Provisioner that has been defaulted and validated; `typed` is its spec
/// before defaulting, so that defaults can be pointed out.
pub fn convert(p: &Provisioner, typed: &ProvisionerSpec, class: &ClassRef) -> Document {
    let spec = &p.spec;
    let name = p.metadata.name.clone().unwrap_or_default();

    let mut template_spec = MapBuilder::new();
    if let Some(reqs) = &spec.requirements {
        let typed_count = typed.requirements.as_ref().map_or(0, Vec::len);
        let (node, notes) = requirements(reqs, typed_count);
        template_spec.noted("requirements", node, notes);
    }
    for (field, taints) in [("taints", &spec.taints), ("startupTaints", &spec.startup_taints)] {
        if let Some(t) = taints {
            template_spec.field(field, self::taints(t));
        }
    }
    let mut class_ref = MapBuilder::new();
    class_ref.field("group", Node::str("karpenter.k8s.aws"));
    class_ref.field("kind", Node::str("EC2NodeClass"));
    class_ref.field("name", Node::str(class.name.clone()));
    template_spec.noted("nodeClassRef", class_ref.build(), class.notes.clone());
    let (expire, expire_notes) = match (spec.ttl_seconds_until_expired, typed.ttl_seconds_until_expired) {
        (Some(ttl), Some(_)) => (duration(ttl), vec![format!("from ttlSecondsUntilExpired: {ttl}")]),
        (Some(ttl), None) => (
            duration(ttl),
            vec![format!(
                "ttlSecondsUntilExpired was not set: karpenter-rs defaulted it to {ttl} (--default-ttl-seconds-until-expired)."
            )],
        ),
        (None, _) => (
            "Never".to_string(),
            vec![
                "ttlSecondsUntilExpired was not set, so nodes never expired (Karpenter v1 would default expireAfter to 720h).".to_string(),
            ],
        ),
    };
    template_spec.noted("expireAfter", Node::str(expire), expire_notes);

    let mut template = MapBuilder::new();
    if let Some(metadata) = template_metadata(spec) {
        template.field("metadata", metadata);
    }
    template.field("spec", template_spec.build());

    let mut pool = MapBuilder::new();
    pool.field("template", template.build());
    let (disruption, disruption_notes) = disruption(spec, typed);
    pool.noted("disruption", disruption, disruption_notes);
    if let Some(resources) = spec.limits.as_ref().and_then(|l| l.resources.as_ref()) {
        let limits = resources.iter().map(|(k, q)| (k.clone(), q.0.clone())).collect::<BTreeMap<_, _>>();
        pool.field("limits", Node::string_map(&limits));
    }
    if let Some(weight) = spec.weight {
        pool.field("weight", Node::Int(weight.into()));
    }

    let mut root = MapBuilder::new();
    root.field("apiVersion", Node::str("karpenter.sh/v1"));
    root.field("kind", Node::str("NodePool"));
    root.field("metadata", object_metadata(&p.metadata));
    root.field("spec", pool.build());
    Document {
        header: vec![format!(
            "NodePool {name:?}, converted from Provisioner {name:?} (karpenter.sh/v1alpha5) by karpenter-rs convert."
        )],
        root: root.build(),
    }
}

/// `metadata` of a converted object: its name, labels and annotations (not kubectl's record of
/// the old object, not the server-set fields).
pub fn object_metadata(meta: &ObjectMeta) -> Node {
    let mut m = MapBuilder::new();
    m.field("name", Node::str(meta.name.clone().unwrap_or_default()));
    if let Some(labels) = meta.labels.as_ref().filter(|l| !l.is_empty()) {
        m.field("labels", Node::string_map(labels));
    }
    if let Some(annotations) = &meta.annotations {
        let kept: BTreeMap<&String, &String> = annotations.iter().filter(|(k, _)| k.as_str() != LAST_APPLIED_ANNOTATION).collect();
        if !kept.is_empty() {
            m.field("annotations", Node::string_map(kept));
        }
    }
    m.build()
}

/// `template.metadata`: the node labels and annotations, less what v1 refuses.
fn template_metadata(spec: &ProvisionerSpec) -> Option<Node> {
    let mut m = MapBuilder::new();
    if let Some(labels) = &spec.labels {
        let mut kept = BTreeMap::new();
        let mut notes = Vec::new();
        for (k, v) in labels {
            match v1_label_restriction(k) {
                Some(reason) => notes.push(format!("label {k}: {v} is left out: it has no Karpenter v1 equivalent ({reason}).")),
                None => {
                    kept.insert(k.clone(), v.clone());
                }
            }
        }
        m.noted("labels", Node::string_map(&kept), notes);
    }
    if let Some(annotations) = &spec.annotations {
        let mut kept = BTreeMap::new();
        let mut notes = Vec::new();
        for (k, v) in annotations {
            if k == DO_NOT_CONSOLIDATE_ANNOTATION {
                notes.push(format!(
                    "{DO_NOT_CONSOLIDATE_ANNOTATION} has no Karpenter v1 equivalent: v1 reads {DO_NOT_DISRUPT_ANNOTATION} instead, which also keeps drift from replacing the node."
                ));
                kept.insert(DO_NOT_DISRUPT_ANNOTATION.to_string(), v.clone());
            } else {
                kept.insert(k.clone(), v.clone());
            }
        }
        m.noted("annotations", Node::string_map(&kept), notes);
    }
    (!m.is_empty()).then(|| m.build())
}

/// The requirements v1 accepts; the first `typed_count` were typed, the rest are karpenter-rs's
/// defaults.
fn requirements(reqs: &[NodeSelectorRequirement], typed_count: usize) -> (Node, Vec<String>) {
    let mut items = Vec::new();
    let mut notes = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        let values = r.values.as_deref().unwrap_or_default();
        if let Some(reason) = v1_label_restriction(&r.key) {
            notes.push(format!(
                "requirement {} {} {:?} is left out: it has no Karpenter v1 equivalent ({reason}).",
                r.key, r.operator, values
            ));
            continue;
        }
        let mut m = MapBuilder::new();
        m.field("key", Node::str(r.key.clone()));
        m.field("operator", Node::str(r.operator.clone()));
        if let Some(values) = &r.values {
            m.field("values", Node::string_seq(values));
        }
        let item_notes = if i >= typed_count {
            vec!["a karpenter-rs default for Provisioners that did not constrain this key (Karpenter v1 adds none)".to_string()]
        } else {
            Vec::new()
        };
        items.push(Item {
            notes: item_notes,
            value: m.build(),
        });
    }
    (Node::Seq(items), notes)
}

fn taints(taints: &[Taint]) -> Node {
    Node::Seq(
        taints
            .iter()
            .map(|t| {
                let mut m = MapBuilder::new();
                m.field("key", Node::str(t.key.clone()));
                // An empty value is no value, and v1's CRD refuses `value: ""`.
                if let Some(v) = t.value.as_ref().filter(|v| !v.is_empty()) {
                    m.field("value", Node::str(v.clone()));
                }
                m.field("effect", Node::str(t.effect.clone()));
                if let Some(time) = &t.time_added {
                    let shown = serde_json::to_value(time).ok().and_then(|v| v.as_str().map(str::to_string));
                    if let Some(shown) = shown {
                        m.field("timeAdded", Node::str(shown));
                    }
                }
                Item::plain(m.build())
            })
            .collect(),
    )
}

/// `spec.disruption` from the TTLs and consolidation (core@v1.6.4:pkg/apis/v1/nodepool.go
/// `Disruption`).
fn disruption(spec: &ProvisionerSpec, typed: &ProvisionerSpec) -> (Node, Vec<String>) {
    let consolidating = spec.consolidation.as_ref().and_then(|c| c.enabled) == Some(true);
    let mut m = MapBuilder::new();
    let notes;
    if consolidating {
        m.field("consolidationPolicy", Node::str("WhenEmptyOrUnderutilized"));
        m.field("consolidateAfter", Node::str("0s"));
        notes = vec!["from consolidation.enabled: true".to_string()];
    } else if let Some(ttl) = spec.ttl_seconds_after_empty {
        m.field("consolidationPolicy", Node::str("WhenEmpty"));
        m.field("consolidateAfter", Node::str(duration(ttl)));
        notes = if typed.ttl_seconds_after_empty.is_some() {
            vec![format!("from ttlSecondsAfterEmpty: {ttl}")]
        } else {
            vec![format!(
                "ttlSecondsAfterEmpty was not set: karpenter-rs defaulted it to {ttl} (--default-ttl-seconds-after-empty)."
            )]
        };
    } else {
        m.field("consolidationPolicy", Node::str("WhenEmpty"));
        m.field("consolidateAfter", Node::str("Never"));
        notes = vec![
            "neither ttlSecondsAfterEmpty nor consolidation was set, so no node was removed for being empty or underused.".to_string(),
        ];
    }
    (m.build(), notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricts_keys_as_karpenter_v1_does() {
        for allowed in [
            "nodeType",
            "team.example.com/owner",
            "kubernetes.io/arch",
            "node.kubernetes.io/instance-type",
            "node-restriction.kubernetes.io/team",
            "topology.kubernetes.io/zone",
            "karpenter.sh/capacity-type",
            "karpenter.k8s.aws/instance-category",
            "kops.k8s.io/instancegroup",
            "sub.kops.k8s.io/x",
        ] {
            assert_eq!(v1_label_restriction(allowed), None, "{allowed}");
        }
        for refused in [
            "karpenter.sh/nodepool",
            "karpenter.sh/provisioner-name",
            "kubernetes.io/hostname",
            "notkubernetes.io/a",
            "myk8s.io/a",
            "mykarpenter.sh/x",
            "karpenter.k8s.aws/instance-pods",
            "karpenter.sh",
        ] {
            assert!(v1_label_restriction(refused).is_some(), "{refused}");
        }
    }
}
