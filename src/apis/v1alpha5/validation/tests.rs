use super::*;
use serde_json::json;

fn provisioner(spec: serde_json::Value) -> Provisioner {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
        "metadata": {"name": "service"}, "spec": spec
    }))
    .expect("test provisioner decodes")
}

fn settings() -> ApiSettings {
    ApiSettings::new("ssungz-cluster")
}

fn errors(spec: serde_json::Value) -> String {
    validate(&provisioner(spec), &settings())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

/// The first write-up's Provisioner spec, as intended (indent glyphs removed).
fn service() -> serde_json::Value {
    let manifest: serde_json::Value =
        serde_yaml_ng::from_str(include_str!("../../../../tests/fixtures/first-writeup/provisioner.yaml")).expect("fixture parses");
    manifest["spec"].clone()
}

fn with(field: &str, value: serde_json::Value) -> serde_json::Value {
    let mut spec = service();
    spec[field] = value;
    spec
}

#[test]
fn accepts_the_first_write_up_provisioner() {
    assert_eq!(errors(service()), "");
    assert!(warnings(&provisioner(service()).spec).is_empty());
}

#[test]
fn accepts_limits_written_as_numbers_as_in_karpenters_getting_started() {
    let spec = with(
        "limits",
        json!({"resources": {"cpu": 1000, "memory": "1000Gi", "nvidia.com/gpu": 2.5}}),
    );
    assert_eq!(errors(spec.clone()), "");
    let limits = provisioner(spec).spec.limits.unwrap().resources.unwrap();
    assert_eq!(limits["cpu"].0, "1000");
    assert_eq!(limits["nvidia.com/gpu"].0, "2.5");
    let err = serde_json::from_value::<Provisioner>(json!({
        "apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner",
        "metadata": {"name": "service"}, "spec": {"limits": {"resources": {"cpu": true}}}
    }))
    .unwrap_err()
    .to_string();
    assert!(err.contains("cpu: expected a quantity (a string or a number), got true"), "{err}");
}

#[test]
fn accepts_the_second_write_up_provisioners() {
    let step4 = json!({
        "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
        "provider": {"instanceProfile": "KarpenterNodeInstanceProfile",
                     "subnetSelector": {"environment": "production"},
                     "securityGroupSelector": {"karpenter": "managed"},
                     "spotPrice": "0.067"},
        "ttlSecondsAfterEmpty": 300
    });
    assert_eq!(errors(step4), "");
    let step37 = json!({
        "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}],
        "provider": {"instanceProfile": "KarpenterNodeInstanceProfile", "clusterName": "ssungz-cluster",
                     "subnetSelector": {"karpenter.sh/discovery": "ssungz-cluster"},
                     "securityGroupSelector": {"karpenter.sh/discovery": "ssungz-cluster"}}
    });
    assert_eq!(errors(step37), "");
}

#[test]
fn table_of_denials() {
    let cases: Vec<(serde_json::Value, &str)> = vec![
        (with("ttlSecondsAfterEmpty", json!(-1)), "spec.ttlSecondsAfterEmpty: invalid value -1: must be 0 or greater"),
        (with("ttlSecondsUntilExpired", json!(-5)), "spec.ttlSecondsUntilExpired: invalid value -5"),
        (with("ttlSecondsUntilExpired", json!(9_000_000_000_000i64)), "spec.ttlSecondsUntilExpired: invalid value 9000000000000: must be at most 3153600000 (100 years)"),
        (with("ttlSecondsAfterEmpty", json!(i64::MAX)), "spec.ttlSecondsAfterEmpty: invalid value 9223372036854775807: must be at most 3153600000"),
        (with("limits", json!({"resources": {"memory": "8Ei"}})), "spec.limits.resources[memory]: invalid value \"8Ei\": must be at most 4Ei"),
        (with("limits", json!({"resources": {"cpu": "1e400"}})), "spec.limits.resources[cpu]: invalid value \"1e400\": must be at most 4611686018427387"),
        (with("kubeletConfiguration", json!({"kubeReserved": {"memory": "9Ei"}})), "spec.kubeletConfiguration.kubeReserved[memory]: invalid value \"9Ei\": must be at most 4Ei"),
        (with("kubeletConfiguration", json!({"evictionHard": {"memory.available": "8Ei"}})), "evictionHard[memory.available]: invalid value \"8Ei\""),
        (with("consolidation", json!({"enabled": true})), "spec.ttlSecondsAfterEmpty: forbidden: ttlSecondsAfterEmpty and consolidation.enabled"),
        (with("provider", json!({"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}})), "spec.provider: forbidden"),
        (with("providerRef", json!(null)), "spec.providerRef: required value"),
        (with("providerRef", json!({"name": ""})), "spec.providerRef.name: required value"),
        (with("providerRef", json!({"name": "x", "kind": "Other"})), "spec.providerRef.kind: invalid value \"Other\""),
        (with("weight", json!(0)), "spec.weight: invalid value 0"),
        (with("weight", json!(101)), "spec.weight: invalid value 101"),
        (with("labels", json!({"karpenter.sh/provisioner-name": "x"})), "spec.labels[karpenter.sh/provisioner-name]: forbidden"),
        (with("labels", json!({"kubernetes.io/custom": "x"})), "spec.labels: invalid value \"kubernetes.io/custom\""),
        (with("labels", json!({"x.kubernetes.io/a": "x"})), "is restricted"),
        (with("labels", json!({"beta.kubernetes.io/arch": "amd64"})), "spec.labels: invalid value \"beta.kubernetes.io/arch\""),
        (with("labels", json!({"bad key": "x"})), "invalid label key"),
        (with("labels", json!({"team": "a/b"})), "spec.labels[team]: invalid value \"a/b\""),
        (with("labels", json!({"node.kubernetes.io/instance-type": "m5.large"})), "contradicts spec.requirements[0]"),
        (with("taints", json!([{"key": "", "effect": "NoSchedule"}])), "spec.taints[0].key: required value"),
        (with("taints", json!([{"key": "a", "effect": ""}])), "spec.taints[0].effect: required value"),
        (with("taints", json!([{"key": "a", "effect": "NoEvict"}])), "spec.taints[0].effect: invalid value \"NoEvict\""),
        (with("taints", json!([{"key": "a", "value": "example.com/blue", "effect": "NoSchedule"}])), "spec.taints[0].value: invalid value \"example.com/blue\""),
        (with("taints", json!([{"key": "a b", "effect": "NoSchedule"}])), "spec.taints[0].key: invalid value \"a b\""),
        (with("startupTaints", json!([{"key": "service", "value": "x", "effect": "NoSchedule"}])), "spec.startupTaints[0]: invalid value \"service:NoSchedule\": duplicate taint: the same key and effect are already at spec.taints[0]"),
        (with("requirements", json!([{"key": "team", "operator": "In"}])), "spec.requirements[0].values: required value"),
        (with("kubeletConfiguration", json!({"evictionHard": {"memory.free": "1Gi"}})), "spec.kubeletConfiguration.evictionHard: invalid value \"memory.free\""),
        (with("kubeletConfiguration", json!({"evictionHard": {"memory.available": "110%"}})), "evictionHard[memory.available]: invalid value \"110%\""),
        (with("kubeletConfiguration", json!({"evictionHard": {"memory.available": "5%3"}})), "evictionHard[memory.available]: invalid value \"5%3\""),
        (with("kubeletConfiguration", json!({"evictionHard": {"memory.available": "110GB"}})), "invalid value \"110GB\""),
        (with("kubeletConfiguration", json!({"evictionSoft": {"memory.available": "1Gi"}})), "spec.kubeletConfiguration.evictionSoftGracePeriod[memory.available]: required value"),
        (with("kubeletConfiguration", json!({"evictionSoftGracePeriod": {"memory.available": "1m"}})), "has no matching evictionSoft threshold"),
        (with("kubeletConfiguration", json!({"evictionSoft": {"memory.available": "1Gi"}, "evictionSoftGracePeriod": {"memory.available": "soon"}})), "evictionSoftGracePeriod[memory.available]: invalid value \"soon\""),
        (with("kubeletConfiguration", json!({"kubeReserved": {"gpu": "1"}})), "spec.kubeletConfiguration.kubeReserved: invalid value \"gpu\""),
        (with("kubeletConfiguration", json!({"systemReserved": {"cpu": "-1"}})), "spec.kubeletConfiguration.systemReserved[cpu]: invalid value \"-1\""),
        (with("kubeletConfiguration", json!({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60})), "imageGCLowThresholdPercent: invalid value 60"),
        (with("kubeletConfiguration", json!({"imageGCHighThresholdPercent": 101})), "imageGCHighThresholdPercent: invalid value 101"),
        (with("kubeletConfiguration", json!({"maxPods": -1})), "spec.kubeletConfiguration.maxPods: invalid value -1"),
        (with("kubeletConfiguration", json!({"clusterDNS": ["10.100.0.10", "dns"]})), "spec.kubeletConfiguration.clusterDNS[1]: invalid value \"dns\""),
        (with("limits", json!({"resources": {"cpu": "-1"}})), "spec.limits.resources[cpu]: invalid value \"-1\""),
        (with("limits", json!({"resources": {"cpu": "lots"}})), "spec.limits.resources[cpu]: invalid value \"lots\""),
    ];
    for (spec, want) in cases {
        let got = errors(spec.clone());
        assert!(got.contains(want), "spec {spec}: want {want:?} in {got:?}");
    }
}

#[test]
fn inline_provider_denials_name_the_field() {
    let inline = |provider: serde_json::Value| {
        let mut spec = service();
        spec.as_object_mut().unwrap().remove("providerRef");
        spec["provider"] = provider;
        errors(spec)
    };
    let got = inline(json!({"subnetSelector": {"a": "b"}, "securityGroupSelecter": {"a": "b"}}));
    assert!(
        got.contains("spec.provider.securityGroupSelecter: forbidden: unknown field, did you mean \"securityGroupSelector\"?"),
        "{got}"
    );
    let got = inline(json!({"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}, "spotPrice": 0.067}));
    assert!(got.contains("spec.provider.spotPrice: invalid value 0.067"), "{got}");
    let got = inline(json!({"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}, "clusterName": "your-cluster-name"}));
    assert!(
        got.contains("spec.provider.clusterName: invalid value \"your-cluster-name\""),
        "{got}"
    );
    let got = inline(json!({"subnetSelector": {"a": ""}, "securityGroupSelector": {"a": "b"}}));
    assert!(got.contains("spec.provider.subnetSelector[a]: invalid value \"\""), "{got}");
    // Not an object: refused when read, as the CRD's schema refuses it.
    for provider in [json!("a string"), json!(["%"]), json!(7)] {
        let mut spec = service();
        spec.as_object_mut().unwrap().remove("providerRef");
        spec["provider"] = provider.clone();
        let object =
            json!({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "service"}, "spec": spec});
        let got = crate::apis::decode::decode::<Provisioner>(&object, &crate::apis::field_error::Path::default())
            .unwrap_err()
            .to_string();
        assert!(
            got.starts_with(&format!("spec.provider: invalid value {provider}")) && got.contains("expected an object"),
            "{got}"
        );
    }
}

#[test]
fn reports_every_problem_at_once() {
    let mut spec = with("ttlSecondsAfterEmpty", json!(-1));
    spec["labels"] = json!({"kubernetes.io/custom": "x"});
    spec["weight"] = json!(0);
    let got = errors(spec);
    assert_eq!(got.matches(": invalid value").count(), 3, "{got}");
}

#[test]
fn denies_invalid_names() {
    for name in ["1st-pool", "team.gpu", &"a".repeat(64)] {
        let mut p = provisioner(service());
        p.metadata.name = Some(name.to_string());
        let got = validate(&p, &settings()).unwrap_err().to_string();
        assert!(got.contains("metadata.name: invalid value"), "{got}");
    }
}

#[test]
fn warns_about_suspicious_specs() {
    let spec = with(
        "requirements",
        json!([{"key": "beta.kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]),
    );
    let w = warnings(&provisioner(spec).spec);
    assert!(w.iter().any(|w| w.contains("deprecated")), "{w:?}");
    let spec = with(
        "requirements",
        json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["x86"]}]),
    );
    assert!(warnings(&provisioner(spec).spec).iter().any(|w| w.contains("can never launch")));
    let spec = with(
        "requirements",
        json!([
            {"key": "team", "operator": "In", "values": ["a"]},
            {"key": "team", "operator": "NotIn", "values": ["a"]}
        ]),
    );
    assert!(warnings(&provisioner(spec).spec).iter().any(|w| w.contains("\"team\"")));
}
