//! A node's explanation in one short line, for a column (`karpenter-rs nodes`' WHY): the one
//! reason it stays, or what happens to it next. Read only from the explanation's fields, so a
//! view that holds an explanation (its own or a controller's) shows the same line. Pure.

use super::dollars;
use super::node::{Method, NodeExplanation};

impl NodeExplanation {
    /// The one line of `headline`'s method: what it does now, consolidation's first blocker or
    /// why it keeps the node, the next expiry, emptiness's state.
    pub fn reason(&self) -> String {
        let Some(m) = headline(&self.methods) else {
            return NO_METHOD.to_string();
        };
        if m.acts {
            return acting(m, self);
        }
        match m.method.as_str() {
            "consolidation" => match m.state.strip_prefix("kept: ") {
                Some(why) => why.to_string(),
                None => {
                    let why = m
                        .state
                        .strip_prefix("blocked: ")
                        .or_else(|| m.state.strip_prefix("not a candidate: "))
                        .unwrap_or(&m.state);
                    format!("consolidation: {why}")
                }
            },
            "expiration" => match (m.state.strip_prefix("expires at "), m.blockers.first()) {
                (Some(at), _) => format!("expires {}", at.split(" (").next().unwrap_or(at)),
                (None, Some(blocker)) => format!("expired, kept: {blocker}"),
                (None, None) => m.state.clone(),
            },
            _ => m.state.clone(),
        }
    }
}

/// What a node no method applies to says.
pub(super) const NO_METHOD: &str = "no deprovisioning method applies";

/// The method that says most about the node now, in this order: one that acts now (in a pass's
/// order: expiry and drift first), consolidation unless it is off, expiration once a TTL is set,
/// emptiness once a TTL is set. The one rule behind both the `Why` line (`summary`) and the WHY
/// column (`reason`).
pub(super) fn headline(methods: &[Method]) -> Option<&Method> {
    let method = |name: &str| methods.iter().find(|m| m.method == name);
    methods
        .iter()
        .find(|m| m.acts)
        .or_else(|| method("consolidation").filter(|m| !m.state.starts_with("off")))
        .or_else(|| method("expiration").filter(|m| m.state.starts_with("expires at ") || m.state.starts_with("expired")))
        .or_else(|| method("emptiness").filter(|m| !m.state.ends_with("is not set")))
}

/// The line for a method that acts now.
fn acting(m: &Method, n: &NodeExplanation) -> String {
    match m.method.as_str() {
        "expiration" => "expired: replaced by the next pass".to_string(),
        "drift" => "drifted: replaced by the next pass".to_string(),
        "consolidation" if m.state.starts_with("would delete") => {
            let saves = n.removal.cluster_price_before - n.removal.cluster_price_after;
            if saves > 0.0 {
                format!("consolidation would delete it (pods fit elsewhere), saving {}", dollars(saves))
            } else {
                "consolidation would delete it (pods fit elsewhere)".to_string()
            }
        }
        "consolidation" => "consolidation would replace it with a cheaper node".to_string(),
        // Emptiness's states say it all ("empty: deleted at ...").
        _ => m.state.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::node::Removal;
    use super::*;

    fn method(name: &str, acts: bool, state: &str, blockers: &[&str]) -> Method {
        Method {
            method: name.to_string(),
            acts,
            state: state.to_string(),
            blockers: blockers.iter().map(|b| b.to_string()).collect(),
        }
    }

    /// A node with the four methods in a pass's order: none acting unless replaced.
    fn explained(replace: &[Method]) -> NodeExplanation {
        let mut methods = vec![
            method("expiration", false, "ttlSecondsUntilExpired is not set", &[]),
            method("drift", false, "not drifted as of the last check", &[]),
            method("emptiness", false, "ttlSecondsAfterEmpty is not set", &[]),
            method(
                "consolidation",
                false,
                "off: its Provisioner does not set consolidation.enabled",
                &[],
            ),
        ];
        for r in replace {
            let slot = methods.iter_mut().find(|m| m.method == r.method).expect("a known method");
            *slot = r.clone();
        }
        NodeExplanation {
            node: "a".to_string(),
            provisioner: Some("default".to_string()),
            instance_type: Some("m5.large".to_string()),
            capacity_type: Some("on-demand".to_string()),
            zone: Some("us-west-2a".to_string()),
            price_per_hour: Some(0.096),
            created: Some("2026-12-01T00:00:00Z".to_string()),
            age_seconds: Some(60),
            pods: vec![],
            methods,
            summary: String::new(),
            removal: Removal {
                moves: vec![],
                cluster_price_before: 0.192,
                cluster_price_after: 0.096,
                every_pod_placed: true,
            },
        }
    }

    #[test]
    fn consolidation_blockers_are_named_in_consolidations_words() {
        let blocked = explained(&[method(
            "consolidation",
            false,
            "blocked: pod ns/x has do not evict annotation",
            &["pod ns/x has do not evict annotation", "pdb ns/pdb prevents pod evictions"],
        )]);
        assert_eq!(blocked.reason(), "consolidation: pod ns/x has do not evict annotation");
        let pdb = explained(&[method("consolidation", false, "blocked: pdb ns/pdb prevents pod evictions", &[])]);
        assert_eq!(pdb.reason(), "consolidation: pdb ns/pdb prevents pod evictions");
        let young = explained(&[method(
            "consolidation",
            false,
            "not a candidate: received a pod in the last 15s",
            &[],
        )]);
        assert_eq!(young.reason(), "consolidation: received a pod in the last 15s");
    }

    #[test]
    fn a_node_consolidation_keeps_says_why_with_both_prices() {
        let why = "can't replace with a cheaper node: $0.0832/h now, the cheapest replacement $0.0928/h";
        let kept = explained(&[method("consolidation", false, &format!("kept: {why}"), &[why])]);
        assert_eq!(kept.reason(), why);
    }

    #[test]
    fn a_node_consolidation_would_remove_says_delete_or_replace() {
        let delete = explained(&[method(
            "consolidation",
            true,
            "would delete, terminating 1 node(s) a, moving 2 pod(s), $0.1920/h → $0.0960/h",
            &[],
        )]);
        assert_eq!(
            delete.reason(),
            "consolidation would delete it (pods fit elsewhere), saving $0.0960/h"
        );
        let replace = explained(&[method(
            "consolidation",
            true,
            "would replace, terminating 1 node(s) a and replacing ...",
            &[],
        )]);
        assert_eq!(replace.reason(), "consolidation would replace it with a cheaper node");
    }

    #[test]
    fn emptiness_says_when_the_node_goes_and_wins_over_a_blocked_consolidation() {
        let empty = explained(&[
            method("emptiness", true, "empty: deleted at 2026-12-01T00:10:20Z", &[]),
            method("consolidation", false, "blocked: node is not initialized", &[]),
        ]);
        assert_eq!(empty.reason(), "empty: deleted at 2026-12-01T00:10:20Z");
        let occupied = explained(&[method("emptiness", false, "not empty: 2 pod(s), e.g. ns/x", &[])]);
        assert_eq!(occupied.reason(), "not empty: 2 pod(s), e.g. ns/x");
    }

    #[test]
    fn expiry_says_when_and_an_expired_node_what_keeps_it() {
        let later = explained(&[method("expiration", false, "expires at 2026-12-20T10:00:00Z (in 19d 10h)", &[])]);
        assert_eq!(later.reason(), "expires 2026-12-20T10:00:00Z");
        let now = explained(&[method(
            "expiration",
            true,
            "expired at 2026-12-01T00:00:00Z: replaced by a pass",
            &[],
        )]);
        assert_eq!(now.reason(), "expired: replaced by the next pass");
        let kept = explained(&[method(
            "expiration",
            false,
            "expired at 2026-12-01T00:00:00Z, kept for now",
            &["pdb ns/pdb prevents pod evictions"],
        )]);
        assert_eq!(kept.reason(), "expired, kept: pdb ns/pdb prevents pod evictions");
    }

    #[test]
    fn drift_acts_before_emptiness_and_nothing_applying_is_said() {
        let drifted = explained(&[
            method("drift", true, "drifted: replaced by a pass, one node at a time", &[]),
            method("emptiness", true, "empty: deleted at 2026-12-01T00:10:20Z", &[]),
        ]);
        assert_eq!(drifted.reason(), "drifted: replaced by the next pass");
        assert_eq!(explained(&[]).reason(), "no deprovisioning method applies");
    }

    /// The `Why` line and the WHY column pick the same method: an expiry beats an emptiness
    /// that is only "not empty", a blocked consolidation beats both, and a node nothing applies
    /// to says so in both.
    #[test]
    fn the_why_line_and_the_reason_name_the_same_method() {
        use super::super::node::summary;
        let expiring = explained(&[
            method("expiration", false, "expires at 2026-12-20T10:00:00Z (in 19d 10h)", &[]),
            method("emptiness", false, "not empty: 2 pod(s), e.g. ns/x", &[]),
        ]);
        assert_eq!(
            summary(&expiring.methods),
            "expiration: expires at 2026-12-20T10:00:00Z (in 19d 10h)"
        );
        assert_eq!(expiring.reason(), "expires 2026-12-20T10:00:00Z");
        let blocked = explained(&[
            method("expiration", false, "expires at 2026-12-20T10:00:00Z (in 19d 10h)", &[]),
            method("consolidation", false, "blocked: node is not initialized", &[]),
        ]);
        assert_eq!(summary(&blocked.methods), "consolidation blocked: node is not initialized");
        assert_eq!(blocked.reason(), "consolidation: node is not initialized");
        let nothing = explained(&[]);
        assert_eq!(summary(&nothing.methods), NO_METHOD);
        assert_eq!(nothing.reason(), NO_METHOD);
    }
}
