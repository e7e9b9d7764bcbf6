//! The pure decisions of deprovisioning, with the time passed in: emptiness
//! (`ttlSecondsAfterEmpty`, `core@v0.27.0:pkg/controllers/node/emptiness.go`,
//! `core@v0.27.0:pkg/controllers/deprovisioning/emptiness.go`) and expiration
//! (`ttlSecondsUntilExpired`, `core@v0.27.0:pkg/controllers/deprovisioning/expiration.go`), and what
//! blocks a voluntary removal: the `karpenter.sh/do-not-evict` opt-out and PodDisruptionBudgets that
//! allow no disruption (`core@v0.27.0:pkg/controllers/deprovisioning/helpers.go`, `pdblimits.go`).
//! `emptiness.rs`, `expiration.rs`, `drift_marks.rs` and `mod.rs` act on these; consolidation's
//! decisions are in `consolidation/decide.rs`. The unit tests are in `decide/tests.rs`.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::VOLUNTARY_DISRUPTION_ANNOTATION;
use crate::apis::v1alpha5::labels::{
    opted_out, DO_NOT_DISRUPT_ANNOTATION, DO_NOT_EVICT_ANNOTATION, EMPTINESS_TIMESTAMP_ANNOTATION, PROVISIONER_NAME_LABEL,
};
use crate::scheduling::nodes::{is_labelled_initialized, is_ready};
use crate::scheduling::pods::{is_daemon_or_mirror, is_mirror_pod, is_terminal, is_terminating};
use crate::scheduling::Selector;

/// What to do about one node and `ttlSecondsAfterEmpty`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Emptiness {
    /// Not a candidate (not ours, no TTL, being deleted, not Ready, or just launched and possibly
    /// about to receive the pods it was launched for): leave it alone.
    Ignore,
    /// Has pods and no emptiness timestamp: nothing to do.
    Occupied,
    /// Has pods but still carries the timestamp: remove it.
    Unmark,
    /// Empty and unmarked: set the timestamp to now.
    Mark,
    /// Empty since the timestamp; delete it at `until`.
    Wait {
        /// When it will have been empty for the TTL.
        until: Timestamp,
    },
    /// Empty for the TTL (or the timestamp cannot be read): delete it.
    Delete,
}

/// Whether a pod keeps a node from being empty: anything but terminal, DaemonSet and mirror pods.
/// A terminating pod still occupies its node until it is gone.
pub fn occupies(pod: &Pod) -> bool {
    !(is_terminal(pod) || is_daemon_or_mirror(pod))
}

/// A running, non-terminating, non-mirror pod annotated `karpenter.sh/do-not-evict: "true"`
/// (or its v0.31 alias `karpenter.sh/do-not-disrupt`).
pub fn do_not_evict(pods: &[Arc<Pod>]) -> Option<&Pod> {
    pods.iter().map(|p| p.as_ref()).find(|p| {
        !is_terminal(p)
            && !is_terminating(p)
            && !is_mirror_pod(p)
            && opted_out(
                p.metadata.annotations.as_ref(),
                &[DO_NOT_EVICT_ANNOTATION, DO_NOT_DISRUPT_ANNOTATION],
            )
            .is_some()
    })
}

/// A PodDisruptionBudget that selects one of `pods` (in its namespace) and allows no disruption
/// now (`status.disruptionsAllowed == 0`): `(pdb, pod)`, both as `namespace/name`. Terminal,
/// terminating, DaemonSet and mirror pods are not evicted and so not counted.
pub fn blocking_pdb(pods: &[Arc<Pod>], pdbs: &[PodDisruptionBudget]) -> Option<(String, String)> {
    let key = |namespace: Option<&String>, name: Option<&String>| {
        format!(
            "{}/{}",
            namespace.map_or("default", String::as_str),
            name.map_or("", String::as_str)
        )
    };
    pods.iter()
        .filter(|p| !(is_terminal(p) || is_terminating(p) || is_daemon_or_mirror(p)))
        .find_map(|pod| {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            pdbs.iter()
                .filter(|b| b.metadata.namespace == pod.metadata.namespace)
                .filter(|b| b.status.as_ref().is_some_and(|s| s.disruptions_allowed == 0))
                .find(|b| Selector::new(b.spec.as_ref().and_then(|s| s.selector.as_ref())).matches(&labels))
                .map(|b| {
                    (
                        key(b.metadata.namespace.as_ref(), b.metadata.name.as_ref()),
                        key(pod.metadata.namespace.as_ref(), pod.metadata.name.as_ref()),
                    )
                })
        })
}

/// Whether `labels` satisfy a label selector of the API's string form, restricted to what a
/// node selector of ours needs: `key`, `!key`, `key=value`, `key==value`, `key!=value`,
/// comma-separated (all must hold). An empty selector selects everything.
pub fn selects(selector: &str, labels: &std::collections::BTreeMap<String, String>) -> bool {
    selector.split(',').map(str::trim).filter(|t| !t.is_empty()).all(|term| {
        if let Some((key, value)) = term.split_once("!=") {
            labels.get(key.trim()).map(String::as_str) != Some(value.trim())
        } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels.get(key.trim()).map(String::as_str) == Some(value.trim())
        } else if let Some(key) = term.strip_prefix('!') {
            !labels.contains_key(key.trim())
        } else {
            labels.contains_key(term)
        }
    })
}

fn created(node: &Node) -> Option<Timestamp> {
    node.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// The emptiness decision for `node` with the pods bound to it, its Provisioner's
/// `ttlSecondsAfterEmpty`, and how long after launch a node is presumed nominated for the pods
/// it was launched for. TTL 0 deletes an empty node at once.
pub fn emptiness(
    node: &Node,
    pods: &[Arc<Pod>],
    ttl_seconds_after_empty: Option<i64>,
    nomination: SignedDuration,
    now: Timestamp,
) -> Emptiness {
    let Some(ttl) = ttl_seconds_after_empty.filter(|t| *t >= 0) else {
        return Emptiness::Ignore;
    };
    if !node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(PROVISIONER_NAME_LABEL))
        || node.metadata.deletion_timestamp.is_some()
    {
        return Emptiness::Ignore;
    }
    let annotation = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EMPTINESS_TIMESTAMP_ANNOTATION));
    if pods.iter().any(|p| occupies(p)) {
        return if annotation.is_some() {
            Emptiness::Unmark
        } else {
            Emptiness::Occupied
        };
    }
    // A node that has not initialised is in flight, never empty
    // (`core@v0.27.0:pkg/controllers/node/emptiness.go`): removing it would launch the same
    // capacity again for the pods on their way to it.
    if !is_labelled_initialized(node) || !is_ready(node) || created(node).is_none_or(|c| now < c + nomination) {
        return Emptiness::Ignore;
    }
    if ttl == 0 {
        return Emptiness::Delete;
    }
    let Some(annotation) = annotation else { return Emptiness::Mark };
    match annotation.parse::<Timestamp>() {
        Ok(since) => {
            // A TTL past the end of the calendar (one that bypassed the webhook's bound) never
            // runs out.
            match after_seconds(since, ttl) {
                Some(until) if now >= until => Emptiness::Delete,
                Some(until) => Emptiness::Wait { until },
                None => Emptiness::Ignore,
            }
        }
        Err(_) => Emptiness::Delete,
    }
}

/// The emptiness timestamp for `now`, as the annotation holds it (RFC 3339, seconds, UTC).
pub fn emptiness_timestamp(now: Timestamp) -> String {
    format!("{now:.0}")
}

/// A node of ours with the pods bound to it and its Provisioner's TTLs, as expiration sees it.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    /// The node.
    pub node: &'a Node,
    /// The pods bound to it.
    pub pods: &'a [Arc<Pod>],
    /// Its Provisioner's `ttlSecondsUntilExpired`.
    pub ttl_seconds_until_expired: Option<i64>,
}

/// When `node` expires, if its Provisioner sets `ttlSecondsUntilExpired`.
pub fn expires_at(node: &Node, ttl_seconds_until_expired: Option<i64>) -> Option<Timestamp> {
    let ttl = ttl_seconds_until_expired.filter(|t| *t >= 0)?;
    after_seconds(created(node)?, ttl)
}

/// `at + seconds`, or None when the date would not be representable (a TTL of a Provisioner that
/// bypassed the webhook's bound never expires).
fn after_seconds(at: Timestamp, seconds: i64) -> Option<Timestamp> {
    at.checked_add(SignedDuration::from_secs(seconds)).ok()
}

/// The outcome of an expiration pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expiration {
    /// The node to replace and delete now (the one that expired first), if any.
    pub expire: Option<String>,
    /// Expired nodes kept for now: (node, why), e.g. a do-not-evict pod or a PodDisruptionBudget
    /// allowing no disruption.
    pub blocked: Vec<(String, String)>,
}

/// The nodes a pass waits for before it starts anything new, and the ones it stopped waiting for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deletions {
    /// Nodes a command of ours deleted less than the deletion timeout ago that are still there:
    /// their evicted pods may be on their way to other nodes, and a fleet rolls one node at a time.
    pub awaited: Vec<String>,
    /// Nodes a command of ours deleted longer than the timeout ago that are still there (a drain
    /// held up by a PodDisruptionBudget, say): the pass no longer waits for them.
    pub overdue: Vec<String>,
}

/// Which of `nodes` being deleted a pass waits for. Only the deletions of our own commands count,
/// known by the `karpenter.sh/voluntary-disruption` annotation a command writes before it deletes (an expired node's
/// replacement); a node someone else deletes (`kubectl delete node` held up by a
/// PodDisruptionBudget) is not waited for, and ours only for `timeout` after the deletion began,
/// so one stuck drain never freezes emptiness and expiration of every other node. Karpenter
/// waited for every deletion for ≈9.5 min and then retried the same wait
/// (`core@v0.27.0:pkg/controllers/deprovisioning/controller.go` `waitForDeletion`), which stalled
/// all deprovisioning behind one PodDisruptionBudget.
pub fn deletions<'a>(nodes: impl IntoIterator<Item = &'a Node>, timeout: SignedDuration, now: Timestamp) -> Deletions {
    let mut outcome = Deletions::default();
    for node in nodes {
        let Some(since) = node.metadata.deletion_timestamp.as_ref().map(|t| t.0) else {
            continue;
        };
        let commanded = node
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(VOLUNTARY_DISRUPTION_ANNOTATION));
        if !commanded {
            continue;
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        // A timeout too long to add is no timeout.
        if since.checked_add(timeout).ok().is_none_or(|until| now < until) {
            outcome.awaited.push(name);
        } else {
            outcome.overdue.push(name);
        }
    }
    outcome.awaited.sort();
    outcome.overdue.sort();
    outcome
}

/// Where a wait for the replacement nodes of a command stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replacements {
    /// Every replacement is there and satisfies the condition (Ready, or initialised).
    Done,
    /// Some are not there yet, or not yet ready.
    Waiting,
    /// The replacement at this index was deleted, or is being deleted: it will never be ready, so
    /// the command is abandoned now rather than at its timeout.
    Gone(usize),
}

/// `nodes[i]` is what the cluster view holds now of the command's i-th replacement, `seen[i]`
/// whether the view held it before (updated here): a node not there yet was just created and the
/// view has not caught up; one that was there and is not any more was deleted.
pub fn replacements(nodes: &[Option<&Node>], seen: &mut [bool], done: impl Fn(&Node) -> bool) -> Replacements {
    let mut all_done = true;
    for (i, node) in nodes.iter().enumerate() {
        match node {
            Some(node) => {
                seen[i] = true;
                if node.metadata.deletion_timestamp.is_some() {
                    return Replacements::Gone(i);
                }
                all_done &= done(node);
            }
            None if seen[i] => return Replacements::Gone(i),
            None => all_done = false,
        }
    }
    if all_done {
        Replacements::Done
    } else {
        Replacements::Waiting
    }
}

/// At most one expired node to replace, oldest expiry first, skipping nodes already being deleted
/// and nodes that run a do-not-evict pod or a pod whose PodDisruptionBudget allows no disruption
/// now. (The pass does not call this while it waits for a deletion of its own, see [`deletions`].)
pub fn expiration(candidates: &[Candidate<'_>], pdbs: &[PodDisruptionBudget], now: Timestamp) -> Expiration {
    let ours = |c: &&Candidate<'_>| {
        c.node
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(PROVISIONER_NAME_LABEL))
    };
    let mut expired: Vec<(Timestamp, &Candidate<'_>)> = candidates
        .iter()
        .filter(ours)
        .filter(|c| c.node.metadata.deletion_timestamp.is_none())
        .filter_map(|c| {
            expires_at(c.node, c.ttl_seconds_until_expired)
                .filter(|at| now > *at)
                .map(|at| (at, c))
        })
        .collect();
    expired.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.node.metadata.name.cmp(&b.1.node.metadata.name)));
    first_unblocked(expired.into_iter().map(|(_, c)| c), pdbs)
}

/// The first of `candidates` (in the order given) that nothing blocks, and the ones before it
/// that something did: a do-not-evict pod, or a PodDisruptionBudget allowing no disruption of one
/// of its pods now. Expiration and drift choose their one node a command this way
/// (`core@v0.27.0:pkg/controllers/deprovisioning/expiration.go`, `drift.go`).
pub fn first_unblocked<'a, 'b: 'a>(candidates: impl IntoIterator<Item = &'a Candidate<'b>>, pdbs: &[PodDisruptionBudget]) -> Expiration {
    let mut outcome = Expiration::default();
    for candidate in candidates {
        let name = candidate.node.metadata.name.clone().unwrap_or_default();
        if let Some(pod) = do_not_evict(candidate.pods) {
            let pod_name = format!(
                "{}/{}",
                pod.metadata.namespace.as_deref().unwrap_or("default"),
                pod.metadata.name.as_deref().unwrap_or_default()
            );
            outcome.blocked.push((name, format!("do-not-evict pod {pod_name}")));
            continue;
        }
        if let Some((pdb, pod)) = blocking_pdb(candidate.pods, pdbs) {
            outcome
                .blocked
                .push((name, format!("PodDisruptionBudget {pdb} allows no disruption of pod {pod}")));
            continue;
        }
        outcome.expire = Some(name);
        break;
    }
    outcome
}

#[cfg(test)]
mod tests;
