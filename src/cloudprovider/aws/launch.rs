//! The launch sequence of `AwsCloudProvider::create`: the offerings to try (without those
//! recently short of capacity), a subnet per zone, a launch template per AMI and max pods, then
//! one CreateFleet call; the offerings it reports short of capacity are marked unavailable.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use super::ami::AmiNeed;
use super::launch_template::{self, LaunchTemplateConfig, Metadata};
use super::user_data::{self, Bootstrap};
use super::{ami_need, instance, retries, subnets, AwsCloudProvider};
use crate::apis::v1alpha5::labels::PROVISIONER_NAME_LABEL;
use crate::cloudprovider::{Error, Instance, InstanceTypeInfo, LaunchRequest, LAUNCH_CONFIG_TAG};

impl AwsCloudProvider {
    async fn ensure_launch_template(&self, config: &LaunchTemplateConfig) -> Result<String, Error> {
        let name = config.name();
        {
            let mut usage = self
                .launch_templates
                .lock()
                .expect("cache lock is never poisoned: no panics while held");
            if usage.contains(&name) {
                usage.used(&name, Instant::now());
                return Ok(name);
            }
        }
        let name = launch_template::ensure(&self.ec2, config).await?;
        self.launch_templates
            .lock()
            .expect("cache lock is never poisoned: no panics while held")
            .used(&name, Instant::now());
        Ok(name)
    }

    /// Launch template name per instance type of the plan.
    async fn launch_templates_for(
        &self,
        request: &LaunchRequest,
        capacity_type: &str,
        types: &[String],
    ) -> Result<HashMap<String, String>, Error> {
        let template = &request.template;
        if let Some(name) = &template.launch_template {
            return Ok(types.iter().map(|t| (t.clone(), name.clone())).collect());
        }
        let catalogue = self.catalogue().await?;
        let by_name: HashMap<&str, &InstanceTypeInfo> = catalogue.iter().map(|t| (t.facts.name.as_str(), t)).collect();
        // One launch template per AMI and per max pods (the kubelet's flag is in the user data).
        let mut needs: BTreeMap<(AmiNeed, Option<i64>), Vec<String>> = BTreeMap::new();
        for t in types {
            let info = by_name
                .get(t.as_str())
                .ok_or_else(|| Error::InvalidConfiguration(format!("instance type {t} is not offered in this region")))?;
            let need = ami_need(info);
            let max_pods = request.max_pods.get(t).copied().or(request.kubelet.max_pods.map(i64::from));
            needs.entry((need, max_pods)).or_default().push(t.clone());
        }
        let instance_profile = template
            .instance_profile
            .clone()
            .or_else(|| self.config.default_instance_profile.clone())
            .ok_or_else(|| {
                Error::InvalidConfiguration("no instanceProfile in the node template and no default instance profile configured".into())
            })?;
        let mut security_group_ids: Vec<String> = self.resolve_security_groups(template).await?.into_iter().map(|g| g.id).collect();
        security_group_ids.sort();
        let labels = user_data::kubelet_labels(&request.labels, &request.provisioner_name, capacity_type);
        let taints: Vec<_> = request.taints.iter().chain(&request.startup_taints).cloned().collect();
        let bootstrap = Bootstrap {
            cluster_name: &self.config.cluster_name,
            cluster_endpoint: &self.config.cluster_endpoint,
            ca_bundle: self.config.cluster_ca_bundle.as_deref(),
            cluster_cidr: self.config.cluster_cidr.as_deref(),
            cluster_dns: self.config.cluster_dns.as_deref(),
            labels: &labels,
            taints: &taints,
            kubelet: &request.kubelet,
            custom_user_data: template.user_data.as_deref(),
        };
        let mut lt_tags = BTreeMap::from([("Name".to_string(), format!("{PROVISIONER_NAME_LABEL}/{}", request.provisioner_name))]);
        lt_tags.insert(PROVISIONER_NAME_LABEL.to_string(), request.provisioner_name.clone());
        lt_tags.extend(self.config.tags.clone());
        lt_tags.extend(template.tags.clone());
        let mut out = HashMap::new();
        for ((need, max_pods), need_types) in needs {
            let mut kubelet = request.kubelet.clone();
            kubelet.max_pods = max_pods.and_then(|n| i32::try_from(n).ok()).or(kubelet.max_pods);
            let user_data = user_data::user_data(
                template.ami_family,
                &Bootstrap {
                    kubelet: &kubelet,
                    ..bootstrap
                },
            )?;
            let image = self.ami(template, need).await?;
            let config = LaunchTemplateConfig {
                cluster_name: self.config.cluster_name.clone(),
                image_id: image.id,
                instance_profile: instance_profile.clone(),
                security_group_ids: security_group_ids.clone(),
                user_data: user_data.clone(),
                block_device_mappings: template
                    .block_device_mappings
                    .clone()
                    .unwrap_or_else(|| launch_template::default_block_devices(template.ami_family)),
                metadata: Metadata::resolve(template.metadata_options.as_ref()),
                detailed_monitoring: template.detailed_monitoring,
                tags: lt_tags.clone(),
            };
            let name = self.ensure_launch_template(&config).await?;
            out.extend(need_types.into_iter().map(|t| (t, name.clone())));
        }
        Ok(out)
    }

    pub(super) async fn launch_once(&self, request: &LaunchRequest) -> Result<Instance, Error> {
        let plan = {
            let now = Instant::now();
            let cache = self.unavailable.lock().expect("cache lock is never poisoned: no panics while held");
            instance::plan(&request.instance_options, request.spot_max_price, |o| {
                cache.is_unavailable(&o.instance_type, &o.zone, &o.capacity_type, now)
            })?
        };
        let subnets = subnets::one_per_zone(&self.resolve_subnets(&request.template.subnet_selector).await?);
        let zones: Vec<&str> = plan.options.iter().map(|o| o.zone.as_str()).collect();
        if !zones.iter().any(|z| subnets.contains_key(*z)) {
            let mut zones = zones;
            zones.sort();
            zones.dedup();
            return Err(Error::InvalidConfiguration(format!(
                "no subnet matching subnetSelector {} is in zone {} (subnets are in {})",
                subnets::describe_selector(&request.template.subnet_selector),
                zones.join(", "),
                subnets.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        let mut seen = HashSet::new();
        let types: Vec<String> = plan
            .options
            .iter()
            .filter(|o| seen.insert(o.instance_type.as_str()))
            .map(|o| o.instance_type.clone())
            .collect();
        let lts = self.launch_templates_for(request, &plan.capacity_type, &types).await?;
        let configs = instance::overrides(&plan.options, &subnets, &lts);
        let mut tags = instance::instance_tags(
            &self.config.cluster_name,
            &request.provisioner_name,
            request.node_name.as_deref(),
            &self.config.tags,
            &request.template.tags,
        );
        let client_token = match &request.identity {
            Some(identity) => {
                tags.insert(LAUNCH_CONFIG_TAG.to_string(), identity.config.clone());
                retries::need_client_token(&self.config.cluster_name, &identity.need, &plan.capacity_type, &configs)
            }
            None => retries::new_client_token(&self.config.cluster_name, &request.provisioner_name),
        };
        let fleet = instance::create_fleet(
            &self.ec2,
            &instance::FleetRequest {
                configs: &configs,
                capacity_type: &plan.capacity_type,
                tags: &tags,
                spot_max_price: request.spot_max_price,
                context: request.template.context.as_deref(),
                client_token: &client_token,
            },
        )
        .await?;
        self.mark_offerings_unavailable(&instance::capacity_failures(&fleet.errors));
        let Some(id) = fleet.instance_ids.first() else {
            return Err(instance::fleet_failure(&fleet.errors));
        };
        instance::read_back(&self.ec2, id).await
    }
}
