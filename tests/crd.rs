//! The committed CRDs under deploy/crds and deploy/chart/karpenter-rs/crds are exactly what
//! `karpenter-rs crds` generates from the Rust types; regenerate both with `deploy/generate.sh`
//! when this fails.

use std::path::PathBuf;

use karpenter_rs::crds;

#[test]
fn committed_crds_are_up_to_date() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for dir in ["deploy/crds", "deploy/chart/karpenter-rs/crds"] {
        let dir = root.join(dir);
        for (file, generated) in crds::render() {
            let path = dir.join(file);
            let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            assert!(
                committed == generated,
                "{} is stale: run deploy/generate.sh and commit the result",
                path.display()
            );
        }
        let files = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(
            files,
            crds::render().len(),
            "{} holds files `karpenter-rs crds` does not write",
            dir.display()
        );
    }
}

#[test]
fn crds_carry_the_schema_constraints_users_rely_on() {
    let rendered = crds::render();
    let provisioners: serde_yaml_ng::Value = serde_yaml_ng::from_str(&rendered[0].1).unwrap();
    let version = &provisioners["spec"]["versions"][0];
    let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(provisioners["spec"]["scope"], "Cluster");
    assert_eq!(spec["weight"]["minimum"].as_f64(), Some(1.0));
    assert_eq!(spec["weight"]["maximum"].as_f64(), Some(100.0));
    assert_eq!(spec["provider"]["x-kubernetes-preserve-unknown-fields"], true);
    assert_eq!(spec["kubeletConfiguration"]["properties"]["maxPods"]["minimum"].as_f64(), Some(0.0));
    assert_eq!(spec["providerRef"]["required"][0], "name");
    assert!(spec["ttlSecondsAfterEmpty"]["description"].as_str().unwrap().contains("empty"));
    assert_eq!(version["subresources"]["status"], serde_yaml_ng::Value::Mapping(Default::default()));
    let columns: Vec<&str> = version["additionalPrinterColumns"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["Template", "Weight", "Age"]);
    // A structural schema may not combine properties with additionalProperties: false.
    assert!(!rendered.iter().any(|(_, yaml)| yaml.contains("additionalProperties: false")));

    let templates: serde_yaml_ng::Value = serde_yaml_ng::from_str(&rendered[1].1).unwrap();
    assert_eq!(templates["spec"]["scope"], "Cluster");
    assert_eq!(templates["spec"]["names"]["kind"], "AWSNodeTemplate");
}
