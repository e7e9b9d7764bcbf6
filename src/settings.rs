//! The `karpenter-global-settings` ConfigMap of Karpenter (`core@v0.27.0:pkg/apis/settings/settings.go`,
//! `aws@v0.27.0:pkg/apis/settings/settings.go`), read at start from the system namespace, so a
//! cluster moving from Karpenter keeps its settings, and again every `RECHECK_INTERVAL`
//! ([`changed`]): a change starts the controllers again with it. Parsing its data is pure
//! ([`parse`]); a bad value is an error naming the key and the value, and that key is ignored. A
//! flag given on the command line, or its environment variable, wins over the ConfigMap
//! (`config::RunArgs::apply_settings`); the ConfigMap wins over the flag's default. [`read`] is
//! the one edge: a GET of the ConfigMap.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use tracing::{debug, error, info, warn};

use crate::apis::v1alpha1::validation::{CLUSTER_TAG_PREFIX, RESTRICTED_TAG_KEYS};
use crate::apis::v1alpha5::labels::LAUNCH_TEMPLATE_CLUSTER_TAG;

/// Name of the ConfigMap, as Karpenter's chart creates it.
pub const SETTINGS_CONFIGMAP: &str = "karpenter-global-settings";

/// The keys karpenter-rs reads; any other (`aws.isolatedVPC`, a typo) is ignored
/// with a warning naming it (`not_honoured`).
pub mod keys {
    /// `aws.clusterName`.
    pub const CLUSTER_NAME: &str = "aws.clusterName";
    /// `aws.clusterEndpoint`.
    pub const CLUSTER_ENDPOINT: &str = "aws.clusterEndpoint";
    /// `aws.defaultInstanceProfile`.
    pub const DEFAULT_INSTANCE_PROFILE: &str = "aws.defaultInstanceProfile";
    /// `aws.tags`: a JSON object of tag key → value.
    pub const TAGS: &str = "aws.tags";
    /// `aws.vmMemoryOverheadPercent`: a fraction despite the name (0.075).
    pub const VM_MEMORY_OVERHEAD_PERCENT: &str = "aws.vmMemoryOverheadPercent";
    /// `aws.enableENILimitedPodDensity`.
    pub const ENABLE_ENI_LIMITED_POD_DENSITY: &str = "aws.enableENILimitedPodDensity";
    /// `aws.reservedENIs`.
    pub const RESERVED_ENIS: &str = "aws.reservedENIs";
    /// `aws.enablePodENI`: trunking-compatible types offer `vpc.amazonaws.com/pod-eni`.
    pub const ENABLE_POD_ENI: &str = "aws.enablePodENI";
    /// `aws.interruptionQueueName`: the SQS queue of instance events; empty turns interruption
    /// handling off.
    pub const INTERRUPTION_QUEUE_NAME: &str = "aws.interruptionQueueName";
    /// `batchMaxDuration`.
    pub const BATCH_MAX_DURATION: &str = "batchMaxDuration";
    /// `batchIdleDuration`.
    pub const BATCH_IDLE_DURATION: &str = "batchIdleDuration";
    /// `aws.clusterCABundle`: base64 of the API server's PEM CA, for the nodes' bootstrap.
    pub const CLUSTER_CA_BUNDLE: &str = "aws.clusterCABundle";
    /// `featureGates.driftEnabled`: drifted nodes are replaced (karpenter-rs: on when unset).
    pub const DRIFT_ENABLED: &str = "featureGates.driftEnabled";

    /// Every key karpenter-rs reads.
    pub const READ: &[&str] = &[
        CLUSTER_NAME,
        CLUSTER_ENDPOINT,
        DEFAULT_INSTANCE_PROFILE,
        TAGS,
        VM_MEMORY_OVERHEAD_PERCENT,
        ENABLE_ENI_LIMITED_POD_DENSITY,
        RESERVED_ENIS,
        ENABLE_POD_ENI,
        INTERRUPTION_QUEUE_NAME,
        BATCH_MAX_DURATION,
        BATCH_IDLE_DURATION,
        CLUSTER_CA_BUNDLE,
        DRIFT_ENABLED,
    ];

    /// Keys of Karpenter v0.27–v0.31's ConfigMap that karpenter-rs does not honour, and why
    /// (`aws@v0.27.0:pkg/apis/settings/settings.go`, `aws@v0.31.0:pkg/apis/settings/settings.go`).
    pub const NOT_HONOURED: &[(&str, &str)] = &[
        (
            "aws.isolatedVPC",
            "prices are read from the Pricing API when it answers and estimated when it does not, in an isolated VPC as elsewhere",
        ),
        (
            "aws.nodeNameConvention",
            "nodes are named by their private DNS name (Karpenter v0.27's ip-name); resource-name is not supported",
        ),
        (
            "aws.assumeRoleARN",
            "karpenter-rs uses the credentials of its pod (IRSA or the node role); it assumes no other role",
        ),
        (
            "aws.assumeRoleDuration",
            "karpenter-rs uses the credentials of its pod (IRSA or the node role); it assumes no other role",
        ),
    ];
}

/// What the ConfigMap sets; `None` for a key that is absent or whose value was refused.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GlobalSettings {
    /// `aws.clusterName`.
    pub cluster_name: Option<String>,
    /// `aws.clusterEndpoint`.
    pub cluster_endpoint: Option<String>,
    /// `aws.defaultInstanceProfile`.
    pub default_instance_profile: Option<String>,
    /// `aws.tags`.
    pub tags: Option<BTreeMap<String, String>>,
    /// `aws.vmMemoryOverheadPercent`.
    pub vm_memory_overhead_percent: Option<f64>,
    /// `aws.enableENILimitedPodDensity`.
    pub enable_eni_limited_pod_density: Option<bool>,
    /// `aws.reservedENIs`.
    pub reserved_enis: Option<i64>,
    /// `aws.interruptionQueueName`.
    pub interruption_queue_name: Option<String>,
    /// `aws.enablePodENI`.
    pub enable_pod_eni: Option<bool>,
    /// `batchMaxDuration`.
    pub batch_max_duration: Option<Duration>,
    /// `batchIdleDuration`.
    pub batch_idle_duration: Option<Duration>,
    /// `aws.clusterCABundle` (base64 PEM).
    pub cluster_ca_bundle: Option<String>,
    /// `featureGates.driftEnabled`.
    pub drift_enabled: Option<bool>,
}

/// A value of the ConfigMap that was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{SETTINGS_CONFIGMAP} key {key}: invalid value {value:?}: {reason}")]
pub struct SettingError {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// Why it was refused.
    pub reason: String,
}

/// The settings in a ConfigMap's `data`, and an error for every value refused (that key is then
/// left unset). Other keys are not read here (`not_honoured` names them).
pub fn parse(data: &BTreeMap<String, String>) -> (GlobalSettings, Vec<SettingError>) {
    let mut errors = Vec::new();
    let mut value = |key: &str, parse: &dyn Fn(&str) -> Result<(), String>| {
        let value = data.get(key)?;
        match parse(value) {
            Ok(()) => Some(value.as_str()),
            Err(reason) => {
                errors.push(SettingError {
                    key: key.to_string(),
                    value: value.clone(),
                    reason,
                });
                None
            }
        }
    };
    // Each value is checked once through `value` (which records the error), then converted.
    let cluster_name = value(keys::CLUSTER_NAME, &|v| {
        if v.is_empty() {
            Err("must not be empty".into())
        } else {
            Ok(())
        }
    });
    let cluster_endpoint = value(keys::CLUSTER_ENDPOINT, &parse_cluster_endpoint);
    let default_instance_profile = value(keys::DEFAULT_INSTANCE_PROFILE, &|_| Ok(()));
    let tags = value(keys::TAGS, &|v| parse_tags(v).map(drop));
    let overhead = value(keys::VM_MEMORY_OVERHEAD_PERCENT, &|v| parse_vm_memory_overhead_percent(v).map(drop));
    let eni_density = value(keys::ENABLE_ENI_LIMITED_POD_DENSITY, &|v| parse_bool(v).map(drop));
    let reserved_enis = value(keys::RESERVED_ENIS, &|v| parse_reserved_enis(v).map(drop));
    let queue = value(keys::INTERRUPTION_QUEUE_NAME, &|_| Ok(()));
    let pod_eni = value(keys::ENABLE_POD_ENI, &|v| parse_bool(v).map(drop));
    let batch_max = value(keys::BATCH_MAX_DURATION, &|v| parse_batch_duration(v).map(drop));
    let batch_idle = value(keys::BATCH_IDLE_DURATION, &|v| parse_batch_duration(v).map(drop));
    let ca_bundle = value(keys::CLUSTER_CA_BUNDLE, &|v| parse_ca_bundle(v).map(drop));
    let drift = value(keys::DRIFT_ENABLED, &|v| parse_bool(v).map(drop));
    let settings = GlobalSettings {
        cluster_name: cluster_name.map(str::to_string),
        cluster_endpoint: cluster_endpoint.map(str::to_string),
        default_instance_profile: default_instance_profile.filter(|v| !v.is_empty()).map(str::to_string),
        tags: tags.and_then(|v| parse_tags(v).ok()),
        vm_memory_overhead_percent: overhead.and_then(|v| parse_vm_memory_overhead_percent(v).ok()),
        enable_eni_limited_pod_density: eni_density.and_then(|v| parse_bool(v).ok()),
        reserved_enis: reserved_enis.and_then(|v| parse_reserved_enis(v).ok()),
        interruption_queue_name: queue.map(str::to_string),
        enable_pod_eni: pod_eni.and_then(|v| parse_bool(v).ok()),
        batch_max_duration: batch_max.and_then(|v| parse_batch_duration(v).ok()),
        batch_idle_duration: batch_idle.and_then(|v| parse_batch_duration(v).ok()),
        cluster_ca_bundle: ca_bundle.map(|v| v.trim().to_string()).filter(|v| !v.is_empty()),
        drift_enabled: drift.and_then(|v| parse_bool(v).ok()),
    };
    (settings, errors)
}

/// A note for every key of the ConfigMap that karpenter-rs does not honour, naming the key and
/// why: Karpenter's keys it does not support, and keys nobody knows (a typo reads as one).
pub fn not_honoured(data: &BTreeMap<String, String>) -> Vec<String> {
    data.keys()
        .filter(|k| !keys::READ.contains(&k.as_str()))
        .map(|k| match keys::NOT_HONOURED.iter().find(|(key, _)| *key == k.as_str()) {
            Some((_, why)) => format!("{SETTINGS_CONFIGMAP} key {k} is not honoured and is ignored: {why}"),
            None => format!("{SETTINGS_CONFIGMAP} key {k} is unknown and is ignored"),
        })
        .collect()
}

/// A boolean as Go's `strconv.ParseBool` reads one (`true`, `True`, `TRUE`, `t`, `1`, and the
/// same for false).
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "True" | "TRUE" => Ok(true),
        "0" | "f" | "F" | "false" | "False" | "FALSE" => Ok(false),
        _ => Err(format!("invalid boolean {s:?}: expected true or false")),
    }
}

/// `aws.vmMemoryOverheadPercent`: the fraction of an instance's memory the hypervisor and OS take,
/// 0 or more and below 1 (`0.075` is 7.5%).
pub fn parse_vm_memory_overhead_percent(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        Ok(_) => Err(format!(
            "invalid memory overhead {s:?}: must be a fraction from 0 up to (not including) 1, e.g. 0.075 for 7.5%"
        )),
        Err(_) => Err(format!("invalid memory overhead {s:?}: expected a number such as 0.075")),
    }
}

/// `aws.reservedENIs`: network interfaces kept out of the pod-density count, 0 or more.
pub fn parse_reserved_enis(s: &str) -> Result<i64, String> {
    match s.trim().parse::<i64>() {
        Ok(v) if v >= 0 => Ok(v),
        _ => Err(format!("invalid number of reserved ENIs {s:?}: expected a whole number, 0 or more")),
    }
}

/// A batch window: a Go duration greater than 0.
pub fn parse_batch_duration(s: &str) -> Result<Duration, String> {
    match crate::apis::quantity::parse_duration(s)? {
        d if d.is_zero() => Err(format!("invalid batch duration {s:?}: must be greater than 0")),
        d => Ok(d),
    }
}

/// `aws.clusterEndpoint`: an absolute `http(s)` URL with a host.
pub fn parse_cluster_endpoint(s: &str) -> Result<(), String> {
    let rest = s.strip_prefix("https://").or_else(|| s.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(()),
        _ => Err(format!(
            "invalid cluster endpoint {s:?}: expected an absolute URL such as https://ABC.gr7.us-west-2.eks.amazonaws.com"
        )),
    }
}

/// `aws.tags`: a JSON object of tag key → string value, put on every instance, volume and launch
/// template. Keys karpenter-rs sets itself to track what it owns (`kubernetes.io/cluster/*`,
/// `karpenter.sh/provisioner-name`, `karpenter-rs.sh/managed-by`, `karpenter.k8s.aws/cluster`)
/// and Karpenter's `karpenter.sh/managed-by` are refused, naming the key.
pub fn parse_tags(s: &str) -> Result<BTreeMap<String, String>, String> {
    let tags: BTreeMap<String, String> =
        serde_json::from_str(s).map_err(|e| format!("invalid tags {s:?}: expected a JSON object of tag key to string value ({e})"))?;
    for key in tags.keys() {
        if key.is_empty() {
            return Err(format!("invalid tags {s:?}: tag keys must not be empty"));
        }
        if RESTRICTED_TAG_KEYS.contains(&key.as_str()) || key.starts_with(CLUSTER_TAG_PREFIX) || key == LAUNCH_TEMPLATE_CLUSTER_TAG {
            return Err(format!(
                "tag {key:?} is set by karpenter-rs itself to track the instances it owns and cannot be given"
            ));
        }
    }
    Ok(tags)
}

/// What reading the ConfigMap found.
#[derive(Debug)]
pub enum Read {
    /// The ConfigMap.
    Found(Box<ConfigMap>),
    /// There is no such ConfigMap: flags and defaults apply.
    Missing,
}

/// GETs the ConfigMap in `namespace`; an error (forbidden, unreachable) is the caller's to retry.
pub async fn read(client: kube::Client, namespace: &str) -> Result<Read, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    Ok(match api.get_opt(SETTINGS_CONFIGMAP).await? {
        Some(cm) => Read::Found(Box::new(cm)),
        None => Read::Missing,
    })
}

/// The note of the `InvalidSetting` event a refused value gets on the ConfigMap.
pub fn refused_note(e: &SettingError) -> String {
    format!("{e}; the key is ignored and its flag or default applies")
}

/// Checks a cluster CA bundle: empty, or base64 of PEM certificates.
pub fn parse_ca_bundle(s: &str) -> Result<String, String> {
    use base64::Engine;
    let s = s.trim();
    if s.is_empty() {
        return Ok(String::new());
    }
    let shown: String = s.chars().take(16).collect();
    let err =
        || format!("invalid cluster CA bundle {shown:?}...: expected base64 of PEM certificates, as EKS reports certificateAuthority.data");
    let pem = base64::engine::general_purpose::STANDARD.decode(s).map_err(|_| err())?;
    if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
        return Err(err());
    }
    Ok(s.to_string())
}

/// What `load` read.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The values refused (each logged and given an `InvalidSetting` event).
    pub refused: Vec<SettingError>,
    /// The ConfigMap's data as read; None when there is no ConfigMap.
    pub data: Option<BTreeMap<String, String>>,
    /// The values it holds, for the caller to apply under its explicit flags.
    pub settings: GlobalSettings,
}

/// Reads the ConfigMap from `namespace`, for the caller to apply under its explicit flags
/// (`RunArgs::apply_settings`). A missing ConfigMap is fine; one that cannot be read is an error, for the caller to retry
/// with back-off (running on defaults that the ConfigMap overrides could launch the wrong
/// nodes); every refused value is an error in the log and a Warning event `InvalidSetting` on
/// the ConfigMap, naming key and value, and that key is ignored.
pub async fn load(client: kube::Client, namespace: &str) -> Result<Loaded, kube::Error> {
    let configmap = match read(client.clone(), namespace).await? {
        Read::Found(cm) => cm,
        Read::Missing => {
            info!(namespace = %namespace, configmap = SETTINGS_CONFIGMAP, "no settings ConfigMap; using flags and defaults");
            return Ok(Loaded::default());
        }
    };
    let data = configmap.data.clone().unwrap_or_default();
    let (settings, errors) = parse(&data);
    let recorder = crate::controllers::events::recorder(&client);
    let warn_on_configmap = async |reason: &str, note: &str| {
        let warning = kube::runtime::events::EventType::Warning;
        crate::controllers::events::publish(&recorder, &*configmap, warning, reason, "ReadSettings", note).await;
    };
    for note in not_honoured(&data) {
        warn!(namespace = %namespace, "{note}");
        warn_on_configmap("IgnoredSetting", &note).await;
    }
    for e in &errors {
        error!(namespace = %namespace, key = %e.key, value = %e.value, "{e}; the key is ignored");
        warn_on_configmap("InvalidSetting", &refused_note(e)).await;
    }
    info!(namespace = %namespace, configmap = SETTINGS_CONFIGMAP, keys = data.len(), "read the settings ConfigMap");
    Ok(Loaded {
        refused: errors,
        data: Some(data),
        settings,
    })
}

/// How often `changed` reads the ConfigMap again.
pub const RECHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(15);

/// Returns once the settings ConfigMap in `namespace` holds other data than `since` (what `load`
/// read; None: there was none), read every `RECHECK_INTERVAL` with the `get` the chart grants. A
/// read that fails is retried at the next check.
pub async fn changed(client: kube::Client, namespace: String, since: Option<BTreeMap<String, String>>) {
    let mut ticker = tokio::time::interval(RECHECK_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let now = match read(client.clone(), &namespace).await {
            Ok(Read::Found(cm)) => Some(cm.data.clone().unwrap_or_default()),
            Ok(Read::Missing) => None,
            Err(e) => {
                debug!(namespace = %namespace, error = %e, "reading the settings ConfigMap for changes; retrying");
                continue;
            }
        };
        if now != since {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
