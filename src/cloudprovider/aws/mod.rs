//! `AwsCloudProvider`: the `CloudProvider` on EC2 and SSM through the AWS SDK. This file wires
//! the clients and the caches (catalogue, selectors, AMIs, launch templates, unavailable
//! offerings); the launch sequence is in `launch`; the decisions are in the sibling modules' pure
//! functions.
//!
//! The endpoint and region come from `CloudConfig` (or the SDK's `AWS_ENDPOINT_URL` /
//! `AWS_REGION`), so the same code talks to the moto emulator in tests. The Pricing API client
//! signs for the Pricing API's own region (`pricing::pricing_api_region`) but shares the
//! endpoint override and credentials.

pub mod ami;
pub mod branch_interfaces;
pub mod errors;
pub mod instance;
pub mod instance_types;
mod launch;
pub mod launch_template;
pub mod pricing;
pub mod queue;
pub mod retries;
pub mod subnets;
pub mod unavailable_offerings;
pub mod user_data;

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_ec2::types::Filter;
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use self::ami::{Accelerator, Ami, AmiNeed};
use self::subnets::{SecurityGroup, Subnet};
use self::unavailable_offerings::UnavailableOfferings;
use crate::apis::v1alpha1::{AmiStatus, AwsNodeTemplateStatus, SecurityGroupStatus, SubnetStatus};
use crate::apis::v1alpha5::labels::{ARCH_LABEL, PROVISIONER_NAME_LABEL};
use crate::cloudprovider::{CloudConfig, CloudProvider, Error, Instance, InstanceTypeInfo, LaunchRequest, NodeTemplate, OfferingId};

/// A value cache with a time to live, keyed by selector.
struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
    ttl: Duration,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    fn new(ttl: Duration) -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
            ttl,
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().expect("cache lock is never poisoned: no panics while held");
        entries.get(key).filter(|(at, _)| at.elapsed() < self.ttl).map(|(_, v)| v.clone())
    }

    fn put(&self, key: K, value: V) {
        self.entries
            .lock()
            .expect("cache lock is never poisoned: no panics while held")
            .insert(key, (Instant::now(), value));
    }
}

struct Catalogue {
    fetched: Instant,
    types: Arc<Vec<InstanceTypeInfo>>,
    /// Where its prices came from.
    pricing: Arc<pricing::Pricing>,
}

/// Longest a Pricing API fetch (every page) may hold up a catalogue load before it counts as
/// failed; a region's EC2 price list is a few dozen pages.
const PRICING_TIMEOUT: Duration = Duration::from_secs(60);

/// The Pricing API client and the region whose prices it asks for.
struct PricingApi {
    client: aws_sdk_pricing::Client,
    region: String,
}

/// The last good on-demand prices from the Pricing API and when it was last asked.
#[derive(Default)]
struct ApiPrices {
    prices: Arc<pricing::OnDemandPrices>,
    fetch: pricing::FetchState,
    warned: bool,
}

/// The AWS cloud provider.
pub struct AwsCloudProvider {
    config: CloudConfig,
    eks: aws_sdk_eks::Client,
    ec2: aws_sdk_ec2::Client,
    ssm: aws_sdk_ssm::Client,
    sqs: aws_sdk_sqs::Client,
    pricing_api: Option<PricingApi>,
    overrides: Option<pricing::PriceOverrides>,
    api_prices: Mutex<ApiPrices>,
    catalogue: tokio::sync::Mutex<Option<Catalogue>>,
    unavailable: Mutex<UnavailableOfferings>,
    subnets: TtlCache<BTreeMap<String, String>, Vec<Subnet>>,
    security_groups: TtlCache<BTreeMap<String, String>, Vec<SecurityGroup>>,
    amis: TtlCache<String, Ami>,
    selected_images: TtlCache<BTreeMap<String, String>, Vec<Ami>>,
    launch_templates: Mutex<launch_template::Usage>,
    warned_estimate: AtomicBool,
}

impl AwsCloudProvider {
    /// Builds the SDK clients from `config` (endpoint, region, credentials; the SDK's chain for
    /// what is unset) and reads the price-overrides file. Makes no AWS call.
    pub async fn new(config: CloudConfig) -> Result<Self, Error> {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .retry_config(retries::retry_config())
            .timeout_config(retries::timeout_config());
        if let Some(region) = &config.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(url) = &config.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        if let Some(c) = &config.credentials {
            loader = loader.credentials_provider(aws_sdk_ec2::config::Credentials::new(
                &c.access_key_id,
                &c.secret_access_key,
                None,
                None,
                "karpenter-rs-static",
            ));
        }
        let shared = loader.load().await;
        let pricing_api = shared.region().map(|region| {
            let conf = aws_sdk_pricing::config::Builder::from(&shared)
                .region(Region::new(pricing::pricing_api_region(region.as_ref())))
                .build();
            PricingApi {
                client: aws_sdk_pricing::Client::from_conf(conf),
                region: region.to_string(),
            }
        });
        let overrides = config.price_overrides.as_deref().map(pricing::load_overrides).transpose()?;
        Ok(AwsCloudProvider {
            eks: aws_sdk_eks::Client::new(&shared),
            ec2: aws_sdk_ec2::Client::new(&shared),
            ssm: aws_sdk_ssm::Client::new(&shared),
            sqs: aws_sdk_sqs::Client::new(&shared),
            pricing_api,
            overrides,
            api_prices: Mutex::new(ApiPrices::default()),
            catalogue: tokio::sync::Mutex::new(None),
            unavailable: Mutex::new(UnavailableOfferings::new()),
            subnets: TtlCache::new(config.resolve_ttl),
            security_groups: TtlCache::new(config.resolve_ttl),
            amis: TtlCache::new(config.resolve_ttl),
            selected_images: TtlCache::new(config.resolve_ttl),
            launch_templates: Mutex::new(launch_template::Usage::default()),
            warned_estimate: AtomicBool::new(false),
            config,
        })
    }

    /// When no cluster endpoint is configured, looks it up with `eks:DescribeCluster` for the
    /// cluster name, as Karpenter does at start: AL2023 and Bottlerocket nodes do not look it up
    /// themselves and never join without it. An error names the settings that skip the lookup.
    pub async fn discover_cluster_endpoint(&mut self) -> Result<(), Error> {
        if !self.config.cluster_endpoint.is_empty() {
            return Ok(());
        }
        let name = self.config.cluster_name.clone();
        let unset = "no cluster endpoint is set (--cluster-endpoint, CLUSTER_ENDPOINT, or aws.clusterEndpoint in the settings ConfigMap)";
        let answer = self.eks.describe_cluster().name(&name).send().await.map_err(|e| {
            Error::InvalidConfiguration(format!(
                "{unset} and looking it up failed: {}",
                errors::api("eks:DescribeCluster", e)
            ))
        })?;
        let endpoint = answer
            .cluster()
            .and_then(|c| c.endpoint())
            .filter(|e| !e.is_empty())
            .ok_or_else(|| Error::InvalidConfiguration(format!("{unset} and eks:DescribeCluster for cluster {name:?} names none")))?;
        tracing::info!(cluster = %name, endpoint, "cluster endpoint from eks:DescribeCluster");
        self.config.cluster_endpoint = endpoint.to_string();
        Ok(())
    }

    /// The cluster endpoint the nodes are given.
    pub fn cluster_endpoint(&self) -> &str {
        &self.config.cluster_endpoint
    }

    /// The EC2 client (tests read EC2 state through it).
    pub fn ec2(&self) -> &aws_sdk_ec2::Client {
        &self.ec2
    }

    /// The SQS client (tests send interruption events through it).
    pub fn sqs(&self) -> &aws_sdk_sqs::Client {
        &self.sqs
    }

    /// The SSM client (tests move an AMI parameter to a new image through it).
    pub fn ssm(&self) -> &aws_sdk_ssm::Client {
        &self.ssm
    }

    /// The interruption queue's API (SQS), with the same endpoint, region and credentials.
    pub fn interruption_queue(&self) -> queue::SqsQueue {
        queue::SqsQueue::new(self.sqs.clone())
    }

    /// The settings.
    pub fn config(&self) -> &CloudConfig {
        &self.config
    }

    /// The catalogue without the unavailable-offerings overlay, loaded when older than
    /// `catalogue_ttl`.
    async fn catalogue(&self) -> Result<Arc<Vec<InstanceTypeInfo>>, Error> {
        let mut cached = self.catalogue.lock().await;
        if let Some(c) = cached.as_ref().filter(|c| c.fetched.elapsed() < self.config.catalogue_ttl) {
            return Ok(c.types.clone());
        }
        let started = Instant::now();
        let (types, zones, spot, on_demand) = tokio::try_join!(
            instance_types::describe_instance_types(&self.ec2),
            instance_types::describe_offerings(&self.ec2),
            pricing::describe_spot_prices(&self.ec2),
            async { Ok(self.on_demand_prices().await) },
        )?;
        let prices = pricing::Pricing::new(self.overrides.clone(), on_demand, spot);
        let estimated: Vec<&str> = types
            .iter()
            .filter(|t| prices.is_estimated(t))
            .map(|t| t.facts.name.as_str())
            .collect();
        if !estimated.is_empty() && !self.warned_estimate.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                estimated = estimated.len(),
                total = types.len(),
                examples = %estimated.iter().take(5).copied().collect::<Vec<_>>().join(","),
                "no on-demand price known for some instance types (not in the price overrides, not from the Pricing API); ranking them by a resource-based estimate"
            );
        }
        let types = Arc::new(instance_types::with_offerings(types, &zones, &prices));
        tracing::debug!(
            instance_types = types.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded instance types"
        );
        *cached = Some(Catalogue {
            fetched: Instant::now(),
            types: types.clone(),
            pricing: Arc::new(prices),
        });
        Ok(types)
    }

    /// The instance types as `instance_types` gives them, and where their prices came from, to
    /// tell karpenter-rs's estimates from AWS's prices (`nodes --live-prices`).
    pub async fn instance_types_with_pricing(&self) -> Result<(Vec<InstanceTypeInfo>, Arc<pricing::Pricing>), Error> {
        let types = self.instance_types().await?;
        let pricing = self.catalogue.lock().await.as_ref().map(|c| c.pricing.clone()).unwrap_or_default();
        Ok((types, pricing))
    }

    /// The Pricing API's on-demand prices: fetched when due (`FetchState::is_due`), else the
    /// last good ones (empty until a fetch succeeds). A failure is logged, at warn once, and
    /// never fails the catalogue; it is retried at the next catalogue refresh.
    async fn on_demand_prices(&self) -> Arc<pricing::OnDemandPrices> {
        let (due, current) = {
            let state = self.api_prices.lock().expect("price lock is never poisoned: no panics while held");
            let due = state
                .fetch
                .is_due(Instant::now(), pricing::ON_DEMAND_REFRESH, self.config.catalogue_ttl);
            (due, state.prices.clone())
        };
        let Some(api) = self.pricing_api.as_ref().filter(|_| due) else {
            return current;
        };
        let fetched = tokio::time::timeout(PRICING_TIMEOUT, pricing::describe_on_demand_prices(&api.client, &api.region))
            .await
            .unwrap_or_else(|_| {
                Err(Error::Api {
                    operation: "pricing:GetProducts",
                    code: None,
                    source: format!("no answer within {}s", PRICING_TIMEOUT.as_secs()).into(),
                })
            });
        let mut state = self.api_prices.lock().expect("price lock is never poisoned: no panics while held");
        let now = Instant::now();
        match fetched {
            Ok(parsed) if !parsed.prices.is_empty() => {
                tracing::info!(
                    region = %api.region,
                    instance_types = parsed.prices.len(),
                    skipped = parsed.skipped,
                    "loaded on-demand prices from the Pricing API"
                );
                state.prices = Arc::new(parsed.prices);
                state.fetch.last_success = Some(now);
                state.warned = false;
            }
            failed => {
                let error = match failed {
                    Ok(parsed) => format!(
                        "no on-demand prices listed for {} ({} documents skipped)",
                        api.region, parsed.skipped
                    ),
                    Err(e) => crate::telemetry::chain(&e),
                };
                let kept = state.prices.len();
                if std::mem::replace(&mut state.warned, true) {
                    tracing::debug!(region = %api.region, error, kept, "Pricing API unavailable; keeping the last prices");
                } else {
                    tracing::warn!(
                        region = %api.region,
                        error,
                        kept,
                        "Pricing API unavailable; using the last prices, overrides and estimates, retrying at the next catalogue refresh"
                    );
                }
                state.fetch.last_failure = Some(now);
            }
        }
        state.prices.clone()
    }

    fn mark_offerings_unavailable(&self, offerings: &[OfferingId]) {
        let now = Instant::now();
        let mut cache = self.unavailable.lock().expect("cache lock is never poisoned: no panics while held");
        for o in offerings {
            tracing::info!(instance_type = %o.instance_type, zone = %o.zone, capacity_type = %o.capacity_type, "offering unavailable: insufficient capacity");
            cache.mark(o.clone(), now);
        }
    }

    async fn resolve_subnets(&self, selector: &BTreeMap<String, String>) -> Result<Vec<Subnet>, Error> {
        if let Some(hit) = self.subnets.get(selector) {
            return Ok(hit);
        }
        let found = subnets::resolve_subnets(&self.ec2, selector).await?;
        self.subnets.put(selector.clone(), found.clone());
        Ok(found)
    }

    async fn resolve_security_groups(&self, template: &NodeTemplate) -> Result<Vec<SecurityGroup>, Error> {
        let selector = &template.security_group_selector;
        if selector.is_empty() {
            if template.launch_template.is_some() {
                return Ok(Vec::new());
            }
            return Err(Error::InvalidConfiguration("securityGroupSelector is empty".into()));
        }
        if let Some(hit) = self.security_groups.get(selector) {
            return Ok(hit);
        }
        let found = subnets::resolve_security_groups(&self.ec2, selector).await?;
        self.security_groups.put(selector.clone(), found.clone());
        Ok(found)
    }

    /// The AMI for `need` under the template: the newest selector match of the architecture,
    /// else the family's SSM parameter.
    async fn ami(&self, template: &NodeTemplate, need: AmiNeed) -> Result<Ami, Error> {
        if let Some(selector) = &template.ami_selector {
            let images = self.selected_images(selector).await?;
            return images.into_iter().find(|a| a.architecture == need.architecture).ok_or_else(|| {
                Error::InvalidConfiguration(format!(
                    "no {} image matches amiSelector {}",
                    need.architecture,
                    subnets::describe_selector(selector)
                ))
            });
        }
        let key = format!(
            "{}/{}/{}/{:?}",
            template.ami_family, template.kubernetes_version, need.architecture, need.accelerator
        );
        if let Some(hit) = self.amis.get(&key) {
            return Ok(hit);
        }
        let found = ami::resolve_from_ssm(&self.ssm, template.ami_family, template.kubernetes_version, need).await?;
        self.amis.put(key, found.clone());
        Ok(found)
    }

    /// The images an `amiSelector` matches, newest first, cached like the other selectors (launches
    /// and drift ask for them every pass).
    async fn selected_images(&self, selector: &BTreeMap<String, String>) -> Result<Vec<Ami>, Error> {
        if let Some(hit) = self.selected_images.get(selector) {
            return Ok(hit);
        }
        let found = ami::resolve_from_selector(&self.ec2, selector).await?;
        self.selected_images.put(selector.clone(), found.clone());
        Ok(found)
    }
}

fn arch_requirement(arch: &str) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: ARCH_LABEL.to_string(),
        operator: "In".to_string(),
        values: Some(vec![arch.to_string()]),
    }
}

/// What a node of this instance type needs from its AMI: its architecture, and the NVIDIA or
/// Neuron variant for an accelerated type.
fn ami_need(info: &InstanceTypeInfo) -> AmiNeed {
    let nvidia = info.facts.gpus.iter().any(|g| g.manufacturer.eq_ignore_ascii_case("nvidia"));
    AmiNeed {
        architecture: if info.facts.architecture == "arm64" { "arm64" } else { "amd64" },
        accelerator: match (nvidia, info.needs_accelerated_ami()) {
            (true, _) => Accelerator::Nvidia,
            (false, true) => Accelerator::Neuron,
            (false, false) => Accelerator::None,
        },
    }
}

#[async_trait]
impl CloudProvider for AwsCloudProvider {
    async fn instance_types(&self) -> Result<Vec<InstanceTypeInfo>, Error> {
        let catalogue = self.catalogue().await?;
        let now = Instant::now();
        let cache = self.unavailable.lock().expect("cache lock is never poisoned: no panics while held");
        let mut types = catalogue.as_ref().clone();
        for t in &mut types {
            for o in &mut t.offerings {
                o.available = !cache.is_unavailable(&t.facts.name, &o.zone, &o.capacity_type, now);
            }
        }
        Ok(types)
    }

    async fn resolve(&self, template: &NodeTemplate) -> Result<AwsNodeTemplateStatus, Error> {
        if template.launch_template.is_none() {
            user_data::check_bootstrap(template.ami_family, &self.config)?;
        }
        let subnets = self.resolve_subnets(&template.subnet_selector).await?;
        let groups = self.resolve_security_groups(template).await?;
        let amis = match &template.ami_selector {
            Some(selector) => self.selected_images(selector).await?,
            None if template.launch_template.is_some() => Vec::new(),
            None => {
                let mut found = Vec::new();
                for architecture in ["amd64", "arm64"] {
                    found.push(
                        self.ami(
                            template,
                            AmiNeed {
                                architecture,
                                accelerator: Accelerator::None,
                            },
                        )
                        .await?,
                    );
                }
                found
            }
        };
        Ok(AwsNodeTemplateStatus {
            conditions: None,
            subnets: Some(
                subnets
                    .into_iter()
                    .map(|s| SubnetStatus {
                        id: s.id,
                        zone: Some(s.zone),
                    })
                    .collect(),
            ),
            security_groups: Some(
                groups
                    .into_iter()
                    .map(|g| SecurityGroupStatus {
                        id: g.id,
                        name: Some(g.name),
                    })
                    .collect(),
            ),
            amis: Some(
                amis.into_iter()
                    .map(|a| AmiStatus {
                        requirements: Some(vec![arch_requirement(&a.architecture)]),
                        id: a.id,
                        name: a.name,
                    })
                    .collect(),
            ),
        })
    }

    async fn image_for(&self, template: &NodeTemplate, instance_type: &str) -> Result<Option<String>, Error> {
        if template.launch_template.is_some() {
            return Ok(None);
        }
        let catalogue = self.catalogue().await?;
        let info = catalogue
            .iter()
            .find(|t| t.facts.name == instance_type)
            .ok_or_else(|| Error::NotFound(format!("instance type {instance_type} in this region's catalogue")))?;
        Ok(Some(self.ami(template, ami_need(info)).await?.id))
    }

    async fn create(&self, request: &LaunchRequest) -> Result<Instance, Error> {
        let instance = match self.launch_once(request).await {
            // Someone deleted a launch template we had cached: forget them all and retry once.
            Err(e) if errors::code(&e) == Some("InvalidLaunchTemplateName.NotFoundException") => {
                self.launch_templates
                    .lock()
                    .expect("cache lock is never poisoned: no panics while held")
                    .clear();
                self.launch_once(request).await?
            }
            other => other?,
        };
        tracing::info!(
            provisioner = %request.provisioner_name,
            instance_id = %instance.id,
            instance_type = %instance.instance_type,
            zone = %instance.zone,
            capacity_type = %instance.capacity_type,
            "launched instance"
        );
        Ok(instance)
    }

    async fn delete_unused_launch_templates(&self, unused_for: Duration) -> Result<Vec<String>, Error> {
        let existing = launch_template::list(&self.ec2, &self.config.cluster_name).await?;
        let unused = self
            .launch_templates
            .lock()
            .expect("cache lock is never poisoned: no panics while held")
            .take_unused(&existing, unused_for, Instant::now());
        let mut deleted = Vec::new();
        for name in unused {
            match launch_template::delete(&self.ec2, &name).await {
                Ok(()) => {
                    tracing::info!(launch_template = %name, "deleted unused launch template");
                    deleted.push(name);
                }
                // Forgotten already: the next pass sees it again (as new) and retries later.
                Err(e) => tracing::warn!(launch_template = %name, error = %e, "deleting unused launch template; retrying later"),
            }
        }
        Ok(deleted)
    }

    async fn delete(&self, instance_id: &str) -> Result<(), Error> {
        instance::terminate(&self.ec2, instance_id).await?;
        tracing::info!(instance_id, "terminated instance");
        Ok(())
    }

    async fn list(&self) -> Result<Vec<Instance>, Error> {
        let cluster_tag = format!("{}{}", instance::CLUSTER_TAG_PREFIX, self.config.cluster_name);
        let filters = vec![
            Filter::builder().name(format!("tag:{cluster_tag}")).values("owned").build(),
            Filter::builder().name("tag-key").values(PROVISIONER_NAME_LABEL).build(),
            instance::live_filter(),
        ];
        instance::describe(&self.ec2, &[], filters).await
    }

    async fn get(&self, instance_id: &str) -> Result<Instance, Error> {
        let found = instance::describe(&self.ec2, &[instance_id.to_string()], vec![instance::live_filter()]).await;
        match found {
            Ok(list) => list
                .into_iter()
                .next()
                .ok_or_else(|| Error::NotFound(format!("instance {instance_id}"))),
            Err(e) if errors::code(&e) == Some("InvalidInstanceID.Malformed") => Err(Error::NotFound(format!("instance {instance_id}"))),
            Err(e) => Err(e),
        }
    }
    fn unavailable_offerings(&self) -> Vec<(OfferingId, jiff::Timestamp)> {
        let cache = self.unavailable.lock().expect("cache lock is never poisoned: no panics while held");
        cache.unavailable_until_wall(Instant::now(), jiff::Timestamp::now())
    }

    fn mark_unavailable(&self, offerings: &[OfferingId]) {
        self.mark_offerings_unavailable(offerings);
    }
}
