//! The flags of `karpenter-rs simulate` (the `Command::Simulate` of `config`).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::cloudprovider::KubernetesVersion;

/// Settings of `simulate`.
#[derive(Args, Debug, Clone)]
pub struct SimulateArgs {
    /// YAML or JSON file of Provisioners, AWSNodeTemplates, workloads (Deployments,
    /// StatefulSets, ReplicaSets, Jobs, Pods), DaemonSets, Nodes; many documents per file and
    /// `kind: List` are fine; `-` reads stdin. Repeatable.
    #[arg(short = 'f', long = "filename", env = "SIMULATE_FILES", value_delimiter = ',', required = true)]
    pub files: Vec<PathBuf>,
    /// YAML or JSON file of the cluster's Nodes and the Pods bound to them (`kubectl get nodes,pods
    /// -A -o yaml`), which pods are placed on before anything is launched. Repeatable.
    #[arg(long, env = "SIMULATE_EXISTING_NODES", value_delimiter = ',')]
    pub existing_nodes: Vec<PathBuf>,
    /// Catalogue snapshot file to use instead of the one built in (same shape, see
    /// src/simulate/catalogue.rs).
    #[arg(long, env = "SIMULATE_CATALOGUE", conflicts_with = "live")]
    pub catalogue: Option<PathBuf>,
    /// Read the catalogue from EC2 (and prices from the Pricing API and spot price history)
    /// with the usual AWS credentials instead of a snapshot.
    #[arg(long, env = "SIMULATE_LIVE", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub live: bool,
    /// Region of the catalogue; empty: the region of the zones the Provisioners require, else
    /// ap-northeast-2 (with --live: the AWS SDK's region).
    #[arg(long, env = "SIMULATE_REGION", default_value = "")]
    pub region: String,
    /// YAML or JSON file of instance type → USD per hour (or `{onDemand, spot}`), overriding
    /// prices, as for `run`.
    #[arg(long, env = "PRICE_OVERRIDES")]
    pub price_overrides: Option<PathBuf>,
    /// Cluster name of the default subnet and security-group selectors and of
    /// `spec.provider.clusterName`; empty: the first `spec.provider.clusterName` in the files,
    /// else `simulated`.
    #[arg(long, env = "CLUSTER_NAME", default_value = "")]
    pub cluster_name: String,
    /// Kubernetes `major.minor` of the nodes (the AMI family of templates naming none).
    #[arg(long, env = "KUBERNETES_VERSION", default_value = "1.33", value_parser = KubernetesVersion::parse)]
    pub kubernetes_version: KubernetesVersion,
    /// Output format.
    #[arg(long, short = 'o', env = "SIMULATE_OUTPUT", value_enum, default_value = "table")]
    pub output: Output,
}

/// How the report is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Human-readable tables.
    Table,
    /// The report as JSON.
    Json,
    /// The report as YAML.
    Yaml,
}
