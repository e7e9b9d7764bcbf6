use super::*;

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn a_refused_value_is_named_with_what_applies_instead() {
    let (_, errors) = parse(&data(&[("aws.reservedENIs", "two")]));
    let note = refused_note(&errors[0]);
    assert!(note.contains("aws.reservedENIs") && note.contains("\"two\""), "{note}");
    assert!(note.ends_with("its flag or default applies"), "{note}");
}

#[test]
fn reads_every_key_of_karpenters_configmap() {
    let (s, errors) = parse(&data(&[
        ("aws.clusterName", "ssungz-cluster"),
        ("aws.clusterEndpoint", "https://ABC.gr7.ap-northeast-2.eks.amazonaws.com"),
        ("aws.defaultInstanceProfile", "KarpenterNodeInstanceProfile"),
        ("aws.tags", r#"{"team": "a", "cost-center": "42"}"#),
        ("aws.vmMemoryOverheadPercent", "0.1"),
        ("aws.enableENILimitedPodDensity", "false"),
        ("aws.reservedENIs", "1"),
        ("aws.interruptionQueueName", "ssungz-cluster"),
        ("aws.enablePodENI", "true"),
        ("batchMaxDuration", "1m30s"),
        ("batchIdleDuration", "500ms"),
        ("aws.clusterCABundle", CA),
        ("featureGates.driftEnabled", "true"),
    ]));
    assert_eq!(errors, vec![]);
    assert_eq!(
        s,
        GlobalSettings {
            cluster_name: Some("ssungz-cluster".into()),
            cluster_endpoint: Some("https://ABC.gr7.ap-northeast-2.eks.amazonaws.com".into()),
            default_instance_profile: Some("KarpenterNodeInstanceProfile".into()),
            tags: Some(BTreeMap::from([("cost-center".into(), "42".into()), ("team".into(), "a".into())])),
            vm_memory_overhead_percent: Some(0.1),
            enable_eni_limited_pod_density: Some(false),
            reserved_enis: Some(1),
            interruption_queue_name: Some("ssungz-cluster".into()),
            enable_pod_eni: Some(true),
            batch_max_duration: Some(Duration::from_secs(90)),
            batch_idle_duration: Some(Duration::from_millis(500)),
            cluster_ca_bundle: Some(CA.into()),
            drift_enabled: Some(true),
        }
    );
    assert_eq!(parse(&BTreeMap::new()), (GlobalSettings::default(), vec![]));
}

/// base64 of a PEM certificate block (its content does not matter here).
const CA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=";

#[test]
fn keys_not_honoured_are_named_with_why_and_unknown_ones_too() {
    let notes = not_honoured(&data(&[
        ("aws.clusterName", "c"),
        ("featureGates.driftEnabled", "false"),
        ("aws.isolatedVPC", "true"),
        ("aws.assumeRoleARN", "arn:aws:iam::1:role/x"),
        ("aws.clustername", "typo"),
    ]));
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert!(
        !notes.iter().any(|n| n.contains("featureGates.driftEnabled")),
        "drift is honoured: {notes:?}"
    );
    assert!(notes.iter().any(|n| n.contains("aws.isolatedVPC is not honoured")), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("aws.assumeRoleARN is not honoured")), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("aws.clustername is unknown")), "{notes:?}");
    assert!(not_honoured(&data(&[("aws.clusterCABundle", CA), ("batchMaxDuration", "1s")])).is_empty());
    let (_, errors) = parse(&data(&[("aws.clusterCABundle", "not base64")]));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].key, "aws.clusterCABundle");
}

#[test]
fn a_bad_value_is_an_error_naming_key_and_value_and_the_key_is_ignored() {
    let (s, errors) = parse(&data(&[
        ("aws.vmMemoryOverheadPercent", "-0.5"),
        ("aws.enablePodENI", "yes"),
        ("aws.reservedENIs", "two"),
        ("batchMaxDuration", "10"),
        ("batchIdleDuration", "0s"),
        ("aws.clusterEndpoint", "ABC.eks.amazonaws.com"),
        ("aws.tags", "team=a"),
        ("aws.clusterName", "kept"),
    ]));
    assert_eq!(
        s,
        GlobalSettings {
            cluster_name: Some("kept".into()),
            ..Default::default()
        }
    );
    let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "aws.clusterEndpoint",
            "aws.tags",
            "aws.vmMemoryOverheadPercent",
            "aws.reservedENIs",
            "aws.enablePodENI",
            "batchMaxDuration",
            "batchIdleDuration"
        ]
    );
    for e in &errors {
        let message = e.to_string();
        assert!(message.contains(&e.key) && message.contains(&format!("{:?}", e.value)), "{message}");
    }
}

#[test]
fn tags_the_controller_owns_are_refused_naming_the_key() {
    for key in [
        "kubernetes.io/cluster/ssungz-cluster",
        "karpenter.sh/provisioner-name",
        "karpenter.sh/managed-by",
        "karpenter-rs.sh/managed-by",
        "karpenter.k8s.aws/cluster",
    ] {
        let err = parse_tags(&format!(r#"{{"{key}": "x"}}"#)).unwrap_err();
        assert!(err.contains(key), "{err}");
    }
    assert!(parse_tags(r#"{"": "x"}"#).is_err());
    assert!(parse_tags(r#"{"team": 1}"#).is_err(), "values are strings");
    assert_eq!(parse_tags("{}"), Ok(BTreeMap::new()));
}

#[test]
fn booleans_and_fractions_read_as_go_reads_them() {
    assert_eq!(parse_bool("True"), Ok(true));
    assert_eq!(parse_bool("0"), Ok(false));
    assert!(parse_bool("on").is_err());
    assert_eq!(parse_vm_memory_overhead_percent("0"), Ok(0.0));
    assert!(parse_vm_memory_overhead_percent("1").is_err());
    assert!(parse_vm_memory_overhead_percent("7.5").is_err(), "a fraction, not a percentage");
}
