use super::*;
use crate::apis::v1alpha1::AwsProvider;
use crate::apis::v1alpha1::{AwsNodeTemplateSpec, BlockDevice, BlockDeviceMapping};
use crate::cloudprovider::KubernetesVersion;
use crate::scheduling::testing::{instance_type, pod, provisioner, service};
use crate::scheduling::{GpuFacts, InstanceFacts, Offering, Requirements};

/// A type sold in one zone at `on_demand` and `spot` (None: not as spot).
fn priced(facts: InstanceFacts, on_demand: f64, spot: Option<f64>) -> InstanceType {
    let mut offerings = vec![Offering {
        zone: "ap-northeast-2a".into(),
        capacity_type: "on-demand".into(),
        price: on_demand,
        available: true,
    }];
    offerings.extend(spot.map(|price| Offering {
        zone: "ap-northeast-2a".into(),
        capacity_type: "spot".into(),
        price,
        available: true,
    }));
    InstanceType::from_facts(&facts, offerings, &NodeSettings::default(), None)
}

fn facts(name: &str) -> InstanceFacts {
    InstanceFacts {
        name: name.into(),
        vcpus: 4,
        memory_mib: 16384,
        architecture: "amd64".into(),
        max_enis: 4,
        ipv4_per_eni: 15,
        ..Default::default()
    }
}

fn with_gpu(name: &str, manufacturer: &str) -> InstanceFacts {
    InstanceFacts {
        gpus: vec![GpuFacts {
            name: "gpu".into(),
            manufacturer: manufacturer.into(),
            count: 1,
            memory_mib: 16384,
        }],
        ..facts(name)
    }
}

/// Every option of each type whose capacity type is in `capacity_types`.
fn candidates<'a>(types: &'a [InstanceType], capacity_types: &[&str]) -> Vec<(&'a InstanceType, Vec<InstanceOption>)> {
    types
        .iter()
        .map(|it| {
            let options = it
                .offerings
                .iter()
                .filter(|o| capacity_types.contains(&o.capacity_type.as_str()))
                .map(|o| InstanceOption::of(&it.name, o))
                .collect();
            (it, options)
        })
        .collect()
}

fn type_names(options: &[InstanceOption]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for o in options {
        if !names.contains(&o.instance_type) {
            names.push(o.instance_type.clone());
        }
    }
    names
}

#[test]
fn the_type_cache_rebuilds_only_when_the_catalogue_or_the_provisioner_inputs_change() {
    let template = NodeTemplate::from_provider(&AwsProvider::default(), "c", KubernetesVersion { major: 1, minor: 33 }).unwrap();
    let mut p = provisioner("default").build();
    let zones = BTreeSet::from(["ap-northeast-2a".to_string()]);
    let mut info = info("m5.large");
    let mut cache = TypeCache::default();
    assert!(cache.set_catalogue(vec![info.clone()]), "the first catalogue is a change");
    let first = cache.instance_types(&p, &template, &zones, "ap-northeast-2", &NodeSettings::default());
    assert!(!cache.set_catalogue(vec![info.clone()]), "the same catalogue is none");
    let again = cache.instance_types(&p, &template, &zones, "ap-northeast-2", &NodeSettings::default());
    assert!(Arc::ptr_eq(&first[0], &again[0]), "same inputs: the same types");
    // An offering marked unavailable changes the catalogue: rebuilt, and it shows.
    info.offerings[0].available = false;
    assert!(cache.set_catalogue(vec![info.clone()]));
    let after_ice = cache.instance_types(&p, &template, &zones, "ap-northeast-2", &NodeSettings::default());
    assert!(!Arc::ptr_eq(&first[0], &after_ice[0]));
    assert!(!after_ice[0].offerings[0].available);
    // Kubelet settings change the capacity: rebuilt.
    p.spec.kubelet_configuration = Some(crate::apis::v1alpha5::KubeletConfiguration {
        max_pods: Some(10),
        ..Default::default()
    });
    cache.set_catalogue(vec![info]);
    let limited = cache.instance_types(&p, &template, &zones, "ap-northeast-2", &NodeSettings::default());
    assert!(!Arc::ptr_eq(&after_ice[0], &limited[0]));
    assert_eq!(limited[0].allocatable().pods, 10);
}

#[test]
fn only_the_types_a_provisioner_allows_are_kept_and_any_other_is_translated_when_asked() {
    let template = NodeTemplate::from_provider(&AwsProvider::default(), "c", KubernetesVersion { major: 1, minor: 33 }).unwrap();
    let zones = BTreeSet::from(["ap-northeast-2a".to_string()]);
    let settings = NodeSettings::default();
    let mut cache = TypeCache::default();
    cache.set_catalogue(vec![info("t3.large"), info("t3.xlarge"), info("m5.large")]);
    let p = provisioner("service")
        .requirement("node.kubernetes.io/instance-type", "In", &["t3.large", "t3.xlarge"])
        .build();
    let allowed = cache.instance_types(&p, &template, &zones, "ap-northeast-2", &settings);
    assert_eq!(
        allowed.iter().map(|it| it.name.as_str()).collect::<Vec<_>>(),
        ["t3.large", "t3.xlarge"]
    );
    // The shared one when allowed; a node of a type no longer allowed still gets its
    // capacity and price, as the Provisioner's nodes would have it.
    assert!(Arc::ptr_eq(&cache.instance_type("service", "t3.large").unwrap(), &allowed[0]));
    let other = cache.instance_type("service", "m5.large").expect("in the catalogue");
    assert_eq!(other.offerings.len(), 1);
    assert_eq!(other.offerings[0].zone, "ap-northeast-2a");
    assert!(other.allocatable().pods > 0);
    assert!(cache.instance_type("service", "x9.huge").is_none(), "not in the catalogue");
    assert!(cache.instance_type("other", "t3.large").is_none(), "no such Provisioner seen");
    // Changed requirements rebuild the set.
    let p = provisioner("service")
        .requirement("node.kubernetes.io/instance-type", "In", &["m5.large"])
        .build();
    let allowed = cache.instance_types(&p, &template, &zones, "ap-northeast-2", &settings);
    assert_eq!(allowed.iter().map(|it| it.name.as_str()).collect::<Vec<_>>(), ["m5.large"]);
    // A Provisioner that names no types keeps every one.
    let everything = provisioner("service").build();
    assert_eq!(
        cache
            .instance_types(&everything, &template, &zones, "ap-northeast-2", &settings)
            .len(),
        3
    );
}

#[test]
fn drops_metal_gpu_neuron_and_habana_types_when_others_fit() {
    let types = [
        priced(facts("m5.xlarge"), 0.236, None),
        priced(facts("m5.metal"), 0.1, None),
        priced(facts("m7i.metal-24xl"), 0.1, None),
        priced(with_gpu("g4dn.xlarge", "nvidia"), 0.1, None),
        priced(with_gpu("g4ad.xlarge", "amd"), 0.1, None),
        priced(with_gpu("dl1.24xlarge", "habana"), 0.1, None),
        priced(
            InstanceFacts {
                neuron_devices: 1,
                ..facts("inf1.xlarge")
            },
            0.1,
            None,
        ),
    ];
    assert!(types[1..].iter().all(is_exotic) && !is_exotic(&types[0]));
    let options = launch_options(candidates(&types, &["on-demand"]));
    assert_eq!(type_names(&options), ["m5.xlarge"]);
}

#[test]
fn keeps_exotic_types_when_nothing_else_fits() {
    let types = [
        priced(with_gpu("p3.2xlarge", "nvidia"), 3.06, None),
        priced(with_gpu("g4dn.xlarge", "nvidia"), 0.526, None),
    ];
    let options = launch_options(candidates(&types, &["on-demand"]));
    assert_eq!(type_names(&options), ["g4dn.xlarge", "p3.2xlarge"]);
}

#[test]
fn mixed_launches_drop_types_dearer_than_the_cheapest_on_demand_option() {
    let types = [
        priced(facts("m5.large"), 0.096, Some(0.05)),
        priced(facts("m5.xlarge"), 0.192, Some(0.09)),
        priced(facts("m5.2xlarge"), 0.384, Some(0.12)),
        // Only on-demand, dearer than m5.large on-demand: dropped too.
        priced(facts("c5.xlarge"), 0.17, None),
    ];
    let options = launch_options(candidates(&types, &["on-demand", "spot"]));
    assert_eq!(type_names(&options), ["m5.large", "m5.xlarge"]);
    assert!(
        options.iter().any(|o| o.capacity_type == "on-demand"),
        "their on-demand options stay"
    );
    // Spot only, or on-demand only: not a mixed launch, nothing is dropped for price.
    let spot = launch_options(candidates(&types, &["spot"]));
    assert_eq!(type_names(&spot), ["m5.large", "m5.xlarge", "m5.2xlarge"]);
    let on_demand = launch_options(candidates(&types, &["on-demand"]));
    assert_eq!(type_names(&on_demand), ["m5.large", "c5.xlarge", "m5.xlarge", "m5.2xlarge"]);
}

#[test]
fn orders_by_cheapest_option_with_name_ties_and_caps_at_sixty_types() {
    let types: Vec<InstanceType> = (0..70)
        .rev()
        .map(|i| priced(facts(&format!("m5.size{i:02}")), if i < 65 { 1.0 } else { 0.5 }, None))
        .collect();
    let options = launch_options(candidates(&types, &["on-demand"]));
    let names = type_names(&options);
    assert_eq!(names.len(), MAX_INSTANCE_TYPES);
    assert_eq!(names[..5], ["m5.size65", "m5.size66", "m5.size67", "m5.size68", "m5.size69"]);
    assert_eq!(names[5], "m5.size00", "equal prices: by name");
    assert_eq!(names[59], "m5.size54");
}

#[test]
fn launch_requests_carry_the_filtered_options() {
    let request = NodeRequest {
        provisioner: "service".into(),
        requirements: Requirements::new(),
        instance_type_options: vec![Arc::new(instance_type("g4dn.xlarge")), Arc::new(instance_type("m5.xlarge"))],
        pods: vec![],
        requests: Resources::zero(),
        labels: BTreeMap::new(),
        taints: vec![],
        startup_taints: vec![],
    };
    let template =
        NodeTemplate::from_provider(&AwsProvider::default(), "ssungz-cluster", KubernetesVersion { major: 1, minor: 33 }).unwrap();
    let launch = launch_request(&request, &service(), template, None);
    assert!(!launch.instance_options.is_empty());
    assert!(
        launch.instance_options.iter().all(|o| o.instance_type == "m5.xlarge"),
        "{:?}",
        launch.instance_options
    );
    assert!(launch.instance_options.windows(2).all(|w| w[0].price <= w[1].price));
}

/// The catalogue entry of a test-catalogue type, sold on-demand in `ap-northeast-2a`.
fn info(name: &str) -> InstanceTypeInfo {
    test_info(name, 0.0832)
}

fn template_with_root(family: Option<&str>, root: Option<(&str, &str)>) -> NodeTemplate {
    let spec = AwsNodeTemplateSpec {
        ami_family: family.map(str::to_string),
        block_device_mappings: root.map(|(device, size)| {
            vec![BlockDeviceMapping {
                device_name: Some(device.into()),
                ebs: Some(BlockDevice {
                    volume_size: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(size.into())),
                    ..Default::default()
                }),
            }]
        }),
        ..Default::default()
    };
    NodeTemplate::from_node_template(&spec, "ssungz-cluster", KubernetesVersion { major: 1, minor: 33 }).unwrap()
}

#[test]
fn ephemeral_storage_comes_from_the_templates_root_volume() {
    const GI: i64 = 1 << 30;
    let zones = BTreeSet::from(["ap-northeast-2a".to_string()]);
    let p = provisioner("default").build();
    let storage = |template: &NodeTemplate| {
        let types = instance_types(&[info("t3.large")], &p, template, &zones, "ap-northeast-2", &Default::default());
        (
            types[0].capacity.ephemeral_storage_bytes,
            types[0].allocatable().ephemeral_storage_bytes,
        )
    };
    // 20Gi by default, minus kube-reserved 1Gi, system-reserved 1Gi and the kubelet's
    // nodefs.available eviction threshold (10%).
    assert_eq!(storage(&template_with_root(None, None)), (20 * GI, 16 * GI));
    assert_eq!(
        storage(&template_with_root(None, Some(("/dev/xvda", "100Gi")))),
        (100 * GI, 88 * GI)
    );
    assert_eq!(
        storage(&template_with_root(Some("Bottlerocket"), Some(("/dev/xvda", "100Gi")))),
        (20 * GI, 16 * GI),
        "Bottlerocket's ephemeral storage is /dev/xvdb"
    );
}

#[test]
fn a_pod_asking_for_50gi_of_ephemeral_storage_fits_a_100gi_root_volume_only() {
    let zones = BTreeSet::from(["ap-northeast-2a".to_string()]);
    let p = provisioner("default").build();
    let simulate = |template: &NodeTemplate| {
        let input = crate::scheduling::SimulationInput {
            pods: vec![Arc::new(pod("scratch").cpu("100m").ephemeral_storage("50Gi").build())],
            provisioners: vec![crate::scheduling::ProvisionerInput {
                provisioner: p.clone(),
                instance_types: instance_types(&[info("t3.large")], &p, template, &zones, "ap-northeast-2", &Default::default()),
            }],
            nodes: vec![],
            daemonset_pods: vec![],
            namespace_labels: BTreeMap::new(),
        };
        crate::scheduling::simulate(&input)
    };
    let plan = simulate(&template_with_root(None, Some(("/dev/xvda", "100Gi"))));
    assert_eq!(plan.new_nodes.len(), 1, "{:?}", plan.unschedulable);
    let plan = simulate(&template_with_root(None, None));
    assert!(plan.new_nodes.is_empty());
    assert_eq!(plan.unschedulable.len(), 1);
}
