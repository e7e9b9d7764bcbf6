//! The edge of `karpenter-rs simulate`: reads the files (and stdin), the catalogue (the built-in
//! snapshot, a file, or EC2 with `--live`), runs the pure core and renders the report. Warnings
//! go to stderr, the report to stdout.

use std::io::Read;
use std::path::Path;

use super::args::{Output, SimulateArgs};
use super::catalogue::{Catalogue, Snapshot, SHIPPED};
use super::manifests::{provider_cluster_name, Manifests, Source};
use super::report::Report;
use super::{implied_region, simulate, Options, DEFAULT_REGION};
use crate::apis::ApiSettings;
use crate::cloudprovider::aws::pricing::load_overrides;
use crate::scheduling::NodeSettings;

/// Cluster name when neither `--cluster-name` nor the files give one.
const SIMULATED_CLUSTER: &str = "simulated";

/// Runs `simulate` and returns what to print on stdout; the error is the message for stderr.
pub fn run(args: &SimulateArgs) -> Result<String, String> {
    let mut sources = Vec::new();
    for path in args.files.iter().chain(&args.existing_nodes) {
        sources.push(read_source(path)?);
    }
    let cluster_name = Some(args.cluster_name.clone())
        .filter(|c| !c.is_empty())
        .or_else(|| provider_cluster_name(&sources))
        .unwrap_or_else(|| SIMULATED_CLUSTER.to_string());
    let settings = ApiSettings::new(cluster_name.clone());
    let manifests = Manifests::read(&sources, &settings).map_err(|e| e.to_string())?;
    let overrides = args
        .price_overrides
        .as_deref()
        .map(load_overrides)
        .transpose()
        .map_err(|e| e.to_string())?;
    let requested_region = Some(args.region.clone()).filter(|r| !r.is_empty());
    let (catalogue, kind) = if args.live {
        (live_catalogue(args, &cluster_name)?, "live")
    } else {
        let (text, kind) = match &args.catalogue {
            Some(path) => (
                std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?,
                "file",
            ),
            None => (SHIPPED.to_string(), "snapshot"),
        };
        let snapshot = Snapshot::parse(&text)?;
        let region = requested_region
            .or_else(|| implied_region(&manifests.provisioners))
            .unwrap_or_else(|| DEFAULT_REGION.to_string());
        (snapshot.catalogue(&region, overrides)?, kind)
    };
    let options = Options {
        cluster_name,
        kubernetes_version: args.kubernetes_version,
        node_settings: NodeSettings::default(),
        catalogue_kind: kind.to_string(),
    };
    let report = simulate(&manifests, &catalogue, &options);
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    render(&report, args.output)
}

/// The report in the chosen format.
pub fn render(report: &Report, output: Output) -> Result<String, String> {
    match output {
        Output::Table => Ok(report.table()),
        Output::Json => serde_json::to_string_pretty(report).map(|s| s + "\n").map_err(|e| e.to_string()),
        Output::Yaml => serde_yaml_ng::to_string(report).map_err(|e| e.to_string()),
    }
}

fn read_source(path: &Path) -> Result<Source, String> {
    let name = path.display().to_string();
    let text = if name == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("reading stdin: {e}"))?;
        text
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("reading {name}: {e}"))?
    };
    Ok(Source { name, text })
}

/// The region's catalogue from EC2 and the Pricing API, as `run` reads it, with the SDK's
/// usual region and credentials (`--region` wins).
fn live_catalogue(args: &SimulateArgs, cluster_name: &str) -> Result<Catalogue, String> {
    use crate::cloudprovider::aws::AwsCloudProvider;
    use crate::cloudprovider::{CloudConfig, CloudProvider};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("starting the async runtime: {e}"))?;
    let mut config = CloudConfig::new(cluster_name, "");
    config.region = Some(args.region.clone()).filter(|r| !r.is_empty());
    config.price_overrides = args.price_overrides.clone();
    let types = runtime
        .block_on(async {
            let cloud = AwsCloudProvider::new(config).await?;
            cloud.instance_types().await
        })
        .map_err(|e| format!("reading the instance types from EC2: {}", crate::telemetry::chain(&e)))?;
    let zones: std::collections::BTreeSet<String> = types.iter().flat_map(|t| t.offerings.iter().map(|o| o.zone.clone())).collect();
    let region = Some(args.region.clone())
        .filter(|r| !r.is_empty())
        .or_else(|| zones.iter().find_map(|z| super::catalogue::region_of_zone(z)).map(str::to_string))
        .ok_or("EC2 offers no instance type in any zone")?;
    Ok(Catalogue {
        region,
        zones,
        types,
        source: "EC2 DescribeInstanceTypes and DescribeInstanceTypeOfferings now; on-demand prices from --price-overrides, the AWS Pricing API, else karpenter-rs's estimate; spot prices from the spot price history, else a fraction of on-demand".to_string(),
        taken: None,
        prices_estimated: false,
    })
}
