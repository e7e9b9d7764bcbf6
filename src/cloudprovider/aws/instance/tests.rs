use super::*;

fn option(t: &str, zone: &str, ct: &str, price: f64) -> InstanceOption {
    InstanceOption {
        instance_type: t.into(),
        zone: zone.into(),
        capacity_type: ct.into(),
        price,
    }
}

fn first_write_up_options() -> Vec<InstanceOption> {
    vec![
        option("t3.large", "ap-northeast-2a", "on-demand", 0.104),
        option("t3.large", "ap-northeast-2c", "on-demand", 0.104),
        option("t3.xlarge", "ap-northeast-2a", "on-demand", 0.208),
        option("t3.xlarge", "ap-northeast-2c", "on-demand", 0.208),
    ]
}

#[test]
fn plans_on_demand_cheapest_first_for_the_first_write_up() {
    let p = plan(&first_write_up_options(), None, |_| false).unwrap();
    assert_eq!(p.capacity_type, "on-demand");
    assert_eq!(p.options, first_write_up_options());
}

#[test]
fn prefers_spot_when_allowed_and_drops_spot_above_spot_price() {
    let mut options = first_write_up_options();
    options.push(option("t3.large", "ap-northeast-2a", "spot", 0.03));
    options.push(option("t3.xlarge", "ap-northeast-2a", "spot", 0.08));
    let p = plan(&options, Some(0.067), |_| false).unwrap();
    assert_eq!(p.capacity_type, "spot");
    assert_eq!(p.options, vec![option("t3.large", "ap-northeast-2a", "spot", 0.03)]);
    let p = plan(&options, Some(0.01), |_| false).unwrap();
    assert_eq!(p.capacity_type, "on-demand", "no spot option is cheap enough");
    let spot_only = vec![option("t3.large", "ap-northeast-2a", "spot", 0.03)];
    let err = plan(&spot_only, Some(0.01), |_| false).unwrap_err();
    assert!(err.to_string().contains("spotPrice 0.01"), "{err}");
}

#[test]
fn skips_unavailable_offerings_and_reports_capacity_when_none_is_left() {
    let options = first_write_up_options();
    let p = plan(&options, None, |o| o.zone == "ap-northeast-2a").unwrap();
    assert!(p.options.iter().all(|o| o.zone == "ap-northeast-2c"));
    match plan(&options, None, |_| true).unwrap_err() {
        Error::InsufficientCapacity { offerings } => assert_eq!(offerings.len(), 4),
        other => panic!("unexpected {other}"),
    }
    assert_eq!(plan(&[], None, |_| false).unwrap_err().kind(), "invalid_configuration");
}

#[test]
fn caps_launches_at_sixty_instance_types() {
    let options: Vec<_> = (0..80)
        .flat_map(|i| {
            let t = format!("m5.type{i:02}");
            [
                option(&t, "ap-northeast-2a", "on-demand", 1.0 + i as f64),
                option(&t, "ap-northeast-2c", "on-demand", 1.0 + i as f64),
            ]
        })
        .collect();
    let p = plan(&options, None, |_| false).unwrap();
    let types: BTreeSet<_> = p.options.iter().map(|o| o.instance_type.clone()).collect();
    assert_eq!(types.len(), MAX_INSTANCE_TYPES);
    assert_eq!(p.options.len(), 2 * MAX_INSTANCE_TYPES);
    assert!(types.contains("m5.type00") && !types.contains("m5.type60"));
}

#[test]
fn groups_overrides_by_launch_template_and_drops_zones_without_subnets() {
    let subnets = BTreeMap::from([(
        "ap-northeast-2a".to_string(),
        Subnet {
            id: "subnet-a".into(),
            zone: "ap-northeast-2a".into(),
            available_ips: 100,
        },
    )]);
    let lts = HashMap::from([
        ("t3.large".to_string(), "lt-amd".to_string()),
        ("t4g.large".to_string(), "lt-arm".to_string()),
    ]);
    let options = vec![
        option("t4g.large", "ap-northeast-2a", "on-demand", 0.08),
        option("t3.large", "ap-northeast-2a", "on-demand", 0.104),
        option("t3.large", "ap-northeast-2c", "on-demand", 0.104),
    ];
    let grouped = overrides(&options, &subnets, &lts);
    assert_eq!(grouped.len(), 2);
    assert_eq!(grouped[0].0, "lt-arm");
    assert_eq!(grouped[1].0, "lt-amd");
    assert_eq!(grouped[1].1.len(), 1);
    assert_eq!(grouped[1].1[0].subnet_id, "subnet-a");
}

#[test]
fn tags_instances_for_the_cluster_and_provisioner_over_user_tags() {
    let template = BTreeMap::from([
        ("karpenter.sh/discovery".to_string(), "ssungz-cluster".to_string()),
        ("karpenter.sh/provisioner-name".to_string(), "spoofed".to_string()),
        ("Name".to_string(), "custom".to_string()),
    ]);
    let tags = instance_tags("ssungz-cluster", "service", None, &BTreeMap::new(), &template);
    assert_eq!(tags["kubernetes.io/cluster/ssungz-cluster"], "owned");
    assert_eq!(tags["karpenter.sh/provisioner-name"], "service");
    assert_eq!(tags["karpenter-rs.sh/managed-by"], "ssungz-cluster");
    assert!(
        !tags.contains_key("karpenter.sh/managed-by"),
        "Karpenter's collector would terminate an instance with its tag and no Machine"
    );
    assert_eq!(tags["karpenter.sh/discovery"], "ssungz-cluster");
    assert_eq!(tags["Name"], "custom", "Name may be overridden");
    let tags = instance_tags("c", "service", Some("node-1"), &BTreeMap::new(), &BTreeMap::new());
    assert_eq!(tags["Name"], "service/node-1");
}

fn fleet_error(t: &str, code: &str) -> FleetError {
    FleetError {
        offering: OfferingId {
            instance_type: t.into(),
            zone: "ap-northeast-2a".into(),
            capacity_type: "spot".into(),
        },
        code: code.into(),
        message: format!("{code} for {t}"),
    }
}

#[test]
fn reports_capacity_errors_only_when_every_fleet_error_is_one() {
    let errs = [
        fleet_error("t3.large", "InsufficientInstanceCapacity"),
        fleet_error("t3.xlarge", "UnfulfillableCapacity"),
    ];
    match fleet_failure(&errs) {
        Error::InsufficientCapacity { offerings } => assert_eq!(offerings.len(), 2),
        other => panic!("unexpected {other}"),
    }
    assert_eq!(capacity_failures(&errs).len(), 2);
    let mixed = [
        fleet_error("t3.large", "InsufficientInstanceCapacity"),
        fleet_error("t3.xlarge", "InvalidParameterValue"),
    ];
    let err = fleet_failure(&mixed);
    assert_eq!(errors::code(&err), Some("InvalidParameterValue"));
    let chain = std::error::Error::source(&err).unwrap().to_string();
    assert!(
        chain.contains("InsufficientInstanceCapacity: ") && chain.contains("InvalidParameterValue: "),
        "{chain}"
    );
    assert_eq!(capacity_failures(&mixed).len(), 1);
    assert_eq!(fleet_failure(&[]).kind(), "api");
}
