//! Extreme values in every numeric field of a Provisioner and an AWSNodeTemplate (0, the
//! bounds, negative, huge and unparsable quantities) go through defaulting, validation and every
//! pure decision (scheduling, emptiness, expiration, consolidation) without a panic. The decisions
//! run whether or not validation admits the object: an object can reach the controllers without
//! the webhook (installed before it, or with the webhook down and `failurePolicy: Ignore`).

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod};
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::apis::v1alpha1::AwsNodeTemplate;
use crate::apis::v1alpha5::labels::{
    CAPACITY_TYPE_LABEL, EMPTINESS_TIMESTAMP_ANNOTATION, INSTANCE_TYPE_LABEL, PROVISIONER_NAME_LABEL, ZONE_LABEL,
};
use crate::apis::v1alpha5::validation::MAX_TTL_SECONDS;
use crate::apis::v1alpha5::Provisioner;
use crate::apis::ApiSettings;
use crate::cloudprovider::{KubernetesVersion, NodeTemplate};
use crate::controllers::deprovisioning::consolidation::{self, NodeView};
use crate::controllers::deprovisioning::decide;
use crate::scheduling::capacity::NodeSettings;
use crate::apis::v1alpha5::labels::INITIALIZED_LABEL;
use crate::scheduling::testing::{instance_type_with, pod};
use crate::scheduling::{simulate, ExistingNode, ProvisionerInput, SimulationInput};

/// An integer field: absent, the edges of `i64`, the TTL bound and either side of it, any value.
fn int() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        Just(None),
        prop::sample::select(vec![
            0,
            1,
            -1,
            MAX_TTL_SECONDS,
            MAX_TTL_SECONDS + 1,
            i64::MAX / 1000 + 1,
            i64::MAX,
            i64::MIN,
            i64::from(i32::MAX),
            i64::from(i32::MIN),
        ])
        .prop_map(Some),
        any::<i64>().prop_map(Some),
    ]
}

/// An `int32` field: absent, its edges, any value.
fn int32() -> impl Strategy<Value = Option<i32>> {
    prop_oneof![
        Just(None),
        prop::sample::select(vec![0, 1, -1, i32::MAX, i32::MIN]).prop_map(Some),
        any::<i32>().prop_map(Some),
    ]
}

/// A quantity: the edges of what fits an `i64` (in millicores or bytes), past them, negative,
/// tiny, unparsable, or any number with any suffix.
fn quantity() -> impl Strategy<Value = String> {
    let edges = prop::sample::select(vec![
        "0", "1", "-1", "1n", "0.000000001", "4Ei", "8Ei", "-8Ei", "16Ei", "1E", "9223372036854775807",
        "99999999999999999999999999", "1e18", "1e400", "1e-400", "4611686018427387", "4611686018427388", "lots", "",
    ])
    .prop_map(str::to_string);
    let suffix = prop::sample::select(vec!["", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e9", "e30"]);
    prop_oneof![edges, (any::<u64>(), suffix).prop_map(|(n, s)| format!("{n}{s}"))]
}

/// A resource list of the reserved resources with hostile amounts.
fn reserved() -> impl Strategy<Value = Option<Value>> {
    prop::option::of((quantity(), quantity()).prop_map(|(cpu, memory)| json!({"cpu": cpu, "memory": memory})))
}

prop_compose! {
    fn provisioner()(
        after_empty in int(),
        until_expired in int(),
        weight in int32(),
        consolidate in any::<bool>(),
        limit_cpu in quantity(),
        limit_memory in quantity(),
        max_pods in int32(),
        pods_per_core in int32(),
        kube_reserved in reserved(),
        system_reserved in reserved(),
        eviction in quantity(),
        grace in int32(),
    ) -> Value {
        let mut spec = json!({
            "providerRef": {"name": "default"},
            "consolidation": {"enabled": consolidate},
            "limits": {"resources": {"cpu": limit_cpu, "memory": limit_memory}},
            "kubeletConfiguration": {
                "evictionHard": {"memory.available": eviction},
                "evictionMaxPodGracePeriod": grace,
            },
        });
        let set = |spec: &mut Value, path: &[&str], value: Value| {
            if !value.is_null() {
                let (last, parents) = path.split_last().expect("a path");
                let mut at = &mut *spec;
                for p in parents {
                    at = &mut at[*p];
                }
                at[*last] = value;
            }
        };
        set(&mut spec, &["ttlSecondsAfterEmpty"], json!(after_empty));
        set(&mut spec, &["ttlSecondsUntilExpired"], json!(until_expired));
        set(&mut spec, &["weight"], json!(weight));
        set(&mut spec, &["kubeletConfiguration", "maxPods"], json!(max_pods));
        set(&mut spec, &["kubeletConfiguration", "podsPerCore"], json!(pods_per_core));
        set(&mut spec, &["kubeletConfiguration", "kubeReserved"], json!(kube_reserved));
        set(&mut spec, &["kubeletConfiguration", "systemReserved"], json!(system_reserved));
        json!({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"}, "spec": spec})
    }
}

prop_compose! {
    fn node_template()(
        volume_size in quantity(),
        iops in int(),
        throughput in int(),
        hops in int(),
    ) -> Value {
        json!({
            "apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate", "metadata": {"name": "default"},
            "spec": {
                "subnetSelector": {"karpenter.sh/discovery": "c"},
                "securityGroupSelector": {"karpenter.sh/discovery": "c"},
                "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": volume_size, "iops": iops, "throughput": throughput, "volumeType": "gp3"}}],
                "metadataOptions": {"httpPutResponseHopLimit": hops},
            }
        })
    }
}

fn at(seconds: i64) -> Timestamp {
    "2023-06-01T12:00:00Z".parse::<Timestamp>().unwrap() + SignedDuration::from_secs(seconds)
}

/// A Ready, initialised t3.large of Provisioner `default`, created at `at(0)`, marked empty since
/// `at(10)`.
fn our_node() -> Node {
    serde_json::from_value(json!({
        "metadata": {
            "name": "n1",
            "creationTimestamp": at(0).to_string(),
            "labels": {
                PROVISIONER_NAME_LABEL: "default", INITIALIZED_LABEL: "true", INSTANCE_TYPE_LABEL: "t3.large",
                ZONE_LABEL: "ap-northeast-2a", CAPACITY_TYPE_LABEL: "on-demand", "kubernetes.io/hostname": "n1",
            },
            "annotations": {EMPTINESS_TIMESTAMP_ANNOTATION: decide::emptiness_timestamp(at(10))},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

/// Every pure decision over `provisioner`, with a pending pod and a bound pod requesting
/// `cpu`/`memory`; panics are the failures.
fn decide_all(provisioner: &Provisioner, cpu: &str, memory: &str) {
    let settings = NodeSettings::default().with_kubelet(provisioner.spec.kubelet_configuration.as_ref());
    let types: Vec<_> = ["t3.large", "m5.large", "c5.xlarge"]
        .into_iter()
        .map(|n| Arc::new(instance_type_with(n, &settings)))
        .collect();
    let node = our_node();
    let mut bound: Pod = pod("bound").cpu(cpu).memory(memory).build();
    bound.spec.as_mut().unwrap().node_name = Some("n1".into());
    bound.status = Some(serde_json::from_value(json!({"phase": "Running", "startTime": at(0).to_string()})).unwrap());
    let pods = [Arc::new(bound)];
    let mut existing = ExistingNode::from_node(&node, pods.to_vec());
    existing.allocatable = types[0].allocatable();
    existing.capacity = types[0].allocatable();
    let input = SimulationInput {
        pods: vec![Arc::new(pod("pending").cpu(cpu).memory(memory).build())],
        provisioners: vec![ProvisionerInput {
            provisioner: provisioner.clone(),
            instance_types: types.clone(),
        }],
        nodes: vec![existing],
        ..Default::default()
    };
    let _ = simulate(&input);

    let now = at(1_000_000);
    let spec = &provisioner.spec;
    let _ = decide::emptiness(&node, &[], spec.ttl_seconds_after_empty, SignedDuration::from_secs(20), now);
    let _ = decide::emptiness(&node, &pods, spec.ttl_seconds_after_empty, SignedDuration::from_secs(20), now);
    let _ = decide::expires_at(&node, spec.ttl_seconds_until_expired);
    let candidate = decide::Candidate {
        node: &node,
        pods: &pods,
        ttl_seconds_until_expired: spec.ttl_seconds_until_expired,
    };
    let _ = decide::expiration(&[candidate], &[], now);
    let _ = consolidation::lifetime_remaining(Some(at(0)), spec.ttl_seconds_until_expired, now);
    let view = NodeView {
        node: &node,
        pods: &pods,
        provisioner: Some(provisioner),
        instance_type: Some(&types[0]),
        nominated: false,
        resuming: false,
    };
    let unbind = |p: &Pod| {
        let mut p = p.clone();
        p.spec.as_mut().unwrap().node_name = None;
        p
    };
    if let Ok(candidate) = consolidation::candidate(view, &[], &unbind, now) {
        let mut cluster = input.clone();
        cluster.pods.clear();
        let _ = consolidation::choose(&cluster, &[candidate], &|| false, &|| false);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_provisioner_value_panics_defaulting_validation_or_a_decision(
        object in provisioner(),
        cpu in quantity(),
        memory in quantity(),
    ) {
        let api = ApiSettings::new("c");
        if let Ok(mut p) = serde_json::from_value::<Provisioner>(object) {
            crate::apis::v1alpha5::defaults::set_defaults(&mut p.spec, &api);
            let admitted = crate::apis::v1alpha5::validation::validate(&p, &api).is_ok();
            if admitted {
                // What the webhook admits is bounded.
                for ttl in [p.spec.ttl_seconds_after_empty, p.spec.ttl_seconds_until_expired].into_iter().flatten() {
                    prop_assert!((0..=MAX_TTL_SECONDS).contains(&ttl), "admitted TTL {ttl}");
                }
            }
            decide_all(&p, &cpu, &memory);
        }
    }

    #[test]
    fn no_node_template_value_panics_defaulting_validation_or_the_launch_settings(object in node_template()) {
        if let Ok(mut t) = serde_json::from_value::<AwsNodeTemplate>(object) {
            crate::apis::v1alpha1::defaults::set_defaults(&mut t.spec, "c");
            let _ = crate::apis::v1alpha1::validation::validate(&t);
            let version = KubernetesVersion { major: 1, minor: 27 };
            if let Ok(template) = NodeTemplate::from_node_template(&t.spec, "c", version) {
                let _ = template.ephemeral_storage_bytes();
            }
        }
    }
}
