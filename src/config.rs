//! Command line and environment: every flag has an environment variable. Read once in `main`;
//! modules get typed sub-configs. The subcommands and their smaller argument sets are here, with
//! the parsers of flag values; `run`'s flags and the sub-configs built from them are in `run`.

mod explain;
mod run;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::apis::quantity::parse_duration;
use crate::apis::v1alpha5::validation::MAX_TTL_SECONDS;
use crate::apis::{ApiSettings, DEFAULT_TTL_SECONDS_AFTER_EMPTY, DEFAULT_TTL_SECONDS_UNTIL_EXPIRED};
use crate::cloudprovider::KubernetesVersion;

pub use explain::{settings_from_env, ExplainArgs, What};
pub use run::{RunArgs, ENV_ALIASES};

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
    /// Show what karpenter-rs would launch for these manifests, offline: nodes, prices, where each pod goes.
    Simulate(crate::simulate::args::SimulateArgs),
    /// Convert Provisioners and AWSNodeTemplates into Karpenter v1 NodePools and EC2NodeClasses (YAML or JSON on stdout).
    Convert(ConvertArgs),
    /// A live view of the cluster's nodes: type, capacity type, zone, price, pods, requests against allocatable, status.
    Nodes(crate::viewer::NodesArgs),
    /// Why a pod is pending or on its node's type; why a node stays and what removing it would do (from the running controller, or a view of its own).
    Explain(ExplainArgs),
}

/// Settings of `convert`: the inputs, and what karpenter-rs ran with (its defaults depend on it).
#[derive(Args, Debug, Clone)]
pub struct ConvertArgs {
    /// YAML or JSON file of Provisioners and AWSNodeTemplates (several documents, or a List), or
    /// a directory: its .yaml, .yml and .json files by name, as kubectl reads one; repeatable;
    /// `-` reads stdin.
    #[arg(short = 'f', long = "filename", env = "CONVERT_FILENAMES", value_delimiter = ',', required = true)]
    pub filenames: Vec<String>,
    /// Read the subdirectories of `-f` directories too, as `kubectl -R` does.
    #[arg(short = 'R', long, env = "CONVERT_RECURSIVE", default_value_t = false)]
    pub recursive: bool,
    /// Output format: `yaml` (comments beside the fields they are about) or `json` (one List for
    /// `kubectl apply -f`; the comments go to stderr).
    #[arg(short = 'o', long, env = "CONVERT_OUTPUT", value_enum, default_value = "yaml")]
    pub output: crate::convert::Output,
    /// Name of the cluster the objects ran on: the default subnet and security-group selectors
    /// use `karpenter.sh/discovery: <name>`, the node role placeholder `KarpenterNodeRole-<name>`.
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: String,
    /// Kubernetes `major.minor` of the cluster: templates without amiFamily ran AL2 up to 1.32 and
    /// AL2023 from 1.33; Ubuntu's AMIs are looked up for it. Empty: AL2 is assumed (and noted).
    #[arg(long, env = "KUBERNETES_VERSION", default_value_t = VersionOverride(None), value_parser = parse_version_override)]
    pub kubernetes_version: VersionOverride,
    /// The instance profile karpenter-rs gave nodes whose template names none; without it such
    /// classes get a `role` placeholder to replace.
    #[arg(long, env = "DEFAULT_INSTANCE_PROFILE")]
    pub default_instance_profile: Option<String>,
    /// The ttlSecondsAfterEmpty default karpenter-rs ran with; `none` if it was off.
    #[arg(long, env = "DEFAULT_TTL_SECONDS_AFTER_EMPTY", default_value_t = TtlDefault(Some(DEFAULT_TTL_SECONDS_AFTER_EMPTY)), value_parser = parse_ttl_default)]
    pub default_ttl_seconds_after_empty: TtlDefault,
    /// The ttlSecondsUntilExpired default karpenter-rs ran with; `none` if it was off.
    #[arg(long, env = "DEFAULT_TTL_SECONDS_UNTIL_EXPIRED", default_value_t = TtlDefault(Some(DEFAULT_TTL_SECONDS_UNTIL_EXPIRED)), value_parser = parse_ttl_default)]
    pub default_ttl_seconds_until_expired: TtlDefault,
}

impl ConvertArgs {
    /// The conversion's settings.
    pub fn settings(&self) -> crate::convert::Settings {
        crate::convert::Settings {
            api: ApiSettings {
                cluster_name: self.cluster_name.clone(),
                default_ttl_seconds_after_empty: self.default_ttl_seconds_after_empty.0,
                default_ttl_seconds_until_expired: self.default_ttl_seconds_until_expired.0,
            },
            kubernetes_version: self.kubernetes_version.0,
            default_instance_profile: self.default_instance_profile.clone().filter(|p| !p.is_empty()),
        }
    }
}

impl From<&ConvertArgs> for crate::convert::cli::Invocation {
    fn from(args: &ConvertArgs) -> Self {
        Self {
            filenames: args.filenames.clone(),
            recursive: args.recursive,
            output: args.output,
            settings: args.settings(),
        }
    }
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

/// Parses the command line, remembering which settings of `run`/`webhook` were given explicitly
/// (flag or environment variable) rather than left at their default.
pub fn parse_cli<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::parser::ValueSource;
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().try_get_matches_from(args)?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    if let (Command::Run(run) | Command::Webhook(run), Some((_, sub))) = (&mut cli.command, matches.subcommand()) {
        run.explicit = sub
            .ids()
            .filter(|id| {
                matches!(
                    sub.value_source(id.as_str()),
                    Some(ValueSource::CommandLine | ValueSource::EnvVariable)
                )
            })
            .map(|id| id.to_string())
            .collect();
        run.apply_env_aliases(|name| std::env::var(name).ok());
    }
    Ok(cli)
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
    #[arg(long, env = "CERTS_VALIDITY", default_value = "365d", value_parser = parse_interval)]
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
        Ok(n) if (0..=MAX_TTL_SECONDS).contains(&n) => Ok(TtlDefault(Some(n))),
        _ => Err(format!(
            "invalid TTL default {s:?}: expected a number of seconds from 0 to {MAX_TTL_SECONDS} (100 years) or \"none\""
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

/// A Go duration for how often something runs, or how long something may take or must wait:
/// more than zero. A zero period would make a controller spin or stop; a zero registration TTL
/// would delete every node before its kubelet starts and launch another, a zero replacement
/// timeout abandon every replacement, a zero garbage-collection grace terminate an instance
/// before its Node is written, a zero client timeout or certificate validity refuse every client.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        Duration::ZERO => Err(format!("invalid duration {s:?}: must be more than 0 (e.g. 10s, 2m)")),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests;
