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
