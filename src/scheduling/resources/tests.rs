use super::*;
use crate::scheduling::testing::pod;

#[test]
fn limits_add_up_like_requests_without_standing_in_for_them() {
    let cases = [
        (pod("a").cpu("500m").memory("1Gi"), "{}"),
        (pod("e").limit_cpu("750m"), "cpu=750m"),
        (pod("f").limit_cpu("1").container_cpu("250m"), "cpu=1"),
    ];
    for (p, want) in cases {
        assert_eq!(pod_limits(&p.build()).to_string(), want);
    }
}

#[test]
fn sums_containers_and_takes_the_larger_init_container() {
    let cases = [
        (pod("a").cpu("500m").memory("1Gi"), "cpu=500m, memory=1Gi, pods=1"),
        (pod("b"), "pods=1"),
        (
            pod("c").cpu("250m").container_cpu("250m").init_cpu("1").memory("100Mi"),
            "cpu=1, memory=100Mi, pods=1",
        ),
        (pod("d").cpu("2").init_cpu("1"), "cpu=2, pods=1"),
        (pod("e").limit_cpu("750m"), "cpu=750m, pods=1"),
        (pod("f").cpu("100m").overhead_cpu("50m"), "cpu=150m, pods=1"),
        (pod("g").gpu(1), "pods=1, nvidia.com/gpu=1"),
    ];
    for (p, want) in cases {
        assert_eq!(pod_requests(&p.build()).to_string(), want);
    }
}

#[test]
fn native_sidecars_run_beside_the_containers_and_the_later_init_containers() {
    let cases = [
        // Containers 1 + sidecar 500m run together; the init container (1) starts beside the
        // sidecar started before it: max(1 + 500m, 1500m) = 1500m.
        (pod("a").cpu("1").sidecar_cpu("500m").init_cpu("1"), "cpu=1500m, pods=1"),
        // An init container before the sidecar starts alone: max(2, 1 + 500m) = 2.
        (pod("b").cpu("1").init_cpu("2").sidecar_cpu("500m"), "cpu=2, pods=1"),
        // After the sidecar it starts beside it: 2 + 500m.
        (pod("c").cpu("1").sidecar_cpu("500m").init_cpu("2"), "cpu=2500m, pods=1"),
        // Two sidecars both count with the containers.
        (pod("d").cpu("1").sidecar_cpu("250m").sidecar_cpu("250m"), "cpu=1500m, pods=1"),
        // The overhead comes on top.
        (pod("e").cpu("1").sidecar_cpu("500m").overhead_cpu("100m"), "cpu=1600m, pods=1"),
    ];
    for (p, want) in cases {
        assert_eq!(pod_requests(&p.build()).to_string(), want);
    }
}

#[test]
fn converts_quantities_to_exact_units() {
    assert_eq!(to_units(CPU, 0.1), 100);
    assert_eq!(to_units(CPU, 1.5), 1500);
    assert_eq!(to_units(CPU, 0.0001), 1);
    assert_eq!(to_units(MEMORY, 1.5 * 1024.0 * 1024.0 * 1024.0), 1536 << 20);
    assert_eq!(format_amount(MEMORY, 1536 << 20), "1536Mi");
    assert_eq!(format_amount(CPU, 2000), "2");
    assert_eq!(format_amount(NVIDIA_GPU, 4), "4");
}

#[test]
fn fits_compares_every_resource() {
    let node = Resources::zero().with(CPU, 2000).with(MEMORY, 4 << 30).with(PODS, 10);
    assert!(Resources::zero().with(CPU, 2000).fits(&node));
    assert!(!Resources::zero().with(CPU, 2001).fits(&node));
    assert!(!Resources::zero().with(NVIDIA_GPU, 1).fits(&node));
    assert_eq!(
        Resources::zero().with(MEMORY, 5 << 30).first_excess(&node).as_deref(),
        Some("memory (requested 5Gi, available 4Gi)")
    );
}
