//! Subnet and security-group selectors → DescribeSubnets / DescribeSecurityGroups filters, and
//! the subnet chosen per zone at launch. `selector_filters`, `describe_selector` and
//! `one_per_zone` are pure; the `resolve_*` functions call EC2.
//!
//! Selector syntax (as Karpenter's): `aws-ids` / `aws::ids: a,b` selects by id; a value `*`
//! selects any resource with the tag key; any other value selects the tag with one of the
//! comma-separated values. Several keys must all match.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;
use aws_sdk_ec2::Client;

use super::errors;
use crate::cloudprovider::Error;

/// A subnet a node can be launched in.
#[derive(Clone, Debug, PartialEq)]
pub struct Subnet {
    /// `subnet-...`.
    pub id: String,
    /// Availability zone.
    pub zone: String,
    /// Free IPv4 addresses.
    pub available_ips: i64,
}

/// A security group of the nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct SecurityGroup {
    /// `sg-...`.
    pub id: String,
    /// Group name.
    pub name: String,
}

/// EC2 filters `(name, values)` for a selector; `id_filter` is `subnet-id`, `group-id` or
/// `image-id`.
pub fn selector_filters(selector: &BTreeMap<String, String>, id_filter: &str) -> Vec<(String, Vec<String>)> {
    selector
        .iter()
        .map(|(key, value)| {
            if key == "aws-ids" || key == "aws::ids" {
                (id_filter.to_string(), split_comma(value))
            } else if value == "*" {
                ("tag-key".to_string(), vec![key.clone()])
            } else {
                (format!("tag:{key}"), split_comma(value))
            }
        })
        .collect()
}

/// `a, b,,c` → `[a, b, c]`.
pub fn split_comma(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .collect()
}

/// A selector as users wrote it, for messages: `{aws:eks:cluster-name: "ssungz-cluster"}`.
pub fn describe_selector(selector: &BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = selector.iter().map(|(k, v)| format!("{k}: {v:?}")).collect();
    format!("{{{}}}", pairs.join(", "))
}

/// SDK filters from `selector_filters`.
pub fn to_sdk_filters(filters: Vec<(String, Vec<String>)>) -> Vec<Filter> {
    filters
        .into_iter()
        .map(|(name, values)| Filter::builder().name(name).set_values(Some(values)).build())
        .collect()
}

/// For each zone, the subnet with the most free addresses (ties: lowest id).
pub fn one_per_zone(subnets: &[Subnet]) -> BTreeMap<String, Subnet> {
    let mut chosen: BTreeMap<String, Subnet> = BTreeMap::new();
    for s in subnets {
        let better = chosen
            .get(&s.zone)
            .is_none_or(|c| (s.available_ips, std::cmp::Reverse(&s.id)) > (c.available_ips, std::cmp::Reverse(&c.id)));
        if better {
            chosen.insert(s.zone.clone(), s.clone());
        }
    }
    chosen
}

/// The available subnets the selector matches, by zone then id; none is a configuration error.
pub async fn resolve_subnets(ec2: &Client, selector: &BTreeMap<String, String>) -> Result<Vec<Subnet>, Error> {
    let mut subnets = Vec::new();
    let mut pages = ec2
        .describe_subnets()
        .set_filters(Some(to_sdk_filters(selector_filters(selector, "subnet-id"))))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| errors::api("ec2:DescribeSubnets", e))?;
        subnets.extend(
            page.subnets()
                .iter()
                .filter(|s| s.state().is_none_or(|st| st.as_str() == "available"))
                .filter_map(|s| {
                    Some(Subnet {
                        id: s.subnet_id()?.to_string(),
                        zone: s.availability_zone()?.to_string(),
                        available_ips: s.available_ip_address_count().unwrap_or(0).into(),
                    })
                }),
        );
    }
    if subnets.is_empty() {
        return Err(Error::InvalidConfiguration(format!(
            "no available subnet matches subnetSelector {}",
            describe_selector(selector)
        )));
    }
    subnets.sort_by(|a, b| (&a.zone, &a.id).cmp(&(&b.zone, &b.id)));
    Ok(subnets)
}

/// The security groups the selector matches, by id; none is a configuration error.
pub async fn resolve_security_groups(ec2: &Client, selector: &BTreeMap<String, String>) -> Result<Vec<SecurityGroup>, Error> {
    let mut groups = Vec::new();
    let mut pages = ec2
        .describe_security_groups()
        .set_filters(Some(to_sdk_filters(selector_filters(selector, "group-id"))))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| errors::api("ec2:DescribeSecurityGroups", e))?;
        groups.extend(page.security_groups().iter().filter_map(|g| {
            Some(SecurityGroup {
                id: g.group_id()?.to_string(),
                name: g.group_name().unwrap_or_default().to_string(),
            })
        }));
    }
    if groups.is_empty() {
        return Err(Error::InvalidConfiguration(format!(
            "no security group matches securityGroupSelector {}",
            describe_selector(selector)
        )));
    }
    groups.sort_by(|a, b| a.id.cmp(&b.id));
    groups.dedup_by(|a, b| a.id == b.id);
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn turns_the_first_write_up_selectors_into_filters() {
        assert_eq!(
            selector_filters(&selector(&[("karpenter.sh/discovery/ssungz-cluster", "*")]), "subnet-id"),
            vec![("tag-key".to_string(), vec!["karpenter.sh/discovery/ssungz-cluster".to_string()])]
        );
        assert_eq!(
            selector_filters(&selector(&[("aws:eks:cluster-name", "ssungz-cluster")]), "group-id"),
            vec![("tag:aws:eks:cluster-name".to_string(), vec!["ssungz-cluster".to_string()])]
        );
    }

    #[test]
    fn selects_by_ids_and_comma_separated_values() {
        assert_eq!(
            selector_filters(&selector(&[("aws-ids", "subnet-1, subnet-2")]), "subnet-id"),
            vec![("subnet-id".to_string(), vec!["subnet-1".to_string(), "subnet-2".to_string()])]
        );
        assert_eq!(
            selector_filters(&selector(&[("aws::ids", "sg-1")]), "group-id"),
            vec![("group-id".to_string(), vec!["sg-1".to_string()])]
        );
        assert_eq!(
            selector_filters(&selector(&[("environment", "production,staging"), ("team", "*")]), "subnet-id"),
            vec![
                ("tag:environment".to_string(), vec!["production".to_string(), "staging".to_string()]),
                ("tag-key".to_string(), vec!["team".to_string()]),
            ]
        );
    }

    #[test]
    fn describes_selectors_as_written() {
        assert_eq!(
            describe_selector(&selector(&[("karpenter.sh/discovery/ssungz-cluster", "*")])),
            r#"{karpenter.sh/discovery/ssungz-cluster: "*"}"#
        );
    }

    #[test]
    fn picks_the_subnet_with_most_free_addresses_per_zone() {
        let subnet = |id: &str, zone: &str, ips| Subnet {
            id: id.into(),
            zone: zone.into(),
            available_ips: ips,
        };
        let chosen = one_per_zone(&[
            subnet("subnet-a1", "ap-northeast-2a", 10),
            subnet("subnet-a2", "ap-northeast-2a", 200),
            subnet("subnet-c2", "ap-northeast-2c", 50),
            subnet("subnet-c1", "ap-northeast-2c", 50),
        ]);
        let ids: Vec<_> = chosen.values().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, vec!["subnet-a2", "subnet-c1"]);
    }
}
