//! deploy/iam/controller-policy.json allows every AWS call src/cloudprovider/aws makes, and nothing
//! it never makes: a new SDK call without a policy update fails here, and so does a grant no code
//! needs. The calls are read from the source: each SDK operation (`.describe_subnets()`) and each
//! error label naming its IAM action (`errors::api("ec2:DescribeSubnets", e)`), which must agree.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read_json(path: &str) -> Value {
    let full = root().join(path);
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("reading {}: {e}", full.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", full.display()))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Verbs AWS operation names start with.
const VERBS: &[&str] = &[
    "accept",
    "allocate",
    "assign",
    "associate",
    "attach",
    "authorize",
    "cancel",
    "copy",
    "create",
    "delete",
    "deregister",
    "describe",
    "detach",
    "disable",
    "disassociate",
    "enable",
    "export",
    "get",
    "import",
    "list",
    "modify",
    "put",
    "reboot",
    "receive",
    "register",
    "release",
    "replace",
    "request",
    "reset",
    "revoke",
    "run",
    "send",
    "start",
    "stop",
    "tag",
    "terminate",
    "unassign",
    "untag",
    "update",
];

/// `.verb_object()` calls (SDK fluent builders take no arguments), as CamelCase operation names.
fn sdk_operations(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices('.') {
        let rest = &text[i + 1..];
        let ident: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if !rest[ident.len()..].starts_with("()") {
            continue;
        }
        let Some((verb, _)) = ident.split_once('_') else { continue };
        if VERBS.contains(&verb) && ident != "start_timer" {
            out.insert(ident.split('_').map(|w| w[..1].to_uppercase() + &w[1..]).collect());
        }
    }
    out
}

/// `"service:Action"` labels in the source.
fn action_labels(text: &str) -> BTreeSet<String> {
    text.split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.split_once(':').is_some_and(|(svc, op)| {
                ["ec2", "ssm", "iam", "pricing", "eks", "sqs", "sts"].contains(&svc)
                    && op.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                    && op.chars().all(|c| c.is_ascii_alphanumeric())
            })
        })
        .map(str::to_string)
        .collect()
}

/// What the AWS cloud provider calls, as IAM actions.
fn called_actions() -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&root().join("src/cloudprovider/aws"), &mut files);
    let (mut operations, mut labels) = (BTreeSet::new(), BTreeSet::new());
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        operations.extend(sdk_operations(code));
        labels.extend(action_labels(code));
    }
    let labelled: BTreeSet<String> = labels.iter().map(|l| l.split_once(':').unwrap().1.to_string()).collect();
    assert_eq!(
        operations, labelled,
        "every SDK call in src/cloudprovider/aws needs an error label naming its IAM action (errors::api(\"ec2:Op\", e)), and every label a call"
    );
    labels
}

/// Actions a call needs besides its own (CreateFleet launches and tags on the caller's behalf and
/// passes the node role of the launch template's instance profile).
fn implied(action: &str) -> &'static [&'static str] {
    match action {
        "ec2:CreateFleet" => &["ec2:RunInstances", "ec2:CreateTags", "iam:PassRole"],
        "ec2:CreateLaunchTemplate" => &["ec2:CreateTags"],
        _ => &[],
    }
}

fn as_list(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().map(|i| i.as_str().unwrap().to_string()).collect(),
        _ => vec![],
    }
}

fn statements() -> Vec<Value> {
    let policy = read_json("deploy/iam/controller-policy.json");
    assert_eq!(policy["Version"], "2012-10-17");
    policy["Statement"].as_array().unwrap().clone()
}

#[test]
fn trust_policies_parse() {
    let node = read_json("deploy/iam/node-trust-policy.json");
    assert_eq!(node["Statement"][0]["Principal"]["Service"], "ec2.amazonaws.com");
    let controller = read_json("deploy/iam/controller-trust-policy.json");
    assert_eq!(controller["Statement"][0]["Action"], "sts:AssumeRoleWithWebIdentity");
    let sub = &controller["Statement"][0]["Condition"]["StringEquals"]["${OIDC_ENDPOINT}:sub"];
    assert_eq!(
        sub, "system:serviceaccount:karpenter:karpenter-rs",
        "the chart's default namespace and ServiceAccount"
    );
}

#[test]
fn policy_allows_every_call_the_cloud_provider_makes_and_nothing_more() {
    let called = called_actions();
    assert!(
        called.contains("ec2:CreateFleet") && called.contains("ssm:GetParameter") && called.contains("pricing:GetProducts"),
        "{called:?}"
    );
    let needed: BTreeSet<String> = called
        .iter()
        .flat_map(|a| std::iter::once(a.clone()).chain(implied(a).iter().map(|s| s.to_string())))
        .collect();
    let statements = statements();
    let allowed: BTreeSet<String> = statements
        .iter()
        .filter(|s| s["Effect"] == "Allow")
        .flat_map(|s| as_list(&s["Action"]))
        .collect();
    assert!(!allowed.iter().any(|a| a.contains('*')), "no wildcard actions: {allowed:?}");
    let missing: Vec<_> = needed.difference(&allowed).collect();
    assert!(missing.is_empty(), "deploy/iam/controller-policy.json does not allow {missing:?}");
    let unneeded: Vec<_> = allowed.difference(&needed).collect();
    assert!(
        unneeded.is_empty(),
        "deploy/iam/controller-policy.json allows {unneeded:?}, which no code needs"
    );
}

#[test]
fn writes_are_scoped_to_the_clusters_tagged_resources() {
    let statements = statements();
    let with = |action: &str| -> Vec<Value> {
        statements
            .iter()
            .filter(|s| as_list(&s["Action"]).iter().any(|a| a == action))
            .cloned()
            .collect()
    };
    for s in with("ec2:TerminateInstances") {
        assert_eq!(
            s["Condition"]["StringEquals"]["aws:ResourceTag/kubernetes.io/cluster/${CLUSTER_NAME}"], "owned",
            "{s}"
        );
        assert_eq!(
            s["Condition"]["StringLike"]["aws:ResourceTag/karpenter.sh/provisioner-name"], "*",
            "{s}"
        );
    }
    for s in with("ec2:CreateLaunchTemplate") {
        assert_eq!(
            s["Condition"]["StringEquals"]["aws:RequestTag/karpenter.k8s.aws/cluster"], "${CLUSTER_NAME}",
            "{s}"
        );
    }
    // Instances, volumes and fleets only with the cluster's ownership tag.
    for s in with("ec2:CreateFleet") {
        let resources = as_list(&s["Resource"]);
        if resources
            .iter()
            .any(|r| r.contains(":instance/") || r.contains(":volume/") || r.contains(":fleet/"))
        {
            assert_eq!(
                s["Condition"]["StringEquals"]["aws:RequestTag/kubernetes.io/cluster/${CLUSTER_NAME}"], "owned",
                "{s}"
            );
            assert_eq!(
                s["Condition"]["StringLike"]["aws:RequestTag/karpenter.sh/provisioner-name"], "*",
                "{s}"
            );
        }
    }
    for s in with("ec2:CreateTags") {
        assert!(
            as_list(&s["Condition"]["StringEquals"]["ec2:CreateAction"]).contains(&"CreateFleet".to_string()),
            "{s}"
        );
    }
    for s in with("iam:PassRole") {
        assert_eq!(s["Condition"]["StringEquals"]["iam:PassedToService"], "ec2.amazonaws.com", "{s}");
        assert!(
            as_list(&s["Resource"])
                .iter()
                .all(|r| r.ends_with(":role/KarpenterNodeRole-${CLUSTER_NAME}")),
            "{s}"
        );
    }
    // Only reads may name every resource (the Pricing API has no resource-level permissions and
    // is called in its own region, so it has no region condition).
    for s in &statements {
        if s["Resource"] == "*" {
            assert!(
                as_list(&s["Action"])
                    .iter()
                    .all(|a| a.starts_with("ec2:Describe") || a == "pricing:GetProducts"),
                "{s}"
            );
        }
    }
    for s in with("ec2:DescribeInstanceTypes") {
        assert_eq!(s["Condition"]["StringEquals"]["aws:RequestedRegion"], "${AWS_REGION}", "{s}");
    }
}

#[test]
fn the_scanner_sees_operations_and_labels() {
    let code = r#"let out = ec2
        .describe_availability_zones()
        .send().await.map_err(|e| errors::api("ec2:DescribeAvailabilityZones", e))?;
        let _t = metrics.start_timer();"#;
    assert_eq!(sdk_operations(code), BTreeSet::from(["DescribeAvailabilityZones".to_string()]));
    assert_eq!(action_labels(code), BTreeSet::from(["ec2:DescribeAvailabilityZones".to_string()]));
}
