//! Launching, reading and terminating instances.
//!
//! A launch is one CreateFleet of type `instant` with `TotalTargetCapacity = 1`: the request's
//! options are filtered (capacity failures, `spotPrice`), one capacity type is chosen (spot when
//! any spot option is left, as Karpenter does), capped at `MAX_INSTANCE_TYPES` types, and sent as
//! overrides (instance type × the zone's subnet) of the launch template of each type's AMI,
//! cheapest first with `lowest-price` (on-demand) or `price-capacity-optimized` (spot).
//! Fleet errors with capacity codes mark those offerings unavailable. The planning, the
//! overrides, the tags and the fleet-error verdict are pure; the rest calls EC2.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use aws_sdk_ec2::types::{
    CreateFleetError, DefaultTargetCapacityType, Filter, FleetLaunchTemplateConfigRequest, FleetLaunchTemplateOverridesRequest,
    FleetLaunchTemplateSpecificationRequest, FleetOnDemandAllocationStrategy, FleetType, OnDemandOptionsRequest, ResourceType,
    SpotAllocationStrategy, SpotOptionsRequest, Tag, TagSpecification, TargetCapacitySpecificationRequest,
};
use aws_sdk_ec2::Client;

use super::errors::{self, AwsError};
use super::subnets::Subnet;
use crate::apis::v1alpha5::labels::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, PROVISIONER_NAME_LABEL};
use crate::cloudprovider::{Error, Instance, InstanceOption, OfferingId};

/// Most instance types sent in one launch (`MaxInstanceTypes` of the AWS provider).
pub const MAX_INSTANCE_TYPES: usize = 60;
pub use crate::apis::v1alpha1::validation::{CLUSTER_TAG_PREFIX, MANAGED_BY_TAG};
/// Instance states that count as existing (everything but `terminated`).
pub const LIVE_STATES: &[&str] = &["pending", "running", "stopping", "stopped", "shutting-down"];

/// What a launch will try, after filtering.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    /// `on-demand` or `spot`.
    pub capacity_type: String,
    /// The options to send, cheapest first, at most `MAX_INSTANCE_TYPES` types.
    pub options: Vec<InstanceOption>,
}

/// Chooses what to launch from the request's options.
pub fn plan(
    options: &[InstanceOption],
    spot_max_price: Option<f64>,
    is_unavailable: impl Fn(&InstanceOption) -> bool,
) -> Result<LaunchPlan, Error> {
    if options.is_empty() {
        return Err(Error::InvalidConfiguration(
            "the launch request has no instance type options".into(),
        ));
    }
    let (unavailable, available): (Vec<&InstanceOption>, Vec<&InstanceOption>) = options.iter().partition(|o| is_unavailable(o));
    let affordable: Vec<&InstanceOption> = available
        .iter()
        .copied()
        .filter(|o| o.capacity_type != CAPACITY_TYPE_SPOT || spot_max_price.is_none_or(|max| o.price <= max))
        .collect();
    if affordable.is_empty() {
        if available.is_empty() {
            return Err(Error::InsufficientCapacity {
                offerings: unavailable.iter().map(|o| offering(o)).collect(),
            });
        }
        return Err(Error::InvalidConfiguration(format!(
            "every spot option costs more than spotPrice {}",
            spot_max_price.unwrap_or_default()
        )));
    }
    let capacity_type = if affordable.iter().any(|o| o.capacity_type == CAPACITY_TYPE_SPOT) {
        CAPACITY_TYPE_SPOT
    } else {
        CAPACITY_TYPE_ON_DEMAND
    };
    let mut chosen: Vec<InstanceOption> = affordable
        .into_iter()
        .filter(|o| o.capacity_type == capacity_type)
        .cloned()
        .collect();
    chosen.sort_by(|a, b| a.price.total_cmp(&b.price));
    let mut types = BTreeSet::new();
    chosen.retain(|o| {
        if types.contains(&o.instance_type) {
            return true;
        }
        if types.len() >= MAX_INSTANCE_TYPES {
            return false;
        }
        types.insert(o.instance_type.clone());
        true
    });
    Ok(LaunchPlan {
        capacity_type: capacity_type.to_string(),
        options: chosen,
    })
}

fn offering(o: &InstanceOption) -> OfferingId {
    OfferingId {
        instance_type: o.instance_type.clone(),
        zone: o.zone.clone(),
        capacity_type: o.capacity_type.clone(),
    }
}

/// One CreateFleet override.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    /// Instance type.
    pub instance_type: String,
    /// Subnet in `zone`.
    pub subnet_id: String,
    /// Availability zone.
    pub zone: String,
    /// Launch priority (0 = first), for documentation of the order; prices decide for lowest-price.
    pub priority: f64,
}

/// Overrides grouped by launch template (in order of first use), for options whose zone has a
/// subnet. `launch_template_of` maps an instance type to its template name.
pub fn overrides(
    options: &[InstanceOption],
    subnets: &BTreeMap<String, Subnet>,
    launch_template_of: &HashMap<String, String>,
) -> Vec<(String, Vec<Override>)> {
    let mut grouped: Vec<(String, Vec<Override>)> = Vec::new();
    for (i, o) in options.iter().enumerate() {
        let (Some(subnet), Some(lt)) = (subnets.get(&o.zone), launch_template_of.get(&o.instance_type)) else {
            continue;
        };
        let ov = Override {
            instance_type: o.instance_type.clone(),
            subnet_id: subnet.id.clone(),
            zone: o.zone.clone(),
            priority: i as f64,
        };
        match grouped.iter_mut().find(|(name, _)| name == lt) {
            Some((_, list)) => list.push(ov),
            None => grouped.push((lt.clone(), vec![ov])),
        }
    }
    grouped
}

/// Tags of a launched instance and its volumes: `Name`, then the global tags, then the
/// template's, then the ones karpenter-rs relies on (cluster ownership, provisioner, managed-by),
/// which always win.
pub fn instance_tags(
    cluster_name: &str,
    provisioner: &str,
    node_name: Option<&str>,
    global: &BTreeMap<String, String>,
    template: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut tags = BTreeMap::new();
    let name = match node_name {
        Some(node) => format!("{provisioner}/{node}"),
        None => format!("{PROVISIONER_NAME_LABEL}/{provisioner}"),
    };
    tags.insert("Name".to_string(), name);
    tags.extend(global.iter().map(|(k, v)| (k.clone(), v.clone())));
    tags.extend(template.iter().map(|(k, v)| (k.clone(), v.clone())));
    tags.insert(format!("{CLUSTER_TAG_PREFIX}{cluster_name}"), "owned".to_string());
    tags.insert(PROVISIONER_NAME_LABEL.to_string(), provisioner.to_string());
    tags.insert(MANAGED_BY_TAG.to_string(), cluster_name.to_string());
    tags
}

/// One error of a CreateFleet response.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetError {
    /// The offering it is about.
    pub offering: OfferingId,
    /// AWS error code.
    pub code: String,
    /// AWS message.
    pub message: String,
}

/// The error of a fleet that launched nothing: capacity failure when every error is a capacity
/// code (those offerings are to be marked unavailable), else an API error listing them all.
pub fn fleet_failure(errs: &[FleetError]) -> Error {
    if !errs.is_empty() && errs.iter().all(|e| errors::is_insufficient_capacity(&e.code)) {
        let mut offerings: Vec<OfferingId> = errs.iter().map(|e| e.offering.clone()).collect();
        offerings.sort();
        offerings.dedup();
        return Error::InsufficientCapacity { offerings };
    }
    let message = if errs.is_empty() {
        "the fleet launched no instance and reported no error".to_string()
    } else {
        let mut seen = BTreeSet::new();
        errs.iter()
            .filter(|e| seen.insert((e.code.clone(), e.message.clone())))
            .map(|e| format!("{}: {}", e.code, e.message))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let code = errs
        .iter()
        .find(|e| !errors::is_insufficient_capacity(&e.code))
        .map(|e| e.code.clone());
    Error::Api {
        operation: "ec2:CreateFleet",
        code,
        source: Box::new(AwsError { code: None, message }),
    }
}

/// The offerings of capacity errors, to mark unavailable.
pub fn capacity_failures(errs: &[FleetError]) -> Vec<OfferingId> {
    errs.iter()
        .filter(|e| errors::is_insufficient_capacity(&e.code))
        .map(|e| e.offering.clone())
        .collect()
}

fn fleet_error(e: &CreateFleetError, capacity_type: &str) -> Option<FleetError> {
    let ov = e.launch_template_and_overrides()?.overrides()?;
    Some(FleetError {
        offering: OfferingId {
            instance_type: ov.instance_type()?.as_str().to_string(),
            zone: ov.availability_zone().unwrap_or_default().to_string(),
            capacity_type: e
                .lifecycle()
                .map(|l| l.as_str().to_string())
                .unwrap_or_else(|| capacity_type.to_string()),
        },
        code: e.error_code().unwrap_or_default().to_string(),
        message: e.error_message().unwrap_or_default().to_string(),
    })
}

fn sdk_tags(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter().map(|(k, v)| Tag::builder().key(k).value(v).build()).collect()
}

/// The inputs of one CreateFleet call.
pub struct FleetRequest<'a> {
    /// Overrides per launch template.
    pub configs: &'a [(String, Vec<Override>)],
    /// `on-demand` or `spot`.
    pub capacity_type: &'a str,
    /// Tags of the instance, its volumes and the fleet.
    pub tags: &'a BTreeMap<String, String>,
    /// Highest spot price per override.
    pub spot_max_price: Option<f64>,
    /// CreateFleet `Context`.
    pub context: Option<&'a str>,
    /// CreateFleet `ClientToken` (`retries::client_token`): the SDK's retries of this call
    /// reuse it, so EC2 does not launch again for a request whose answer was lost.
    pub client_token: &'a str,
}

/// What CreateFleet returned.
#[derive(Debug, Default)]
pub struct FleetResult {
    /// Launched instance ids.
    pub instance_ids: Vec<String>,
    /// Per-offering errors.
    pub errors: Vec<FleetError>,
}

/// Calls CreateFleet (type instant, one instance).
pub async fn create_fleet(ec2: &Client, r: &FleetRequest<'_>) -> Result<FleetResult, Error> {
    let spot = r.capacity_type == CAPACITY_TYPE_SPOT;
    let configs: Vec<FleetLaunchTemplateConfigRequest> = r
        .configs
        .iter()
        .map(|(name, ovs)| {
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_name(name)
                        .version("$Latest")
                        .build(),
                )
                .set_overrides(Some(
                    ovs.iter()
                        .map(|o| {
                            FleetLaunchTemplateOverridesRequest::builder()
                                .instance_type(o.instance_type.as_str().into())
                                .subnet_id(&o.subnet_id)
                                .availability_zone(&o.zone)
                                .priority(o.priority)
                                .set_max_price(if spot { r.spot_max_price.map(|p| p.to_string()) } else { None })
                                .build()
                        })
                        .collect(),
                ))
                .build()
        })
        .collect();
    let tag_spec = |rt: ResourceType| {
        TagSpecification::builder()
            .resource_type(rt)
            .set_tags(Some(sdk_tags(r.tags)))
            .build()
    };
    let mut req = ec2
        .create_fleet()
        .r#type(FleetType::Instant)
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(DefaultTargetCapacityType::from(r.capacity_type))
                .build(),
        )
        .set_launch_template_configs(Some(configs))
        .tag_specifications(tag_spec(ResourceType::Instance))
        .tag_specifications(tag_spec(ResourceType::Volume))
        .tag_specifications(tag_spec(ResourceType::Fleet))
        .set_context(r.context.map(str::to_string))
        .client_token(r.client_token);
    req = if spot {
        req.spot_options(
            SpotOptionsRequest::builder()
                .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                .build(),
        )
    } else {
        req.on_demand_options(
            OnDemandOptionsRequest::builder()
                .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                .build(),
        )
    };
    let out = req.send().await.map_err(|e| errors::api("ec2:CreateFleet", e))?;
    Ok(FleetResult {
        instance_ids: out.instances().iter().flat_map(|i| i.instance_ids().iter().cloned()).collect(),
        errors: out.errors().iter().filter_map(|e| fleet_error(e, r.capacity_type)).collect(),
    })
}

/// Our `Instance` of an EC2 one.
pub fn from_sdk(i: &aws_sdk_ec2::types::Instance) -> Instance {
    let spot = i.instance_lifecycle().is_some_and(|l| l.as_str() == "spot") || i.spot_instance_request_id().is_some();
    Instance {
        id: i.instance_id().unwrap_or_default().to_string(),
        instance_type: i.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default(),
        zone: i.placement().and_then(|p| p.availability_zone()).unwrap_or_default().to_string(),
        capacity_type: if spot { CAPACITY_TYPE_SPOT } else { CAPACITY_TYPE_ON_DEMAND }.to_string(),
        private_dns_name: i.private_dns_name().unwrap_or_default().to_string(),
        private_ip: i.private_ip_address().map(str::to_string),
        launch_time: i.launch_time().and_then(|t| SystemTime::try_from(*t).ok()),
        state: i.state().and_then(|s| s.name()).map(|n| n.as_str().to_string()).unwrap_or_default(),
        tags: i
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())))
            .collect(),
        image_id: i.image_id().map(str::to_string),
        subnet_id: i.subnet_id().map(str::to_string),
        security_group_ids: {
            let mut ids: Vec<String> = i
                .security_groups()
                .iter()
                .filter_map(|g| g.group_id().map(str::to_string))
                .collect();
            ids.sort();
            ids.dedup();
            ids
        },
    }
}

/// The instances matching the filters (and ids, when given), across pages.
pub async fn describe(ec2: &Client, ids: &[String], filters: Vec<Filter>) -> Result<Vec<Instance>, Error> {
    let mut out = Vec::new();
    let mut pages = ec2
        .describe_instances()
        .set_instance_ids((!ids.is_empty()).then(|| ids.to_vec()))
        .set_filters((!filters.is_empty()).then_some(filters))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| errors::api_or_not_found("ec2:DescribeInstances", format!("instance {}", ids.join(",")), e))?;
        out.extend(page.reservations().iter().flat_map(|r| r.instances().iter().map(from_sdk)));
    }
    Ok(out)
}

/// Filter on instance states other than terminated.
pub fn live_filter() -> Filter {
    Filter::builder()
        .name("instance-state-name")
        .set_values(Some(LIVE_STATES.iter().map(|s| s.to_string()).collect()))
        .build()
}

/// Pause between `read_back`'s reads of a just-launched instance without a private DNS name yet.
const READ_BACK_PAUSE: Duration = Duration::from_secs(1);

/// Reads a just-launched instance back, waiting (up to 6 tries, 1 s apart) for its private DNS
/// name, which names the Node.
pub async fn read_back(ec2: &Client, id: &str) -> Result<Instance, Error> {
    let ids = [id.to_string()];
    let mut last = None;
    for attempt in 0..6 {
        if attempt > 0 {
            tokio::time::sleep(READ_BACK_PAUSE).await;
        }
        match describe(ec2, &ids, vec![]).await {
            Ok(found) => match found.into_iter().next() {
                Some(i) if !i.private_dns_name.is_empty() => return Ok(i),
                Some(i) => last = Some(Ok(i)),
                None => last = Some(Err(Error::NotFound(format!("instance {id}")))),
            },
            // Eventual consistency: a new instance can be unknown to DescribeInstances briefly.
            Err(e) if e.is_not_found() => last = Some(Err(e)),
            Err(e) => return Err(e),
        }
    }
    last.expect("the loop ran at least once")
}

/// Terminates an instance; one that does not exist (any more) is success.
pub async fn terminate(ec2: &Client, id: &str) -> Result<(), Error> {
    match ec2.terminate_instances().instance_ids(id).send().await {
        Ok(_) => Ok(()),
        Err(e) => match errors::api_or_not_found("ec2:TerminateInstances", format!("instance {id}"), e) {
            Error::NotFound(_) => Ok(()),
            // A malformed id cannot name an instance of ours either.
            err if errors::code(&err) == Some("InvalidInstanceID.Malformed") => Ok(()),
            err => Err(err),
        },
    }
}

#[cfg(test)]
mod tests;
