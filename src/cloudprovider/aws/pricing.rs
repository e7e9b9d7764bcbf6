//! Prices of offerings, in USD per hour.
//!
//! * On-demand, first found wins: the price-overrides file when it names the type; else the AWS
//!   Pricing API (`pricing:GetProducts`, Linux, shared tenancy, no pre-installed software, the
//!   region's `regionCode`); else a resource-based estimate (below). The provider logs one warning
//!   when any price is estimated. The Pricing API is optional: when it is unreachable, denied or
//!   not emulated, the provider keeps its last good prices and the estimate fills the gaps.
//! * Spot: the overrides file's `spot` when given, else the newest DescribeSpotPriceHistory
//!   entry for the type and zone (`Linux/UNIX`), else `SPOT_FRACTION` of on-demand.
//!
//! The estimate is linear in the resources, with rates by family class fitted to us-east-1
//! on-demand prices of the 5th generation (m5.large 0.096, c5.large 0.085, r5.large 0.126,
//! t3.large 0.0832, i3.large 0.156, g4dn.xlarge 0.526):
//!
//! | class (category) | per vCPU | per GiB | note |
//! | --- | --- | --- | --- |
//! | compute (`c`) | 0.0340 | 0.00425 | |
//! | memory (`r`, `x`, `z`, `u`) | 0.0252 | 0.0047 | |
//! | burstable (`t`) | 0.0269 | 0.00349 | 85 % of general purpose |
//! | everything else | 0.0316 | 0.0041 | general purpose |
//!
//! plus 0.35 per GPU, 0.25 per other accelerator and 0.00006 per GB of local NVMe; arm64
//! (Graviton) types cost 80 %. The file parse, the Pricing API document parse, the refresh
//! decision, the estimate and the precedence are here and pure; `describe_spot_prices`,
//! `describe_on_demand_prices` and `load_overrides` are the edges.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_ec2::Client;
use aws_sdk_pricing::types::{Filter as PricingFilter, FilterType};
use serde::Deserialize;

use super::errors;
use crate::cloudprovider::{Error, InstanceTypeInfo};

/// Spot price as a fraction of on-demand when EC2 reports none.
pub const SPOT_FRACTION: f64 = 0.35;

/// How long on-demand prices from the Pricing API are reused after a successful fetch
/// (Karpenter refreshes them every 12 h; list prices change rarely, and a region's EC2 price
/// list is tens of pages).
pub const ON_DEMAND_REFRESH: Duration = Duration::from_secs(12 * 60 * 60);

/// On-demand USD per hour by instance type, from the Pricing API.
pub type OnDemandPrices = BTreeMap<String, f64>;

/// Prices from the overrides file, by instance type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PriceOverrides(pub HashMap<String, OverridePrice>);

/// One type's prices in the overrides file: `t3.large: 0.104` or
/// `t3.large: {onDemand: 0.104, spot: 0.0312}`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum OverridePrice {
    /// On-demand USD per hour.
    OnDemand(f64),
    /// Both prices.
    #[serde(rename_all = "camelCase")]
    Both {
        /// On-demand USD per hour.
        on_demand: f64,
        /// Spot USD per hour.
        #[serde(default)]
        spot: Option<f64>,
    },
}

impl OverridePrice {
    fn on_demand(&self) -> f64 {
        match self {
            OverridePrice::OnDemand(p) | OverridePrice::Both { on_demand: p, .. } => *p,
        }
    }

    fn spot(&self) -> Option<f64> {
        match self {
            OverridePrice::OnDemand(_) => None,
            OverridePrice::Both { spot, .. } => *spot,
        }
    }
}

/// Parses an overrides file (YAML, or JSON which YAML reads too).
pub fn parse_overrides(text: &str) -> Result<PriceOverrides, String> {
    let map: HashMap<String, OverridePrice> = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    if let Some((name, _)) = map.iter().find(|(_, p)| !(p.on_demand() > 0.0 && p.spot().is_none_or(|s| s > 0.0))) {
        return Err(format!("price of {name} must be greater than 0"));
    }
    Ok(PriceOverrides(map))
}

/// Reads and parses the overrides file.
pub fn load_overrides(path: &Path) -> Result<PriceOverrides, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::InvalidConfiguration(format!("reading price overrides {}: {e}", path.display())))?;
    parse_overrides(&text).map_err(|e| Error::InvalidConfiguration(format!("price overrides {}: {e}", path.display())))
}

/// Estimated on-demand USD per hour of a type from its resources (see the module doc).
pub fn estimate_on_demand(it: &InstanceTypeInfo) -> f64 {
    let (per_vcpu, per_gib) = match it.category.as_str() {
        "c" => (0.0340, 0.00425),
        "r" | "x" | "z" | "u" => (0.0252, 0.0047),
        "t" => (0.0269, 0.00349),
        _ => (0.0316, 0.0041),
    };
    let base = it.facts.vcpus as f64 * per_vcpu + it.facts.memory_mib as f64 / 1024.0 * per_gib;
    let base = if it.facts.architecture == "arm64" { base * 0.8 } else { base };
    let extras = it.gpu_count() as f64 * 0.35
        + it.accelerators.iter().map(|a| a.count).sum::<i64>() as f64 * 0.25
        + it.facts.local_nvme_gb as f64 * 0.00006;
    round_price(base + extras)
}

fn round_price(p: f64) -> f64 {
    (p * 1e6).round() / 1e6
}

/// Where an on-demand price came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PriceSource {
    /// The price-overrides file.
    Override,
    /// The AWS Pricing API.
    PricingApi,
    /// The resource-based estimate.
    Estimate,
}

/// Where prices come from for one catalogue load.
#[derive(Clone, Debug, Default)]
pub struct Pricing {
    overrides: Option<PriceOverrides>,
    on_demand_api: Arc<OnDemandPrices>,
    spot_history: BTreeMap<(String, String), f64>,
}

impl Pricing {
    /// Prices from the overrides file (if any), the Pricing API's on-demand prices (empty when
    /// it was never reachable) and the spot history by (type, zone).
    pub fn new(
        overrides: Option<PriceOverrides>,
        on_demand_api: Arc<OnDemandPrices>,
        spot_history: BTreeMap<(String, String), f64>,
    ) -> Self {
        Pricing {
            overrides,
            on_demand_api,
            spot_history,
        }
    }

    fn overridden(&self, name: &str) -> Option<&OverridePrice> {
        self.overrides.as_ref().and_then(|o| o.0.get(name))
    }

    /// Where the on-demand price of `it` comes from: overrides file > Pricing API > estimate.
    pub fn source(&self, it: &InstanceTypeInfo) -> PriceSource {
        if self.overridden(&it.facts.name).is_some() {
            PriceSource::Override
        } else if self.on_demand_api.contains_key(&it.facts.name) {
            PriceSource::PricingApi
        } else {
            PriceSource::Estimate
        }
    }

    /// Whether the on-demand price of `it` is an estimate.
    pub fn is_estimated(&self, it: &InstanceTypeInfo) -> bool {
        self.source(it) == PriceSource::Estimate
    }

    /// On-demand USD per hour.
    pub fn on_demand(&self, it: &InstanceTypeInfo) -> f64 {
        match self.source(it) {
            PriceSource::Override => self.overridden(&it.facts.name).map(OverridePrice::on_demand),
            PriceSource::PricingApi => self.on_demand_api.get(&it.facts.name).copied(),
            PriceSource::Estimate => None,
        }
        .unwrap_or_else(|| estimate_on_demand(it))
    }

    /// Whether the spot price of `it` in `zone` is a fraction of on-demand rather than the
    /// overrides file's or the spot price history's.
    pub fn is_spot_estimated(&self, it: &InstanceTypeInfo, zone: &str) -> bool {
        self.overridden(&it.facts.name).and_then(OverridePrice::spot).is_none()
            && !self.spot_history.contains_key(&(it.facts.name.clone(), zone.to_string()))
    }

    /// Spot USD per hour in `zone`, given the type's on-demand price.
    pub fn spot(&self, it: &InstanceTypeInfo, zone: &str, on_demand: f64) -> f64 {
        self.overridden(&it.facts.name)
            .and_then(OverridePrice::spot)
            .or_else(|| self.spot_history.get(&(it.facts.name.clone(), zone.to_string())).copied())
            .unwrap_or_else(|| round_price(on_demand * SPOT_FRACTION))
    }
}

/// The region whose Pricing API endpoint serves `region`'s prices: the API lives only in
/// us-east-1, eu-central-1 and ap-south-1 (cn-northwest-1 for the China partition), and
/// every one of them answers for every region of its partition.
pub fn pricing_api_region(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("ap-") {
        "ap-south-1"
    } else if region.starts_with("eu-") {
        "eu-central-1"
    } else {
        "us-east-1"
    }
}

/// The `TERM_MATCH` filters (field, value) that select the on-demand Linux compute products
/// Karpenter launches in `region`: shared tenancy, no pre-installed software or license, and
/// the "Used" capacity status (not reservations).
pub fn product_filters(region: &str) -> Vec<(&'static str, String)> {
    vec![
        ("regionCode", region.to_string()),
        ("operatingSystem", "Linux".to_string()),
        ("preInstalledSw", "NA".to_string()),
        ("tenancy", "Shared".to_string()),
        ("capacitystatus", "Used".to_string()),
        ("licenseModel", "No License required".to_string()),
    ]
}

/// On-demand prices read from Pricing API documents, and how many documents could not be read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedPrices {
    /// USD per hour by instance type.
    pub prices: OnDemandPrices,
    /// Documents that were not JSON, had no instance type, or had a price that is not a number.
    pub skipped: usize,
}

#[derive(Deserialize)]
struct PriceListItem {
    product: Product,
    #[serde(default)]
    terms: Terms,
}

#[derive(Deserialize)]
struct Product {
    attributes: ProductAttributes,
}

#[derive(Deserialize)]
struct ProductAttributes {
    #[serde(rename = "instanceType")]
    instance_type: String,
}

#[derive(Default, Deserialize)]
struct Terms {
    #[serde(rename = "OnDemand", default)]
    on_demand: HashMap<String, Term>,
}

#[derive(Deserialize)]
struct Term {
    #[serde(rename = "priceDimensions", default)]
    price_dimensions: HashMap<String, PriceDimension>,
}

#[derive(Deserialize)]
struct PriceDimension {
    #[serde(default)]
    unit: Option<String>,
    #[serde(rename = "pricePerUnit", default)]
    price_per_unit: HashMap<String, String>,
}

/// The lowest positive hourly USD price of one document's on-demand terms: `Ok(None)` when it
/// has none (only zero prices, other units, no on-demand term), `Err` when it is malformed.
fn document_price(document: &str) -> Result<(String, Option<f64>), ()> {
    let item: PriceListItem = serde_json::from_str(document).map_err(|_| ())?;
    if item.product.attributes.instance_type.is_empty() {
        return Err(());
    }
    let mut lowest: Option<f64> = None;
    for dimension in item.terms.on_demand.values().flat_map(|t| t.price_dimensions.values()) {
        if dimension.unit.as_deref().is_some_and(|u| !u.eq_ignore_ascii_case("hrs")) {
            continue;
        }
        let Some(usd) = dimension.price_per_unit.get("USD") else { continue };
        let price: f64 = usd.trim().parse().map_err(|_| ())?;
        if !price.is_finite() || price < 0.0 {
            return Err(());
        }
        if price > 0.0 && lowest.is_none_or(|l| price < l) {
            lowest = Some(price);
        }
    }
    Ok((item.product.attributes.instance_type, lowest))
}

/// On-demand prices from GetProducts `PriceList` documents (one JSON product with its terms
/// each). A type's price is the lowest positive hourly USD price among its documents; zero
/// prices (reservation placeholders) are ignored; malformed documents are counted, not fatal.
pub fn parse_price_list<'a>(documents: impl IntoIterator<Item = &'a str>) -> ParsedPrices {
    let mut parsed = ParsedPrices::default();
    parsed.add(documents);
    parsed
}

impl ParsedPrices {
    /// Adds the prices of more documents (the next page), as `parse_price_list` reads them.
    pub fn add<'a>(&mut self, documents: impl IntoIterator<Item = &'a str>) {
        for document in documents {
            match document_price(document) {
                Ok((instance_type, Some(price))) => {
                    let entry = self.prices.entry(instance_type).or_insert(price);
                    *entry = entry.min(price);
                }
                Ok((_, None)) => {}
                Err(()) => self.skipped += 1,
            }
        }
    }
}

/// When the Pricing API was last asked, and how that went.
#[derive(Clone, Copy, Debug, Default)]
pub struct FetchState {
    /// The last fetch that returned prices.
    pub last_success: Option<Instant>,
    /// The last fetch that failed (error, timeout, or no prices).
    pub last_failure: Option<Instant>,
}

impl FetchState {
    /// Whether the prices should be fetched at `now`: never fetched yet; the last success is
    /// older than `refresh`; or the last attempt failed at least `retry` ago (a failure is not
    /// retried on every catalogue pass, only at the next catalogue refresh).
    pub fn is_due(&self, now: Instant, refresh: Duration, retry: Duration) -> bool {
        let elapsed = |at: Instant| now.saturating_duration_since(at);
        match (self.last_success, self.last_failure) {
            (None, None) => true,
            (Some(ok), Some(failed)) if failed > ok => elapsed(failed) >= retry,
            (Some(ok), _) => elapsed(ok) >= refresh,
            (None, Some(failed)) => elapsed(failed) >= retry,
        }
    }
}

/// Every on-demand price the Pricing API lists for Linux instances in `region`.
pub async fn describe_on_demand_prices(pricing: &aws_sdk_pricing::Client, region: &str) -> Result<ParsedPrices, Error> {
    let mut request = pricing.get_products().service_code("AmazonEC2");
    for (field, value) in product_filters(region) {
        let filter = PricingFilter::builder()
            .r#type(FilterType::TermMatch)
            .field(field)
            .value(value)
            .build()
            .expect("type, field and value are set");
        request = request.filters(filter);
    }
    let mut parsed = ParsedPrices::default();
    let mut pages = request.into_paginator().send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| errors::api("pricing:GetProducts", e))?;
        parsed.add(page.price_list().iter().map(String::as_str));
    }
    Ok(parsed)
}

/// The current Linux spot price of every (type, zone) EC2 reports.
pub async fn describe_spot_prices(ec2: &Client) -> Result<BTreeMap<(String, String), f64>, Error> {
    let mut newest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
    let mut pages = ec2
        .describe_spot_price_history()
        .product_descriptions("Linux/UNIX")
        .product_descriptions("Linux/UNIX (Amazon VPC)")
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| errors::api("ec2:DescribeSpotPriceHistory", e))?;
        for entry in page.spot_price_history() {
            let (Some(t), Some(zone), Some(price)) = (entry.instance_type(), entry.availability_zone(), entry.spot_price()) else {
                continue;
            };
            let Ok(price) = price.parse::<f64>() else { continue };
            let at = entry.timestamp().map(|t| t.secs()).unwrap_or(0);
            let key = (t.as_str().to_string(), zone.to_string());
            if newest.get(&key).is_none_or(|(seen, _)| at >= *seen) {
                newest.insert(key, (at, price));
            }
        }
    }
    Ok(newest.into_iter().map(|(k, (_, p))| (k, p)).collect())
}

#[cfg(test)]
mod tests {
    use super::super::instance_types::test_instance_type as instance_type;
    use super::*;
    use crate::cloudprovider::GpuInfo;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() / b < 0.05
    }

    #[test]
    fn estimates_on_demand_prices_near_list_prices() {
        assert!(close(estimate_on_demand(&instance_type("m5.large", "amd64", 2, 8)), 0.096));
        assert!(close(estimate_on_demand(&instance_type("c5.large", "amd64", 2, 4)), 0.085));
        assert!(close(estimate_on_demand(&instance_type("r5.large", "amd64", 2, 16)), 0.126));
        assert!(close(estimate_on_demand(&instance_type("t3.large", "amd64", 2, 8)), 0.0832));
        assert!(close(estimate_on_demand(&instance_type("m6g.large", "arm64", 2, 8)), 0.077));
        let mut g4dn = instance_type("g4dn.xlarge", "amd64", 4, 16);
        g4dn.facts.gpus = vec![GpuInfo {
            name: "t4".into(),
            manufacturer: "nvidia".into(),
            count: 1,
            memory_mib: 16384,
        }];
        g4dn.facts.local_nvme_gb = 125;
        assert!(close(estimate_on_demand(&g4dn), 0.526), "{}", estimate_on_demand(&g4dn));
    }

    #[test]
    fn ranks_the_first_write_up_types_by_size() {
        let large = estimate_on_demand(&instance_type("t3.large", "amd64", 2, 8));
        let xlarge = estimate_on_demand(&instance_type("t3.xlarge", "amd64", 4, 16));
        assert!(large < xlarge);
        assert!(close(xlarge, 2.0 * large));
    }

    #[test]
    fn reads_overrides_in_yaml_and_json_with_optional_spot() {
        let yaml = parse_overrides("t3.large: 0.104\nt3.xlarge: {onDemand: 0.208, spot: 0.0624}\n").unwrap();
        let json = parse_overrides(r#"{"t3.large": 0.104, "t3.xlarge": {"onDemand": 0.208, "spot": 0.0624}}"#).unwrap();
        assert_eq!(yaml, json);
        let pricing = Pricing::new(Some(yaml), Default::default(), BTreeMap::new());
        let large = instance_type("t3.large", "amd64", 2, 8);
        let xlarge = instance_type("t3.xlarge", "amd64", 4, 16);
        assert_eq!(pricing.on_demand(&large), 0.104);
        assert!(!pricing.is_estimated(&large));
        assert_eq!(pricing.spot(&xlarge, "ap-northeast-2a", 0.208), 0.0624);
        assert!(pricing.is_estimated(&instance_type("m5.large", "amd64", 2, 8)));
    }

    #[test]
    fn rejects_overrides_that_are_not_positive_prices() {
        assert!(parse_overrides("t3.large: 0").unwrap_err().contains("t3.large"));
        assert!(parse_overrides("t3.large: cheap").is_err());
        assert!(parse_overrides("- t3.large").is_err());
    }

    #[test]
    fn prefers_spot_history_over_the_fraction_of_on_demand() {
        let history = BTreeMap::from([(("t3.large".to_string(), "ap-northeast-2a".to_string()), 0.0312)]);
        let pricing = Pricing::new(None, Default::default(), history);
        let it = instance_type("t3.large", "amd64", 2, 8);
        assert_eq!(pricing.spot(&it, "ap-northeast-2a", 0.104), 0.0312);
        assert_eq!(pricing.spot(&it, "ap-northeast-2c", 0.1), 0.035);
    }

    /// A GetProducts `PriceList` document as AWS returns it (abridged attributes), with one
    /// on-demand term per entry of `terms`, each with the given USD prices per hour, and a
    /// reserved term that must be ignored.
    fn product(instance_type: &str, terms: &[&[&str]]) -> String {
        let sku = format!("SKU{}", instance_type.replace('.', "").to_uppercase());
        let on_demand: serde_json::Map<String, serde_json::Value> = terms
            .iter()
            .enumerate()
            .map(|(i, prices)| {
                let code = format!("{sku}.TERM{i}");
                let dimensions: serde_json::Map<String, serde_json::Value> = prices
                    .iter()
                    .enumerate()
                    .map(|(j, usd)| {
                        (
                            format!("{code}.RATE{j}"),
                            serde_json::json!({
                                "unit": "Hrs",
                                "endRange": "Inf",
                                "description": format!("${usd} per On Demand Linux {instance_type} Instance Hour"),
                                "appliesTo": [],
                                "rateCode": format!("{code}.RATE{j}"),
                                "beginRange": "0",
                                "pricePerUnit": {"USD": usd}
                            }),
                        )
                    })
                    .collect();
                (
                    code.clone(),
                    serde_json::json!({"priceDimensions": dimensions, "sku": sku, "offerTermCode": format!("TERM{i}"), "termAttributes": {}}),
                )
            })
            .collect();
        serde_json::json!({
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": "ap-northeast-2",
                    "operatingSystem": "Linux",
                    "preInstalledSw": "NA",
                    "tenancy": "Shared",
                    "capacitystatus": "Used",
                    "licenseModel": "No License required",
                    "usagetype": format!("APN2-BoxUsage:{instance_type}"),
                    "operation": "RunInstances",
                    "vcpu": "2",
                    "memory": "8 GiB"
                },
                "sku": sku
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": on_demand,
                "Reserved": {
                    format!("{sku}.4NA7Y494T4"): {
                        "priceDimensions": {
                            format!("{sku}.4NA7Y494T4.6YS6EN2CT7"): {"unit": "Hrs", "pricePerUnit": {"USD": "0.0010000000"}}
                        },
                        "termAttributes": {"LeaseContractLength": "1yr", "PurchaseOption": "No Upfront"}
                    }
                }
            },
            "version": "20241115000000",
            "publicationDate": "2024-11-15T00:00:00Z"
        })
        .to_string()
    }

    #[test]
    fn reads_on_demand_prices_from_price_list_documents() {
        let documents = [
            product("t3.large", &[&["0.1040000000"]]),
            product("t3.xlarge", &[&["0.2080000000"]]),
            // several terms and dimensions: the lowest positive hourly price
            product("m5.large", &[&["0.1180000000", "0.0000000000"], &["0.1200000000"]]),
        ];
        let parsed = parse_price_list(documents.iter().map(String::as_str));
        assert_eq!(
            parsed.prices,
            BTreeMap::from([
                ("m5.large".to_string(), 0.118),
                ("t3.large".to_string(), 0.104),
                ("t3.xlarge".to_string(), 0.208),
            ])
        );
        assert_eq!(parsed.skipped, 0);
    }

    #[test]
    fn ignores_zero_prices_and_keeps_the_lowest_price_of_a_type_listed_twice() {
        let documents = [
            product("c5.large", &[&["0.0000000000"]]),
            product("r5.large", &[]),
            product("t3.large", &[&["0.1100000000"]]),
            product("t3.large", &[&["0.1040000000"]]),
        ];
        let parsed = parse_price_list(documents.iter().map(String::as_str));
        assert_eq!(parsed.prices, BTreeMap::from([("t3.large".to_string(), 0.104)]));
        assert_eq!(parsed.skipped, 0, "a product without a positive price is not malformed");
    }

    #[test]
    fn skips_and_counts_malformed_documents_without_failing() {
        let no_instance_type = product("t3.large", &[&["0.104"]]).replace("\"instanceType\"", "\"instanceFamily\"");
        let documents = [
            "not json".to_string(),
            "{}".to_string(),
            no_instance_type,
            product("t3.xlarge", &[&["cheap"]]),
            product("t3.2xlarge", &[&["-1"]]),
            product("t3.medium", &[&["0.0520000000"]]),
        ];
        let parsed = parse_price_list(documents.iter().map(String::as_str));
        assert_eq!(parsed.prices, BTreeMap::from([("t3.medium".to_string(), 0.052)]));
        assert_eq!(parsed.skipped, 5);
        let mut paged = parse_price_list(documents[..3].iter().map(String::as_str));
        paged.add(documents[3..].iter().map(String::as_str));
        assert_eq!(paged, parsed, "reading page by page adds up to reading at once");
    }

    #[test]
    fn ignores_prices_in_units_other_than_hours() {
        let document = product("t3.large", &[&["0.104"]]).replace("\"Hrs\"", "\"Quantity\"");
        assert!(parse_price_list([document.as_str()]).prices.is_empty());
    }

    #[test]
    fn prefers_overrides_then_the_pricing_api_then_the_estimate() {
        let overrides = parse_overrides("t3.large: 0.1").unwrap();
        let api = Arc::new(BTreeMap::from([("t3.large".to_string(), 0.104), ("t3.xlarge".to_string(), 0.208)]));
        let pricing = Pricing::new(Some(overrides), api, BTreeMap::new());
        let large = instance_type("t3.large", "amd64", 2, 8);
        let xlarge = instance_type("t3.xlarge", "amd64", 4, 16);
        let m5 = instance_type("m5.large", "amd64", 2, 8);
        assert_eq!((pricing.source(&large), pricing.on_demand(&large)), (PriceSource::Override, 0.1));
        assert_eq!(
            (pricing.source(&xlarge), pricing.on_demand(&xlarge)),
            (PriceSource::PricingApi, 0.208)
        );
        assert_eq!(
            (pricing.source(&m5), pricing.on_demand(&m5)),
            (PriceSource::Estimate, estimate_on_demand(&m5))
        );
        assert!(!pricing.is_estimated(&xlarge));
        assert!(pricing.is_estimated(&m5));
        assert_eq!(
            pricing.spot(&xlarge, "ap-northeast-2a", 0.208),
            0.0728,
            "spot falls back to a fraction of the API price"
        );
    }

    #[test]
    fn asks_the_pricing_api_region_of_the_partition() {
        assert_eq!(pricing_api_region("ap-northeast-2"), "ap-south-1");
        assert_eq!(pricing_api_region("eu-west-1"), "eu-central-1");
        assert_eq!(pricing_api_region("us-west-2"), "us-east-1");
        assert_eq!(pricing_api_region("sa-east-1"), "us-east-1");
        assert_eq!(pricing_api_region("cn-north-1"), "cn-northwest-1");
    }

    #[test]
    fn filters_linux_shared_tenancy_products_of_the_region() {
        let filters = product_filters("ap-northeast-2");
        assert!(filters.contains(&("regionCode", "ap-northeast-2".to_string())));
        assert!(filters.contains(&("operatingSystem", "Linux".to_string())));
        assert!(filters.contains(&("preInstalledSw", "NA".to_string())));
        assert!(filters.contains(&("tenancy", "Shared".to_string())));
        assert!(filters.contains(&("capacitystatus", "Used".to_string())));
        assert!(filters.contains(&("licenseModel", "No License required".to_string())));
        assert_eq!(filters.len(), 6);
    }

    #[test]
    fn fetches_prices_first_then_after_the_refresh_and_retries_failures_at_the_next_catalogue_refresh() {
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let (refresh, retry) = (Duration::from_secs(3600), Duration::from_secs(300));
        assert!(FetchState::default().is_due(start, refresh, retry), "never fetched");
        let ok = FetchState {
            last_success: Some(start),
            last_failure: None,
        };
        assert!(!ok.is_due(at(3599), refresh, retry));
        assert!(ok.is_due(at(3600), refresh, retry));
        let failed = FetchState {
            last_success: None,
            last_failure: Some(start),
        };
        assert!(!failed.is_due(at(299), refresh, retry), "not retried on every pass");
        assert!(failed.is_due(at(300), refresh, retry));
        let failed_after_ok = FetchState {
            last_success: Some(start),
            last_failure: Some(at(3600)),
        };
        assert!(!failed_after_ok.is_due(at(3899), refresh, retry));
        assert!(failed_after_ok.is_due(at(3900), refresh, retry));
        let ok_after_failure = FetchState {
            last_success: Some(at(300)),
            last_failure: Some(start),
        };
        assert!(!ok_after_failure.is_due(at(3000), refresh, retry));
    }
}
