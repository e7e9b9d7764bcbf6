//! The AWS cloud provider against the local cluster's real moto emulator (tests/cluster/): the
//! instance-type catalogue, the first write-up's AWSNodeTemplate selectors and AMIs, and
//! launching, listing and terminating instances through CreateFleet. Every launch uses a unique
//! provisioner name and terminates what it created, also when an assertion fails.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_ec2::types::Filter;
use base64::Engine;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Taint;
use karpenter_rs::apis::v1alpha1::AwsNodeTemplate;
use karpenter_rs::cloudprovider::aws::pricing::estimate_on_demand;
use karpenter_rs::cloudprovider::aws::AwsCloudProvider;
use karpenter_rs::cloudprovider::{
    AmiFamily, CloudConfig, CloudProvider, Error, InstanceOption, KubernetesVersion, LaunchIdentity, LaunchRequest, NodeTemplate,
    LAUNCH_CONFIG_TAG,
};

mod support;

use support::{repo_root, unique, CLUSTER_NAME};

/// The variables of target/local-cluster/env (the cluster is brought up once per test binary).
fn local_env() -> &'static HashMap<String, String> {
    &support::cluster().env
}

/// The ids fixtures.py seeded into moto.
fn fixtures() -> serde_json::Value {
    support::cluster().fixtures()
}

fn config() -> CloudConfig {
    let config = support::cloud_config(support::cluster());
    let endpoint = config.endpoint_url.clone().unwrap_or_default();
    assert!(
        endpoint.starts_with("http://127.0.0.1:"),
        "moto must be on loopback, got {endpoint}"
    );
    config
}

async fn provider() -> AwsCloudProvider {
    AwsCloudProvider::new(config()).await.expect("building the provider")
}

/// The first write-up's AWSNodeTemplate, from its fixture, for nodes of the local cluster's
/// Kubernetes 1.33: it names no amiFamily, so its nodes boot AL2023.
fn first_write_up_template() -> NodeTemplate {
    let text = std::fs::read_to_string(repo_root().join("tests/fixtures/first-writeup/awsnodetemplate.yaml")).unwrap();
    let template: AwsNodeTemplate = serde_yaml_ng::from_str(&text).expect("the fixture is an AWSNodeTemplate");
    NodeTemplate::from_node_template(&template.spec, CLUSTER_NAME, support::KUBERNETES_VERSION)
        .expect("the fixture's settings are supported")
}

/// The first write-up's AWSNodeTemplate with `amiFamily: AL2`.
fn first_write_up_al2_template() -> NodeTemplate {
    let mut template = first_write_up_template();
    template.ami_family = AmiFamily::Al2;
    template
}

fn option(instance_type: &str, zone: &str, price: f64) -> InstanceOption {
    InstanceOption {
        instance_type: instance_type.into(),
        zone: zone.into(),
        capacity_type: "on-demand".into(),
        price,
    }
}

/// A launch like the first write-up's `service` Provisioner asks for: t3.large or t3.xlarge,
/// on-demand, in ap-northeast-2a or 2c, label nodeType=service-2023, taint service=true:NoSchedule,
/// with its template set to `amiFamily: AL2`.
fn first_write_up_request(provisioner: &str) -> LaunchRequest {
    LaunchRequest {
        provisioner_name: provisioner.into(),
        node_name: None,
        template: first_write_up_al2_template(),
        instance_options: vec![
            option("t3.large", "ap-northeast-2a", 0.104),
            option("t3.large", "ap-northeast-2c", 0.104),
            option("t3.xlarge", "ap-northeast-2a", 0.208),
            option("t3.xlarge", "ap-northeast-2c", 0.208),
        ],
        // With a zone and an instance type, as the plan samples them from the Provisioner's
        // requirements: the kubelet must not register with them (the fleet may pick others).
        labels: BTreeMap::from([
            ("nodeType".to_string(), "service-2023".to_string()),
            ("karpenter.sh/provisioner-name".to_string(), provisioner.to_string()),
            ("topology.kubernetes.io/zone".to_string(), "ap-northeast-2a".to_string()),
            ("node.kubernetes.io/instance-type".to_string(), "t3.large".to_string()),
        ]),
        taints: vec![Taint {
            key: "service".into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        }],
        startup_taints: vec![],
        kubelet: Default::default(),
        // What the plan counts with ENI-limited pod density: 3 ENIs x (12 - 1) + 2, 4 x (15 - 1) + 2.
        max_pods: BTreeMap::from([("t3.large".to_string(), 35), ("t3.xlarge".to_string(), 58)]),
        spot_max_price: None,
        identity: None,
    }
}

fn tag_map(tags: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .map(|t| (t.key().unwrap_or_default().to_string(), t.value().unwrap_or_default().to_string()))
        .collect()
}

/// The launch templates tagged with `provisioner`.
async fn launch_templates_of(cloud: &AwsCloudProvider, provisioner: &str) -> Result<Vec<aws_sdk_ec2::types::LaunchTemplate>, String> {
    let tagged = Filter::builder()
        .name("tag:karpenter.sh/provisioner-name")
        .values(provisioner)
        .build();
    let out = cloud.ec2().describe_launch_templates().filters(tagged).send().await;
    out.map(|o| o.launch_templates().to_vec()).map_err(|e| e.to_string())
}

/// Runs `body` with a list to record launched instance ids in, then terminates them and deletes
/// the launch templates tagged with `provisioner`, also when `body` panicked.
async fn with_cleanup<F, Fut>(cloud: &AwsCloudProvider, provisioner: &str, body: F)
where
    F: FnOnce(Arc<Mutex<Vec<String>>>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ids = Arc::new(Mutex::new(Vec::new()));
    let outcome = AssertUnwindSafe(body(ids.clone())).catch_unwind().await;
    let created = ids.lock().unwrap().clone();
    for id in created {
        if let Err(e) = cloud.delete(&id).await {
            eprintln!("cleanup: terminating {id}: {e}");
        }
    }
    for lt in launch_templates_of(cloud, provisioner).await.unwrap_or_default() {
        let _ = cloud
            .ec2()
            .delete_launch_template()
            .set_launch_template_id(lt.launch_template_id().map(str::to_string))
            .send()
            .await;
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

#[tokio::test]
async fn catalogue_has_every_moto_instance_type_with_offerings_in_the_subnet_zones() {
    let cloud = provider().await;
    let types = cloud.instance_types().await.expect("describing instance types");
    assert!(types.len() >= 400, "only {} instance types", types.len());
    for name in ["t3.large", "t3.xlarge"] {
        let it = types
            .iter()
            .find(|t| t.facts.name == name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(it.facts.architecture, "amd64");
        assert_eq!((it.category.as_str(), it.family.as_str(), it.generation), ("t", "t3", Some(3)));
        let zones: BTreeSet<&str> = it
            .offerings
            .iter()
            .filter(|o| o.capacity_type == "on-demand" && o.available)
            .map(|o| o.zone.as_str())
            .collect();
        for zone in ["ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c"] {
            assert!(zones.contains(zone), "{name} has no on-demand offering in {zone}: {zones:?}");
        }
        assert!(it.offerings.iter().all(|o| o.price > 0.0), "{name} has an unpriced offering");
        assert!(it.capacity_types.contains(&"spot".to_string()));
    }
    let large = types.iter().find(|t| t.facts.name == "t3.large").unwrap();
    assert_eq!((large.facts.vcpus, large.facts.memory_mib), (2, 8192));
    assert_eq!(large.eni_limited_pods(), 35, "3 ENIs x (12 - 1) + 2");
    let xlarge = types.iter().find(|t| t.facts.name == "t3.xlarge").unwrap();
    let od = |t: &karpenter_rs::cloudprovider::InstanceTypeInfo| t.offerings.iter().find(|o| o.capacity_type == "on-demand").unwrap().price;
    assert!(od(large) < od(xlarge), "t3.large must rank cheaper than t3.xlarge");
    assert!(
        types.iter().any(|t| t.facts.architecture == "arm64"),
        "Graviton types are in the catalogue"
    );
    assert!(types
        .iter()
        .all(|t| t.facts.architecture == "amd64" || t.facts.architecture == "arm64"));
    // Every label a node of any type would get is one the API server takes (a GPU name with
    // spaces would fail the Node's create and loop launches).
    let valid = |v: &str| {
        v.len() <= 63
            && (v.is_empty()
                || (v.starts_with(|c: char| c.is_ascii_alphanumeric())
                    && v.ends_with(|c: char| c.is_ascii_alphanumeric())
                    && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))))
    };
    let mut gpu_types = 0;
    for info in &types {
        let it = karpenter_rs::scheduling::InstanceType::from_facts(&info.facts, vec![], &Default::default(), None);
        for (key, value) in it.requirements.node_labels() {
            assert!(valid(&value), "{}: label {key}={value:?} is not a valid label value", info.facts.name);
        }
        gpu_types += usize::from(it.requirements.node_labels().contains_key("karpenter.k8s.aws/instance-gpu-name"));
    }
    assert!(gpu_types > 0, "GPU types are in the catalogue");
}

/// moto does not implement the Pricing API (GetProducts answers 500 on the same endpoint), which
/// is what an unreachable or denied Pricing API looks like: the catalogue still loads, the
/// overrides file wins, every other type is priced by the estimate, and loading again works.
#[tokio::test]
async fn catalogue_loads_with_prices_when_the_pricing_api_is_not_available() {
    let dir = tempfile::tempdir().unwrap();
    let overrides = dir.path().join("prices.yaml");
    std::fs::write(&overrides, "t3.large: 0.1\nt3.xlarge: {onDemand: 0.2, spot: 0.06}\n").unwrap();
    let mut config = config();
    config.price_overrides = Some(overrides);
    let cloud = AwsCloudProvider::new(config).await.expect("building the provider");
    let types = cloud.instance_types().await.expect("the catalogue loads without the Pricing API");
    assert!(types.len() >= 400, "only {} instance types", types.len());
    let on_demand = |name: &str| {
        let it = types
            .iter()
            .find(|t| t.facts.name == name)
            .unwrap_or_else(|| panic!("{name} missing"));
        let prices: BTreeSet<String> = it
            .offerings
            .iter()
            .filter(|o| o.capacity_type == "on-demand")
            .map(|o| o.price.to_string())
            .collect();
        assert_eq!(prices.len(), 1, "{name} has one on-demand price in every zone: {prices:?}");
        (it, prices.into_iter().next().unwrap().parse::<f64>().unwrap())
    };
    assert_eq!(on_demand("t3.large").1, 0.1);
    let (xlarge, price) = on_demand("t3.xlarge");
    assert_eq!(price, 0.2);
    assert!(xlarge
        .offerings
        .iter()
        .filter(|o| o.capacity_type == "spot")
        .all(|o| o.price == 0.06));
    for name in ["m5.large", "c5.large", "m6g.large"] {
        let (it, price) = on_demand(name);
        assert_eq!(price, estimate_on_demand(it), "{name} is priced by the estimate");
    }
    for it in &types {
        assert!(
            it.offerings.iter().all(|o| o.price > 0.0),
            "{} has an unpriced offering",
            it.facts.name
        );
    }
    let again = cloud.instance_types().await.expect("loading again within the TTL");
    assert_eq!(again.len(), types.len());
}

/// `nodes --live-prices` reads its prices through the same catalogue: the overrides file's and the
/// spot price history's are AWS's (no `~`); moto has no Pricing API, so other on-demand prices
/// are karpenter-rs's estimates and marked so; another region falls back to the snapshot.
#[tokio::test]
async fn live_prices_of_nodes_come_from_the_catalogue_and_say_which_are_estimates() {
    use karpenter_rs::viewer::{live::load_live_prices, PriceBook};
    let dir = tempfile::tempdir().unwrap();
    let overrides = dir.path().join("prices.yaml");
    std::fs::write(&overrides, "t3.large: 0.1\n").unwrap();
    let mut config = config();
    config.price_overrides = Some(overrides);
    let region = config.region.clone().expect("the local cluster names its region");
    let live = load_live_prices(config).await.expect("live prices from moto");
    assert_eq!(live.region(), region);
    let zone = format!("{region}a");
    let on_demand = live.price(&region, "t3.large", "on-demand", &zone).expect("t3.large is offered");
    assert_eq!((on_demand.usd_per_hour, on_demand.estimated), (0.1, false));
    let estimated = live.price(&region, "m5.large", "on-demand", &zone).expect("m5.large is offered");
    assert!(estimated.estimated, "no Pricing API in moto: {estimated:?}");
    let (priced, estimates) = live.counts();
    assert!(priced > 400 && estimates < priced, "{priced} offerings, {estimates} estimated");
    let elsewhere = live
        .price("us-east-1", "t3.large", "on-demand", "us-east-1a")
        .expect("the snapshot's");
    assert!(elsewhere.estimated);

    let mut unreachable = support::cloud_config(support::cluster());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    unreachable.endpoint_url = Some(format!("http://127.0.0.1:{closed}"));
    let error = load_live_prices(unreachable).await.err().expect("no EC2 there");
    assert!(error.starts_with("reading the instance types from EC2: "), "{error}");
}

#[tokio::test]
async fn first_write_up_template_resolves_to_the_three_subnets_and_the_security_group() {
    let cloud = provider().await;
    let fx = fixtures();
    let status = cloud
        .resolve(&first_write_up_template())
        .await
        .expect("resolving the first write-up's template");
    let subnets: BTreeMap<String, String> = status.subnets.unwrap().into_iter().map(|s| (s.zone.unwrap(), s.id)).collect();
    assert_eq!(subnets, support::cluster().fixture_subnets());
    let groups: Vec<String> = status.security_groups.unwrap().into_iter().map(|g| g.id).collect();
    assert_eq!(groups, vec![fx["security_group_id"].as_str().unwrap().to_string()]);
    // No amiFamily on Kubernetes 1.33: AL2023 (Karpenter v0.31 took AL2; a README difference).
    let amis: BTreeSet<String> = status.amis.unwrap().into_iter().map(|a| a.id).collect();
    let ami = |param: &str| fx["amis"][param]["image_id"].as_str().unwrap().to_string();
    assert_eq!(
        amis,
        BTreeSet::from([
            ami("/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"),
            ami("/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/standard/recommended/image_id"),
        ])
    );
    let status = cloud
        .resolve(&first_write_up_al2_template())
        .await
        .expect("resolving with amiFamily AL2");
    let amis: BTreeSet<String> = status.amis.unwrap().into_iter().map(|a| a.id).collect();
    assert_eq!(
        amis,
        BTreeSet::from([
            ami("/aws/service/eks/optimized-ami/1.33/amazon-linux-2/recommended/image_id"),
            ami("/aws/service/eks/optimized-ami/1.33/amazon-linux-2-arm64/recommended/image_id"),
        ])
    );
}

#[tokio::test]
async fn a_missing_ssm_parameter_is_a_template_error_naming_the_parameter_and_the_family() {
    let cloud = provider().await;
    // No AMI is published (seeded) for Kubernetes 1.27.
    let mut template = first_write_up_template();
    template.kubernetes_version = KubernetesVersion { major: 1, minor: 27 };
    template.ami_family = AmiFamily::Al2023;
    let err = cloud.resolve(&template).await.unwrap_err();
    assert_eq!(err.kind(), "invalid_configuration");
    let message = err.to_string();
    assert!(
        message.contains("/aws/service/eks/optimized-ami/1.27/amazon-linux-2023/x86_64/standard/recommended/image_id"),
        "{message}"
    );
    assert!(
        message.contains("amiFamily AL2023") && message.contains("Kubernetes 1.27"),
        "{message}"
    );
}

#[tokio::test]
async fn al2023_templates_without_a_service_cidr_are_configuration_errors_naming_the_setting() {
    let mut config = config();
    config.cluster_cidr = None;
    let cloud = AwsCloudProvider::new(config).await.unwrap();
    let err = cloud.resolve(&first_write_up_template()).await.unwrap_err();
    assert_eq!(err.kind(), "invalid_configuration");
    assert!(err.to_string().contains("--cluster-cidr"), "{err}");
    assert!(
        cloud.resolve(&first_write_up_al2_template()).await.is_ok(),
        "AL2's bootstrap looks it up itself"
    );
}

#[tokio::test]
async fn selectors_that_match_nothing_are_configuration_errors_naming_the_selector() {
    let cloud = provider().await;
    let mut template = first_write_up_template();
    template.subnet_selector = BTreeMap::from([("environment".to_string(), "production".to_string())]);
    let err = cloud.resolve(&template).await.unwrap_err();
    assert_eq!(err.kind(), "invalid_configuration");
    assert!(err.to_string().contains(r#"subnetSelector {environment: "production"}"#), "{err}");

    let mut template = first_write_up_template();
    template.security_group_selector = BTreeMap::from([("karpenter".to_string(), "managed".to_string())]);
    let err = cloud.resolve(&template).await.unwrap_err();
    assert!(err.to_string().contains(r#"securityGroupSelector {karpenter: "managed"}"#), "{err}");
}

/// The one launch template tagged with `provisioner`.
/// The provisioner's launch template for nodes of `max_pods` pods. A launch of the first
/// write-up's types makes two, one per max pods the plan counted (t3.large 35, t3.xlarge 58):
/// the kubelet's flag is in the user data. Exactly one must be for `max_pods`.
async fn launch_template_for_max_pods(cloud: &AwsCloudProvider, provisioner: &str, max_pods: i64) -> aws_sdk_ec2::types::LaunchTemplate {
    let templates = cloud
        .ec2()
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name("tag:karpenter.sh/provisioner-name")
                .values(provisioner)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let mut found = Vec::new();
    for lt in templates.launch_templates() {
        let name = lt.launch_template_name().unwrap();
        let versions = cloud.ec2().describe_launch_template_versions().launch_template_name(name).send().await.unwrap();
        let data = versions.launch_template_versions()[0].launch_template_data().unwrap();
        let user_data = base64::engine::general_purpose::STANDARD.decode(data.user_data().unwrap()).unwrap();
        // AL2's `--max-pods=35`, AL2023's NodeConfig `maxPods: 35`.
        let flat: String = String::from_utf8(user_data).unwrap().chars().filter(|c| !matches!(c, ' ' | '"')).collect();
        if flat.contains(&format!("--max-pods={max_pods}'")) || flat.contains(&format!("maxPods:{max_pods}\n")) || flat.contains(&format!("maxPods:{max_pods},")) {
            found.push(lt.clone());
        }
    }
    assert_eq!(found.len(), 1, "one template for {max_pods} pods in {templates:?}");
    found.remove(0)
}

#[tokio::test]
async fn launches_tags_lists_and_terminates_first_write_up_nodes() {
    let cloud = provider().await;
    let provisioner = unique("service");
    let fx = fixtures();
    with_cleanup(&cloud, &provisioner, |ids| {
        let cloud = &cloud;
        let provisioner = provisioner.clone();
        async move {
            let request = first_write_up_request(&provisioner);

            // 1. launch: the cheapest option, t3.large, in one of the allowed zones
            let first = cloud.create(&request).await.expect("launching the first node");
            ids.lock().unwrap().push(first.id.clone());
            assert_eq!(first.instance_type, "t3.large");
            assert!(["ap-northeast-2a", "ap-northeast-2c"].contains(&first.zone.as_str()), "zone {}", first.zone);
            assert_eq!(first.capacity_type, "on-demand");
            assert!(!first.private_dns_name.is_empty());
            assert_eq!(first.provider_id(), format!("aws:///{}/{}", first.zone, first.id));

            // 2. EC2 has the instance with our tags, in the zone's fixture subnet
            let described = cloud.ec2().describe_instances().instance_ids(&first.id).send().await.unwrap();
            let ec2_instance = &described.reservations()[0].instances()[0];
            let tags = tag_map(ec2_instance.tags());
            assert_eq!(tags["kubernetes.io/cluster/ssungz-cluster"], "owned");
            assert_eq!(tags["karpenter.sh/provisioner-name"], provisioner);
            assert_eq!(tags["karpenter-rs.sh/managed-by"], CLUSTER_NAME);
            assert!(!tags.contains_key("karpenter.sh/managed-by"), "Karpenter's collector keys on it: {tags:?}");
            assert_eq!(tags["karpenter.sh/discovery"], CLUSTER_NAME, "the template's tags");
            assert_eq!(tags["Name"], format!("karpenter.sh/provisioner-name/{provisioner}"));
            assert_eq!(ec2_instance.subnet_id(), fx["subnets"][first.zone.as_str()].as_str());
            let al2 = fx["amis"]["/aws/service/eks/optimized-ami/1.33/amazon-linux-2/recommended/image_id"]["image_id"].as_str();
            assert_eq!(ec2_instance.image_id(), al2);

            // 3. a launch template per max pods, holding the AMI, security group, profile, metadata and bootstrap
            let lt = launch_template_for_max_pods(cloud, &provisioner, 35).await;
            let lt_name = lt.launch_template_name().unwrap().to_string();
            assert!(lt_name.starts_with("karpenter-rs/ssungz-cluster/"), "{lt_name}");
            assert_eq!(tag_map(lt.tags()).get("karpenter.k8s.aws/cluster").map(String::as_str), Some(CLUSTER_NAME));
            let versions = cloud.ec2().describe_launch_template_versions().launch_template_name(&lt_name).send().await.unwrap();
            let data = versions.launch_template_versions()[0].launch_template_data().unwrap();
            assert_eq!(data.image_id(), al2);
            assert_eq!(data.security_group_ids(), [fx["security_group_id"].as_str().unwrap().to_string()]);
            assert_eq!(data.iam_instance_profile().and_then(|p| p.name()), Some("KarpenterNodeInstanceProfile"));
            let md = data.metadata_options().expect("metadata options are set");
            assert_eq!(md.http_tokens().map(|t| t.as_str()), Some("required"));
            assert_eq!(md.http_put_response_hop_limit(), Some(2));
            let user_data = base64::engine::general_purpose::STANDARD.decode(data.user_data().unwrap()).unwrap();
            let user_data = String::from_utf8(user_data).unwrap();
            let endpoint = &local_env()["CLUSTER_ENDPOINT"];
            assert!(
                user_data.contains(&format!("/etc/eks/bootstrap.sh 'ssungz-cluster' --apiserver-endpoint '{endpoint}'")),
                "{user_data}"
            );
            assert!(
                user_data.contains(&format!(
                    "--node-labels=karpenter.sh/capacity-type=on-demand,karpenter.sh/provisioner-name={provisioner},nodeType=service-2023 --register-with-taints=service=true:NoSchedule"
                )),
                "{user_data}"
            );
            // The pods the plan counted, not AL2's own ENI table.
            assert!(user_data.contains("--use-max-pods false") && user_data.contains("--max-pods=35'"), "{user_data}");
            let root = &data.block_device_mappings()[0];
            assert_eq!(root.device_name(), Some("/dev/xvda"));
            assert_eq!(root.ebs().and_then(|e| e.volume_size()), Some(20));

            // 4. a second launch reuses the launch template
            let second = cloud.create(&request).await.expect("launching the second node");
            ids.lock().unwrap().push(second.id.clone());
            assert_ne!(second.id, first.id);
            let again = cloud
                .ec2()
                .describe_launch_templates()
                .filters(Filter::builder().name("tag:karpenter.sh/provisioner-name").values(&provisioner).build())
                .send()
                .await
                .unwrap();
            let names: Vec<_> = again.launch_templates().iter().filter_map(|t| t.launch_template_name()).collect();
            assert_eq!(names.len(), 2, "the same two templates: {names:?}");
            assert!(names.contains(&lt_name.as_str()), "{names:?}");

            // 5. list finds both, get finds each
            let listed: BTreeSet<String> = cloud.list().await.unwrap().into_iter().map(|i| i.id).collect();
            assert!(listed.contains(&first.id) && listed.contains(&second.id), "{listed:?}");
            assert_eq!(cloud.get(&second.id).await.unwrap().tags["karpenter.sh/provisioner-name"], provisioner);

            // 6. delete terminates; deleting again is fine; list and get no longer see them
            for id in [&first.id, &second.id] {
                cloud.delete(id).await.expect("terminating");
                cloud.delete(id).await.expect("terminating a terminated instance is success");
            }
            let listed: BTreeSet<String> = cloud.list().await.unwrap().into_iter().map(|i| i.id).collect();
            assert!(!listed.contains(&first.id) && !listed.contains(&second.id), "{listed:?}");
            assert!(cloud.get(&first.id).await.unwrap_err().is_not_found());
            let state = cloud.ec2().describe_instances().instance_ids(&first.id).send().await.unwrap();
            let state = state.reservations()[0].instances()[0].state().and_then(|s| s.name()).unwrap().as_str().to_string();
            assert!(state == "terminated" || state == "shutting-down", "{state}");
        }
    })
    .await;
}

#[tokio::test]
async fn launches_al2023_nodes_with_a_node_config_in_the_launch_template() {
    let cloud = provider().await;
    let provisioner = unique("al2023");
    let fx = fixtures();
    with_cleanup(&cloud, &provisioner, |ids| {
        let cloud = &cloud;
        let provisioner = provisioner.clone();
        async move {
            let mut request = first_write_up_request(&provisioner);
            // The fixture names no amiFamily: on Kubernetes 1.33 that is AL2023.
            request.template = first_write_up_template();
            assert_eq!(request.template.ami_family, AmiFamily::Al2023);
            // The plan counts the Provisioner's maxPods for every type: one template.
            request.kubelet.max_pods = Some(29);
            request.max_pods.values_mut().for_each(|n| *n = 29);
            let instance = cloud.create(&request).await.expect("launching an AL2023 node");
            ids.lock().unwrap().push(instance.id.clone());
            let al2023 = fx["amis"]["/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"]["image_id"].as_str();
            assert_eq!(instance.image_id.as_deref(), al2023);

            let lt = launch_template_for_max_pods(cloud, &provisioner, 29).await;
            let lt_name = lt.launch_template_name().unwrap();
            let versions = cloud.ec2().describe_launch_template_versions().launch_template_name(lt_name).send().await.unwrap();
            let data = versions.launch_template_versions()[0].launch_template_data().unwrap();
            assert_eq!(data.image_id(), al2023);
            assert_eq!(data.block_device_mappings()[0].device_name(), Some("/dev/xvda"));
            let user_data = base64::engine::general_purpose::STANDARD.decode(data.user_data().unwrap()).unwrap();
            let user_data = String::from_utf8(user_data).unwrap();
            let (headers, body) = user_data.split_once("Content-Type: application/node.eks.aws\n\n").unwrap_or_else(|| panic!("{user_data}"));
            assert!(headers.starts_with("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\""), "{user_data}");
            let body = body.split("\n--//").next().unwrap();
            let node_config: serde_json::Value = serde_yaml_ng::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
            assert_eq!(node_config["apiVersion"], "node.eks.aws/v1alpha1");
            assert_eq!(node_config["kind"], "NodeConfig");
            let cluster = &node_config["spec"]["cluster"];
            assert_eq!(cluster["name"], CLUSTER_NAME);
            assert_eq!(cluster["apiServerEndpoint"], local_env()["CLUSTER_ENDPOINT"].as_str());
            assert_eq!(cluster["cidr"], local_env()["CLUSTER_CIDR"].as_str());
            let ca = base64::engine::general_purpose::STANDARD.decode(cluster["certificateAuthority"].as_str().unwrap()).unwrap();
            assert_eq!(ca, std::fs::read(&local_env()["LOCAL_CLUSTER_CA_FILE"]).unwrap(), "the local cluster's CA");
            let kubelet = &node_config["spec"]["kubelet"];
            assert_eq!(kubelet["config"]["maxPods"], 29);
            assert_eq!(
                kubelet["flags"],
                serde_json::json!([
                    format!("--node-labels=karpenter.sh/capacity-type=on-demand,karpenter.sh/provisioner-name={provisioner},nodeType=service-2023"),
                    "--register-with-taints=service=true:NoSchedule",
                ])
            );
            assert!(!user_data.contains("bootstrap.sh"), "{user_data}");
        }
    })
    .await;
}

#[tokio::test]
async fn launches_spot_under_the_spot_price_when_spot_is_allowed() {
    let cloud = provider().await;
    let provisioner = unique("spot");
    with_cleanup(&cloud, &provisioner, |ids| {
        let cloud = &cloud;
        let provisioner = provisioner.clone();
        async move {
            let types = cloud.instance_types().await.unwrap();
            let large = types.iter().find(|t| t.facts.name == "t3.large").unwrap();
            let spot = large
                .offerings
                .iter()
                .find(|o| o.capacity_type == "spot" && o.zone == "ap-northeast-2a")
                .unwrap();
            let mut request = first_write_up_request(&provisioner);
            request.instance_options.insert(
                0,
                InstanceOption {
                    capacity_type: "spot".into(),
                    price: spot.price,
                    ..option("t3.large", "ap-northeast-2a", 0.0)
                },
            );
            request.spot_max_price = Some(0.067);
            assert!(spot.price <= 0.067, "moto's spot price history is below the write-up's spotPrice");
            let instance = cloud.create(&request).await.expect("launching a spot node");
            ids.lock().unwrap().push(instance.id.clone());
            assert_eq!(instance.capacity_type, "spot");
            assert_eq!(instance.zone, "ap-northeast-2a");

            // a cap below every spot price leaves only on-demand
            request.spot_max_price = Some(spot.price / 2.0);
            let instance = cloud.create(&request).await.expect("launching an on-demand node");
            ids.lock().unwrap().push(instance.id.clone());
            assert_eq!(instance.capacity_type, "on-demand");
        }
    })
    .await;
}

/// A launch for a need is idempotent: CreateFleet made again with the same need (a call whose
/// answer was lost, or a controller restarted before it created the Node) gets the instance
/// already launched, tagged with its launch configuration so a restarted controller can adopt
/// it; another need launches another instance. Relies on the EC2 emulator keeping CreateFleet's
/// ClientToken as EC2 does (tests/cluster/moto_server.py).
#[tokio::test]
async fn a_launch_for_the_same_need_gets_the_instance_already_launched() {
    let cloud = provider().await;
    let provisioner = unique("need");
    with_cleanup(&cloud, &provisioner, |ids| {
        let cloud = &cloud;
        let provisioner = provisioner.clone();
        async move {
            let mut request = first_write_up_request(&provisioner);
            request.identity = Some(LaunchIdentity {
                config: "1234".into(),
                need: format!("{provisioner}-need-1"),
            });
            let first = cloud.create(&request).await.expect("launching for the need");
            ids.lock().unwrap().push(first.id.clone());
            assert_eq!(first.tags.get(LAUNCH_CONFIG_TAG).map(String::as_str), Some("1234"), "{:?}", first.tags);
            let again = cloud.create(&request).await.expect("launching for the same need again");
            ids.lock().unwrap().push(again.id.clone());
            assert_eq!(again.id, first.id, "the same need launched twice");

            request.identity.as_mut().unwrap().need = format!("{provisioner}-need-2");
            let other = cloud.create(&request).await.expect("launching for another need");
            ids.lock().unwrap().push(other.id.clone());
            assert_ne!(other.id, first.id);
            let launched = support::instances_ever(cloud.ec2(), &provisioner).await;
            assert_eq!(launched.len(), 2, "two needs, two instances: {launched:?}");
        }
    })
    .await;
}

#[tokio::test]
async fn launching_in_zones_without_a_matching_subnet_names_the_selector() {
    let cloud = provider().await;
    let mut request = first_write_up_request(&unique("nozone"));
    request.instance_options = vec![option("t3.large", "ap-northeast-2d", 0.104)];
    match cloud.create(&request).await {
        Err(Error::InvalidConfiguration(message)) => {
            assert!(message.contains("karpenter.sh/discovery/ssungz-cluster"), "{message}");
            assert!(message.contains("ap-northeast-2d"), "{message}");
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[tokio::test]
async fn deleting_an_unknown_instance_succeeds() {
    let cloud = provider().await;
    cloud
        .delete("i-0123456789abcdef0")
        .await
        .expect("an instance that does not exist counts as deleted");
    assert!(cloud.get("i-0123456789abcdef0").await.unwrap_err().is_not_found());
}

/// The names of the launch templates tagged with `cluster`.
async fn cluster_templates(cloud: &AwsCloudProvider, cluster: &str) -> BTreeSet<String> {
    let out = cloud
        .ec2()
        .describe_launch_templates()
        .filters(Filter::builder().name("tag:karpenter.k8s.aws/cluster").values(cluster).build())
        .send()
        .await
        .expect("listing launch templates");
    out.launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn launch_templates_unused_for_the_period_are_deleted_and_made_again_when_needed() {
    // A cluster name of its own, so that no other test's templates are in play.
    let mut config = config();
    config.cluster_name = unique("lt-gc");
    let cluster = config.cluster_name.clone();
    let cloud = AwsCloudProvider::new(config.clone()).await.expect("building the provider");
    let provisioner = unique("service");
    with_cleanup(&cloud, &provisioner, |ids| {
        let cloud = &cloud;
        let provisioner = provisioner.clone();
        async move {
            let request = first_write_up_request(&provisioner);
            let first = cloud.create(&request).await.expect("launching");
            ids.lock().unwrap().push(first.id.clone());
            let ours = cluster_templates(cloud, &cluster).await;
            assert_eq!(ours.len(), 2, "one per max pods: {ours:?}");
            assert!(ours.iter().all(|n| n.starts_with(&format!("karpenter-rs/{cluster}/"))), "{ours:?}");

            // A template of the user's, tagged with the cluster but not named by karpenter-rs.
            let user_template = format!("user-{provisioner}");
            cloud
                .ec2()
                .create_launch_template()
                .launch_template_name(&user_template)
                .launch_template_data(
                    aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                        .image_id("ami-12c6146b")
                        .build(),
                )
                .tag_specifications(
                    aws_sdk_ec2::types::TagSpecification::builder()
                        .resource_type(aws_sdk_ec2::types::ResourceType::LaunchTemplate)
                        .tags(
                            aws_sdk_ec2::types::Tag::builder()
                                .key("karpenter.k8s.aws/cluster")
                                .value(&cluster)
                                .build(),
                        )
                        .tags(
                            aws_sdk_ec2::types::Tag::builder()
                                .key("karpenter.sh/provisioner-name")
                                .value(&provisioner)
                                .build(),
                        )
                        .build(),
                )
                .send()
                .await
                .expect("creating the user's template");

            // Used just now: kept.
            let kept = cloud.delete_unused_launch_templates(Duration::from_secs(3600)).await.unwrap();
            assert!(kept.is_empty(), "{kept:?}");
            // A process that never used it (a new leader) counts it as used when it first sees it.
            let other = AwsCloudProvider::new(config.clone()).await.expect("building a second provider");
            let first_sight = other.delete_unused_launch_templates(Duration::from_millis(500)).await.unwrap();
            assert!(first_sight.is_empty(), "{first_sight:?}");

            // Once unused for longer than the TTL, ours are deleted (polled: each one goes once
            // its own last use is 500 ms old).
            let mut deleted = BTreeSet::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while deleted != ours && tokio::time::Instant::now() < deadline {
                let now_deleted = cloud.delete_unused_launch_templates(Duration::from_millis(500)).await.unwrap();
                deleted.extend(now_deleted);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(deleted, ours);
            assert_eq!(
                cluster_templates(cloud, &cluster).await,
                BTreeSet::from([user_template.clone()]),
                "ours deleted, the user's left"
            );

            // The next launch of that configuration makes the template again.
            let second = cloud.create(&request).await.expect("launching after the template was deleted");
            ids.lock().unwrap().push(second.id.clone());
            let again = cluster_templates(cloud, &cluster).await;
            assert!(ours.is_subset(&again), "{again:?}");
        }
    })
    .await;
}

/// Karpenter's `karpenter-global-settings` ConfigMap in the system namespace, read from the real
/// API server the way `karpenter-rs run` reads it at start: its values take effect where no flag
/// was given (tags on the instance, its volume and its launch template in the emulator; the
/// memory overhead in a node's capacity), an explicit flag wins, and a bad value is reported
/// naming the key and ignored.
#[tokio::test]
async fn the_settings_configmap_tags_launches_and_sets_memory_overhead_unless_a_flag_wins() {
    let cluster = support::cluster();
    let namespace = unique("settings");
    support::kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let configmap = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": karpenter_rs::settings::SETTINGS_CONFIGMAP, "namespace": namespace},
        "data": {
            "aws.clusterName": CLUSTER_NAME,
            "aws.tags": r#"{"team": "payments", "cost-center": "4711"}"#,
            "aws.vmMemoryOverheadPercent": "0.1",
            "aws.reservedENIs": "two",
            "featureGates.driftEnabled": "false",
            "aws.isolatedVPC": "true",
            "batchMaxDuration": "1m30s",
            "batchIdleDuration": "5s"
        }
    });
    support::kubectl_ok(cluster, &["apply", "-f", "-"], Some(&configmap.to_string()));
    let cli = karpenter_rs::config::parse_cli([
        "karpenter-rs",
        "run",
        "--cluster-name",
        CLUSTER_NAME,
        "--system-namespace",
        &namespace,
        "--batch-idle-duration",
        "2s",
    ])
    .unwrap();
    let karpenter_rs::config::Command::Run(mut args) = cli.command else {
        panic!("run subcommand");
    };
    let client = support::client(cluster).await;
    let loaded = karpenter_rs::settings::load(client.clone(), &namespace)
        .await
        .expect("the ConfigMap is read");
    args.apply_settings(&loaded.settings);
    let refused = loaded.refused;
    // The refused value is a Warning event on the ConfigMap, naming key and value.
    let events = support::wait_for("the InvalidSetting event", Duration::from_secs(30), || {
        let out = support::kubectl(cluster, &["get", "events", "-n", &namespace, "-o", "json"], None);
        let out = String::from_utf8_lossy(&out.stdout).to_string();
        out.contains("InvalidSetting").then_some(out)
    });
    assert!(events.contains("aws.reservedENIs") && events.contains("\\\"two\\\""), "{events}");
    // A key karpenter-rs does not honour is named too.
    let events = support::wait_for("the IgnoredSetting event", Duration::from_secs(30), || {
        let out = support::kubectl(cluster, &["get", "events", "-n", &namespace, "-o", "json"], None);
        let out = String::from_utf8_lossy(&out.stdout).to_string();
        out.contains("IgnoredSetting").then_some(out)
    });
    assert!(events.contains("aws.isolatedVPC is not honoured"), "{events}");
    assert!(!events.contains("featureGates.driftEnabled"), "drift is honoured: {events}");
    assert!(!args.deprovisioning().drift_enabled, "featureGates.driftEnabled: false turns drift off");
    // One that cannot be read is an error for the caller to retry, not defaults.
    let forbidden = kube::Client::try_from({
        let mut c = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        c.connect_timeout = Some(Duration::from_secs(2));
        c
    })
    .unwrap();
    assert!(karpenter_rs::settings::load(forbidden, &namespace).await.is_err());
    support::kubectl(cluster, &["delete", "namespace", &namespace, "--wait=false"], None);

    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].to_string().contains("aws.reservedENIs") && refused[0].to_string().contains("\"two\""));
    assert_eq!(args.reserved_enis, 0, "the bad value is ignored");
    assert_eq!(args.batch_max_duration, Duration::from_secs(90), "the ConfigMap's, in Go's form");
    assert_eq!(args.batch_idle_duration, Duration::from_secs(2), "the flag wins");

    // The memory overhead reaches the node's capacity: t3.large 8192Mi − ⌈819.2⌉ = 7372Mi.
    let cloud = provider().await;
    let types = cloud.instance_types().await.expect("describing instance types");
    let large = types.iter().find(|t| t.facts.name == "t3.large").unwrap();
    let it = karpenter_rs::scheduling::InstanceType::from_facts(&large.facts, vec![], &args.node_settings(), None);
    assert_eq!(it.capacity.memory_bytes, 7372 << 20);

    // The tags reach what is launched.
    let mut config = config();
    config.tags = args.cloud().tags;
    let cloud = AwsCloudProvider::new(config).await.expect("building the provider");
    let provisioner = unique("settings");
    with_cleanup(&cloud, &provisioner, |ids| {
        let cloud = &cloud;
        let provisioner = provisioner.clone();
        async move {
            let instance = cloud.create(&first_write_up_request(&provisioner)).await.expect("launching");
            ids.lock().unwrap().push(instance.id.clone());
            let described = cloud.ec2().describe_instances().instance_ids(&instance.id).send().await.unwrap();
            let ec2_instance = &described.reservations()[0].instances()[0];
            let tags = tag_map(ec2_instance.tags());
            assert_eq!(tags.get("team").map(String::as_str), Some("payments"), "{tags:?}");
            assert_eq!(tags.get("cost-center").map(String::as_str), Some("4711"));
            assert_eq!(tags["karpenter.sh/provisioner-name"], provisioner, "ours are still there");
            let templates = launch_templates_of(cloud, &provisioner).await.unwrap();
            let lt_tags = tag_map(templates[0].tags());
            assert_eq!(lt_tags.get("team").map(String::as_str), Some("payments"), "{lt_tags:?}");
        }
    })
    .await;
}

/// A Node of ours (its provisioner label, and `selector` for this test only) whose providerID
/// names an instance moto never had.
fn node_without_instance(name: &str, selector: &str, n: usize) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"karpenter.sh/provisioner-name": "gc-guard", selector: "true"},
        },
        "spec": {"providerID": format!("aws:///ap-northeast-2a/i-0{n:016x}")},
    })
    .to_string()
}

/// Starts the garbage collector, leading, with `config` on the Nodes labelled `selector` and the
/// instances tagged `gc-test: <selector>` (none: the instance half of its passes has nothing to
/// see); returns its metrics, what stops it and its task.
async fn start_collector(
    cluster: &'static support::Cluster,
    selector: &str,
    config: karpenter_rs::controllers::garbagecollection::GarbageCollectionConfig,
) -> (karpenter_rs::metrics::Metrics, tokio_util::sync::CancellationToken, tokio::task::JoinHandle<()>) {
    use karpenter_rs::controllers::garbagecollection::{self, GarbageCollectionConfig};
    let metrics = karpenter_rs::metrics::Metrics::new();
    let config = GarbageCollectionConfig {
        instance_tags: BTreeMap::from([("gc-test".to_string(), selector.to_string())]),
        node_selector: selector.to_string(),
        ..config
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    let client = support::client(cluster).await;
    let view = karpenter_rs::controllers::state::Cluster::start(&client, &shutdown, &metrics.liveness);
    let shared = karpenter_rs::controllers::Shared::new(client, Arc::new(provider().await), metrics.clone(), view);
    let ctx = garbagecollection::Context::new(&shared, config);
    let (leading_tx, leading) = tokio::sync::watch::channel(true);
    let stop = shutdown.clone();
    let collector = tokio::spawn(async move {
        // The sender lives as long as the collector: it leads throughout.
        let _leading = leading_tx;
        garbagecollection::run(ctx, leading, stop).await
    });
    (metrics, shutdown, collector)
}

/// Stops the collector, deletes the test's `nodes` still there, and carries the test's outcome on.
async fn stop_collector(
    cluster: &support::Cluster,
    shutdown: tokio_util::sync::CancellationToken,
    collector: tokio::task::JoinHandle<()>,
    nodes: &[String],
    outcome: std::thread::Result<()>,
) {
    shutdown.cancel();
    let _ = collector.await;
    for name in nodes {
        support::kubectl(cluster, &["delete", "node", name, "--ignore-not-found"], None);
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The Nodes labelled `selector`, by name.
fn nodes_labelled(cluster: &support::Cluster, selector: &str) -> Vec<String> {
    let out = support::kubectl(cluster, &["get", "nodes", "-l", selector, "-o", "name"], None);
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[tokio::test]
async fn garbage_collection_deletes_no_node_while_most_instances_look_gone_and_deletes_them_once_few_do() {
    use karpenter_rs::controllers::garbagecollection::GarbageCollectionConfig;
    let cluster = support::cluster();
    let selector = unique("gc-guard");
    let names: Vec<String> = (0..3).map(|i| format!("{selector}-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        support::kubectl_ok(cluster, &["apply", "-f", "-"], Some(&node_without_instance(name, &selector, i + 0xdead00)));
    }
    let config = GarbageCollectionConfig {
        startup_interval: Duration::from_millis(200),
        grace_period: Duration::ZERO,
        ..Default::default()
    };
    let (metrics, shutdown, collector) = start_collector(cluster, &selector, config).await;
    let passes = || metrics.reconcile_total.with_label_values(&["garbagecollection", "success"]).get();
    let node_names = || nodes_labelled(cluster, &selector);
    let result = AssertUnwindSafe(async {
        // Every one of three nodes "without an instance" is what a wrong region looks like.
        let until = passes() + 3;
        while passes() < until {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(node_names().len(), 3, "no node deleted while all three look gone");
        // Two of two is a small cluster's real loss, not a misconfiguration.
        support::kubectl_ok(cluster, &["delete", "node", &names[0]], None);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !node_names().is_empty() {
            assert!(std::time::Instant::now() < deadline, "nodes left: {:?}", node_names());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .catch_unwind()
    .await;
    stop_collector(cluster, shutdown, collector, &names, result).await;
}

/// One garbage-collection pass removes at most `max_removals_per_pass` (here 1) of what it finds
/// gone, and the next pass the rest: of two Nodes without an instance (too few to look like a
/// wrong setting), one is deleted by the first pass and the other by the second.
#[tokio::test]
async fn garbage_collection_removes_at_most_its_cap_per_pass() {
    use karpenter_rs::controllers::garbagecollection::GarbageCollectionConfig;
    let cluster = support::cluster();
    let selector = unique("gc-cap");
    let names: Vec<String> = (0..2).map(|i| format!("{selector}-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        support::kubectl_ok(
            cluster,
            &["apply", "-f", "-"],
            Some(&node_without_instance(name, &selector, i + 0xcab00)),
        );
    }
    // Passes 4 s apart: time enough to count the nodes between two of them.
    let between = Duration::from_secs(4);
    let config = GarbageCollectionConfig {
        startup_interval: between,
        interval: between,
        grace_period: Duration::ZERO,
        max_removals_per_pass: 1,
        ..Default::default()
    };
    let (metrics, shutdown, collector) = start_collector(cluster, &selector, config).await;
    let passes = || metrics.reconcile_total.with_label_values(&["garbagecollection", "success"]).get();
    let node_names = || nodes_labelled(cluster, &selector);
    let result = AssertUnwindSafe(async {
        let after = |n: u64| async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while passes() < n {
                assert!(std::time::Instant::now() < deadline, "no garbage-collection pass {n}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        after(1).await;
        assert_eq!(node_names().len(), 1, "the first pass deleted one node of two");
        after(2).await;
        assert!(node_names().is_empty(), "the second pass deleted the other: {:?}", node_names());
    })
    .catch_unwind()
    .await;
    stop_collector(cluster, shutdown, collector, &names, result).await;
}

/// Counts the requests a client sends (method and path with query) and the most in flight at
/// once, each held `latency` before it is sent so that concurrent ones overlap visibly.
#[derive(Clone)]
struct CountingLayer {
    latency: Duration,
    calls: Arc<Mutex<Vec<String>>>,
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    peak: Arc<std::sync::atomic::AtomicUsize>,
}

struct Counting<S> {
    inner: S,
    layer: CountingLayer,
}

impl<S> tower::Layer<S> for CountingLayer {
    type Service = Counting<S>;
    fn layer(&self, inner: S) -> Counting<S> {
        Counting {
            inner,
            layer: self.clone(),
        }
    }
}

impl<S, B> tower::Service<axum::http::Request<B>> for Counting<S>
where
    S: tower::Service<axum::http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        use std::sync::atomic::Ordering;
        let what = format!(
            "{} {}",
            request.method(),
            request.uri().path_and_query().map(|p| p.as_str()).unwrap_or_default()
        );
        self.layer.calls.lock().unwrap().push(what);
        let layer = self.layer.clone();
        let sent = self.inner.call(request);
        Box::pin(async move {
            let now = layer.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            layer.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(layer.latency).await;
            let answer = sent.await;
            layer.in_flight.fetch_sub(1, Ordering::SeqCst);
            answer
        })
    }
}

/// Termination of many nodes at once reads their pods from the shared cache, not from the API
/// server each pass, and works on at most 16 nodes at a time. 40 deleting nodes (run by kwok),
/// each with a Running pod whose PodDisruptionBudget refuses evictions, drain for several passes
/// with no pod list sent (the cache shows the drain unfinished); once the budget is gone they
/// finish with one list each (confirming an empty node before its instance goes), and no more
/// than 16 of the controller's requests (each held 100 ms by the counting layer, the only thing
/// added) are ever in flight at once.
#[tokio::test]
async fn termination_reads_pods_from_the_cache_and_works_on_at_most_16_nodes_at_once() {
    use karpenter_rs::controllers::{state, termination};
    use std::sync::atomic::Ordering;
    const NODES: usize = 40;
    let cluster = support::cluster();
    let selector = unique("term-bound");
    let namespace = selector.clone();
    support::kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let (mut nodes, mut objects) = (Vec::new(), Vec::new());
    for i in 0..NODES {
        let name = format!("{selector}-{i}");
        nodes.push(serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"karpenter.sh/provisioner-name": "term-bound", selector.as_str(): "true"},
                "finalizers": ["karpenter.sh/termination"],
            },
            // No such instance: terminating it counts as done.
            "spec": {"providerID": format!("aws:///ap-northeast-2a/i-0{:016x}", 0xbd00 + i)},
        }));
        objects.push(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("pod-{i}"), "namespace": namespace, "labels": {"app": "term-bound"}},
            "spec": {
                "nodeName": name,
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "nginx"}],
            },
        }));
    }
    objects.push(serde_json::json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "none", "namespace": namespace},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "term-bound"}}},
    }));
    // The nodes first, and their pods once kwok has them all Ready: kwok ignores for good a
    // pod it sees before it manages the pod's node (one of 40 pods never started when both came
    // in one apply).
    let list = |items: Vec<serde_json::Value>| serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    support::kubectl_ok(cluster, &["apply", "-f", "-"], Some(&list(nodes)));
    let ready_nodes = || {
        let out = support::kubectl(
            cluster,
            &["get", "nodes", "-l", &selector, "-o", r#"jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#],
            None,
        );
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| *l == "True").count()
    };
    let nodes_deadline = std::time::Instant::now() + Duration::from_secs(300);
    while ready_nodes() < NODES {
        assert!(std::time::Instant::now() < nodes_deadline, "{} of {NODES} nodes Ready", ready_nodes());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    support::kubectl_ok(cluster, &["apply", "-f", "-"], Some(&list(objects)));
    let running = || {
        let out = support::kubectl(
            cluster,
            &[
                "get",
                "pods",
                "-n",
                &namespace,
                "--field-selector",
                "status.phase=Running",
                "-o",
                "name",
            ],
            None,
        );
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    let node_names = || nodes_labelled(cluster, &selector).len();

    let layer = CountingLayer {
        latency: Duration::from_millis(100),
        calls: Arc::default(),
        in_flight: Arc::default(),
        peak: Arc::default(),
    };
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(cluster.kubeconfig()).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let counted = kube::client::ClientBuilder::try_from(karpenter_rs::kube_client::configure(config))
        .unwrap()
        .with_layer(&layer)
        .build();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let metrics = karpenter_rs::metrics::Metrics::new();
    let view = state::Cluster::start(&support::client(cluster).await, &shutdown, &metrics.liveness);
    // Termination's own requests, counted; the cluster view it is given watches on another client.
    let shared = karpenter_rs::controllers::Shared::new(counted, Arc::new(provider().await), metrics.clone(), view.clone());
    let ctx = termination::Context::new(&shared, Default::default());
    let (_leading_tx, leading) = tokio::sync::watch::channel(true);
    let passes = || metrics.reconcile_total.with_label_values(&["termination", "success"]).get();
    let pod_lists = |calls: &[String]| calls.iter().filter(|c| c.starts_with("GET /api/v1/pods?")).count();

    let result = AssertUnwindSafe(async {
        // Setup, not a figure under test: kwok starts 40 pods slowly on a loaded CI machine.
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        while running() < NODES {
            assert!(std::time::Instant::now() < deadline, "{} of {NODES} pods Running", running());
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let controller = tokio::spawn(termination::run(ctx, leading, shutdown.clone()));
        support::kubectl_ok(cluster, &["delete", "nodes", "-l", &selector, "--wait=false"], None);
        // Every node's eviction tried (each node is reconciled on its own, 16 at a time), then
        // several passes more while the budget refuses every eviction.
        let evictions = || layer.calls.lock().unwrap().iter().filter(|c| c.contains("/eviction")).count();
        while evictions() < NODES {
            assert!(
                std::time::Instant::now() < deadline,
                "evictions were tried: {} of {NODES} nodes' ({} requests)",
                evictions(),
                layer.calls.lock().unwrap().len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let until = passes() + 5;
        while passes() < until {
            assert!(std::time::Instant::now() < deadline, "termination passes");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let draining = layer.calls.lock().unwrap().clone();
        assert_eq!(node_names(), NODES, "no node finished while its pod could not be evicted");
        assert_eq!(pod_lists(&draining), 0, "no pod list while the cache shows the drains unfinished");

        support::kubectl_ok(cluster, &["delete", "pdb", "none", "-n", &namespace], None);
        while node_names() > 0 {
            assert!(std::time::Instant::now() < deadline, "{} nodes left", node_names());
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let calls = layer.calls.lock().unwrap().clone();
        assert!(
            pod_lists(&calls) <= NODES + NODES / 4,
            "one pod list for each node, give or take a retry: {} for {NODES} nodes",
            pod_lists(&calls)
        );
        let peak = layer.peak.load(Ordering::SeqCst);
        assert!(peak <= 16, "at most 16 nodes' requests in flight at once: {peak}");
        assert!(peak > 1, "the nodes were worked on side by side: {peak}");
        shutdown.cancel();
        let _ = controller.await;
    })
    .catch_unwind()
    .await;
    shutdown.cancel();
    if result.is_err() {
        for i in 0..NODES {
            support::kubectl(
                cluster,
                &[
                    "patch",
                    "node",
                    &format!("{selector}-{i}"),
                    "--type",
                    "merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ],
                None,
            );
        }
    }
    support::kubectl(cluster, &["delete", "namespace", &namespace, "--wait=false"], None);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// With no cluster endpoint configured the endpoint is looked up with eks:DescribeCluster (moto
/// knows the local cluster's EKS cluster: tests/cluster/fixtures.py); a configured one is kept
/// without a call; a cluster EKS does not know is an error naming the settings that skip the
/// lookup.
#[tokio::test]
async fn the_cluster_endpoint_is_looked_up_when_none_is_set() {
    let fx = fixtures();
    let unset = || CloudConfig {
        cluster_endpoint: String::new(),
        ..config()
    };
    let mut cloud = AwsCloudProvider::new(unset()).await.unwrap();
    cloud
        .discover_cluster_endpoint()
        .await
        .expect("the endpoint from eks:DescribeCluster");
    assert_eq!(cloud.cluster_endpoint(), fx["eks_endpoint"].as_str().unwrap());

    let configured = config();
    let expected = configured.cluster_endpoint.clone();
    assert!(!expected.is_empty());
    let mut cloud = AwsCloudProvider::new(configured).await.unwrap();
    cloud.discover_cluster_endpoint().await.unwrap();
    assert_eq!(cloud.cluster_endpoint(), expected, "a configured endpoint is kept");

    let mut cloud = AwsCloudProvider::new(CloudConfig {
        cluster_name: "no-such-cluster".into(),
        ..unset()
    })
    .await
    .unwrap();
    let err = cloud.discover_cluster_endpoint().await.unwrap_err().to_string();
    for part in [
        "--cluster-endpoint",
        "CLUSTER_ENDPOINT",
        "aws.clusterEndpoint",
        "eks:DescribeCluster",
    ] {
        assert!(err.contains(part), "the error names {part}: {err}");
    }
}
