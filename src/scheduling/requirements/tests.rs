use super::*;
use crate::apis::v1alpha5::labels::{ARCH_LABEL, CAPACITY_TYPE_LABEL};

fn r(op: &str, values: &[&str]) -> Requirement {
    let values: Vec<String> = values.iter().map(|s| s.to_string()).collect();
    Requirement::from_operator(op, &values)
}

#[test]
fn intersects_every_pair_of_operators() {
    let cases = [
        (r("In", &["a", "b"]), r("In", &["b", "c"]), "In [b]"),
        (r("In", &["a", "b"]), r("NotIn", &["a"]), "In [b]"),
        (r("NotIn", &["a"]), r("NotIn", &["b"]), "NotIn [a b]"),
        (r("Exists", &[]), r("In", &["x"]), "In [x]"),
        (r("Exists", &[]), r("DoesNotExist", &[]), "DoesNotExist"),
        (r("In", &["a"]), r("In", &["b"]), "DoesNotExist"),
        (r("Gt", &["2"]), r("In", &["1", "3", "x"]), "In [3]"),
        (r("Gt", &["2"]), r("Lt", &["8"]), "Exists >2 <8"),
        (r("Gt", &["5"]), r("Lt", &["5"]), "DoesNotExist"),
        (r("Gt", &["2"]), r("Gt", &["4"]), "Gt 4"),
        (r("Lt", &["x"]), r("Exists", &[]), "DoesNotExist"),
    ];
    for (a, b, want) in cases {
        assert_eq!(a.intersection(&b).to_string(), want, "{a} ∩ {b}");
        assert_eq!(b.intersection(&a).to_string(), want, "{b} ∩ {a}");
        assert_eq!(a.overlaps(&b), !a.intersection(&b).is_empty(), "{a} overlaps {b}");
    }
}

#[test]
fn has_respects_bounds_and_complements() {
    assert!(r("Gt", &["2"]).has("3"));
    assert!(!r("Gt", &["2"]).has("2"));
    assert!(!r("Gt", &["2"]).has("abc"));
    assert!(r("NotIn", &["a"]).has("b"));
    assert!(!r("DoesNotExist", &[]).has("a"));
}

#[test]
fn custom_labels_must_be_declared_by_the_node_side() {
    let node = Requirements::new()
        .with("nodeType", r("In", &["service-2023"]))
        .with(ZONE_LABEL, r("In", &["ap-northeast-2a", "ap-northeast-2c"]));
    let cases = [
        (Requirements::new().with("nodeType", r("In", &["service-2023"])), Ok(())),
        (
            Requirements::new().with("nodeType", r("In", &["other"])),
            Err("key nodeType, In [other] not in In [service-2023]"),
        ),
        (
            Requirements::new().with("team", r("In", &["a"])),
            Err("label \"team\" does not have known values"),
        ),
        (
            Requirements::new().with("nodetype", r("In", &["a"])),
            Err("(typo of \"nodeType\"?)"),
        ),
        (Requirements::new().with("team", r("NotIn", &["a"])), Ok(())),
        (Requirements::new().with("team", r("DoesNotExist", &[])), Ok(())),
        (Requirements::new().with(ARCH_LABEL, r("In", &["arm64"])), Ok(())),
        (
            Requirements::new().with(ZONE_LABEL, r("In", &["ap-northeast-2b"])),
            Err("key topology.kubernetes.io/zone"),
        ),
        (Requirements::new().with(ZONE_LABEL, r("NotIn", &["ap-northeast-2a"])), Ok(())),
    ];
    for (pod, want) in cases {
        let got = node.compatible(&pod);
        match want {
            Ok(()) => assert_eq!(got, Ok(()), "{pod}"),
            Err(part) => assert!(got.as_ref().is_err_and(|e| e.contains(part)), "{pod}: want {part:?} in {got:?}"),
        }
    }
}

#[test]
fn both_sides_excluding_never_conflict() {
    let a = Requirements::new().with("k", r("DoesNotExist", &[]));
    let b = Requirements::new().with("k", r("NotIn", &["x"]));
    assert_eq!(a.intersects(&b), Ok(()));
    assert!(a.overlaps(&b));
}

#[test]
fn normalizes_deprecated_keys() {
    let reqs = Requirements::new()
        .with("failure-domain.beta.kubernetes.io/zone", r("In", &["a"]))
        .with(EBS_CSI_ZONE_LABEL, r("In", &["a", "b"]));
    assert_eq!(reqs.to_string(), "topology.kubernetes.io/zone In [a]");
}

#[test]
fn labels_are_the_single_valued_unrestricted_keys() {
    let reqs = Requirements::new()
        .with("nodeType", r("In", &["service-2023"]))
        .with(CAPACITY_TYPE_LABEL, r("In", &["on-demand"]))
        .with(ZONE_LABEL, r("In", &["a", "b"]))
        .with(HOSTNAME_LABEL, r("In", &["h"]))
        .with("team", r("Exists", &[]));
    let got: Vec<String> = reqs.labels().into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(got, ["karpenter.sh/capacity-type=on-demand", "nodeType=service-2023"]);
}

#[test]
fn node_labels_give_every_settable_key_a_value_that_satisfies_it() {
    let reqs = Requirements::new()
        .with("nodeType", r("In", &["service-2023"]))
        .with("team", r("In", &["b", "a"]))
        .with("owner", r("Exists", &[]))
        .with("tier", r("NotIn", &["0", "1"]))
        .with("size", r("Gt", &["7"]))
        .with("size", r("Lt", &["12"]))
        .with("small", r("Lt", &["3"]))
        .with("gone", r("DoesNotExist", &[]))
        .with(HOSTNAME_LABEL, r("In", &["h"]))
        .with("kubernetes.io/custom", r("In", &["x"]));
    let labels = reqs.node_labels();
    let got: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(
        got,
        ["nodeType=service-2023", "owner=0", "size=8", "small=0", "team=a", "tier=2"],
        "DoesNotExist, the hostname and restricted keys get no label"
    );
    // Every label satisfies its requirement: the node is compatible with what it was
    // launched for.
    for (k, v) in &labels {
        assert!(reqs.get(k).unwrap().has(v), "{k}={v}");
    }
    // An empty range has no value.
    assert_eq!(r("Gt", &["5"]).intersection(&r("Lt", &["6"])).sample(), None);
    assert_eq!(r("In", &["a"]).intersection(&r("In", &["b"])).sample(), None);
}

#[test]
fn round_trips_to_node_selector_requirements() {
    let reqs = Requirements::new()
        .with("a", r("In", &["x"]))
        .with("b", r("Gt", &["2"]))
        .with("b", r("Lt", &["9"]));
    let again = Requirements::from_node_selector_requirements(&reqs.to_node_selector_requirements());
    assert_eq!(again, reqs);
}
