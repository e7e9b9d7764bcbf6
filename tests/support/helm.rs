//! The helm CLI that tests/helm/build.sh builds from its Go module (on first use, then cached),
//! and the chart under deploy/chart/karpenter-rs rendered with it. A missing helm fails the test:
//! the chart checks never skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::repo_root;

/// The helm binary: `$HELM` when set, else the one tests/helm/build.sh builds (or finds cached).
pub fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        if let Some(path) = std::env::var_os("HELM") {
            return PathBuf::from(path);
        }
        let out = Command::new("bash")
            .arg(repo_root().join("tests/helm/build.sh"))
            .stdin(Stdio::null())
            .output()
            .expect("running tests/helm/build.sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "tests/helm/build.sh failed; the chart tests need helm:\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("HELM="))
            .next_back()
            .expect("tests/helm/build.sh prints HELM=<path>");
        PathBuf::from(path)
    })
}

/// deploy/chart/karpenter-rs.
pub fn chart_dir() -> PathBuf {
    repo_root().join("deploy/chart/karpenter-rs")
}

/// deploy/chart/karpenter-rs/ci/all-values.yaml: a non-default value for every setting.
pub fn ci_values() -> PathBuf {
    chart_dir().join("ci/all-values.yaml")
}

/// Runs helm with `args`; returns (success, stdout, stderr).
pub fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(helm())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", helm().display()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `helm template <release> <chart> --namespace <namespace> <args>`: the YAML stream, or a failed test.
pub fn template(release: &str, namespace: &str, args: &[&str]) -> String {
    let chart = chart_dir();
    let mut all = vec!["template", release, chart.to_str().unwrap(), "--namespace", namespace];
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = run(&all);
    assert!(ok, "helm {} failed:\n{stderr}", all.join(" "));
    stdout
}

/// The documents of a YAML stream, as JSON (empty documents dropped).
pub fn documents(yaml: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|doc| serde_json::Value::deserialize(doc).expect("helm renders valid YAML"))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// The one document of `kind` named `name`.
pub fn find<'a>(docs: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}
