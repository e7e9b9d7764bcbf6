//! Command line and environment: every flag has an environment variable. Read once in `main`;
//! modules get typed sub-configs.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::apis::{ApiSettings, DEFAULT_TTL_SECONDS_AFTER_EMPTY, DEFAULT_TTL_SECONDS_UNTIL_EXPIRED};
use crate::cloudprovider::KubernetesVersion;
use crate::telemetry::LogFormat;
use crate::webhook::cert_reconciler::SelfManagedCerts;
use crate::webhook::WebhookConfig;

/// karpenter-rs: node autoscaler for Kubernetes on AWS (Karpenter v1alpha5 APIs).
#[derive(Parser, Debug)]
#[command(name = "karpenter-rs", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the admission webhook, the controllers (provisioning, deprovisioning, termination, garbage collection), metrics and health servers.
    Run(RunArgs),
    /// Run the admission webhook, metrics and health servers only (split deployments, tests).
    Webhook(RunArgs),
    /// Print the CustomResourceDefinitions, or write them into a directory.
    Crds(CrdsArgs),
    /// Write a development CA and serving certificate for the webhook.
    Certs(CertsArgs),
    /// Print the Mutating and Validating webhook configurations that route both kinds to the webhook.
    WebhookConfig(WebhookConfigArgs),
}

/// Settings of `webhook-config`.
#[derive(Args, Debug, Clone)]
pub struct WebhookConfigArgs {
    /// PEM file of the CA that signed the webhook's serving certificate (becomes caBundle).
    #[arg(long, env = "WEBHOOK_CA_FILE")]
    pub ca_file: PathBuf,
    /// Base URL of the webhook (out-of-cluster), e.g. https://127.0.0.1:8443.
    #[arg(long, env = "WEBHOOK_URL", conflicts_with = "service")]
    pub url: Option<String>,
    /// In-cluster Service of the webhook.
    #[arg(long, env = "WEBHOOK_SERVICE", required_unless_present = "url")]
    pub service: Option<String>,
    /// Namespace of that Service.
    #[arg(long, env = "WEBHOOK_SERVICE_NAMESPACE", default_value = "karpenter")]
    pub namespace: String,
    /// Port of that Service.
    #[arg(long, env = "WEBHOOK_SERVICE_PORT", default_value_t = 443)]
    pub port: i32,
}

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
    #[arg(long, env = "CERT_RELOAD_INTERVAL", default_value = "10s", value_parser = parse_duration)]
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
    #[arg(long, env = "CERT_VALIDITY", default_value = "7d", value_parser = parse_duration)]
    pub cert_validity: Duration,
    /// A self-managed certificate expiring within this is replaced.
    #[arg(long, env = "CERT_RENEW_BEFORE", default_value = "24h", value_parser = parse_duration)]
    pub cert_renew_before: Duration,
    /// More DNS names or IP addresses for the self-managed certificate (comma-separated), e.g. 127.0.0.1 for an out-of-cluster webhook.
    #[arg(long, env = "CERT_EXTRA_SAN", value_delimiter = ',')]
    pub cert_extra_san: Vec<String>,
    /// Longest time a webhook client may take for its TLS handshake, headers or body.
    #[arg(long, env = "WEBHOOK_CLIENT_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub webhook_client_timeout: Duration,
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
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = parse_duration)]
    pub batch_idle_duration: Duration,
    /// A batch of pending pods closes at the latest after this long (`run` only).
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = parse_duration)]
    pub batch_max_duration: Duration,
    /// Bind planned pods to their new node once it is ready, instead of waiting for the scheduler (`run` only).
    #[arg(long, env = "BIND_PODS", default_value_t = true, action = clap::ArgAction::Set)]
    pub bind_pods: bool,
    /// How often empty and expired nodes are looked for (`run` only).
    #[arg(long, env = "DEPROVISIONING_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub deprovisioning_interval: Duration,
    /// How long the replacements of an expired node may take to become Ready before the node is
    /// put back into service and tried again later (`run` only).
    #[arg(long, env = "REPLACEMENT_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    pub replacement_timeout: Duration,
    /// How often the garbage collector looks for leaked instances and orphaned Nodes, once past
    /// its first 20 passes, which run every 10 s (`run` only).
    #[arg(long, env = "GC_INTERVAL", default_value = "2m", value_parser = parse_duration)]
    pub gc_interval: Duration,
    /// How old an instance without a Node must be before the garbage collector terminates it
    /// (`run` only).
    #[arg(long, env = "GC_GRACE_PERIOD", default_value = "2m", value_parser = parse_duration)]
    pub gc_grace_period: Duration,
    /// Run the controllers only on the replica holding the leader Lease (`run` only).
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (`run` only).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", default_value = "kube-system")]
    pub leader_election_namespace: String,
    /// Log filter: a level (error, warn, info, debug, trace) or tracing directives.
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "plain")]
    pub log_format: LogFormat,
}

impl RunArgs {
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
            kubernetes_version: self.kubernetes_version.0,
        }
    }

    /// The deprovisioning controller's settings.
    pub fn deprovisioning(&self) -> crate::controllers::deprovisioning::DeprovisioningConfig {
        crate::controllers::deprovisioning::DeprovisioningConfig {
            interval: self.deprovisioning_interval,
            replacement_timeout: self.replacement_timeout,
            ..Default::default()
        }
    }

    /// The garbage collector's settings.
    pub fn garbage_collection(&self) -> crate::controllers::garbagecollection::GarbageCollectionConfig {
        crate::controllers::garbagecollection::GarbageCollectionConfig {
            interval: self.gc_interval,
            startup_interval: self.gc_interval.min(Duration::from_secs(10)),
            grace_period: self.gc_grace_period,
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
            shutdown_grace: self.shutdown_grace,
            settings: self.api_settings(),
        }
    }
}

/// Settings of `crds`.
#[derive(Args, Debug, Clone)]
pub struct CrdsArgs {
    /// Write one file per CRD into this directory instead of printing them.
    #[arg(long, env = "CRDS_OUT_DIR")]
    pub out_dir: Option<PathBuf>,
}

/// Settings of `certs`.
#[derive(Args, Debug, Clone)]
pub struct CertsArgs {
    /// Directory to write ca.crt, ca.key, tls.crt and tls.key into.
    #[arg(long, env = "CERTS_OUT_DIR", default_value = "certs/generated")]
    pub out_dir: PathBuf,
    /// In-cluster Service the certificate is for (adds svc, svc.ns, svc.ns.svc, svc.ns.svc.cluster.local).
    #[arg(long, env = "CERTS_SERVICE")]
    pub service: Option<String>,
    /// Namespace of that Service.
    #[arg(long, env = "CERTS_NAMESPACE", default_value = "karpenter")]
    pub namespace: String,
    /// More DNS names or IP addresses for the certificate (repeatable); localhost, 127.0.0.1 and ::1 are always included.
    #[arg(long = "name", env = "CERTS_NAMES", value_delimiter = ',')]
    pub names: Vec<String>,
    /// Validity of the CA and serving certificate.
    #[arg(long, env = "CERTS_VALIDITY", default_value = "365d", value_parser = parse_duration)]
    pub validity: Duration,
}

/// A TTL default: a number of seconds, or `none` for no default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TtlDefault(pub Option<i64>);

impl std::fmt::Display for TtlDefault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(s) => write!(f, "{s}"),
            None => f.write_str("none"),
        }
    }
}

/// Parses `30`, `0` or `none`.
pub fn parse_ttl_default(s: &str) -> Result<TtlDefault, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(TtlDefault(None));
    }
    match s.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(TtlDefault(Some(n))),
        _ => Err(format!(
            "invalid TTL default {s:?}: expected a number of seconds (0 or more) or \"none\""
        )),
    }
}

/// A Kubernetes version that overrides the API server's, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VersionOverride(pub Option<KubernetesVersion>);

impl std::fmt::Display for VersionOverride {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{v}"),
            None => Ok(()),
        }
    }
}

/// Parses `1.33`, or the empty string for none.
pub fn parse_version_override(s: &str) -> Result<VersionOverride, String> {
    if s.trim().is_empty() {
        return Ok(VersionOverride(None));
    }
    KubernetesVersion::parse(s).map(|v| VersionOverride(Some(v)))
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

/// Checks a service CIDR: empty, or an IPv4 network `a.b.c.d/n`.
pub fn parse_cidr(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(String::new());
    }
    let valid = s
        .split_once('/')
        .is_some_and(|(ip, bits)| ip.parse::<std::net::Ipv4Addr>().is_ok() && bits.parse::<u8>().is_ok_and(|b| b <= 32));
    if valid {
        Ok(s.to_string())
    } else {
        Err(format!(
            "invalid service CIDR {s:?}: expected an IPv4 network such as 10.100.0.0/16"
        ))
    }
}

/// Parses `500ms`, `10s`, `5m`, `2h`, `365d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let err = || format!("invalid duration {s:?}: expected a number followed by ms, s, m, h or d (e.g. 10s)");
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(err)?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| err())?;
    let seconds = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        _ => return Err(err()),
    };
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations_and_ttl_defaults() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("365d"), Ok(Duration::from_secs(365 * 86400)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
        assert_eq!(parse_ttl_default("none"), Ok(TtlDefault(None)));
        assert_eq!(parse_ttl_default("0"), Ok(TtlDefault(Some(0))));
        assert!(parse_ttl_default("-1").unwrap_err().contains("\"-1\""));
    }

    #[test]
    fn every_flag_reads_an_env_var() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        for sub in cmd.get_subcommands() {
            for arg in sub.get_arguments() {
                if arg.get_id() == "help" || arg.get_id() == "version" {
                    continue;
                }
                assert!(arg.get_env().is_some(), "{} --{} has no env var", sub.get_name(), arg.get_id());
            }
        }
    }

    #[test]
    fn self_managed_certificate_flags_default_to_the_shipped_names() {
        let Command::Webhook(args) = Cli::try_parse_from(["karpenter-rs", "webhook", "--cluster-name", "c"])
            .unwrap()
            .command
        else {
            panic!("webhook subcommand");
        };
        let certs = args.self_managed_certs().unwrap();
        assert_eq!(certs.secret, "karpenter-rs-cert");
        assert_eq!(certs.namespace, "karpenter");
        assert_eq!(certs.service, "karpenter-rs");
        assert_eq!(certs.mutating_configuration, "karpenter-rs-defaulting");
        assert_eq!(certs.validating_configuration, "karpenter-rs-validation");
        assert_eq!(certs.validity, Duration::from_secs(7 * 86400));
        assert_eq!(certs.renew_before, Duration::from_secs(86400));
        assert!(certs.extra_names.is_empty());
        let Command::Run(args) = Cli::try_parse_from([
            "karpenter-rs",
            "run",
            "--cluster-name",
            "c",
            "--cert-extra-san",
            "127.0.0.1,webhook.example.com",
            "--cert-validity",
            "1h",
            "--cert-renew-before",
            "2h",
        ])
        .unwrap()
        .command
        else {
            panic!("run subcommand");
        };
        assert_eq!(args.cert_extra_san, ["127.0.0.1", "webhook.example.com"]);
        assert!(args.self_managed_certs().unwrap_err().contains("--cert-validity"));
    }

    #[test]
    fn cluster_name_is_required() {
        let err = Cli::try_parse_from(["karpenter-rs", "run"]).unwrap_err().to_string();
        assert!(err.contains("--cluster-name"), "{err}");
    }

    fn run_args(extra: &[&str]) -> Result<RunArgs, clap::Error> {
        let mut argv = vec!["karpenter-rs", "run", "--cluster-name", "c"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv)?.command {
            Command::Run(args) => Ok(args),
            other => panic!("run subcommand, got {other:?}"),
        }
    }

    #[test]
    fn kubernetes_version_is_read_from_the_api_server_unless_given() {
        let args = run_args(&[]).unwrap();
        assert_eq!(args.provisioning().kubernetes_version, None);
        let args = run_args(&["--kubernetes-version", "1.32"]).unwrap();
        assert_eq!(
            args.provisioning().kubernetes_version,
            Some(KubernetesVersion { major: 1, minor: 32 })
        );
        assert_eq!(parse_version_override(""), Ok(VersionOverride(None)), "an empty KUBERNETES_VERSION");
        let err = run_args(&["--kubernetes-version", "latest"]).unwrap_err().to_string();
        assert!(err.contains("\"latest\"") && err.contains("--kubernetes-version"), "{err}");
    }

    #[test]
    fn cluster_ca_bundle_and_cidr_reach_the_cloud_settings() {
        use base64::Engine;
        let bundle = base64::engine::general_purpose::STANDARD.encode("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
        let args = run_args(&["--cluster-ca-bundle", &bundle, "--cluster-cidr", "10.100.0.0/16"]).unwrap();
        let cloud = args.cloud();
        assert_eq!(cloud.cluster_ca_bundle.as_deref(), Some(bundle.as_str()));
        assert_eq!(cloud.cluster_cidr.as_deref(), Some("10.100.0.0/16"));
        let cloud = run_args(&[]).unwrap().cloud();
        assert_eq!((cloud.cluster_ca_bundle, cloud.cluster_cidr), (None, None));
        let err = run_args(&["--cluster-ca-bundle", "not base64!"]).unwrap_err().to_string();
        assert!(err.contains("--cluster-ca-bundle") && err.contains("\"not base64!\""), "{err}");
        let not_pem = base64::engine::general_purpose::STANDARD.encode("hello");
        assert!(run_args(&["--cluster-ca-bundle", &not_pem]).is_err());
        for bad in ["10.100.0.0", "10.100.0.0/33", "fd00::/108", "ten/8"] {
            let err = run_args(&["--cluster-cidr", bad]).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }
}
