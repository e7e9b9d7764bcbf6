//! Drift (`aws@v0.31.0:pkg/cloudprovider/drift.go`,
//! `core@v0.31.0:pkg/controllers/nodeclaim/disruption/drift.go`; on by default, where Karpenter had
//! it behind `featureGates.driftEnabled`, off by default): whether a node of ours no longer matches
//! what its Provisioner and AWSNodeTemplate would launch now. Five checks, in this order, the first
//! that holds naming the drift:
//!
//! * **static**: the `karpenter.sh/provisioner-hash` or `karpenter.k8s.aws/nodetemplate-hash`
//!   written at launch differs from the hash of the objects now (`apis::hash`: labels, taints,
//!   kubelet settings, user data, tags, block devices...; not `weight`, `limits` or the TTLs);
//! * **requirements**: the node's labels no longer satisfy the Provisioner's requirements and
//!   labels (an instance type, zone or capacity type taken out, a label changed);
//! * **ami**: the instance's image is not the one the template resolves now for its instance
//!   type (architecture and accelerator); never for a template with its own `launchTemplate`;
//! * **subnet**: the instance's subnet is not among the subnets the template selects now;
//! * **securitygroup**: the instance's security groups are not the set the template selects now.
//!
//! A node launched before the hashes existed has none: it gets the current ones written (so that
//! later edits count) and is not drifted for their lack. What is unknown (an instance EC2 did not
//! describe, a selector that failed to resolve) is not drift: only what is known to differ is.
//! Pure; `drift_marks.rs` gathers the facts and acts on the outcome.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::apis::hash::{NODE_TEMPLATE_HASH_ANNOTATION, PROVISIONER_HASH_ANNOTATION};
use crate::apis::v1alpha5::labels::{restriction, HOSTNAME_LABEL};
use crate::scheduling::Requirements;

/// The kind of drift, as the `type` label of `karpenter_nodes_drifted` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// The instance's image is not the one the template resolves now.
    Ami,
    /// The instance's subnet is not selected any more.
    Subnet,
    /// The instance's security groups differ from the selected set.
    SecurityGroup,
    /// A launch-affecting field of the Provisioner or AWSNodeTemplate changed.
    Static,
    /// The node's labels no longer satisfy the Provisioner's requirements.
    Requirements,
}

impl Kind {
    /// Every kind, for metrics that show each.
    pub const ALL: [Kind; 5] = [Kind::Ami, Kind::Subnet, Kind::SecurityGroup, Kind::Static, Kind::Requirements];

    /// `ami`, `subnet`, `securitygroup`, `static`, `requirements`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ami => "ami",
            Kind::Subnet => "subnet",
            Kind::SecurityGroup => "securitygroup",
            Kind::Static => "static",
            Kind::Requirements => "requirements",
        }
    }
}

/// A node's drift: its kind and what changed, old and new.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drift {
    /// What kind.
    pub kind: Kind,
    /// What the node has and what would be launched now, in words.
    pub detail: String,
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} drift: {}", self.kind.as_str(), self.detail)
    }
}

/// What EC2 says the node's instance runs, when it said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceFacts {
    /// Its image.
    pub image_id: Option<String>,
    /// Its subnet.
    pub subnet_id: Option<String>,
    /// Its security groups.
    pub security_group_ids: BTreeSet<String>,
}

/// What the node's Provisioner and template stand for now; `None` where it is not known.
#[derive(Clone, Debug, Default)]
pub struct Current {
    /// The Provisioner's name (for the wording).
    pub provisioner: String,
    /// The Provisioner's hash now.
    pub provisioner_hash: String,
    /// The AWSNodeTemplate's name and hash now; `None` with an inline provider.
    pub template: Option<(String, String)>,
    /// The Provisioner's requirements and labels (`scheduling::template::provisioner_requirements`).
    pub requirements: Requirements,
    /// The image a node of this instance type gets now: `Some(None)` when the template has its
    /// own launch template (no AMI drift), `None` when it could not be resolved.
    pub image: Option<Option<String>>,
    /// The subnets the template selects now.
    pub subnets: Option<BTreeSet<String>>,
    /// The security groups the template selects now.
    pub security_groups: Option<BTreeSet<String>>,
}

/// The outcome of checking one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Check {
    /// The drift, if the node has drifted.
    pub drift: Option<Drift>,
    /// Hash annotations the node lacks, to write (a node launched before they existed).
    pub write: Vec<(&'static str, String)>,
}

/// Checks a node with `annotations` and `labels`, whose instance is `instance` (when EC2
/// described it), against what its Provisioner and template stand for now.
pub fn check(
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
    instance: Option<&InstanceFacts>,
    now: &Current,
) -> Check {
    let mut out = Check::default();
    let mut drifts: Vec<Drift> = Vec::new();
    match annotations.get(PROVISIONER_HASH_ANNOTATION) {
        None => out.write.push((PROVISIONER_HASH_ANNOTATION, now.provisioner_hash.clone())),
        Some(old) if *old != now.provisioner_hash => drifts.push(Drift {
            kind: Kind::Static,
            detail: format!(
                "Provisioner {} changed since launch ({PROVISIONER_HASH_ANNOTATION} {old} → {})",
                now.provisioner, now.provisioner_hash
            ),
        }),
        Some(_) => {}
    }
    if let Some((template, hash)) = &now.template {
        match annotations.get(NODE_TEMPLATE_HASH_ANNOTATION) {
            None => out.write.push((NODE_TEMPLATE_HASH_ANNOTATION, hash.clone())),
            Some(old) if old != hash => drifts.push(Drift {
                kind: Kind::Static,
                detail: format!("AWSNodeTemplate {template} changed since launch ({NODE_TEMPLATE_HASH_ANNOTATION} {old} → {hash})"),
            }),
            Some(_) => {}
        }
    }
    if let Err(key) = now.requirements.matched_by(labels) {
        let has = labels
            .get(&key)
            .map_or_else(|| "no such label".to_string(), |v| format!("{key}={v}"));
        let wants = now
            .requirements
            .get(&key)
            .map(|r| {
                r.to_node_selector_requirements(&key)
                    .iter()
                    .map(|s| format!("{} {} {:?}", s.key, s.operator, s.values.clone().unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        drifts.push(Drift {
            kind: Kind::Requirements,
            detail: format!("node has {has}; Provisioner {} now requires {wants}", now.provisioner),
        });
    }
    if let Some(instance) = instance {
        if let (Some(Some(image)), Some(has)) = (&now.image, &instance.image_id) {
            if image != has {
                drifts.push(Drift {
                    kind: Kind::Ami,
                    detail: format!("instance runs image {has}; the template resolves {image} now"),
                });
            }
        }
        if let (Some(subnets), Some(has)) = (&now.subnets, &instance.subnet_id) {
            if !subnets.contains(has) {
                drifts.push(Drift {
                    kind: Kind::Subnet,
                    detail: format!("instance is in subnet {has}; the template selects {} now", list(subnets)),
                });
            }
        }
        if let Some(groups) = &now.security_groups {
            if !instance.security_group_ids.is_empty() && *groups != instance.security_group_ids {
                drifts.push(Drift {
                    kind: Kind::SecurityGroup,
                    detail: format!(
                        "instance has security groups {}; the template selects {} now",
                        list(&instance.security_group_ids),
                        list(groups)
                    ),
                });
            }
        }
    }
    out.drift = drifts.into_iter().next();
    out
}

/// `requirements` without the keys a node never carries as a label (restricted keys, the
/// hostname): a node launched for them lacks them from the start, so comparing them would call
/// every such node drifted and replace it in a loop.
pub fn comparable(mut requirements: Requirements) -> Requirements {
    let never_labelled: Vec<String> = requirements
        .iter()
        .map(|(k, _)| k.to_string())
        .filter(|k| k == HOSTNAME_LABEL || restriction(k).is_some())
        .collect();
    for key in never_labelled {
        requirements.remove(&key);
    }
    requirements
}

fn list(set: &BTreeSet<String>) -> String {
    if set.is_empty() {
        "none".to_string()
    } else {
        set.iter().cloned().collect::<Vec<_>>().join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::Requirement;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn map(items: &[(&str, &str)]) -> BTreeMap<String, String> {
        items.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn current() -> Current {
        Current {
            provisioner: "service".into(),
            provisioner_hash: "111".into(),
            template: Some(("lt".into(), "222".into())),
            requirements: Requirements::new()
                .with(
                    "node.kubernetes.io/instance-type",
                    Requirement::in_values(["t3.large", "t3.xlarge"]),
                )
                .with("team", Requirement::in_values(["a"])),
            image: Some(Some("ami-new".into())),
            subnets: Some(set(&["subnet-a", "subnet-c"])),
            security_groups: Some(set(&["sg-1"])),
        }
    }

    fn hashed() -> BTreeMap<String, String> {
        map(&[(PROVISIONER_HASH_ANNOTATION, "111"), (NODE_TEMPLATE_HASH_ANNOTATION, "222")])
    }

    fn labels() -> BTreeMap<String, String> {
        map(&[("node.kubernetes.io/instance-type", "t3.large"), ("team", "a")])
    }

    fn instance() -> InstanceFacts {
        InstanceFacts {
            image_id: Some("ami-new".into()),
            subnet_id: Some("subnet-a".into()),
            security_group_ids: set(&["sg-1"]),
        }
    }

    #[test]
    fn a_node_matching_everything_has_not_drifted() {
        assert_eq!(check(&hashed(), &labels(), Some(&instance()), &current()), Check::default());
    }

    #[test]
    fn each_kind_of_drift_is_named_with_the_old_and_new_values() {
        type Change = Box<dyn Fn(&mut BTreeMap<String, String>, &mut BTreeMap<String, String>, &mut InstanceFacts)>;
        let cases: Vec<(Kind, Change, &str)> = vec![
            (
                Kind::Static,
                Box::new(|a, _, _| drop(a.insert(PROVISIONER_HASH_ANNOTATION.into(), "000".into()))),
                "000 → 111",
            ),
            (
                Kind::Static,
                Box::new(|a, _, _| drop(a.insert(NODE_TEMPLATE_HASH_ANNOTATION.into(), "000".into()))),
                "000 → 222",
            ),
            (
                Kind::Requirements,
                Box::new(|_, l, _| drop(l.insert("team".into(), "b".into()))),
                "team=b",
            ),
            (
                Kind::Requirements,
                Box::new(|_, l, _| drop(l.insert("node.kubernetes.io/instance-type".into(), "m5.large".into()))),
                "m5.large",
            ),
            (
                Kind::Ami,
                Box::new(|_, _, i| i.image_id = Some("ami-old".into())),
                "ami-old; the template resolves ami-new",
            ),
            (
                Kind::Subnet,
                Box::new(|_, _, i| i.subnet_id = Some("subnet-b".into())),
                "subnet-b; the template selects subnet-a,subnet-c",
            ),
            (
                Kind::SecurityGroup,
                Box::new(|_, _, i| i.security_group_ids = set(&["sg-0"])),
                "sg-0; the template selects sg-1",
            ),
        ];
        for (kind, change, says) in cases {
            let (mut a, mut l, mut i) = (hashed(), labels(), instance());
            change(&mut a, &mut l, &mut i);
            let drift = check(&a, &l, Some(&i), &current()).drift.expect("drifted");
            assert_eq!(drift.kind, kind, "{drift}");
            assert!(drift.to_string().contains(says), "{drift} should say {says:?}");
        }
    }

    #[test]
    fn a_node_without_hashes_gets_them_written_and_is_not_drifted_for_their_lack() {
        let out = check(&BTreeMap::new(), &labels(), Some(&instance()), &current());
        assert_eq!(out.drift, None);
        assert_eq!(
            out.write,
            vec![
                (PROVISIONER_HASH_ANNOTATION, "111".to_string()),
                (NODE_TEMPLATE_HASH_ANNOTATION, "222".to_string())
            ]
        );
        // An inline provider has no template hash to write.
        let inline = Current {
            template: None,
            ..current()
        };
        assert_eq!(check(&BTreeMap::new(), &labels(), None, &inline).write.len(), 1);
    }

    #[test]
    fn what_is_unknown_is_not_drift() {
        let unknown = Current {
            image: None,
            subnets: None,
            security_groups: None,
            ..current()
        };
        let odd = InstanceFacts {
            image_id: Some("ami-old".into()),
            subnet_id: Some("subnet-x".into()),
            security_group_ids: set(&["sg-x"]),
        };
        assert_eq!(check(&hashed(), &labels(), Some(&odd), &unknown).drift, None);
        // No instance facts at all: only the checks that need none.
        assert_eq!(check(&hashed(), &labels(), None, &current()).drift, None);
    }

    #[test]
    fn a_template_with_its_own_launch_template_has_no_ami_drift() {
        let own = Current {
            image: Some(None),
            ..current()
        };
        let old = InstanceFacts {
            image_id: Some("ami-old".into()),
            ..instance()
        };
        assert_eq!(check(&hashed(), &labels(), Some(&old), &own).drift, None);
    }

    #[test]
    fn keys_a_node_never_carries_are_not_compared_so_a_new_node_never_drifts_at_once() {
        let requirements = Requirements::new()
            .with("team", Requirement::in_values(["a"]))
            .with("kubernetes.io/hostname", Requirement::in_values(["h"]))
            .with("kubernetes.io/custom", Requirement::in_values(["x"]));
        // What a launch labels a node with for these requirements.
        let launched = requirements.node_labels();
        let only = Current {
            requirements: comparable(requirements),
            template: None,
            ..current()
        };
        let labels = launched.clone();
        assert_eq!(check(&hashed(), &labels, None, &only).drift, None, "{launched:?}");
    }

    #[test]
    fn static_drift_is_reported_before_the_others() {
        let mut a = hashed();
        a.insert(PROVISIONER_HASH_ANNOTATION.into(), "000".into());
        let old = InstanceFacts {
            image_id: Some("ami-old".into()),
            ..instance()
        };
        assert_eq!(check(&a, &labels(), Some(&old), &current()).drift.unwrap().kind, Kind::Static);
    }
}
