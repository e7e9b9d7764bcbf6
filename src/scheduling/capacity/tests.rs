use super::*;
use crate::scheduling::testing::facts;

#[test]
fn computes_t3_large_like_the_spec_worked_example() {
    let f = facts("t3.large");
    let s = NodeSettings::default();
    assert_eq!(max_pods(&f, &s), 35);
    let cap = capacity(&f, &s);
    assert_eq!(cap.to_string(), "cpu=2, memory=7577Mi, pods=35, ephemeral-storage=20Gi");
    let o = overhead(&f, &s);
    assert_eq!(o.kube_reserved.to_string(), "cpu=70m, memory=640Mi, ephemeral-storage=1Gi");
    assert_eq!(o.system_reserved.to_string(), "cpu=100m, memory=100Mi, ephemeral-storage=1Gi");
    // v0.31 keeps 10% of the root volume free as well (nodefs.available).
    assert_eq!(o.eviction_threshold.to_string(), "memory=100Mi, ephemeral-storage=2Gi");
    let alloc = cap.minus(&o.total());
    assert_eq!(alloc.to_string(), "cpu=1830m, memory=6737Mi, pods=35, ephemeral-storage=16Gi");
}

#[test]
fn computes_m5_xlarge() {
    let f = facts("m5.xlarge");
    let s = NodeSettings::default();
    let cap = capacity(&f, &s);
    // 4 ENIs × 15 IPv4: 4 × 14 + 2 = 58 pods; 16384 − ⌈1228.8⌉ = 15155Mi.
    assert_eq!(cap.to_string(), "cpu=4, memory=15155Mi, pods=58, ephemeral-storage=20Gi");
    let o = overhead(&f, &s);
    // 60 + 10 + 10 = 80m; 11 × 58 + 255 = 893Mi.
    assert_eq!(o.kube_reserved.to_string(), "cpu=80m, memory=893Mi, ephemeral-storage=1Gi");
    assert_eq!(
        cap.minus(&o.total()).to_string(),
        "cpu=3820m, memory=14062Mi, pods=58, ephemeral-storage=16Gi"
    );
}

#[test]
fn graviton_types_lose_the_contiguous_allocators_64mi_before_the_vm_overhead() {
    let f = InstanceFacts {
        architecture: "arm64".to_string(),
        ..facts("m5.large")
    };
    // (8192 − 64) − ⌈8128 × 0.075⌉ = 8128 − 610 = 7518Mi; an x86 type of the same size keeps
    // 8192 − 615 = 7577Mi.
    assert_eq!(capacity(&f, &NodeSettings::default()).memory_bytes, 7518 * MIB);
    assert_eq!(capacity(&facts("m5.large"), &NodeSettings::default()).memory_bytes, 7577 * MIB);
}

#[test]
fn the_nodefs_eviction_threshold_is_10_percent_unless_nodefs_available_says_otherwise() {
    let f = facts("t3.large");
    let mut s = NodeSettings {
        ephemeral_storage_bytes: Some(100 * GIB),
        ..NodeSettings::default()
    };
    assert_eq!(overhead(&f, &s).eviction_threshold.ephemeral_storage_bytes, 10 * GIB);
    s.eviction_hard.insert("nodefs.available".to_string(), "5Gi".to_string());
    assert_eq!(overhead(&f, &s).eviction_threshold.ephemeral_storage_bytes, 5 * GIB);
    s.eviction_hard.insert("nodefs.available".to_string(), "100%".to_string());
    assert_eq!(overhead(&f, &s).eviction_threshold.ephemeral_storage_bytes, 0);
    // memory.available alone leaves the storage default in place.
    s.eviction_hard.clear();
    s.eviction_hard.insert("memory.available".to_string(), "200Mi".to_string());
    assert_eq!(overhead(&f, &s).eviction_threshold.ephemeral_storage_bytes, 10 * GIB);
}

#[test]
fn kube_reserved_cpu_follows_the_tiers() {
    let cases = [
        (1000, 60),
        (2000, 70),
        (4000, 80),
        (8000, 90),
        (48000, 190),
        (96000, 310),
        (500, 30),
    ];
    for (cpu, want) in cases {
        assert_eq!(kube_reserved_cpu_millis(cpu), want, "{cpu}m");
    }
}

#[test]
fn max_pods_honours_kubelet_settings() {
    let f = facts("m5.xlarge");
    let cases = [
        (NodeSettings::default(), 58),
        (
            NodeSettings {
                eni_limited_pod_density: false,
                ..NodeSettings::default()
            },
            110,
        ),
        (
            NodeSettings {
                max_pods: Some(20),
                ..NodeSettings::default()
            },
            20,
        ),
        (
            NodeSettings {
                pods_per_core: Some(2),
                ..NodeSettings::default()
            },
            8,
        ),
        (
            NodeSettings {
                pods_per_core: Some(2),
                ami_family: AmiFamily::Bottlerocket,
                ..NodeSettings::default()
            },
            58,
        ),
    ];
    for (s, want) in cases {
        assert_eq!(max_pods(&f, &s), want, "{s:?}");
    }
}

#[test]
fn global_settings_change_pods_and_memory() {
    let f = facts("m5.xlarge");
    let s = NodeSettings {
        reserved_enis: 1,
        vm_memory_overhead_percent: 0.1,
        ..NodeSettings::default()
    };
    // 3 of 4 ENIs × 14 + 2 = 44 pods; 16384 − ⌈1638.4⌉ = 14745Mi; kube-reserved 11 × 44 + 255.
    assert_eq!(
        capacity(&f, &s).to_string(),
        "cpu=4, memory=14745Mi, pods=44, ephemeral-storage=20Gi"
    );
    assert_eq!(overhead(&f, &s).kube_reserved.memory_bytes, 739 * MIB);
    let all_reserved = NodeSettings {
        reserved_enis: 9,
        ..NodeSettings::default()
    };
    assert_eq!(max_pods(&f, &all_reserved), 2);
}

#[test]
fn memory_overhead_keeps_eni_pods_when_max_pods_is_overridden() {
    let f = facts("t3.large");
    let s = NodeSettings {
        max_pods: Some(110),
        ..NodeSettings::default()
    };
    assert_eq!(overhead(&f, &s).kube_reserved.memory_bytes, 640 * MIB);
    let br = NodeSettings {
        ami_family: AmiFamily::Bottlerocket,
        ..s
    };
    assert_eq!(overhead(&f, &br).kube_reserved.memory_bytes, (11 * 110 + 255) * MIB);
}

#[test]
fn eviction_thresholds_take_the_largest_signal() {
    let f = facts("t3.large");
    let s = NodeSettings {
        eviction_hard: [("memory.available".to_string(), "5%".to_string())].into(),
        eviction_soft: [("memory.available".to_string(), "200Mi".to_string())].into(),
        ..NodeSettings::default()
    };
    // 5% of 7577Mi = 378.85Mi, rounded up to the byte.
    let want = (7577.0 * MIB as f64 * 0.05).ceil() as i64;
    assert_eq!(overhead(&f, &s).eviction_threshold.memory_bytes, want);
    let disabled = NodeSettings {
        eviction_hard: [("memory.available".to_string(), "100%".to_string())].into(),
        ..NodeSettings::default()
    };
    assert_eq!(overhead(&f, &disabled).eviction_threshold.memory_bytes, 0);
    assert_eq!(eviction_signal_bytes(1000, "10%"), Some(100));
    assert_eq!(eviction_signal_bytes(1000, "1Ki"), Some(1024));
}

#[test]
fn gpus_become_extended_resources() {
    let cap = capacity(&facts("g4dn.xlarge"), &NodeSettings::default());
    assert_eq!(cap.get(NVIDIA_GPU), 1);
}

#[test]
fn branch_interfaces_become_pod_eni_only_with_security_groups_for_pods() {
    let trunking = InstanceFacts {
        branch_interfaces: 9,
        ..facts("m5.large")
    };
    assert_eq!(capacity(&trunking, &NodeSettings::default()).get(POD_ENI), 0);
    let on = NodeSettings {
        enable_pod_eni: true,
        ..NodeSettings::default()
    };
    assert_eq!(capacity(&trunking, &on).get(POD_ENI), 9);
    assert_eq!(capacity(&facts("m5.large"), &on).get(POD_ENI), 0, "not trunking-compatible");
}
