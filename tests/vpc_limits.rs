//! src/cloudprovider/aws/branch_interfaces.tsv (the branch network interfaces karpenter-rs
//! advertises as `vpc.amazonaws.com/pod-eni`) is what tests/vpc-limits generates from the VPC
//! resource controller's Go module pinned there: run `bash tests/vpc-limits/generate.sh` after
//! changing the pin. Needs Go and the module proxy (or Go's module cache), as tests/cluster does.

use std::path::Path;
use std::process::Command;

#[test]
fn the_branch_interface_table_is_generated_from_the_pinned_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("go")
        .args(["run", "."])
        .current_dir(root.join("tests/vpc-limits"))
        .output()
        .expect("running go (needed to check the generated table)");
    assert!(out.status.success(), "go run failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let generated = String::from_utf8(out.stdout).unwrap();
    let committed = std::fs::read_to_string(root.join("src/cloudprovider/aws/branch_interfaces.tsv")).unwrap();
    assert!(
        generated == committed,
        "src/cloudprovider/aws/branch_interfaces.tsv is stale: run `bash tests/vpc-limits/generate.sh`"
    );
    assert!(committed.lines().any(|l| l == "m5.large\t9"), "a known row");
}
