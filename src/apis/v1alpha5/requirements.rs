//! Node requirements (`key`, `operator`, `values`): the rules one requirement must follow, and
//! whether a label value satisfies it. Shared by validation, defaulting and (later) scheduling.
//! No I/O here.

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use super::labels::{self, PROVISIONER_NAME_LABEL};
use crate::apis::field_error::{FieldError, Path, Raw};
use crate::apis::names::{check_label_value, check_qualified_name};

/// The operators a requirement may use.
pub const OPERATORS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"];

/// Every problem with one requirement, reported under `path` (`spec.requirements[i]`).
pub fn validate_requirement(r: &NodeSelectorRequirement, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let key = labels::normalize(&r.key);
    let key_path = path.child("key");
    if key == PROVISIONER_NAME_LABEL {
        errs.push(FieldError::forbidden(
            key_path,
            format!("{PROVISIONER_NAME_LABEL} is set by karpenter-rs on every node it launches"),
        ));
    } else if let Err(reason) = check_qualified_name(key) {
        errs.push(FieldError::invalid(key_path, &r.key, reason));
    } else if let Some(reason) = labels::restriction(key) {
        errs.push(FieldError::invalid(key_path, &r.key, reason));
    }
    let values = r.values.as_deref().unwrap_or_default();
    for (j, v) in values.iter().enumerate() {
        if let Err(reason) = check_label_value(v) {
            errs.push(FieldError::invalid(path.child("values").index(j), v, reason));
        }
    }
    let values_path = path.child("values");
    match r.operator.as_str() {
        "In" if values.is_empty() => errs.push(FieldError::required(
            values_path,
            format!("operator In needs at least one value for {:?}", r.key),
        )),
        "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::invalid(
            values_path,
            Raw(serde_json::to_string(values).expect("strings serialize")),
            format!("operator {} takes no values", r.operator),
        )),
        "Gt" | "Lt" => match values {
            [v] if parse_non_negative_integer(v).is_some() => {}
            [v] => errs.push(FieldError::invalid(
                values_path.index(0),
                v,
                format!("operator {} needs a non-negative integer", r.operator),
            )),
            _ => errs.push(FieldError::invalid(
                values_path,
                Raw(serde_json::to_string(values).expect("strings serialize")),
                format!("operator {} needs exactly one value, a non-negative integer", r.operator),
            )),
        },
        op if !OPERATORS.contains(&op) => errs.push(FieldError::invalid(
            path.child("operator"),
            op,
            format!("must be one of {}", OPERATORS.join(", ")),
        )),
        _ => {}
    }
    errs
}

/// A base-10 integer, optionally signed, that fits in i64 and is 0 or greater.
pub fn parse_non_negative_integer(v: &str) -> Option<i64> {
    v.parse::<i64>().ok().filter(|n| *n >= 0)
}

/// Whether a node labelled `key=value` satisfies the requirement (`value` `None`: label absent).
/// An unknown operator or a malformed `Gt`/`Lt` value admits nothing.
pub fn admits(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let compare = |want: std::cmp::Ordering| {
        let bound = values.first().and_then(|b| b.parse::<i64>().ok());
        let actual = value.and_then(|v| v.parse::<i64>().ok());
        matches!((actual, bound), (Some(a), Some(b)) if a.cmp(&b) == want)
    };
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => compare(std::cmp::Ordering::Greater),
        "Lt" => compare(std::cmp::Ordering::Less),
        _ => false,
    }
}

/// True when some requirement in `reqs` constrains `key` (deprecated spellings count as their
/// stable key), whatever its operator.
pub fn constrains(reqs: &[NodeSelectorRequirement], key: &str) -> bool {
    reqs.iter().any(|r| labels::normalize(&r.key) == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| s.to_string()).collect()),
        }
    }

    fn problems(r: NodeSelectorRequirement) -> String {
        validate_requirement(&r, &Path::new("spec.requirements").index(0))
            .iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    }

    #[test]
    fn accepts_valid_requirements() {
        for r in [
            req("node.kubernetes.io/instance-type", "In", &["t3.large", "t3.xlarge"]),
            req("topology.kubernetes.io/zone", "In", &["ap-northeast-2a"]),
            req("karpenter.sh/capacity-type", "In", &["on-demand"]),
            req("beta.kubernetes.io/arch", "In", &["amd64"]),
            req("karpenter.k8s.aws/instance-generation", "Gt", &["0"]),
            req("karpenter.k8s.aws/instance-cpu", "Lt", &["007"]),
            req("team", "NotIn", &[]),
            req("team", "Exists", &[]),
            req("team", "In", &[""]),
        ] {
            assert_eq!(problems(r.clone()), "", "{r:?}");
        }
    }

    #[test]
    fn denies_invalid_requirements_naming_the_field() {
        let cases = [
            (
                req("karpenter.sh/provisioner-name", "In", &["a"]),
                "spec.requirements[0].key: forbidden",
            ),
            (
                req("team", "within", &["a"]),
                "spec.requirements[0].operator: invalid value \"within\"",
            ),
            (req("team", "In", &[]), "spec.requirements[0].values: required value"),
            (
                req("kubernetes.io/custom", "In", &["a"]),
                "spec.requirements[0].key: invalid value \"kubernetes.io/custom\"",
            ),
            (req("", "In", &["a"]), "spec.requirements[0].key: invalid value \"\""),
            (req("team", "In", &["a/b"]), "spec.requirements[0].values[0]: invalid value \"a/b\""),
            (
                req("karpenter.k8s.aws/instance-cpu", "Gt", &[]),
                "spec.requirements[0].values: invalid value []",
            ),
            (req("karpenter.k8s.aws/instance-cpu", "Gt", &["1", "2"]), "needs exactly one value"),
            (
                req("karpenter.k8s.aws/instance-cpu", "Lt", &["-1"]),
                "spec.requirements[0].values[0]: invalid value \"-1\"",
            ),
            (req("karpenter.k8s.aws/instance-cpu", "Lt", &["1.5"]), "invalid value \"1.5\""),
            (
                req("karpenter.k8s.aws/instance-cpu", "Lt", &["99999999999999999999"]),
                "non-negative integer",
            ),
            (req("team", "Exists", &["a"]), "takes no values"),
        ];
        for (r, want) in cases {
            let got = problems(r.clone());
            assert!(got.contains(want), "{r:?}: want {want:?} in {got:?}");
        }
    }

    #[test]
    fn gt_without_values_never_panics() {
        let r = NodeSelectorRequirement {
            key: "karpenter.k8s.aws/instance-cpu".into(),
            operator: "Gt".into(),
            values: None,
        };
        assert!(!admits(&r, Some("4")));
        assert!(!problems(r).is_empty());
    }

    #[test]
    fn admits_label_values() {
        assert!(admits(&req("a", "In", &["x"]), Some("x")));
        assert!(!admits(&req("a", "In", &["x"]), Some("y")));
        assert!(admits(&req("a", "NotIn", &["x"]), Some("y")));
        assert!(admits(&req("a", "NotIn", &["x"]), None));
        assert!(!admits(&req("a", "DoesNotExist", &[]), Some("x")));
        assert!(admits(&req("a", "Gt", &["2"]), Some("3")));
        assert!(!admits(&req("a", "Lt", &["2"]), Some("3")));
    }
}
