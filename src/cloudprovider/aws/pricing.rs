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
mod tests;
