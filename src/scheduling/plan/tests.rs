use super::*;
use crate::apis::v1alpha5::labels::PROVISIONER_NAME_LABEL;
use crate::scheduling::nodes::ExistingNode;
use crate::scheduling::testing::{catalogue, instance_type, node, pod, provisioner, service, taint, PodBuilder};

mod topology;

fn input(provisioners: Vec<Provisioner>, pods: Vec<PodBuilder>) -> SimulationInput {
    SimulationInput {
        pods: pods.into_iter().map(|p| Arc::new(p.build())).collect(),
        provisioners: provisioners
            .into_iter()
            .map(|p| ProvisionerInput {
                provisioner: p,
                instance_types: catalogue(),
            })
            .collect(),
        ..Default::default()
    }
}

fn nginx(name: &str) -> PodBuilder {
    pod(name)
        .label("app", "nginx-karpenter")
        .node_selector("nodeType", "service-2023")
        .tolerate("service", "true", "NoSchedule")
}

fn names(r: &NodeRequest) -> Vec<&str> {
    r.instance_type_options.iter().map(|it| it.name.as_str()).collect()
}

fn reason_of<'a>(plan: &'a Plan, pod: &str) -> &'a str {
    plan.unschedulable
        .iter()
        .find(|(k, _)| k.name == pod)
        .map(|(_, r)| r.as_str())
        .unwrap_or_else(|| panic!("{pod} is not unschedulable: {plan:?}"))
}

#[test]
fn launches_one_node_for_pods_that_tolerate_the_taint() {
    let plan = simulate(&input(vec![service()], vec![nginx("nginx-1"), nginx("nginx-2")]));
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let [node] = plan.new_nodes.as_slice() else {
        panic!("want one node, got {:?}", plan.new_nodes)
    };
    assert_eq!(node.provisioner, "service");
    assert_eq!(node.pods.len(), 2);
    assert_eq!(names(node), ["t3.large", "t3.xlarge"]);
    let (it, offering) = node.cheapest().expect("an offering");
    assert_eq!(it.name, "t3.large");
    assert_eq!(offering.capacity_type, "on-demand");
    assert!(["ap-northeast-2a", "ap-northeast-2c"].contains(&offering.zone.as_str()));
    assert_eq!(node.requests.to_string(), "pods=2");
    assert_eq!(node.labels.get("nodeType").map(String::as_str), Some("service-2023"));
    assert_eq!(node.labels.get(PROVISIONER_NAME_LABEL).map(String::as_str), Some("service"));
    assert_eq!(node.labels.get(CAPACITY_TYPE_LABEL).map(String::as_str), Some("on-demand"));
    assert!(!node.requirements.has_key(HOSTNAME_LABEL), "placeholder hostnames stay internal");
    assert_eq!(
        node.requirements.get(INSTANCE_TYPE_LABEL).map(ToString::to_string).as_deref(),
        Some("In [t3.large t3.xlarge]")
    );
    assert_eq!(node.taints, vec![taint("service=true:NoSchedule")]);
}

#[test]
fn explains_why_a_pod_cannot_be_scheduled() {
    let cases = [
        (
            pod("no-toleration").node_selector("nodeType", "service-2023"),
            "incompatible with provisioner \"service\", did not tolerate taint service=true:NoSchedule",
        ),
        (
            pod("undeclared-label")
                .tolerate("service", "true", "NoSchedule")
                .node_selector("team", "a"),
            "incompatible with provisioner \"service\", incompatible requirements, label \"team\" does not have known values",
        ),
        (
            nginx("other-zone").node_selector(ZONE_LABEL, "ap-northeast-2b"),
            "key topology.kubernetes.io/zone, In [ap-northeast-2b] not in In [ap-northeast-2a ap-northeast-2c]",
        ),
        (
            nginx("too-big").cpu("100"),
            "no instance type has room for requests cpu=100, pods=1 (of 2 instance types matching the requirements)",
        ),
        (
            nginx("gpu").gpu(1),
            "no instance type has room for requests pods=1, nvidia.com/gpu=1",
        ),
    ];
    for (p, want) in cases {
        let name = p.clone().build().metadata.name.expect("named");
        let plan = simulate(&input(vec![service()], vec![p]));
        let got = reason_of(&plan, &name);
        assert!(got.contains(want), "{name}: want {want:?} in {got:?}");
        assert!(plan.new_nodes.is_empty());
        let counted: usize = plan.unschedulable_by.values().sum();
        assert_eq!(counted, 1, "{name}: one pod counted once: {:?}", plan.unschedulable_by);
    }
}

#[test]
fn reports_when_no_provisioner_exists() {
    let plan = simulate(&input(vec![], vec![pod("p")]));
    assert!(reason_of(&plan, "p").contains("no Provisioner can launch a node"));
    assert_eq!(
        plan.unschedulable_by,
        BTreeMap::from([((String::new(), "no_provisioner".to_string()), 1)])
    );
}

#[test]
fn a_gpu_request_picks_a_gpu_instance_type() {
    let plan = simulate(&input(vec![provisioner("default").build()], vec![pod("train").gpu(1).cpu("2")]));
    let [node] = plan.new_nodes.as_slice() else {
        panic!("want one node: {plan:?}")
    };
    assert_eq!(names(node), ["g4dn.xlarge", "p3.2xlarge"]);
    assert_eq!(node.cheapest().map(|(it, _)| it.name.as_str()), Some("g4dn.xlarge"));
}

#[test]
fn packs_200_small_pods_into_few_nodes() {
    let pods: Vec<PodBuilder> = (0..200).map(|i| pod(&format!("p{i:03}")).cpu("100m").memory("128Mi")).collect();
    let plan = simulate(&input(vec![provisioner("default").build()], pods));
    assert!(plan.unschedulable.is_empty());
    let placed: usize = plan.new_nodes.iter().map(|n| n.pods.len()).sum();
    assert_eq!(placed, 200);
    // The largest catalogue types take 58 pods (ENI limit): ⌈200 / 58⌉ = 4 nodes.
    assert_eq!(
        plan.new_nodes.len(),
        4,
        "{:?}",
        plan.new_nodes.iter().map(|n| n.pods.len()).collect::<Vec<_>>()
    );
    for n in &plan.new_nodes {
        let cheapest = n.cheapest().map(|(it, _)| it);
        assert!(cheapest.is_some_and(|it| n.requests.fits(&it.allocatable())), "{n:?}");
    }
}

#[test]
fn fills_existing_and_in_flight_nodes_before_launching() {
    let mut existing = node("ip-10-0-0-1", "2", "8Gi", 35);
    existing.labels.insert("nodeType".into(), "service-2023".into());
    existing.taints = vec![taint("service=true:NoSchedule")];
    existing.pods = vec![pod("running").cpu("1").build()].into_iter().map(Arc::new).collect();
    let mut in_flight = node("ip-10-0-0-2", "2", "8Gi", 35);
    in_flight.labels.insert("nodeType".into(), "service-2023".into());
    in_flight.initialized = false;
    in_flight.taints = vec![
        taint("service=true:NoSchedule"),
        taint("node.kubernetes.io/not-ready:NoSchedule"),
        taint("example.com/agent-not-ready:NoExecute"),
    ];
    in_flight.startup_taints = vec![taint("example.com/agent-not-ready:NoExecute")];
    let mut inp = input(
        vec![service()],
        vec![nginx("a").cpu("800m"), nginx("b").cpu("800m"), nginx("c").cpu("800m")],
    );
    inp.nodes = vec![in_flight, existing];
    let plan = simulate(&inp);
    assert!(plan.new_nodes.is_empty(), "{:?}", plan.new_nodes);
    let got: Vec<(String, String)> = plan.existing_assignments.iter().map(|(p, n)| (p.name.clone(), n.clone())).collect();
    // Initialised nodes first: ip-10-0-0-1 has 1 core left, so one pod; the in-flight node
    // takes the other two (its startup and not-ready taints are ignored).
    assert_eq!(
        got,
        [
            ("a".to_string(), "ip-10-0-0-1".to_string()),
            ("b".to_string(), "ip-10-0-0-2".to_string()),
            ("c".to_string(), "ip-10-0-0-2".to_string()),
        ]
    );
}

#[test]
fn provisioner_limits_are_never_exceeded() {
    let limited = provisioner("small").limit("cpu", "4").build();
    let pods: Vec<PodBuilder> = (0..10).map(|i| pod(&format!("p{i}")).cpu("1")).collect();
    let plan = simulate(&input(vec![limited], pods));
    let max_cpu: i64 = plan
        .new_nodes
        .iter()
        .map(|n| n.instance_type_options.iter().map(|it| it.capacity.cpu_millis).max().unwrap_or(0))
        .sum();
    assert!(max_cpu <= 4000, "planned up to {max_cpu}m cpu");
    assert!(!plan.unschedulable.is_empty());
    assert!(plan
        .unschedulable
        .iter()
        .all(|(_, r)| r.contains("all available instance types exceed provisioner limits")));
    assert_eq!(plan.limited, BTreeSet::from(["small".to_string()]));
    assert!(plan.unfit.is_empty(), "limits are not a lack of room");
    assert_eq!(
        plan.unschedulable_by,
        BTreeMap::from([(("small".to_string(), "limits".to_string()), plan.unschedulable.len())])
    );
}

#[test]
fn a_pod_no_instance_type_has_room_for_names_the_provisioner() {
    let plan = simulate(&input(vec![service()], vec![nginx("huge").cpu("64")]));
    let (pod, reason) = &plan.unfit["service"];
    assert_eq!(pod.name, "huge");
    assert!(reason.contains("no instance type has room"), "{reason}");
    // The type that came closest, and by how much.
    assert!(reason.contains("; the closest, t3.xlarge, is short of cpu (requested 64, available "), "{reason}");
    assert!(!reason.contains("memory ("), "only what does not fit: {reason}");
    // A pod that finds a node elsewhere leaves nothing behind.
    let plan = simulate(&input(vec![service()], vec![nginx("small").cpu("1")]));
    assert!(plan.unfit.is_empty());
}

#[test]
fn existing_nodes_count_against_limits() {
    let limited = provisioner("small").limit("cpu", "4").build();
    let mut full = node("n1", "4", "16Gi", 58);
    full.labels.insert(PROVISIONER_NAME_LABEL.into(), "small".into());
    full.allocatable = Resources::zero();
    let mut inp = input(vec![limited], vec![pod("p").cpu("100m")]);
    inp.nodes = vec![full];
    let plan = simulate(&inp);
    assert!(plan.new_nodes.is_empty());
    let reason = reason_of(&plan, "p");
    assert!(reason.contains("exceed provisioner limits"), "{reason}");
    // With the figures: the limit, what the Provisioner's node takes, what is left, the smallest type.
    assert!(reason.contains("(cpu: limit 4, 4 in use or planned, 0 left; the smallest type, "), "{reason}");
}

#[test]
fn the_reason_names_the_provisioner_that_refused_a_compatible_pod() {
    // "a-other" sorts first and is incompatible (taint); "service" matches but is at its limit.
    let other = provisioner("a-other").taint("dedicated=db:NoSchedule").build();
    let limited = provisioner("service")
        .taint("service=true:NoSchedule")
        .label("nodeType", "service-2023")
        .limit("cpu", "1")
        .build();
    let plan = simulate(&input(vec![other.clone(), limited], vec![nginx("p").cpu("500m")]));
    let reason = reason_of(&plan, "p");
    assert!(reason.contains("provisioner \"service\""), "{reason}");
    assert!(reason.contains("exceed provisioner limits"), "{reason}");
    assert!(!reason.contains("a-other"), "{reason}");

    // With nothing compatible, every Provisioner's incompatibility is listed.
    let plan = simulate(&input(vec![other, service()], vec![pod("q")]));
    let reason = reason_of(&plan, "q");
    assert!(reason.contains("a-other") && reason.contains("service"), "{reason}");
}

#[test]
fn heavier_provisioners_are_tried_first() {
    let light = provisioner("a-light").build();
    let heavy = provisioner("z-heavy").weight(50).build();
    let plan = simulate(&input(vec![light, heavy], vec![pod("p")]));
    assert_eq!(plan.new_nodes[0].provisioner, "z-heavy");
}

#[test]
fn relaxes_preferences_that_cannot_be_met() {
    let cases = [
        pod("preferred-zone").preferred_term(10, &[(ZONE_LABEL, "In", &["us-east-1a"])]),
        pod("second-term")
            .required_term(&[(ZONE_LABEL, "In", &["us-east-1a"])])
            .required_term(&[(ZONE_LABEL, "In", &["ap-northeast-2b"])]),
        pod("preferred-anti")
            .label("app", "x")
            .preferred_anti_affinity(1, ZONE_LABEL, &[("app", "nothing-matches-yet")]),
    ];
    for p in cases {
        let name = p.clone().build().metadata.name.expect("named");
        let plan = simulate(&input(vec![provisioner("default").build()], vec![p]));
        assert!(plan.unschedulable.is_empty(), "{name}: {:?}", plan.unschedulable);
        assert_eq!(plan.new_nodes.len(), 1, "{name}");
    }
}

#[test]
fn schedule_anyway_spread_is_relaxed_but_do_not_schedule_is_not() {
    let web = |n: &str, zone: &str| {
        let mut node = node(n, "1", "1Gi", 10);
        node.labels.insert(ZONE_LABEL.into(), zone.into());
        node.allocatable = Resources::zero();
        node
    };
    let running = |n: &str| pod(n).label("app", "web").build();
    let mut a = web("n-a", "ap-northeast-2a");
    a.pods = vec![running("w1"), running("w2"), running("w3")]
        .into_iter()
        .map(Arc::new)
        .collect();
    let mut c = web("n-c", "ap-northeast-2c");
    c.pods = vec![running("w4")].into_iter().map(Arc::new).collect();
    let only_2a = provisioner("default").requirement(ZONE_LABEL, "In", &["ap-northeast-2a"]).build();
    for (when, schedulable) in [("DoNotSchedule", false), ("ScheduleAnyway", true)] {
        let mut inp = input(
            vec![only_2a.clone()],
            vec![pod("new").label("app", "web").spread(ZONE_LABEL, 1, when, &[("app", "web")])],
        );
        inp.nodes = vec![a.clone(), c.clone()];
        let plan = simulate(&inp);
        assert_eq!(plan.unschedulable.is_empty(), schedulable, "{when}: {plan:?}");
        if !schedulable {
            assert!(reason_of(&plan, "new").contains("unsatisfiable topology spread constraint"));
        }
    }
}

#[test]
fn daemonset_overhead_is_part_of_every_new_node() {
    let mut inp = input(vec![service()], vec![nginx("web").cpu("500m")]);
    inp.daemonset_pods = vec![pod("agent")
        .cpu("1500m")
        .tolerate("service", "true", "NoSchedule")
        .daemonset("agent")
        .build()];
    let plan = simulate(&inp);
    let node = &plan.new_nodes[0];
    // t3.large has 1830m allocatable: 1500m + 500m does not fit.
    assert_eq!(names(node), ["t3.xlarge"]);
    assert_eq!(node.requests.to_string(), "cpu=2, pods=2");
}

#[test]
fn a_request_past_every_instance_type_fits_none_even_when_sums_would_overflow() {
    // The API server admits `8Ei` (2^63 bytes); with a DaemonSet's memory added, a wrapping
    // sum would turn negative and "fit" every type.
    let mut inp = input(vec![service()], vec![nginx("huge").memory("8Ei"), nginx("huge-cpu").cpu("1E")]);
    inp.daemonset_pods = vec![pod("agent")
        .cpu("100m")
        .memory("100Mi")
        .tolerate("service", "true", "NoSchedule")
        .daemonset("agent")
        .build()];
    let plan = simulate(&inp);
    assert!(plan.new_nodes.is_empty(), "{:?}", plan.new_nodes);
    assert!(reason_of(&plan, "huge").contains("no instance type has room"), "{plan:?}");
    assert!(reason_of(&plan, "huge-cpu").contains("no instance type has room"), "{plan:?}");
}

#[test]
fn host_port_conflicts_need_separate_nodes() {
    let plan = simulate(&input(
        vec![provisioner("default").build()],
        vec![pod("a").host_port(8080), pod("b").host_port(8080), pod("c").host_port(9090)],
    ));
    assert_eq!(plan.new_nodes.len(), 2);
}

#[test]
fn caps_instance_type_options_cheapest_first() {
    let base = instance_type("m5.large");
    let many: Vec<Arc<InstanceType>> = (0..150)
        .map(|i| {
            let mut it = base.clone();
            it.name = format!("x{i:03}.large");
            it.requirements.remove(INSTANCE_TYPE_LABEL);
            it.requirements.add(INSTANCE_TYPE_LABEL, Requirement::in_values([it.name.clone()]));
            for o in it.offerings.iter_mut() {
                o.price = 1.0 + f64::from(150 - i) / 100.0;
            }
            Arc::new(it)
        })
        .collect();
    let inp = SimulationInput {
        pods: vec![Arc::new(pod("p").build())],
        provisioners: vec![ProvisionerInput {
            provisioner: provisioner("default").build(),
            instance_types: many,
        }],
        ..Default::default()
    };
    let plan = simulate(&inp);
    let node = &plan.new_nodes[0];
    assert_eq!(node.instance_type_options.len(), MAX_INSTANCE_TYPE_OPTIONS);
    assert_eq!(node.instance_type_options[0].name, "x149.large");
    assert_eq!(node.instance_type_options[99].name, "x050.large");
}

#[test]
fn ignores_pods_karpenter_does_not_provision_for() {
    let plan = simulate(&input(
        vec![provisioner("default").build()],
        vec![pod("karpenter").required_term(&[(PROVISIONER_NAME_LABEL, "DoesNotExist", &[])])],
    ));
    assert!(plan.new_nodes.is_empty());
    assert_eq!(plan.ignored.len(), 1);
}

#[test]
fn startup_taints_need_no_toleration_and_travel_with_the_request() {
    let p = provisioner("cilium")
        .startup_taint("node.cilium.io/agent-not-ready=true:NoExecute")
        .build();
    let plan = simulate(&input(vec![p], vec![pod("p")]));
    let [node] = plan.new_nodes.as_slice() else {
        panic!("want one node: {plan:?}")
    };
    assert_eq!(node.startup_taints, vec![taint("node.cilium.io/agent-not-ready=true:NoExecute")]);
    assert!(node.taints.is_empty());
}

#[test]
fn tolerates_prefer_no_schedule_as_a_last_resort() {
    let p = provisioner("soft").taint("dedicated=batch:PreferNoSchedule").build();
    let plan = simulate(&input(vec![p], vec![pod("p")]));
    assert_eq!(plan.new_nodes.len(), 1, "{plan:?}");
}

#[test]
fn plans_are_deterministic() {
    let pods = || -> Vec<PodBuilder> {
        (0..60)
            .map(|i| {
                pod(&format!("p{i}"))
                    .cpu(["100m", "250m", "1"][i % 3])
                    .memory(["128Mi", "1Gi"][i % 2])
                    .label("app", "web")
                    .created(1_700_000_000 + (i as i64 % 7))
                    .spread(ZONE_LABEL, 1, "DoNotSchedule", &[("app", "web")])
            })
            .collect()
    };
    let a = simulate(&input(vec![provisioner("default").build()], pods()));
    let b = simulate(&input(vec![provisioner("default").build()], pods()));
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    assert!(a.unschedulable.is_empty());
}

#[test]
fn existing_nodes_expect_their_missing_daemons() {
    let mut n: ExistingNode = node("n1", "2", "4Gi", 10);
    n.pods = vec![pod("logs-abc").cpu("100m").daemonset("logs").build()]
        .into_iter()
        .map(Arc::new)
        .collect();
    let mut inp = input(vec![provisioner("default").build()], vec![pod("p").cpu("1")]);
    inp.daemonset_pods = vec![
        pod("logs").cpu("100m").daemonset("logs").build(),
        pod("metrics").cpu("950m").daemonset("metrics").build(),
    ];
    inp.nodes = vec![n];
    // 2 cores − 100m running − 950m expected leaves 950m: the 1-core pod needs a new node.
    let plan = simulate(&inp);
    assert!(plan.existing_assignments.is_empty());
    assert_eq!(plan.new_nodes.len(), 1);
}
