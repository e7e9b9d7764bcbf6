//! Preference relaxation: a pod's soft constraints are honoured as hard ones until the pod fails
//! to schedule; then one is dropped per failed attempt, in Karpenter's order. No I/O here.

use super::pods::PodState;
use super::taints::{tolerate_prefer_no_schedule, toleration_matches, PREFER_NO_SCHEDULE};

/// Drops one soft constraint of `pod`, first applicable wins:
/// 1. the first required node-affinity term, when more than one remains (terms are OR-ed);
/// 2. the heaviest preferred pod-affinity term;
/// 3. the heaviest preferred pod-anti-affinity term;
/// 4. the heaviest preferred node-affinity term;
/// 5. one `ScheduleAnyway` topology spread constraint;
/// 6. when some Provisioner has a `PreferNoSchedule` taint, tolerate every `PreferNoSchedule` taint.
///
/// Returns what was relaxed, or None when nothing is left to relax.
pub(crate) fn relax(pod: &mut PodState, tolerate_prefer_no_schedule_taints: bool) -> Option<String> {
    let relaxed = if pod.required_terms.len() > 1 {
        pod.required_terms.remove(0);
        Some("removed required node affinity term #0".to_string())
    } else if !pod.preferred_affinity.is_empty() {
        let (w, t) = pod.preferred_affinity.remove(0);
        Some(format!(
            "removed preferred pod affinity term (weight {w}, topologyKey {})",
            t.topology_key
        ))
    } else if !pod.preferred_anti_affinity.is_empty() {
        let (w, t) = pod.preferred_anti_affinity.remove(0);
        Some(format!(
            "removed preferred pod anti-affinity term (weight {w}, topologyKey {})",
            t.topology_key
        ))
    } else if !pod.preferred_terms.is_empty() {
        let (w, _) = pod.preferred_terms.remove(0);
        Some(format!("removed preferred node affinity term (weight {w})"))
    } else if let Some(i) = pod.spread.iter().position(|c| c.when_unsatisfiable == "ScheduleAnyway") {
        let c = pod.spread.remove(i);
        Some(format!("removed ScheduleAnyway topology spread constraint on {}", c.topology_key))
    } else if tolerate_prefer_no_schedule_taints && !tolerates_all_prefer_no_schedule(pod) {
        pod.tolerations.push(tolerate_prefer_no_schedule());
        Some("tolerated PreferNoSchedule taints".to_string())
    } else {
        None
    };
    if relaxed.is_some() {
        pod.refresh_requirements();
    }
    relaxed
}

fn tolerates_all_prefer_no_schedule(pod: &PodState) -> bool {
    let probe = k8s_openapi::api::core::v1::Taint {
        key: String::new(),
        effect: PREFER_NO_SCHEDULE.to_string(),
        ..Default::default()
    };
    pod.tolerations
        .iter()
        .any(|t| t.key.as_deref().unwrap_or("").is_empty() && toleration_matches(t, &probe))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::testing::pod;

    #[test]
    fn relaxes_one_preference_at_a_time_in_karpenters_order() {
        let p = pod("p")
            .required_term(&[("team", "In", &["a"])])
            .required_term(&[("team", "In", &["b"])])
            .preferred_anti_affinity(10, "kubernetes.io/hostname", &[("app", "web")])
            .preferred_term(5, &[("disk", "In", &["ssd"])])
            .spread("topology.kubernetes.io/zone", 1, "ScheduleAnyway", &[("app", "web")])
            .spread("kubernetes.io/hostname", 1, "DoNotSchedule", &[("app", "web")])
            .build();
        let mut s = PodState::new(&p);
        let mut steps = Vec::new();
        while let Some(step) = relax(&mut s, true) {
            steps.push(step);
        }
        assert_eq!(
            steps,
            [
                "removed required node affinity term #0",
                "removed preferred pod anti-affinity term (weight 10, topologyKey kubernetes.io/hostname)",
                "removed preferred node affinity term (weight 5)",
                "removed ScheduleAnyway topology spread constraint on topology.kubernetes.io/zone",
                "tolerated PreferNoSchedule taints",
            ]
        );
        assert_eq!(s.requirements.to_string(), "team In [b]");
        assert_eq!(s.spread.len(), 1, "DoNotSchedule constraints are never relaxed");
    }

    #[test]
    fn leaves_prefer_no_schedule_alone_when_no_provisioner_has_such_a_taint() {
        let mut s = PodState::new(&pod("p").build());
        assert_eq!(relax(&mut s, false), None);
    }
}
