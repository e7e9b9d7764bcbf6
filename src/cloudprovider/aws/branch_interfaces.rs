//! How many branch network interfaces each trunking-compatible instance type can attach: what a
//! node advertises as `vpc.amazonaws.com/pod-eni` when security groups for pods are on
//! (`aws.enablePodENI`). EC2's DescribeInstanceTypes does not say; the VPC resource controller
//! (the component that advertises the resource on nodes) carries the table, and Karpenter
//! generates its own copy from it (`aws@v0.27.0:pkg/providers/instancetype/zz_generated.vpclimits.go`).
//! `branch_interfaces.tsv` is generated from that Go module by tests/vpc-limits/generate.sh;
//! tests/vpc_limits.rs fails when it is stale.

use std::collections::HashMap;
use std::sync::OnceLock;

const TABLE: &str = include_str!("branch_interfaces.tsv");

/// Branch network interfaces of `instance_type`; 0 when it is not trunking-compatible (or
/// unknown).
pub fn branch_interfaces(instance_type: &str) -> i64 {
    static BY_TYPE: OnceLock<HashMap<&'static str, i64>> = OnceLock::new();
    BY_TYPE.get_or_init(|| parse(TABLE)).get(instance_type).copied().unwrap_or(0)
}

/// `type<TAB>count` lines; `#` comments and malformed lines are skipped.
fn parse(table: &'static str) -> HashMap<&'static str, i64> {
    table
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, count) = l.split_once('\t')?;
            Some((name, count.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trunking_compatible_types_have_branch_interfaces_and_others_none() {
        assert_eq!(branch_interfaces("m5.large"), 9);
        assert!(branch_interfaces("c5.xlarge") > 0);
        assert_eq!(branch_interfaces("t3.large"), 0, "t3 cannot trunk");
        assert_eq!(branch_interfaces("no.such-type"), 0);
        assert!(parse(TABLE).len() > 1000);
    }
}
