//! `karpenter-rs simulate`, the built binary: the first write-up's files in table and JSON,
//! stdin, and an invalid Provisioner refused with the webhook's message and a non-zero exit.

use std::process::{Command, Output};

// Shared with tests/binary.rs; only `output_with_stdin` is used here.
#[path = "support/process.rs"]
#[allow(dead_code)]
mod process;

const BIN: &str = env!("CARGO_BIN_EXE_karpenter-rs");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/first-writeup/");

/// `karpenter-rs simulate` with `args`, run from a directory that holds nothing of the
/// repository (the catalogue is built in), `stdin` piped in.
fn simulate(args: &[&str], stdin: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    process::output_with_stdin(
        Command::new(BIN)
            .arg("simulate")
            .args(args)
            .current_dir(dir.path())
            .env_remove("CLUSTER_NAME")
            .env_remove("PRICE_OVERRIDES")
            .env_remove("KUBERNETES_VERSION"),
        stdin,
    )
}

fn fixture(name: &str) -> String {
    format!("{FIXTURES}{name}")
}

#[test]
fn simulate_launches_one_t3_large_for_the_first_writeup_in_table_and_json() {
    let files = ["provisioner.yaml", "awsnodetemplate.yaml", "nginx-deployment.yaml"].map(fixture);
    let mut args = Vec::new();
    for f in &files {
        args.extend(["-f", f.as_str()]);
    }
    let table = simulate(&args, "");
    let stdout = String::from_utf8_lossy(&table.stdout);
    assert!(table.status.success(), "{stdout}{}", String::from_utf8_lossy(&table.stderr));
    let row = stdout
        .lines()
        .find(|l| l.starts_with("1  service"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        row.contains("t3.large, t3.xlarge") && row.contains("on-demand") && row.ends_with(" 2"),
        "{row}"
    );
    assert!(stdout.contains("TOTAL 1 node:"), "{stdout}");
    assert!(stdout.contains("default/nginx-karpenter-0  new node #1 (t3.large)"), "{stdout}");

    args.extend(["--output", "json"]);
    let json = simulate(&args, "");
    assert!(json.status.success());
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["region"], "ap-northeast-2");
    assert_eq!(report["nodes"].as_array().unwrap().len(), 1);
    let node = &report["nodes"][0];
    assert_eq!(node["cheapest"]["instanceType"], "t3.large");
    assert_eq!(node["cheapest"]["capacityType"], "on-demand");
    assert_eq!(
        node["pods"],
        serde_json::json!(["default/nginx-karpenter-0", "default/nginx-karpenter-1"])
    );
    assert_eq!(report["total"]["nodes"], 1);
    assert_eq!(report["total"]["pricePerHour"], node["cheapest"]["pricePerHour"]);
    assert_eq!(report["catalogue"]["pricesEstimated"], true);
    assert_eq!(report["unschedulable"], serde_json::json!([]));
}

#[test]
fn simulate_reads_stdin_and_lists_every_yaml_document() {
    let mut all = String::new();
    for f in ["provisioner.yaml", "awsnodetemplate.yaml", "nginx-deployment.yaml"] {
        all.push_str("---\n");
        all.push_str(&std::fs::read_to_string(fixture(f)).unwrap());
    }
    all.push_str("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\n");
    let out = simulate(&["-f", "-", "-o", "yaml"], &all);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_yaml_ng::from_slice(&out.stdout).unwrap();
    assert_eq!(report["nodes"][0]["instanceTypes"][0], "t3.large");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ConfigMap \"settings\"") && stderr.contains("ignored"), "{stderr}");
}

#[test]
fn simulate_refuses_an_invalid_provisioner_naming_the_field_and_value() {
    let provisioner = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: bad}\nspec:\n  ttlSecondsAfterEmpty: -1\n";
    let out = simulate(&["-f", "-"], provisioner);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: - (document 1): Provisioner \"bad\" is invalid: ")
            && stderr.contains("spec.ttlSecondsAfterEmpty: invalid value -1: must be 0 or greater"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn simulate_takes_price_overrides_and_existing_nodes_and_refuses_an_unknown_region() {
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.yaml");
    std::fs::write(&prices, "t3.large: 0.104\n").unwrap();
    let nodes = dir.path().join("nodes.yaml");
    std::fs::write(
        &nodes,
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata:\n    name: small\n    labels: {nodeType: service-2023}\n  status:\n    allocatable: {cpu: 100m, memory: 128Mi, pods: '1'}\n",
    )
    .unwrap();
    let files = ["provisioner.yaml", "awsnodetemplate.yaml", "nginx-deployment.yaml"].map(fixture);
    let mut args = vec![
        "-o",
        "json",
        "--price-overrides",
        prices.to_str().unwrap(),
        "--existing-nodes",
        nodes.to_str().unwrap(),
    ];
    for f in &files {
        args.extend(["-f", f.as_str()]);
    }
    let out = simulate(&args, "");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["nodes"][0]["cheapest"]["pricePerHour"], 0.104);
    assert_eq!(report["total"]["pricePerMonth"], 75.92);
    // The existing node has the label the pods select and room for one pod (`pods: 1`): one
    // nginx pod goes there, the other gets the new node.
    let placed: Vec<&serde_json::Value> = report["pods"].as_array().unwrap().iter().collect();
    assert_eq!(placed.iter().filter(|p| p["existingNode"] == "small").count(), 1, "{report:#}");
    assert_eq!(report["nodes"][0]["pods"].as_array().unwrap().len(), 1);

    args.extend(["--region", "mars-north-1"]);
    let out = simulate(&args, "");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\"mars-north-1\"") && stderr.contains("ap-northeast-2"), "{stderr}");
}
