//! Launching one planned node: the Provisioner's AWS settings, the instance (retried on the
//! remaining offerings after insufficient capacity), then its Node. An instance whose Node
//! cannot be created is terminated before the error is returned, so nothing leaks.

use tracing::{info, instrument, warn};

use super::{adopt, node, Context, Stores};
use crate::controllers::lifecycle;
use crate::controllers::state::Plan;
use crate::apis::hash;
use crate::apis::v1alpha1::AwsProvider;
use crate::apis::v1alpha5::labels::REQUESTED_RESOURCES_ANNOTATION;
use crate::apis::v1alpha5::Provisioner;
use crate::cloudprovider::{self, catalogue, CloudProvider, KubernetesVersion, LaunchIdentity, NodeTemplate};
use crate::controllers::node_ops;
use crate::metrics::Metrics;
use crate::scheduling;

/// The AWS settings of a Provisioner for nodes of Kubernetes `version`: its AWSNodeTemplate, or
/// its inline provider.
pub(super) fn node_template(
    ctx: &Context,
    stores: &Stores,
    provisioner: &Provisioner,
    version: KubernetesVersion,
) -> Result<(NodeTemplate, Option<f64>), String> {
    let cluster = &ctx.config.cluster_name;
    if let Some(reference) = &provisioner.spec.provider_ref {
        let template = stores
            .node_template_of(provisioner)
            .ok_or_else(|| format!("AWSNodeTemplate {:?} (spec.providerRef) does not exist", reference.name))?;
        let node_template = NodeTemplate::from_node_template(&template.spec, cluster, version).map_err(|e| e.to_string())?;
        return Ok((node_template, None));
    }
    let raw = provisioner
        .spec
        .provider
        .clone()
        .ok_or("neither spec.provider nor spec.providerRef is set")?;
    let provider: AwsProvider = serde_json::from_value(raw).map_err(|e| format!("spec.provider: {e}"))?;
    let node_template = NodeTemplate::from_provider(&provider, cluster, version).map_err(|e| e.to_string())?;
    Ok((node_template, cloudprovider::spot_max_price(&provider)))
}

/// Launches one planned node: the instance, then its Node. An instance whose Node cannot be
/// created is terminated before the error is returned, so nothing leaks.
#[instrument(skip_all, fields(provisioner = %request.provisioner))]
pub(super) async fn launch(
    ctx: &Context,
    request: &scheduling::NodeRequest,
    provisioner: &Provisioner,
    template: NodeTemplate,
    spot_max_price: Option<f64>,
) -> Result<String, LaunchError> {
    let mut launch_request = catalogue::launch_request(request, provisioner, template, spot_max_price);
    if launch_request.instance_options.is_empty() {
        return Err(LaunchError::NoOffering {
            provisioner: request.provisioner.clone(),
        });
    }
    let template_spec = ctx.state.node_template_of(provisioner);
    let config = hash::launch_config_hash(
        &request.provisioner,
        &provisioner.spec,
        template_spec.as_ref().map(|t| &t.spec),
        &request.labels,
    );
    let pods: Vec<String> = request.pods.iter().map(|k| format!("{}/{}", k.namespace, k.name)).collect();
    launch_request.identity = Some(LaunchIdentity {
        need: hash::need_hash(&config, &pods, 0),
        config: config.clone(),
    });
    let create_error = |source| LaunchError::Create {
        provisioner: request.provisioner.clone(),
        source,
    };
    let adopted = adopt::adopt(ctx, &launch_request).await.map_err(create_error)?;
    let adopting = adopted.is_some();
    let instance = match adopted {
        Some(instance) => instance,
        None => create_for_need(ctx, &mut launch_request, &config, &pods)
            .await
            .map_err(create_error)?,
    };
    crate::failpoint::hit("after-launch");
    let instance_type = request.instance_type_options.iter().find(|t| t.name == instance.instance_type);
    let price = launch_request
        .instance_options
        .iter()
        .find(|o| o.instance_type == instance.instance_type && o.zone == instance.zone && o.capacity_type == instance.capacity_type)
        .map(|o| o.price);
    let launched = node::launched(&instance, instance_type.map(|t| t.as_ref()), &ctx.config.region, price);
    let mut node = node::node_for(provisioner, template_spec.as_ref().map(|t| &t.spec), &launched, &request.labels);
    node.metadata.annotations.get_or_insert_with(Default::default).insert(
        REQUESTED_RESOURCES_ANNOTATION.to_string(),
        lifecycle::requested_annotation(&catalogue::requested(&request.requests)),
    );
    let node_name = launched.node_name();
    match node_ops::create(&ctx.client, &node, &launched.provider_id()).await {
        Ok(()) => {}
        Err(source) => {
            if let Err(e) = ctx.cloud.delete(&instance.id).await {
                warn!(instance_id = %instance.id, error = %e, "terminating the instance whose node could not be created; the garbage collector will retry");
            }
            return Err(LaunchError::RegisterNode {
                node: node_name,
                instance_id: instance.id,
                source,
            });
        }
    }
    ctx.metrics
        .nodes_created
        .with_label_values(&[
            &request.provisioner,
            &instance.zone,
            &instance.instance_type,
            &instance.capacity_type,
        ])
        .inc();
    info!(
        provisioner = %request.provisioner,
        instance_id = %instance.id,
        instance_type = %instance.instance_type,
        zone = %instance.zone,
        capacity_type = %instance.capacity_type,
        price = price.unwrap_or_default(),
        node = %node_name,
        pods = request.pods.len(),
        "{}",
        if adopting { "adopted an instance launched before a restart as node" } else { "launched node" }
    );
    ctx.state.plans.record(
        node_name.clone(),
        Plan {
            pods: request.pods.clone(),
            startup_taints: request.startup_taints.clone(),
            requested: catalogue::requested(&request.requests),
            since: ctx.clock.instant(),
        },
    );
    Ok(node_name)
}

/// How many generations of a need's CreateFleet token one launch tries (`create_for_need`).
const NEED_GENERATIONS: u32 = 3;

/// Launches the instance for a need with CreateFleet's token derived from it. EC2 answers a token
/// it has seen with the instance it launched then: after a lost answer or a restart that is the
/// instance wanted, but when an earlier launch for the same pods already used it (its instance
/// gone, or named by a Node: e.g. a node that never registered and was replaced), the next
/// generation of the need is launched instead.
async fn create_for_need(
    ctx: &Context,
    request: &mut cloudprovider::LaunchRequest,
    config: &str,
    pods: &[String],
) -> Result<cloudprovider::Instance, cloudprovider::Error> {
    let mut generation = 0;
    loop {
        let instance = create_instance(ctx.cloud.as_ref(), &ctx.metrics, request).await?;
        let nodes = ctx.state.nodes.state();
        let named = cloudprovider::instances_named_by(nodes.iter().map(|n| n.as_ref())).contains(instance.id.as_str());
        let live = instance.state == "pending" || instance.state == "running";
        if live && !named {
            return Ok(instance);
        }
        generation += 1;
        if generation == NEED_GENERATIONS {
            return Err(cloudprovider::Error::InvalidConfiguration(format!(
                "CreateFleet answered {NEED_GENERATIONS} launches for the same pods with instances already used (last {}, {})",
                instance.id, instance.state
            )));
        }
        info!(instance_id = %instance.id, state = %instance.state, has_node = named, generation, "CreateFleet answered with the instance of an earlier launch for the same pods; launching the need's next generation");
        if let Some(identity) = request.identity.as_mut() {
            identity.need = hash::need_hash(config, pods, generation);
        }
    }
}

/// How many times one launch is tried while EC2 reports insufficient capacity.
const LAUNCH_ATTEMPTS: usize = 3;

/// Launches the instance. An insufficient-capacity answer marks those offerings unavailable in
/// the provider (`aws@v0.27.0:pkg/cache/unavailableofferings.go`), so trying again right away
/// goes to the remaining offerings of the request (e.g. other zones, or on-demand after spot), up
/// to `LAUNCH_ATTEMPTS`.
async fn create_instance(
    cloud: &dyn CloudProvider,
    metrics: &Metrics,
    request: &cloudprovider::LaunchRequest,
) -> Result<cloudprovider::Instance, cloudprovider::Error> {
    let mut attempt = 1;
    loop {
        match metrics.cloud_call("create", cloud.create(request)).await {
            Ok(instance) => return Ok(instance),
            Err(e) => {
                if !matches!(e, cloudprovider::Error::InsufficientCapacity { .. }) || attempt == LAUNCH_ATTEMPTS {
                    return Err(e);
                }
                info!(provisioner = %request.provisioner_name, attempt, error = %e, "retrying the launch with the remaining offerings");
                attempt += 1;
            }
        }
    }
}

/// What can go wrong launching a node.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The requirements leave no offering to launch.
    #[error("no instance type offering left for provisioner {provisioner}")]
    NoOffering {
        /// The Provisioner.
        provisioner: String,
    },
    /// The cloud refused or failed the launch.
    #[error("launching instance for provisioner {provisioner}")]
    Create {
        /// The Provisioner.
        provisioner: String,
        /// Why.
        #[source]
        source: cloudprovider::Error,
    },
    /// The Node could not be created (the instance was terminated).
    #[error("creating node {node} for instance {instance_id} (instance terminated)")]
    RegisterNode {
        /// The node name.
        node: String,
        /// The instance.
        instance_id: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::collections::VecDeque;
    use std::sync::Mutex as StdMutex;
    use std::time::Duration;

    use crate::apis::v1alpha1::AwsNodeTemplateStatus;
    use crate::cloudprovider::{Error, Instance, InstanceTypeInfo, LaunchRequest, OfferingId};

    /// A cloud whose `create` answers from a script: fault injection (insufficient capacity) the
    /// EC2 emulator cannot produce. Every other method is unused here. With no script (its
    /// default) it is the cloud of a context whose tests never reach it.
    #[derive(Default)]
    pub(crate) struct ScriptedCloud {
        answers: StdMutex<VecDeque<Result<Instance, Error>>>,
        calls: StdMutex<usize>,
    }

    #[async_trait::async_trait]
    impl CloudProvider for ScriptedCloud {
        async fn instance_types(&self) -> Result<Vec<InstanceTypeInfo>, Error> {
            unreachable!("not used by create_instance")
        }
        async fn resolve(&self, _: &NodeTemplate) -> Result<AwsNodeTemplateStatus, Error> {
            unreachable!("not used by create_instance")
        }
        async fn image_for(&self, _: &NodeTemplate, _: &str) -> Result<Option<String>, Error> {
            unreachable!("not used by create_instance")
        }
        async fn create(&self, _: &LaunchRequest) -> Result<Instance, Error> {
            *self.calls.lock().unwrap() += 1;
            self.answers.lock().unwrap().pop_front().expect("a scripted answer")
        }
        async fn delete(&self, _: &str) -> Result<(), Error> {
            unreachable!("not used by create_instance")
        }
        async fn delete_unused_launch_templates(&self, _: Duration) -> Result<Vec<String>, Error> {
            unreachable!("not used by create_instance")
        }
        async fn list(&self) -> Result<Vec<Instance>, Error> {
            unreachable!("not used by create_instance")
        }
        async fn get(&self, _: &str) -> Result<Instance, Error> {
            unreachable!("not used by create_instance")
        }
        fn mark_unavailable(&self, _: &[OfferingId]) {
            unreachable!("not used by create_instance")
        }
    }

    fn ice(zone: &str) -> Error {
        Error::InsufficientCapacity {
            offerings: vec![OfferingId {
                instance_type: "t3.large".into(),
                zone: zone.into(),
                capacity_type: "spot".into(),
            }],
        }
    }

    fn instance() -> Instance {
        Instance {
            id: "i-0123".into(),
            instance_type: "t3.large".into(),
            zone: "ap-northeast-2c".into(),
            capacity_type: "on-demand".into(),
            private_dns_name: String::new(),
            private_ip: None,
            launch_time: None,
            state: "pending".into(),
            tags: BTreeMap::new(),
            image_id: None,
            subnet_id: None,
            security_group_ids: Vec::new(),
        }
    }

    fn request() -> LaunchRequest {
        LaunchRequest {
            provisioner_name: "service".into(),
            node_name: None,
            template: NodeTemplate::from_provider(&AwsProvider::default(), "ssungz-cluster", KubernetesVersion { major: 1, minor: 33 })
                .unwrap(),
            instance_options: Vec::new(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            kubelet: Default::default(),
            max_pods: Default::default(),
            spot_max_price: None,
            identity: None,
        }
    }

    fn run(answers: Vec<Result<Instance, Error>>) -> (Result<Instance, Error>, usize) {
        let cloud = ScriptedCloud {
            answers: StdMutex::new(answers.into()),
            calls: StdMutex::new(0),
        };
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let result = runtime.block_on(create_instance(&cloud, &Metrics::new(), &request()));
        let calls = *cloud.calls.lock().unwrap();
        (result, calls)
    }

    #[test]
    fn insufficient_capacity_is_retried_on_the_remaining_offerings() {
        let (result, calls) = run(vec![Err(ice("ap-northeast-2a")), Ok(instance())]);
        assert_eq!(result.unwrap().zone, "ap-northeast-2c");
        assert_eq!(calls, 2);
    }

    #[test]
    fn retries_stop_after_the_last_attempt() {
        let (result, calls) = run(vec![Err(ice("a")), Err(ice("b")), Err(ice("c")), Ok(instance())]);
        assert!(matches!(result, Err(Error::InsufficientCapacity { .. })));
        assert_eq!(calls, LAUNCH_ATTEMPTS);
    }

    #[test]
    fn other_errors_are_not_retried() {
        let (result, calls) = run(vec![Err(Error::InvalidConfiguration("no subnets".into())), Ok(instance())]);
        assert!(matches!(result, Err(Error::InvalidConfiguration(_))));
        assert_eq!(calls, 1);
    }
}
