//! Taints and tolerations, with Kubernetes' matching rules. The simulation checks every effect
//! (NoSchedule, PreferNoSchedule and NoExecute) of a Provisioner's `taints`; its `startupTaints`
//! are never checked, since a daemon removes them after the node starts. No I/O here.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// `PreferNoSchedule`, the only effect the scheduler may ignore as a last resort.
pub const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";

/// Whether one toleration tolerates one taint (the rules of `v1.Toleration.ToleratesTaint`): the
/// effects match or the toleration names none; the keys match or the toleration names none; and
/// `Exists` tolerates any value while `Equal` (the default) needs the same value.
pub fn toleration_matches(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "Exists" => true,
        "" | "Equal" => toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

/// The first taint no toleration tolerates, if any.
pub fn first_untolerated<'a>(tolerations: &[Toleration], taints: &'a [Taint]) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|taint| !tolerations.iter().any(|t| toleration_matches(t, taint)))
}

/// Ok when every taint is tolerated, else `did not tolerate taint key=value:Effect`.
pub fn tolerates_all(tolerations: &[Toleration], taints: &[Taint]) -> Result<(), String> {
    match first_untolerated(tolerations, taints) {
        None => Ok(()),
        Some(t) => Err(format!("did not tolerate taint {}", show_taint(t))),
    }
}

/// A taint as users write it: `key=value:Effect`, or `key:Effect` without a value.
pub fn show_taint(t: &Taint) -> String {
    match t.value.as_deref() {
        Some(v) if !v.is_empty() => format!("{}={}:{}", t.key, v, t.effect),
        _ => format!("{}:{}", t.key, t.effect),
    }
}

/// Whether two taints are the same taint (key and effect; the value does not identify a taint).
pub fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

/// The toleration the last relaxation step adds: tolerate every `PreferNoSchedule` taint.
pub fn tolerate_prefer_no_schedule() -> Toleration {
    Toleration {
        operator: Some("Exists".to_string()),
        effect: Some(PREFER_NO_SCHEDULE.to_string()),
        ..Toleration::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::testing::{taint, toleration};

    #[test]
    fn matches_tolerations_like_kubernetes() {
        let t = taint("service=true:NoSchedule");
        let cases = [
            (toleration("service", "Equal", "true", "NoSchedule"), true),
            (toleration("service", "Equal", "false", "NoSchedule"), false),
            (toleration("service", "Exists", "", "NoSchedule"), true),
            (toleration("service", "Exists", "", ""), true),
            (toleration("", "Exists", "", ""), true),
            (toleration("other", "Exists", "", ""), false),
            (toleration("service", "Equal", "true", "NoExecute"), false),
            (toleration("service", "", "true", ""), true),
        ];
        for (tol, want) in cases {
            assert_eq!(toleration_matches(&tol, &t), want, "{tol:?}");
        }
    }

    #[test]
    fn names_the_first_untolerated_taint() {
        let taints = [taint("a=1:NoSchedule"), taint("b:PreferNoSchedule")];
        let tols = [toleration("a", "Exists", "", "")];
        assert_eq!(
            tolerates_all(&tols, &taints),
            Err("did not tolerate taint b:PreferNoSchedule".to_string())
        );
        assert_eq!(tolerates_all(&[tolerate_prefer_no_schedule(), tols[0].clone()], &taints), Ok(()));
    }
}
