//! The Helm chart (deploy/chart/karpenter-rs) with the helm CLI built from its Go module
//! (tests/helm/build.sh): it lints, renders what the binary expects (its settings, its webhook
//! configurations, the hardening the issue asks for), the committed plain manifests are what it
//! renders, every value is in docs/install.md, values.schema.json refuses unknown keys and wrong types
//! naming them, Karpenter's keys do what docs/install.md's "Karpenter's values" says (same, alias or
//! refused), and the rendered objects pass the real API server's validation
//! (`kubectl apply --dry-run=server`) with default and with non-default values.

mod support;
#[path = "support/values_doc.rs"]
mod values_doc;

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::{json, Value};
use support::helm::{self, documents, find};
use support::{cluster, kubectl, kubectl_ok, repo_root, unique};

const CLUSTER: &str = "settings.aws.clusterName=ssungz-cluster";

fn default_render(namespace: &str) -> Vec<Value> {
    documents(&helm::template("karpenter-rs", namespace, &["--set", CLUSTER]))
}

fn ci_render(namespace: &str) -> Vec<Value> {
    documents(&helm::template(
        "karpenter-rs",
        namespace,
        &["-f", helm::ci_values().to_str().unwrap()],
    ))
}

fn container(docs: &[Value], name: &str) -> Value {
    find(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0].clone()
}

/// The environment variables a container sets (plain values and downward-API ones alike).
fn env_names(container: &Value) -> BTreeSet<String> {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn chart_lints_with_default_and_non_default_values() {
    let chart = helm::chart_dir();
    let chart = chart.to_str().unwrap();
    for args in [vec!["--set", CLUSTER], vec!["-f", helm::ci_values().to_str().unwrap()]] {
        let mut all = vec!["lint", "--strict", chart];
        all.extend(args);
        let (ok, stdout, stderr) = helm::run(&all);
        assert!(ok, "helm {} failed:\n{stdout}{stderr}", all.join(" "));
    }
}

#[test]
fn chart_refuses_to_render_without_a_cluster_name() {
    let chart = helm::chart_dir();
    let (ok, _, stderr) = helm::run(&["template", "karpenter-rs", chart.to_str().unwrap()]);
    assert!(!ok, "rendered without settings.aws.clusterName");
    assert!(stderr.contains("settings.aws.clusterName is required"), "{stderr}");
}

#[test]
fn chart_app_version_is_the_crate_version() {
    let text = std::fs::read_to_string(helm::chart_dir().join("Chart.yaml")).unwrap();
    let chart: Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(
        chart["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "bump appVersion in Chart.yaml with Cargo.toml"
    );
}

#[test]
fn committed_manifests_are_up_to_date() {
    let out = Command::new("bash")
        .arg(repo_root().join("tests/helm/render.sh"))
        .env("HELM", helm::helm())
        .output()
        .expect("running tests/helm/render.sh");
    assert!(
        out.status.success(),
        "tests/helm/render.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = repo_root().join("deploy/manifests/karpenter-rs.yaml");
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(
        committed == String::from_utf8(out.stdout).unwrap(),
        "{} is stale: run deploy/generate.sh and commit the result",
        path.display()
    );
}

/// Both configurations with `caBundle` and the labels removed: the chart leaves the CA to the
/// binary and adds Helm's labels.
fn comparable(mut doc: Value) -> Value {
    if let Some(metadata) = doc.as_object_mut().unwrap().remove("metadata") {
        doc["name"] = metadata["name"].clone();
    }
    for webhook in doc["webhooks"].as_array_mut().unwrap() {
        webhook["clientConfig"].as_object_mut().unwrap().remove("caBundle");
    }
    doc
}

#[test]
fn webhook_configurations_are_what_the_binary_prints() {
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n").unwrap();
    for (docs, namespace, service, port) in [
        (default_render("karpenter"), "karpenter", "karpenter-rs", "443"),
        (ci_render("platform"), "platform", "autoscaler", "8443"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_karpenter-rs"))
            .args(["webhook-config", "--service", service, "--namespace", namespace, "--port", port])
            .arg("--ca-file")
            .arg(ca.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let printed = documents(&String::from_utf8(out.stdout).unwrap());
        assert_eq!(printed.len(), 2);
        for expected in printed {
            let kind = expected["kind"].as_str().unwrap().to_string();
            let name = expected["metadata"]["name"].as_str().unwrap().to_string();
            let rendered = find(&docs, &kind, &name).clone();
            assert!(
                rendered["webhooks"][0]["clientConfig"].get("caBundle").is_none(),
                "the chart must leave caBundle to the binary"
            );
            assert_eq!(
                comparable(rendered),
                comparable(expected),
                "{kind} {name} differs from `karpenter-rs webhook-config`"
            );
        }
    }
}

/// Environment variables the chart sets that are no flag of `karpenter-rs run`: MIMALLOC_ALLOW_THP
/// is read by the allocator as the process starts.
const NOT_IN_RUN_HELP: &[&str] = &["MIMALLOC_ALLOW_THP"];

#[test]
fn deployment_sets_every_setting_of_run_and_nothing_else() {
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-rs"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let read: BTreeSet<String> = help
        .split("[env: ")
        .skip(1)
        .map(|rest| rest.split(['=', ']']).next().unwrap().to_string())
        .collect();
    assert!(read.contains("CLUSTER_NAME") && read.len() > 20, "unexpected `run --help`:\n{help}");
    let set = env_names(&container(&ci_render("platform"), "autoscaler"));
    let missing: Vec<_> = read.difference(&set).collect();
    assert!(missing.is_empty(), "the chart (ci/all-values.yaml) does not set {missing:?}");
    let unknown: Vec<_> = set
        .iter()
        .filter(|n| !read.contains(*n) && !NOT_IN_RUN_HELP.contains(&n.as_str()) && *n != "AWS_STS_REGIONAL_ENDPOINTS")
        .collect();
    assert!(unknown.is_empty(), "the chart sets variables the binary does not read: {unknown:?}");
}

#[test]
fn values_reach_the_container() {
    let docs = ci_render("platform");
    let c = container(&docs, "autoscaler");
    let env = |name: &str| {
        let entry = c["env"].as_array().unwrap().iter().find(|e| e["name"] == name).cloned();
        entry.unwrap_or_else(|| panic!("{name} not set"))
    };
    assert_eq!(env("CLUSTER_NAME")["value"], "ssungz-cluster");
    assert_eq!(env("DEFAULT_TTL_SECONDS_AFTER_EMPTY")["value"], "none");
    assert_eq!(env("BIND_PODS")["value"], "false");
    assert_eq!(env("LEADER_ELECT")["value"], "false");
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(
        c["envFrom"],
        json!([{"configMapRef": {"name": "autoscaler-proxy", "optional": true}}])
    );
    let deployment = find(&docs, "Deployment", "autoscaler");
    assert_eq!(
        deployment["spec"]["strategy"],
        json!({"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    );
    assert_eq!(
        deployment["spec"]["template"]["spec"]["dnsConfig"],
        json!({"options": [{"name": "ndots", "value": "2"}]})
    );
    assert_eq!(env("WEBHOOK_PORT")["value"], "9443");
    assert_eq!(env("CERT_SECRET")["value"], "autoscaler-webhook-cert");
    assert_eq!(env("CERT_EXTRA_SAN")["value"], "karpenter.example.com,10.0.0.10");
    assert_eq!(env("DEPROVISIONING_INTERVAL")["value"], "30s");
    assert_eq!(env("GC_GRACE_PERIOD")["value"], "10m");
    let tags: Value = serde_json::from_str(env("TAGS")["value"].as_str().unwrap()).unwrap();
    assert_eq!(tags, json!({"team": "platform", "cost-center": "4711"}));
    assert_eq!(env("VM_MEMORY_OVERHEAD_PERCENT")["value"], "0.08");
    assert_eq!(env("RESERVED_ENIS")["value"], "1");
    assert_eq!(env("ENABLE_POD_ENI")["value"], "true");
    assert_eq!(env("INTERRUPTION_QUEUE_NAME")["value"], "ssungz-cluster");
    assert_eq!(
        env("LEADER_ELECTION_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(env("SYSTEM_NAMESPACE")["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace");
    assert_eq!(
        c["image"],
        format!(
            "111122223333.dkr.ecr.ap-northeast-2.amazonaws.com/karpenter-rs@sha256:{}",
            "0".repeat(64)
        )
    );
    // The price list is a mounted ConfigMap whose file PRICE_OVERRIDES names.
    let path = env("PRICE_OVERRIDES")["value"].as_str().unwrap().to_string();
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "price-overrides")
        .unwrap();
    let file = path.strip_prefix(&format!("{}/", mount["mountPath"].as_str().unwrap())).unwrap();
    let prices: Value = serde_yaml_ng::from_str(
        find(&docs, "ConfigMap", "autoscaler-price-overrides")["data"][file]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(prices, json!({"t3.large": 0.0832, "t3.xlarge": 0.1664}));
    // Role and RoleBinding in the release namespace, the Secret rule on the configured name.
    let role = find(&docs, "Role", "autoscaler");
    assert_eq!(role["metadata"]["namespace"], "platform");
    assert!(role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["resourceNames"] == json!(["autoscaler-webhook-cert"])));
    // Karpenter's settings ConfigMap is read by name, nothing more.
    assert!(role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["resources"] == json!(["configmaps"])
            && r["resourceNames"] == json!(["karpenter-global-settings"])
            && r["verbs"] == json!(["get"])));
    // Left empty, the settings the ConfigMap may decide are not set by the chart.
    let defaults = env_names(&container(&default_render("karpenter"), "karpenter-rs"));
    for name in [
        "TAGS",
        "VM_MEMORY_OVERHEAD_PERCENT",
        "ENABLE_ENI_LIMITED_POD_DENSITY",
        "RESERVED_ENIS",
        "ENABLE_POD_ENI",
        "INTERRUPTION_QUEUE_NAME",
        "BATCH_MAX_DURATION",
        "BATCH_IDLE_DURATION",
    ] {
        assert!(!defaults.contains(name), "{name} is set by default");
    }
    let sa = find(&docs, "ServiceAccount", "autoscaler-sa");
    assert_eq!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::111122223333:role/KarpenterControllerRole-ssungz-cluster"
    );
    let monitor = find(&docs, "ServiceMonitor", "autoscaler");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http-metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["interval"], "30s");
    // Without the flag there is no ServiceMonitor (its CRD may not exist).
    assert!(!default_render("karpenter").iter().any(|d| d["kind"] == "ServiceMonitor"));
}

#[test]
fn deployment_is_highly_available_and_hardened() {
    let docs = default_render("karpenter");
    let deployment = find(&docs, "Deployment", "karpenter-rs");
    let pod = &deployment["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["spec"]["strategy"], json!({"rollingUpdate": {"maxUnavailable": 1}}));
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(find(&docs, "PodDisruptionBudget", "karpenter-rs")["spec"]["maxUnavailable"], 1);
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert!(c["resources"]["requests"]["cpu"].is_string() && c["resources"]["limits"]["memory"].is_string());
    assert_eq!(c["livenessProbe"]["httpGet"], json!({"path": "/healthz", "port": "http"}));
    assert_eq!(c["readinessProbe"]["httpGet"], json!({"path": "/readyz", "port": "http"}));
    let port = |name: &str| c["ports"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap()["containerPort"].clone();
    assert_eq!(port("http"), 8081);
    assert_eq!(port("https-webhook"), 8443);
    let env = env_names(c);
    assert!(env.contains("LEADER_ELECT") && env.contains("POD_NAME"));
    // No extra names by default: an empty CERT_EXTRA_SAN would be one empty name.
    assert!(!env.contains("CERT_EXTRA_SAN"));
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(spread["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"], "karpenter-rs");
    let term = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0];
    assert_eq!(
        term["matchExpressions"][0],
        json!({"key": "karpenter.sh/provisioner-name", "operator": "DoesNotExist"}),
        "karpenter-rs must not run on a node it may remove"
    );
    let anti = &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(anti["labelSelector"]["matchLabels"]["app.kubernetes.io/name"], "karpenter-rs");
    let service = find(&docs, "Service", "karpenter-rs");
    let webhook_port = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "https-webhook")
        .unwrap();
    assert_eq!(webhook_port["port"], 443);
    assert_eq!(webhook_port["targetPort"], "https-webhook");
    assert!(service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "http-metrics"));
    // No certificate is mounted: the binary manages it in a Secret.
    assert!(!pod["volumes"].as_array().unwrap().iter().any(|v| v.get("secret").is_some()));
}

/// `# -- text` comments of values.yaml: (dotted key, description), in file order.
fn documented_values() -> Vec<(String, String)> {
    values_doc::documented_values(&helm::chart_dir().join("values.yaml"))
}

/// The table of Helm values in docs/install.md, generated from values.yaml.
fn values_table() -> String {
    let text = std::fs::read_to_string(helm::chart_dir().join("values.yaml")).unwrap();
    let values: Value = serde_yaml_ng::from_str(&text).unwrap();
    let mut table = String::from("| value | default | meaning |\n|---|---|---|\n");
    for (key, doc) in documented_values() {
        let default = key.split('.').fold(&values, |v, k| &v[k]);
        let shown = match default {
            Value::String(s) if s.is_empty() => "`\"\"`".to_string(),
            Value::String(s) => format!("`{s}`"),
            other => {
                let compact = other.to_string();
                if compact.len() <= 40 {
                    format!("`{compact}`")
                } else {
                    "see `values.yaml`".to_string()
                }
            }
        };
        table.push_str(&format!("| `{key}` | {shown} | {} |\n", doc.replace('|', "\\|")));
    }
    table
}

#[test]
fn every_value_is_documented_and_in_the_install_doc_table() {
    let text = std::fs::read_to_string(helm::chart_dir().join("values.yaml")).unwrap();
    let values: Value = serde_yaml_ng::from_str(&text).unwrap();
    let documented: Vec<String> = documented_values().into_iter().map(|(k, _)| k).collect();
    // Every leaf (or opaque map/list) is documented itself or through an ancestor.
    fn leaves(prefix: &str, v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) if !map.is_empty() => {
                for (k, child) in map {
                    let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    leaves(&key, child, out);
                }
            }
            _ => out.push(prefix.to_string()),
        }
    }
    let mut all = Vec::new();
    leaves("", &values, &mut all);
    let undocumented: Vec<_> = all
        .iter()
        .filter(|leaf| !documented.iter().any(|d| *leaf == d || leaf.starts_with(&format!("{d}."))))
        .collect();
    assert!(
        undocumented.is_empty(),
        "values.yaml keys without a `# -- ` comment: {undocumented:?}"
    );
    let install = std::fs::read_to_string(repo_root().join("docs/install.md")).unwrap();
    let table = values_table();
    assert!(
        install.contains(&table),
        "docs/install.md's table of Helm values is stale; replace it with:\n\n{table}"
    );
}

/// `helm template` of the chart with the cluster name and `args`: (success, stderr).
fn template_with(args: &[&str]) -> (bool, String) {
    let chart = helm::chart_dir();
    let mut all = vec!["template", "karpenter-rs", chart.to_str().unwrap(), "--set", CLUSTER];
    all.extend_from_slice(args);
    let (ok, _, stderr) = helm::run(&all);
    (ok, stderr)
}

/// `helm lint --strict` of the chart with the cluster name and `args`: (success, its output).
fn lint_with(args: &[&str]) -> (bool, String) {
    let chart = helm::chart_dir();
    let mut all = vec!["lint", "--strict", chart.to_str().unwrap(), "--set", CLUSTER];
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = helm::run(&all);
    (ok, format!("{stdout}{stderr}"))
}

/// What helm prints for a key the schema does not know, e.g. `controller.resources`:
/// `at '/controller': additional properties 'resources' not allowed`.
fn refusal(key: &str) -> String {
    let (parent, name) = key.rsplit_once('.').unwrap_or(("", key));
    let pointer = if parent.is_empty() {
        String::new()
    } else {
        format!("/{}", parent.replace('.', "/"))
    };
    format!("at '{pointer}': additional properties '{name}' not allowed")
}

/// Sets `key` and expects `helm template` and `helm lint` to fail, naming it.
fn assert_refused(key: &str) {
    let set = format!("{key}=x");
    let expected = refusal(key);
    let (ok, stderr) = template_with(&["--set", &set]);
    assert!(!ok, "helm template accepted {key}");
    assert!(stderr.contains(&expected), "helm template: expected {expected:?}, got:\n{stderr}");
    let (ok, output) = lint_with(&["--set", &set]);
    assert!(!ok, "helm lint accepted {key}");
    assert!(output.contains(&expected), "helm lint: expected {expected:?}, got:\n{output}");
}

#[test]
fn mistyped_keys_fail_template_and_lint_naming_the_key() {
    for key in [
        "contoller",
        "settings.aws.clustrName",
        "image.pullPolcy",
        "webhook.certExtraSan",
        "serviceMonitor.enable",
    ] {
        assert_refused(key);
    }
}

#[test]
fn values_of_the_wrong_type_or_range_fail_naming_the_value() {
    for (args, expected) in [
        (["--set", "replicas=-1"], "at '/replicas': minimum: got -1, want 0"),
        (
            ["--set", "logFormat=console"],
            "at '/logFormat': value must be one of 'plain', 'json'",
        ),
        (["--set", "logLevel=fatal"], "at '/logLevel'"),
        (["--set", "imagePullPolicy=Sometimes"], "at '/imagePullPolicy'"),
        (["--set", "webhook.port=70000"], "at '/webhook/port': maximum"),
        (["--set", "settings.batchMaxDuration=0s"], "at '/settings/batchMaxDuration'"),
        (["--set", "settings.gcInterval=2 minutes"], "at '/settings/gcInterval'"),
        (["--set", "webhook.certValidity=3x"], "at '/webhook/certValidity'"),
        (
            ["--set", "settings.defaultTtlSecondsAfterEmpty=never"],
            "at '/settings/defaultTtlSecondsAfterEmpty'",
        ),
        (
            ["--set", "settings.maxNodeLaunchesPerMinute=-1"],
            "at '/settings/maxNodeLaunchesPerMinute'",
        ),
        (["--set", "settings.aws.enablePodENI=yes"], "at '/settings/aws/enablePodENI'"),
        (["--set", "settings.aws.reservedENIs=-1"], "at '/settings/aws/reservedENIs'"),
        (
            ["--set", "settings.aws.vmMemoryOverheadPercent=1.5"],
            "at '/settings/aws/vmMemoryOverheadPercent'",
        ),
        (["--set", "settings.aws.clusterCIDR=10.100.0.0"], "at '/settings/aws/clusterCIDR'"),
        (
            ["--set", "podAnnotations.example\\.com/scrape=true"],
            "at '/podAnnotations/example.com~1scrape': got boolean, want string",
        ),
        // Unquoted in YAML, 1.30 is the number 1.3.
        (
            ["--set-json", "settings.kubernetesVersion=1.3"],
            "at '/settings/kubernetesVersion': got number, want string",
        ),
        (
            ["--set-json", r#"settings.aws.tags={"cost-center":4711}"#],
            "at '/settings/aws/tags/cost-center': got number, want string",
        ),
        (
            ["--set", "settings.aws.tags.karpenter\\.sh/managed-by=me"],
            "at '/settings/aws/tags/karpenter.sh~1managed-by': false schema",
        ),
        (
            ["--set", "settings.aws.tags.karpenter-rs\\.sh/managed-by=me"],
            "at '/settings/aws/tags/karpenter-rs.sh~1managed-by': false schema",
        ),
        (
            ["--set", "settings.priceOverrides.t3\\.large=0"],
            "at '/settings/priceOverrides/t3.large'",
        ),
    ] {
        let (ok, stderr) = template_with(&args);
        assert!(!ok, "helm template accepted {args:?}");
        assert!(stderr.contains(expected), "{args:?}: expected {expected:?}, got:\n{stderr}");
    }
    // Each form the binary reads passes, as `--set` (numbers and booleans) and `--set-string` give it.
    for args in [
        ["--set", "settings.defaultTtlSecondsAfterEmpty=60"],
        ["--set", "settings.defaultTtlSecondsUntilExpired=NONE"],
        ["--set", "podDisruptionBudget.maxUnavailable=50%"],
        ["--set", "settings.aws.enablePodENI=true"],
        ["--set-string", "settings.aws.enablePodENI=true"],
        ["--set", "settings.aws.reservedENIs=2"],
        ["--set-string", "settings.aws.reservedENIs=2"],
        ["--set-json", "settings.aws.vmMemoryOverheadPercent=0.1"],
        ["--set-string", "settings.aws.vmMemoryOverheadPercent=0.1"],
        ["--set", "settings.batchMaxDuration=1m30s"],
        ["--set-string", "settings.replacementTimeout=0"],
        ["--set", "logLevel=info\\,karpenter_rs::webhook=warn"],
        ["--set-json", r#"settings.priceOverrides={"t3.large":{"onDemand":0.1,"spot":0.03}}"#],
    ] {
        let (ok, stderr) = template_with(&args);
        assert!(ok, "{args:?} refused:\n{stderr}");
    }
}

/// What docs/install.md's "Karpenter's values" table says of a key of Karpenter's chart.
#[derive(Clone, Debug, PartialEq)]
enum KarpenterValue {
    /// The same key, with the same meaning, in our chart.
    Same,
    /// Another name of our key (which wins when both are set).
    Alias(String),
    /// Another name of our key whose keys override ours (ours always holds defaults).
    Overrides(String),
    /// Refused by the schema.
    Refused,
}

/// The code spans (`...`) of a Markdown cell.
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// docs/install.md's "Karpenter's values" table: each Karpenter key and what the chart does with it.
fn karpenter_values_table() -> Vec<(String, KarpenterValue)> {
    let install = std::fs::read_to_string(repo_root().join("docs/install.md")).unwrap();
    let section = install
        .split("## Karpenter's values")
        .nth(1)
        .expect("docs/install.md has a section \"Karpenter's values\"");
    let mut rows = Vec::new();
    for line in section.lines().skip_while(|l| !l.starts_with("| Karpenter value |")).skip(2) {
        let Some(row) = line.strip_prefix("| ") else { break };
        let (keys, behaviour) = row.split_once(" | ").unwrap_or_else(|| panic!("malformed row {line:?}"));
        let behaviour = behaviour.trim_end_matches(" |");
        let value = if behaviour.starts_with("same") {
            KarpenterValue::Same
        } else if behaviour.starts_with("alias of `") {
            KarpenterValue::Alias(code_spans(behaviour).remove(0))
        } else if behaviour.starts_with("overrides `") {
            KarpenterValue::Overrides(code_spans(behaviour).remove(0))
        } else if behaviour.starts_with("refused") {
            KarpenterValue::Refused
        } else {
            panic!("row {line:?}: expected same, alias of `...`, overrides `...` or refused");
        };
        for key in code_spans(keys) {
            rows.push((key, value.clone()));
        }
    }
    assert!(
        rows.len() > 40,
        "docs/install.md's table of Karpenter's values is missing or cut short"
    );
    rows
}

/// Every key of Karpenter's chart from v0.27 to v0.31 (`aws@v0.27.0` ... `aws@v0.31.5`:
/// charts/karpenter/values.yaml), down to the values users set as a whole.
const KARPENTER_VALUES: &[&str] = &[
    "nameOverride",
    "fullnameOverride",
    "additionalLabels",
    "additionalAnnotations",
    "imagePullPolicy",
    "imagePullSecrets",
    "serviceAccount.create",
    "serviceAccount.name",
    "serviceAccount.annotations",
    "additionalClusterRoleRules",
    "serviceMonitor.enabled",
    "serviceMonitor.additionalLabels",
    "serviceMonitor.endpointConfig",
    "replicas",
    "revisionHistoryLimit",
    "strategy",
    "podLabels",
    "podAnnotations",
    "podDisruptionBudget.name",
    "podDisruptionBudget.maxUnavailable",
    "priorityClassName",
    "terminationGracePeriodSeconds",
    "hostNetwork",
    "dnsPolicy",
    "dnsConfig",
    "nodeSelector",
    "affinity",
    "topologySpreadConstraints",
    "tolerations",
    "extraVolumes",
    "extraObjects",
    "podSecurityContext",
    "controller.image.repository",
    "controller.image.tag",
    "controller.image.digest",
    "controller.env",
    "controller.envFrom",
    "controller.resources",
    "controller.securityContext",
    "controller.outputPaths",
    "controller.errorOutputPaths",
    "controller.logLevel",
    "controller.logEncoding",
    "controller.extraVolumeMounts",
    "controller.sidecarContainer",
    "controller.sidecarVolumeMounts",
    "controller.metrics.port",
    "controller.healthProbe.port",
    "webhook.logLevel",
    "webhook.port",
    "logLevel",
    "logEncoding",
    "settings.batchMaxDuration",
    "settings.batchIdleDuration",
    "settings.aws.assumeRoleARN",
    "settings.aws.assumeRoleDuration",
    "settings.aws.clusterCABundle",
    "settings.aws.clusterName",
    "settings.aws.clusterEndpoint",
    "settings.aws.defaultInstanceProfile",
    "settings.aws.enablePodENI",
    "settings.aws.enableENILimitedPodDensity",
    "settings.aws.isolatedVPC",
    "settings.aws.nodeNameConvention",
    "settings.aws.vmMemoryOverheadPercent",
    "settings.aws.interruptionQueueName",
    "settings.aws.tags",
    "settings.featureGates.driftEnabled",
];

#[test]
fn every_karpenter_value_has_a_row_in_the_install_doc() {
    let table = karpenter_values_table();
    let missing: Vec<_> = KARPENTER_VALUES
        .iter()
        .filter(|key| !table.iter().any(|(k, _)| *key == k || key.starts_with(&format!("{k}."))))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/install.md's \"Karpenter's values\" says nothing of {missing:?}"
    );
}

#[test]
fn karpenter_values_of_the_same_name_are_values_of_the_chart() {
    let documented: Vec<String> = documented_values().into_iter().map(|(k, _)| k).collect();
    for (key, value) in karpenter_values_table() {
        let ours = match &value {
            KarpenterValue::Same => &key,
            KarpenterValue::Alias(ours) | KarpenterValue::Overrides(ours) => ours,
            KarpenterValue::Refused => continue,
        };
        assert!(documented.contains(ours), "{key} ({value:?}): {ours} is no value of values.yaml");
    }
}

#[test]
fn karpenter_values_without_meaning_here_fail_naming_the_key() {
    let refused: Vec<String> = karpenter_values_table()
        .into_iter()
        .filter(|(_, v)| *v == KarpenterValue::Refused)
        .map(|(k, _)| k)
        .collect();
    assert!(refused.iter().any(|k| k == "controller.image") && refused.iter().any(|k| k == "logEncoding"));
    for key in &refused {
        assert_refused(key);
    }
}

/// Karpenter's alias, our key, a value for them and another value.
const ALIASES: &[(&str, &str, &str, &str)] = &[
    ("imagePullPolicy", "image.pullPolicy", r#""Always""#, r#""Never""#),
    (
        "controller.env",
        "extraEnv",
        r#"[{"name":"HTTPS_PROXY","value":"http://proxy.example.com:3128"}]"#,
        r#"[{"name":"NO_PROXY","value":"169.254.169.254"}]"#,
    ),
    (
        "controller.envFrom",
        "extraEnvFrom",
        r#"[{"secretRef":{"name":"proxy"}}]"#,
        r#"[{"configMapRef":{"name":"proxy"}}]"#,
    ),
    (
        "controller.extraVolumeMounts",
        "extraVolumeMounts",
        r#"[{"name":"scratch","mountPath":"/scratch"}]"#,
        r#"[{"name":"cache","mountPath":"/cache"}]"#,
    ),
];

#[test]
fn karpenter_aliases_render_what_our_keys_render() {
    let table: Vec<(String, String)> = karpenter_values_table()
        .into_iter()
        .filter_map(|(k, v)| match v {
            KarpenterValue::Alias(ours) => Some((k, ours)),
            _ => None,
        })
        .collect();
    let tested: Vec<(String, String)> = ALIASES.iter().map(|(k, o, _, _)| (k.to_string(), o.to_string())).collect();
    assert_eq!(table, tested, "docs/install.md's aliases and the ones tested here differ");
    // `--set-json key=<JSON>` for each value, after the cluster name.
    let render = |values: &[String]| {
        let mut args = vec!["--set", CLUSTER];
        for value in values {
            args.extend(["--set-json", value.as_str()]);
        }
        documents(&helm::template("karpenter-rs", "karpenter", &args))
    };
    let defaults = default_render("karpenter");
    for (karpenter, ours, value, other) in ALIASES {
        let with_ours = render(&[format!("{ours}={value}")]);
        assert_ne!(with_ours, defaults, "{ours}={value} changes nothing");
        let with_alias = render(&[format!("{karpenter}={value}")]);
        assert!(with_alias == with_ours, "{karpenter} renders otherwise than {ours}");
        let with_both = render(&[format!("{karpenter}={other}"), format!("{ours}={value}")]);
        assert!(with_both == with_ours, "with both set, {karpenter} wins over {ours}");
    }
}

/// Karpenter v0.31's getting-started command (its `helm upgrade --install`, values as a user has
/// them) renders, with its controller resources on the container: `controller.resources` and
/// `controller.securityContext` override ours key by key, and the keys they do not set keep ours.
#[test]
fn karpenters_getting_started_command_renders_with_its_resources_on_the_container() {
    let args = [
        "--set",
        r#"serviceAccount.annotations.eks\.amazonaws\.com/role-arn=arn:aws:iam::111122223333:role/ssungz-cluster-karpenter"#,
        "--set",
        "settings.aws.clusterName=ssungz-cluster",
        "--set",
        "settings.aws.defaultInstanceProfile=KarpenterNodeInstanceProfile-ssungz-cluster",
        "--set",
        "settings.aws.interruptionQueueName=ssungz-cluster",
        "--set",
        "controller.resources.requests.cpu=1",
        "--set",
        "controller.resources.requests.memory=1Gi",
        "--set",
        "controller.resources.limits.cpu=1",
        "--set",
        "controller.resources.limits.memory=1Gi",
    ];
    let (ok, stderr) = lint_with(&args);
    assert!(ok, "helm lint refuses Karpenter's getting-started values:\n{stderr}");
    let docs = documents(&helm::template("karpenter-rs", "karpenter", &args));
    let c = container(&docs, "karpenter-rs");
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": 1, "memory": "1Gi"}}),
        "{c:#}"
    );
    // Only what it sets is overridden.
    let ours = container(&default_render("karpenter"), "karpenter-rs");
    let docs = documents(&helm::template(
        "karpenter-rs",
        "karpenter",
        &[
            "--set",
            CLUSTER,
            "--set",
            "controller.resources.limits.memory=2Gi",
            "--set",
            "controller.securityContext.runAsUser=2000",
        ],
    ));
    let c = container(&docs, "karpenter-rs");
    let mut expected = ours["resources"].clone();
    expected["limits"]["memory"] = json!("2Gi");
    assert_eq!(c["resources"], expected);
    let mut expected = ours["securityContext"].clone();
    expected["runAsUser"] = json!(2000);
    assert_eq!(c["securityContext"], expected);
}

/// The dotted paths of the properties values.schema.json declares; fails on an object that lists
/// properties yet accepts others.
fn schema_paths(schema: &Value, prefix: &str, out: &mut Vec<String>) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let at = if prefix.is_empty() { "the root" } else { prefix };
    assert_eq!(
        schema["additionalProperties"], false,
        "values.schema.json: {at} accepts keys it does not list"
    );
    for (key, child) in properties {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        schema_paths(child, &path, out);
        out.push(path);
    }
}

#[test]
fn schema_declares_every_value_and_only_values_and_aliases() {
    let text = std::fs::read_to_string(helm::chart_dir().join("values.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    let mut declared = Vec::new();
    schema_paths(&schema, "", &mut declared);
    let documented: Vec<String> = documented_values().into_iter().map(|(k, _)| k).collect();
    let undeclared: Vec<_> = documented.iter().filter(|k| !declared.contains(k)).collect();
    assert!(undeclared.is_empty(), "values.schema.json lacks {undeclared:?}");
    let overrides: Vec<String> = karpenter_values_table()
        .into_iter()
        .filter(|(_, v)| matches!(v, KarpenterValue::Overrides(_)))
        .map(|(k, _)| k)
        .collect();
    let mut aliases: Vec<&str> = ALIASES.iter().map(|(k, _, _, _)| *k).collect();
    aliases.extend(overrides.iter().map(String::as_str));
    let unknown: Vec<_> = declared
        .iter()
        .filter(|p| {
            !documented.contains(p) && !aliases.contains(&p.as_str()) && !documented.iter().any(|d| d.starts_with(&format!("{p}.")))
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "values.schema.json declares {unknown:?}, which are neither values nor aliases"
    );
}

/// Renders with `args` into a fresh namespace and applies everything with --dry-run=server:
/// schemas, defaulting and admission of the real API server, nothing stored.
fn apply_dry_run(args: &[&str]) {
    let cluster = cluster();
    let namespace = unique("chart");
    kubectl_ok(cluster, &["create", "namespace", &namespace], None);
    let mut all = vec!["--include-crds"];
    all.extend_from_slice(args);
    let docs = documents(&helm::template("karpenter-rs", &namespace, &all));
    // The ServiceMonitor's CRD belongs to the Prometheus Operator, which the local cluster lacks.
    let applied: Vec<&Value> = docs.iter().filter(|d| d["kind"] != "ServiceMonitor").collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": applied});
    let out = kubectl(
        cluster,
        &["apply", "--dry-run=server", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&list.to_string()),
    );
    kubectl(cluster, &["delete", "namespace", &namespace, "--wait=false"], None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl apply --dry-run=server failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for doc in &applied {
        let name = doc["metadata"]["name"].as_str().unwrap();
        assert!(
            stdout.contains(&format!("/{name} serverside-applied (server dry run)")),
            "{name} not applied:\n{stdout}"
        );
    }
}

#[test]
fn default_render_passes_the_api_server_validation() {
    apply_dry_run(&["--set", CLUSTER]);
}

#[test]
fn non_default_render_passes_the_api_server_validation() {
    apply_dry_run(&["-f", helm::ci_values().to_str().unwrap()]);
}
