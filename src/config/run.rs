//! The flags of `run` and `webhook` (`RunArgs`): the controllers', the webhook's and the cloud
//! provider's settings, how Karpenter's environment variable names and the settings ConfigMap
//! fill in those not given explicitly, and the typed sub-configs handed to each module.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::apis::quantity::parse_duration;
use crate::apis::{ApiSettings, DEFAULT_TTL_SECONDS_AFTER_EMPTY, DEFAULT_TTL_SECONDS_UNTIL_EXPIRED};
use crate::settings::{self, parse_ca_bundle, GlobalSettings};
use crate::telemetry::LogFormat;
use crate::webhook::cert_reconciler::SelfManagedCerts;
use crate::webhook::WebhookConfig;

use super::{parse_cidr, parse_interval, parse_ttl_default, parse_version_override, TtlDefault, VersionOverride};

/// Settings of `run` and `webhook`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Name of the cluster managed: spec.provider.clusterName must match it, and the default
    /// subnet and security-group selectors use `karpenter.sh/discovery: <name>`.
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: String,
    /// Address the webhook, metrics and health servers listen on.
    #[arg(long, env = "BIND_ADDRESS", default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// HTTPS port of the admission webhook (0: any free port; the bound address is logged at start).
    #[arg(long, env = "WEBHOOK_PORT", default_value_t = 8443)]
    pub webhook_port: u16,
    /// Plain-HTTP port of /metrics (0: any free port, logged at start).
    #[arg(long, env = "METRICS_PORT", default_value_t = 8080)]
    pub metrics_port: u16,
    /// Plain-HTTP port of /healthz and /readyz (0: any free port, logged at start).
    #[arg(long, env = "HEALTH_PROBE_PORT", default_value_t = 8081)]
    pub health_probe_port: u16,
    /// Directory holding the webhook's serving certificate (tls.crt) and key (tls.key); reloaded on change.
    #[arg(long, env = "CERT_DIR", default_value = "/tmp/k8s-webhook-server/serving-certs")]
    pub cert_dir: PathBuf,
    /// How often the certificate files are checked for changes.
    #[arg(long, env = "CERT_RELOAD_INTERVAL", default_value = "10s", value_parser = parse_interval)]
    pub cert_reload_interval: Duration,
    /// Secret holding the self-managed webhook certificate (used when --cert-dir holds no tls.crt or tls.key).
    #[arg(long, env = "CERT_SECRET", default_value = "karpenter-rs-cert")]
    pub cert_secret: String,
    /// Namespace karpenter-rs runs in: the namespace of that Secret and of the webhook Service.
    #[arg(long, env = "SYSTEM_NAMESPACE", default_value = "karpenter")]
    pub system_namespace: String,
    /// Service in front of the webhook; the self-managed certificate covers its DNS names.
    #[arg(long, env = "WEBHOOK_SERVICE_NAME", default_value = "karpenter-rs")]
    pub webhook_service_name: String,
    /// MutatingWebhookConfiguration whose caBundle gets the self-managed CA.
    #[arg(long, env = "MUTATING_WEBHOOK_CONFIGURATION", default_value = crate::webhook::registration::MUTATING_CONFIGURATION)]
    pub mutating_webhook_configuration: String,
    /// ValidatingWebhookConfiguration whose caBundle gets the self-managed CA.
    #[arg(long, env = "VALIDATING_WEBHOOK_CONFIGURATION", default_value = crate::webhook::registration::VALIDATING_CONFIGURATION)]
    pub validating_webhook_configuration: String,
    /// Validity of a self-managed CA and serving certificate.
    #[arg(long, env = "CERT_VALIDITY", default_value = "7d", value_parser = parse_interval)]
    pub cert_validity: Duration,
    /// A self-managed certificate expiring within this is replaced.
    #[arg(long, env = "CERT_RENEW_BEFORE", default_value = "24h", value_parser = parse_duration)]
    pub cert_renew_before: Duration,
    /// More DNS names or IP addresses for the self-managed certificate (comma-separated), e.g. 127.0.0.1 for an out-of-cluster webhook.
    #[arg(long, env = "CERT_EXTRA_SAN", value_delimiter = ',')]
    pub cert_extra_san: Vec<String>,
    /// Longest time a webhook client may take for its TLS handshake, headers or body.
    #[arg(long, env = "WEBHOOK_CLIENT_TIMEOUT", default_value = "10s", value_parser = parse_interval)]
    pub webhook_client_timeout: Duration,
    /// A webhook connection with no request in flight for this long is closed.
    #[arg(long, env = "WEBHOOK_IDLE_TIMEOUT", default_value = "90s", value_parser = parse_interval)]
    pub webhook_idle_timeout: Duration,
    /// Longest time open requests get to finish after SIGTERM.
    #[arg(long, env = "SHUTDOWN_GRACE", default_value = "15s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// ttlSecondsAfterEmpty given to Provisioners that set none (and do not consolidate); `none` turns the default off.
    #[arg(long, env = "DEFAULT_TTL_SECONDS_AFTER_EMPTY", default_value_t = TtlDefault(Some(DEFAULT_TTL_SECONDS_AFTER_EMPTY)), value_parser = parse_ttl_default)]
    pub default_ttl_seconds_after_empty: TtlDefault,
    /// ttlSecondsUntilExpired given to Provisioners that set none; `none` turns the default off.
    #[arg(long, env = "DEFAULT_TTL_SECONDS_UNTIL_EXPIRED", default_value_t = TtlDefault(Some(DEFAULT_TTL_SECONDS_UNTIL_EXPIRED)), value_parser = parse_ttl_default)]
    pub default_ttl_seconds_until_expired: TtlDefault,
    /// URL of the cluster's API server, written into the nodes' bootstrap (`run` only).
    #[arg(long, env = "CLUSTER_ENDPOINT", default_value = "")]
    pub cluster_endpoint: String,
    /// Base64 PEM CA bundle of the API server, as EKS reports it (`certificateAuthority.data`),
    /// written into the nodes' bootstrap; empty: the CA of the kube config the controller uses
    /// (`run` only).
    #[arg(long, env = "CLUSTER_CA_BUNDLE", default_value = "", value_parser = parse_ca_bundle)]
    pub cluster_ca_bundle: String,
    /// Service IPv4 CIDR of the cluster (`kubernetesNetworkConfig.serviceIpv4Cidr`), which AL2023
    /// nodes need in their NodeConfig (`run` only).
    #[arg(long, env = "CLUSTER_CIDR", default_value = "", value_parser = parse_cidr)]
    pub cluster_cidr: String,
    /// AWS region; empty: the SDK's default chain (`run` only).
    #[arg(long, env = "AWS_REGION", default_value = "")]
    pub aws_region: String,
    /// Endpoint of every AWS API call, e.g. an emulator; empty: the real AWS endpoints (`run` only).
    #[arg(long, env = "AWS_ENDPOINT_URL", default_value = "")]
    pub aws_endpoint_url: String,
    /// Kubernetes `major.minor` whose EKS-optimized AMIs nodes boot; empty: the API server's
    /// version (`run` only).
    #[arg(long, env = "KUBERNETES_VERSION", default_value_t = VersionOverride(None), value_parser = parse_version_override)]
    pub kubernetes_version: VersionOverride,
    /// Instance profile of nodes whose template names none (`run` only).
    #[arg(long, env = "DEFAULT_INSTANCE_PROFILE")]
    pub default_instance_profile: Option<String>,
    /// YAML or JSON file of instance type → USD per hour, overriding prices (`run` only).
    #[arg(long, env = "PRICE_OVERRIDES")]
    pub price_overrides: Option<PathBuf>,
    /// A batch of pending pods closes when no new one arrived for this long (`run` only).
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = settings::parse_batch_duration)]
    pub batch_idle_duration: Duration,
    /// A batch of pending pods closes at the latest after this long (`run` only).
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = settings::parse_batch_duration)]
    pub batch_max_duration: Duration,
    /// Fraction of an instance type's memory taken by the hypervisor and OS, left out of the
    /// node's memory capacity (`aws.vmMemoryOverheadPercent`; `run` only).
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT", default_value = "0.075", value_parser = settings::parse_vm_memory_overhead_percent)]
    pub vm_memory_overhead_percent: f64,
    /// Limit pods per node to what the instance type's network interfaces can address; `false`:
    /// 110 (`aws.enableENILimitedPodDensity`; `run` only).
    #[arg(long, env = "ENABLE_ENI_LIMITED_POD_DENSITY", default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_eni_limited_pod_density: bool,
    /// Security groups for pods: trunking-compatible instance types offer
    /// `vpc.amazonaws.com/pod-eni`, one per branch network interface, so pods requesting it get
    /// such a node (`aws.enablePodENI`; `run` only).
    #[arg(long, env = "ENABLE_POD_ENI", default_value_t = false, action = clap::ArgAction::Set)]
    pub enable_pod_eni: bool,
    /// Network interfaces per node kept for something else (e.g. a second CNI), left out of the
    /// ENI-limited pod count (`aws.reservedENIs`; `run` only).
    #[arg(long, env = "RESERVED_ENIS", default_value_t = 0, value_parser = settings::parse_reserved_enis)]
    pub reserved_enis: i64,
    /// SQS queue that EventBridge sends EC2 spot interruptions, rebalance recommendations,
    /// scheduled changes and state changes to (`aws.interruptionQueueName`, deploy/interruption/);
    /// empty turns interruption handling off (`run` only).
    #[arg(long, env = "INTERRUPTION_QUEUE_NAME", default_value = "")]
    pub interruption_queue_name: String,
    /// Tags put on every instance, volume and launch template, as a JSON object
    /// (`{"team":"a"}`); the template's own tags win (`aws.tags`; `run` only).
    #[arg(long, env = "TAGS", default_value = "{}", value_parser = settings::parse_tags)]
    pub tags: BTreeMap<String, String>,
    /// Bind planned pods to their new node once it is ready, instead of waiting for the scheduler (`run` only).
    #[arg(long, env = "BIND_PODS", default_value_t = true, action = clap::ArgAction::Set)]
    pub bind_pods: bool,
    /// Replace nodes that no longer match their Provisioner or AWSNodeTemplate (drift: AMI,
    /// subnet, security groups, launch-affecting fields, requirements), one at a time like
    /// expired ones; off removes the drift marks and replaces nothing (`featureGates.driftEnabled`;
    /// `run` only).
    #[arg(long, env = "DRIFT_ENABLED", default_value_t = true, action = clap::ArgAction::Set)]
    pub drift_enabled: bool,
    /// Start the controllers even while Karpenter runs in the cluster (its Lease renewed, its
    /// Deployment ready, or its webhook configurations present), for a staged migration with
    /// separate Provisioners; otherwise they wait until it is gone (`run` only).
    #[arg(long, env = "ALLOW_COEXISTENCE", default_value_t = false, action = clap::ArgAction::Set)]
    pub allow_coexistence: bool,
    /// A node karpenter-rs launched that is not Ready this long after its creation is deleted
    /// and its instance terminated, and its pods get a fresh node (`run` only).
    #[arg(long, env = "REGISTRATION_TTL", default_value = "15m", value_parser = parse_interval)]
    pub registration_ttl: Duration,
    /// At most this many nodes are launched per Provisioner in any minute; 0 stops launches
    /// (`run` only).
    #[arg(long, env = "MAX_NODE_LAUNCHES_PER_MINUTE", default_value_t = 100)]
    pub max_node_launches_per_minute: u32,
    /// Requests per second karpenter-rs sends the API server on average (client-side, as
    /// client-go's); 0 turns the limit off (`run` only).
    #[arg(long, env = "KUBE_CLIENT_QPS", default_value_t = 200.0)]
    pub kube_client_qps: f64,
    /// Requests karpenter-rs may send the API server at once above that rate (`run` only).
    #[arg(long, env = "KUBE_CLIENT_BURST", default_value_t = 300)]
    pub kube_client_burst: u32,
    /// How often empty and expired nodes are looked for (`run` only).
    #[arg(long, env = "DEPROVISIONING_INTERVAL", default_value = "10s", value_parser = parse_interval)]
    pub deprovisioning_interval: Duration,
    /// How long the replacements of an expired or consolidated node may take to become ready
    /// before the node is put back into service and tried again later (`run` only).
    #[arg(long, env = "REPLACEMENT_TIMEOUT", default_value = "10m", value_parser = parse_interval)]
    pub replacement_timeout: Duration,
    /// How often the garbage collector looks for leaked instances and orphaned Nodes, once past
    /// its first 20 passes, which run every 10 s (`run` only).
    #[arg(long, env = "GC_INTERVAL", default_value = "2m", value_parser = parse_interval)]
    pub gc_interval: Duration,
    /// How old an instance without a Node must be before the garbage collector terminates it; one
    /// launched for pending pods waits for the registration TTL instead, so that a restarted
    /// controller can adopt it (`run` only).
    #[arg(long, env = "GC_GRACE_PERIOD", default_value = "2m", value_parser = parse_interval)]
    pub gc_grace_period: Duration,
    /// Run the controllers only on the replica holding the leader Lease (`run` only).
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (`run` only).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", default_value = "kube-system")]
    pub leader_election_namespace: String,
    /// Name of this replica: the holder it writes into the leader Lease and the instance named in
    /// its events (the chart sets it from the pod's name; default `karpenter-rs-<pid>`).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,
    /// Every controller's liveness deadline in seconds instead of the shipped ones, so that a test
    /// can see a stall reported without waiting minutes (never set by the chart); a value that is
    /// not a positive number is ignored.
    #[arg(long, env = crate::metrics::liveness::deadline::OVERRIDE_ENV, hide = true)]
    pub liveness_deadline_seconds: Option<String>,
    /// Log filter: a level (error, warn, info, debug, trace) or tracing directives.
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "plain")]
    pub log_format: LogFormat,
    /// The ids of the settings given on the command line or by environment variable, which win
    /// over the settings ConfigMap (filled by [`parse_cli`]).
    #[arg(skip)]
    pub explicit: BTreeSet<String>,
}

/// Karpenter's names of our environment variables (`aws@v0.32.0` renamed the queue's; its chart
/// names the webhook Service `KARPENTER_SERVICE`): (Karpenter's, ours, the setting's id). Ours
/// wins when both are set.
pub const ENV_ALIASES: &[(&str, &str, &str)] = &[
    ("INTERRUPTION_QUEUE", "INTERRUPTION_QUEUE_NAME", "interruption_queue_name"),
    ("KARPENTER_SERVICE", "WEBHOOK_SERVICE_NAME", "webhook_service_name"),
];

impl RunArgs {
    /// Takes Karpenter's name of a variable (`ENV_ALIASES`) for each setting not given
    /// explicitly, as given explicitly; `env` looks a variable up.
    pub fn apply_env_aliases(&mut self, env: impl Fn(&str) -> Option<String>) {
        for (alias, _, id) in ENV_ALIASES {
            if self.explicit.contains(*id) {
                continue;
            }
            let Some(value) = env(alias).filter(|v| !v.is_empty()) else {
                continue;
            };
            match *id {
                "interruption_queue_name" => self.interruption_queue_name = value,
                "webhook_service_name" => self.webhook_service_name = value,
                other => unreachable!("ENV_ALIASES names {other}, which apply_env_aliases does not set"),
            }
            self.explicit.insert(id.to_string());
        }
    }

    /// Takes each value of the settings ConfigMap whose flag was not given explicitly (flag or
    /// environment variable); returns what the operator should hear about (an `aws.clusterName`
    /// that differs from the required `--cluster-name`, which wins).
    pub fn apply_settings(&mut self, s: &GlobalSettings) -> Vec<String> {
        let mut notes = Vec::new();
        let explicit = self.explicit.clone();
        let take = |id: &str| !explicit.contains(id);
        if let Some(name) = s.cluster_name.as_ref().filter(|n| **n != self.cluster_name) {
            notes.push(format!(
                "{} key {} is {name:?} but --cluster-name is {:?}; using {:?}",
                settings::SETTINGS_CONFIGMAP,
                settings::keys::CLUSTER_NAME,
                self.cluster_name,
                self.cluster_name
            ));
        }
        // An empty endpoint (the chart's default) is no endpoint at all.
        if let Some(v) = s
            .cluster_endpoint
            .clone()
            .filter(|_| take("cluster_endpoint") || self.cluster_endpoint.is_empty())
        {
            self.cluster_endpoint = v;
        }
        if let Some(v) = s.default_instance_profile.clone().filter(|_| take("default_instance_profile")) {
            self.default_instance_profile = Some(v);
        }
        if let Some(v) = s.tags.clone().filter(|_| take("tags")) {
            self.tags = v;
        }
        if let Some(v) = s.vm_memory_overhead_percent.filter(|_| take("vm_memory_overhead_percent")) {
            self.vm_memory_overhead_percent = v;
        }
        if let Some(v) = s.enable_eni_limited_pod_density.filter(|_| take("enable_eni_limited_pod_density")) {
            self.enable_eni_limited_pod_density = v;
        }
        if let Some(v) = s.reserved_enis.filter(|_| take("reserved_enis")) {
            self.reserved_enis = v;
        }
        if let Some(v) = s.interruption_queue_name.clone().filter(|_| take("interruption_queue_name")) {
            self.interruption_queue_name = v;
        }
        if let Some(v) = s.enable_pod_eni.filter(|_| take("enable_pod_eni")) {
            self.enable_pod_eni = v;
        }
        if let Some(v) = s.drift_enabled.filter(|_| take("drift_enabled")) {
            self.drift_enabled = v;
        }
        if let Some(v) = s.batch_max_duration.filter(|_| take("batch_max_duration")) {
            self.batch_max_duration = v;
        }
        if let Some(v) = s.batch_idle_duration.filter(|_| take("batch_idle_duration")) {
            self.batch_idle_duration = v;
        }
        if let Some(v) = s.cluster_ca_bundle.clone().filter(|_| take("cluster_ca_bundle") || self.cluster_ca_bundle.is_empty()) {
            self.cluster_ca_bundle = v;
        }
        notes
    }

    /// The liveness deadline that replaces every controller's own, if any.
    pub fn liveness_deadline_override(&self) -> Option<Duration> {
        self.liveness_deadline_seconds
            .as_deref()
            .and_then(crate::metrics::liveness::deadline::parse_override)
    }

    /// The node settings that are global rather than per Provisioner.
    pub fn node_settings(&self) -> crate::scheduling::NodeSettings {
        crate::scheduling::NodeSettings {
            vm_memory_overhead_percent: self.vm_memory_overhead_percent,
            eni_limited_pod_density: self.enable_eni_limited_pod_density,
            reserved_enis: self.reserved_enis,
            enable_pod_eni: self.enable_pod_eni,
            ..Default::default()
        }
    }

    /// The settings the admission rules use.
    pub fn api_settings(&self) -> ApiSettings {
        ApiSettings {
            cluster_name: self.cluster_name.clone(),
            default_ttl_seconds_after_empty: self.default_ttl_seconds_after_empty.0,
            default_ttl_seconds_until_expired: self.default_ttl_seconds_until_expired.0,
        }
    }

    /// The cloud provider's settings.
    pub fn cloud(&self) -> crate::cloudprovider::CloudConfig {
        let mut c = crate::cloudprovider::CloudConfig::new(self.cluster_name.clone(), self.cluster_endpoint.clone());
        c.region = Some(self.aws_region.clone()).filter(|r| !r.is_empty());
        c.endpoint_url = Some(self.aws_endpoint_url.clone()).filter(|u| !u.is_empty());
        c.cluster_ca_bundle = Some(self.cluster_ca_bundle.clone()).filter(|b| !b.is_empty());
        c.cluster_cidr = Some(self.cluster_cidr.clone()).filter(|b| !b.is_empty());
        c.default_instance_profile = self.default_instance_profile.clone();
        c.price_overrides = self.price_overrides.clone();
        c.tags = self.tags.clone();
        c
    }

    /// The provisioning controller's settings.
    pub fn provisioning(&self) -> crate::controllers::provisioning::ProvisioningConfig {
        crate::controllers::provisioning::ProvisioningConfig {
            cluster_name: self.cluster_name.clone(),
            region: self.aws_region.clone(),
            windows: crate::controllers::provisioning::batcher::BatchWindows {
                idle: self.batch_idle_duration,
                max: self.batch_max_duration,
            },
            bind_pods: self.bind_pods,
            registration_ttl: self.registration_ttl,
            max_launches_per_minute: self.max_node_launches_per_minute,
            node_settings: self.node_settings(),
            kubernetes_version: self.kubernetes_version.0,
        }
    }

    /// The deprovisioning controller's settings.
    pub fn deprovisioning(&self) -> crate::controllers::deprovisioning::DeprovisioningConfig {
        crate::controllers::deprovisioning::DeprovisioningConfig {
            interval: self.deprovisioning_interval,
            replacement_timeout: self.replacement_timeout,
            drift_enabled: self.drift_enabled,
            ..Default::default()
        }
    }

    /// The interruption controller's settings.
    pub fn interruption(&self) -> crate::controllers::interruption::InterruptionConfig {
        crate::controllers::interruption::InterruptionConfig {
            queue_name: self.interruption_queue_name.clone(),
            ..Default::default()
        }
    }

    /// The garbage collector's settings.
    pub fn garbage_collection(&self) -> crate::controllers::garbagecollection::GarbageCollectionConfig {
        crate::controllers::garbagecollection::GarbageCollectionConfig {
            interval: self.gc_interval,
            startup_interval: self.gc_interval.min(crate::controllers::garbagecollection::STARTUP_INTERVAL),
            grace_period: self.gc_grace_period,
            adoptable_for: self.registration_ttl,
            ..Default::default()
        }
    }

    /// The self-managed certificate's settings; an error names the flag whose value makes no sense.
    pub fn self_managed_certs(&self) -> Result<SelfManagedCerts, String> {
        crate::webhook::self_signed::check_timing(self.cert_validity, self.cert_renew_before)?;
        Ok(SelfManagedCerts {
            namespace: self.system_namespace.clone(),
            secret: self.cert_secret.clone(),
            service: self.webhook_service_name.clone(),
            extra_names: self.cert_extra_san.clone(),
            mutating_configuration: self.mutating_webhook_configuration.clone(),
            validating_configuration: self.validating_webhook_configuration.clone(),
            validity: self.cert_validity,
            renew_before: self.cert_renew_before,
        })
    }

    /// The webhook server's settings.
    pub fn webhook(&self) -> WebhookConfig {
        WebhookConfig {
            cert_dir: self.cert_dir.clone(),
            cert_reload_interval: self.cert_reload_interval,
            client_timeout: self.webhook_client_timeout,
            idle_timeout: self.webhook_idle_timeout,
            shutdown_grace: self.shutdown_grace,
            settings: self.api_settings(),
        }
    }
}
