//! The built binary itself: flags and environment variables, the servers it starts, the
//! subcommands that write files, and a clean exit on SIGTERM.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_karpenter-rs");

#[path = "support/process.rs"]
mod process;

use process::{http_get, Running};

/// Sends SIGTERM and waits (at most 30 s) for the process to exit.
fn terminate(child: &mut std::process::Child) -> std::process::ExitStatus {
    let kill = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn certs_subcommand_writes_a_ca_and_serving_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["certs", "--out-dir"])
        .arg(dir.path())
        .args([
            "--service",
            "karpenter-rs",
            "--namespace",
            "karpenter",
            "--name",
            "webhook.example.com",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for file in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(dir.path().join(file).exists(), "{file}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("tls.key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "keys are private");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    for name in ["127.0.0.1", "localhost", "karpenter-rs.karpenter.svc", "webhook.example.com"] {
        assert!(stderr.contains(name), "{name} in {stderr}");
    }
}

#[test]
fn run_requires_a_cluster_name() {
    let out = Command::new(BIN).arg("run").env_remove("CLUSTER_NAME").output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cluster-name"));
}

#[test]
fn webhook_on_free_ports_serves_probes_and_metrics_where_it_logs_then_exits_cleanly_on_sigterm() {
    let certs = tempfile::tempdir().unwrap();
    let status = Command::new(BIN)
        .args(["certs", "--out-dir"])
        .arg(certs.path())
        .output()
        .unwrap()
        .status;
    assert!(status.success());
    let log = certs.path().join("webhook.log");
    let mut child = Running(
        process::webhook_command(BIN, certs.path(), &log)
            .env("LOG_FORMAT", "json")
            .spawn()
            .unwrap(),
    );
    // Port 0 everywhere: the started line names the ports really bound.
    let process::Addresses { webhook, metrics, health } = process::wait_started(&mut child, &log, Duration::from_secs(30));
    for address in [webhook, metrics, health] {
        assert_ne!(address.port(), 0, "{address}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(health, "/readyz").map(|(s, _)| s) != Some(200) {
        assert!(Instant::now() < deadline, "never became ready");
        assert!(child.try_wait().unwrap().is_none(), "exited early");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(http_get(health, "/healthz").unwrap().0, 200);
    let (status, body) = http_get(metrics, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("process_resident_memory_bytes"), "{body}");
    assert!(std::net::TcpStream::connect(webhook).is_ok());

    let exit = terminate(&mut child);
    assert!(exit.success(), "{exit:?}");
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logs.contains("\"message\":\"karpenter-rs started\""), "{logs}");
    assert!(logs.contains("webhook stopped"), "{logs}");
}

#[test]
fn crds_subcommand_prints_both_crds() {
    let out = Command::new(BIN).arg("crds").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let names: Vec<&str> = docs.iter().map(|d| d["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["provisioners.karpenter.sh", "awsnodetemplates.karpenter.k8s.aws"]);
}

#[test]
fn webhook_without_a_mounted_certificate_stays_unready_until_it_has_one() {
    // No tls.crt/tls.key: the certificate is self-managed in a Secret, and with no reachable
    // API server there is none yet, so /readyz says no while /healthz says alive.
    let empty = tempfile::tempdir().unwrap();
    let log = empty.path().join("webhook.log");
    let mut child = Running(
        process::webhook_command(BIN, empty.path(), &log)
            .env("KUBECONFIG", empty.path().join("no-kubeconfig"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .spawn()
            .unwrap(),
    );
    let health = process::wait_started(&mut child, &log, Duration::from_secs(30)).health;
    let status = |path: &str| http_get(health, path).map(|(status, _)| status);
    let deadline = Instant::now() + Duration::from_secs(30);
    while status("/healthz") != Some(200) {
        assert!(Instant::now() < deadline, "never answered /healthz");
        assert!(child.try_wait().unwrap().is_none(), "exited early");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(status("/readyz"), Some(503));
    let exit = terminate(&mut child);
    assert!(exit.success(), "{exit:?}");
}

#[test]
fn a_renewal_window_longer_than_the_validity_is_refused_naming_both_flags() {
    let empty = tempfile::tempdir().unwrap();
    let out = process::webhook_command(BIN, empty.path(), &empty.path().join("webhook.log"))
        .args(["--cert-validity", "1h", "--cert-renew-before", "2h"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--cert-validity: invalid value 3600s: must be longer than --cert-renew-before (7200s)"),
        "{stderr}"
    );
}

#[test]
fn the_started_line_is_read_in_both_log_formats() {
    let expected = process::Addresses {
        webhook: "127.0.0.1:43957".parse().unwrap(),
        metrics: "127.0.0.1:44039".parse().unwrap(),
        health: "127.0.0.1:33789".parse().unwrap(),
    };
    let text = "2026-11-30T18:38:51.706021Z  INFO karpenter-rs started cluster=ssungz-cluster webhook=127.0.0.1:43957 metrics=127.0.0.1:44039 health=127.0.0.1:33789";
    assert_eq!(process::parse_started(text), Some(expected));
    let json = r#"{"timestamp":"2026-11-30T18:38:51.706021Z","level":"INFO","message":"karpenter-rs started","cluster":"ssungz-cluster","webhook":"127.0.0.1:43957","metrics":"127.0.0.1:44039","health":"127.0.0.1:33789"}"#;
    assert_eq!(process::parse_started(json), Some(expected));
    assert_eq!(process::parse_started("INFO webhook serving HTTPS address=127.0.0.1:43957"), None);
}

/// Runs `karpenter-rs convert` with `args`, feeding `stdin`.
fn convert(args: &[&str], stdin: &str) -> std::process::Output {
    process::output_with_stdin(Command::new(BIN).arg("convert").args(args).env_remove("CLUSTER_NAME"), stdin)
}

#[test]
fn convert_subcommand_writes_v1_objects_from_files_and_stdin() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/first-writeup");
    let template = std::fs::read_to_string(format!("{fixtures}/awsnodetemplate.yaml")).unwrap();
    let provisioner = format!("{fixtures}/provisioner.yaml");
    let deployment = format!("{fixtures}/nginx-deployment.yaml");
    let out = convert(
        &["--cluster-name", "ssungz-cluster", "-f", &provisioner, "-f", "-", "-f", &deployment],
        &template,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("skipped apps/v1 Deployment \"nginx-karpenter\""), "{stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["NodePool", "EC2NodeClass"], "{text}");
    assert_eq!(
        docs[0]["spec"]["template"]["spec"]["nodeClassRef"]["name"].as_str(),
        Some("service-lt")
    );
    assert!(text.contains("# REPLACE: instanceProfile was not set"), "{text}");
}

#[test]
fn convert_subcommand_fails_naming_field_and_value_without_a_panic() {
    let invalid = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: service}\nspec:\n  providerRef: {name: service-lt}\n  ttlSecondsAfterEmpty: -1\n";
    let out = convert(&["--cluster-name", "ssungz-cluster", "-f", "-"], invalid);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains(
            "-: document 1: Provisioner \"service\" is invalid: spec.ttlSecondsAfterEmpty: invalid value -1: must be 0 or greater"
        ),
        "{stderr}"
    );
    for input in [
        "{not yaml",
        "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nspec: 5\n",
        "- a\n- b\n",
    ] {
        let out = convert(&["--cluster-name", "c", "-f", "-"], input);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{input}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let out = convert(&["--cluster-name", "c", "-f", "/nonexistent/provisioner.yaml"], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("reading /nonexistent/provisioner.yaml"));
    let out = convert(&["--cluster-name", "c"], "");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--filename"));
}

/// A kubeconfig in `dir` for the API server at `server` (the rest of its `cluster:` lines may
/// follow the URL), with a token.
fn kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    path
}

/// `nodes --once` against a kubeconfig, with a bound on how long it may take.
fn nodes_once(kubeconfig: &std::path::Path) -> std::process::Output {
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .args(["nodes", "--once"])
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Bounded: a hang is a failure, not a stuck test.
    while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if child.try_wait().unwrap().is_none() {
        let _ = child.kill();
    }
    child.wait_with_output().unwrap()
}

#[test]
fn nodes_once_without_a_reachable_cluster_fails_with_the_reason_and_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-kubeconfig");
    let out = nodes_once(&missing);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("kubeconfig"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // A kubeconfig whose API server refuses connections: the first watch error ends it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let refused = kubeconfig(dir.path(), &format!("https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true"));
    let out = nodes_once(&refused);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("listing nodes:") || stderr.contains("listing pods:"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn convert_reads_directories_by_name_and_subdirectories_with_recursive() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/first-writeup");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("nested")).unwrap();
    std::fs::copy(format!("{fixtures}/provisioner.yaml"), root.join("b-provisioner.yml")).unwrap();
    std::fs::copy(format!("{fixtures}/nginx-deployment.yaml"), root.join("a-deployment.yaml")).unwrap();
    std::fs::write(root.join("notes.txt"), "not a manifest").unwrap();
    std::fs::copy(format!("{fixtures}/awsnodetemplate.yaml"), root.join("nested/template.yaml")).unwrap();
    let root_arg = root.display().to_string();

    // Without -R the template in the subdirectory is not read: its class is not in the output.
    let out = convert(&["--cluster-name", "ssungz-cluster", "-f", &root_arg], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{root_arg}/a-deployment.yaml: document 1: skipped apps/v1 Deployment")),
        "{stderr}"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let kinds: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("kind: ")).collect();
    assert_eq!(kinds, ["NodePool"], "{text}");

    let out = convert(&["--cluster-name", "ssungz-cluster", "-R", "-f", &root_arg], "");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let kinds: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("kind: ")).collect();
    assert_eq!(
        kinds,
        ["NodePool", "EC2NodeClass"],
        "by name: b-provisioner.yml, then nested/template.yaml"
    );

    // A directory without a manifest, and a file that cannot be read, name the -f value.
    let empty = tempfile::tempdir().unwrap();
    let empty_arg = empty.path().display().to_string();
    let out = convert(&["--cluster-name", "c", "-f", &empty_arg], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: -f {empty_arg}: no .yaml, .yml or .json file in the directory (-R reads its subdirectories too)"
        )),
        "{stderr}"
    );
    let out = convert(
        &["--cluster-name", "c", "-f", &root.join("nested/missing.yaml").display().to_string()],
        "",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: -f ") && stderr.contains("missing.yaml: reading "),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn convert_writes_a_json_list_with_the_comments_on_stderr_and_refuses_other_formats() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/first-writeup");
    let template = std::fs::read_to_string(format!("{fixtures}/awsnodetemplate.yaml")).unwrap();
    let provisioner = format!("{fixtures}/provisioner.yaml");
    let out = convert(
        &["--cluster-name", "ssungz-cluster", "-o", "json", "-f", &provisioner, "-f", "-"],
        &template,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(list["kind"], "List");
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["NodePool", "EC2NodeClass"]);
    assert!(
        stderr.contains("note: EC2NodeClass \"service-lt\" spec.role: REPLACE: instanceProfile was not set"),
        "{stderr}"
    );

    let out = convert(&["--cluster-name", "c", "-o", "xml", "-f", "-"], &template);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("'xml'") && stderr.contains("--output"), "{stderr}");
}

/// A Kubernetes API server that answers lists of `nodes` and of no pods over plain HTTP and
/// holds watches open: enough for `nodes --once`. Serves until the test process ends.
fn fake_api_server(nodes: serde_json::Value) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let nodes = nodes.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let mut request = String::new();
                    if reader.read_line(&mut request).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                        line.clear();
                    }
                    if request.contains("watch=true") || request.contains("watch=1") {
                        let _ =
                            stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
                        std::thread::sleep(Duration::from_secs(120));
                        return;
                    }
                    let (kind, items) = if request.contains("/nodes") {
                        ("NodeList", nodes.clone())
                    } else {
                        ("PodList", serde_json::json!([]))
                    };
                    let body = serde_json::json!({
                        "apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items,
                    })
                    .to_string();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    if stream
                        .write_all(head.as_bytes())
                        .and_then(|_| stream.write_all(body.as_bytes()))
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[test]
fn nodes_shows_extra_labels_sorts_by_a_label_and_falls_back_to_the_snapshot_when_aws_is_unreachable() {
    let node = |name: &str, team: Option<&str>| {
        let mut labels = serde_json::json!({
            "karpenter.sh/provisioner-name": "default",
            "node.kubernetes.io/instance-type": "t3.large",
            "karpenter.sh/capacity-type": "on-demand",
            "topology.kubernetes.io/zone": "ap-northeast-2a",
        });
        if let Some(team) = team {
            labels["team"] = serde_json::json!(team);
        }
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": labels},
            "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "35"}, "conditions": [{"type": "Ready", "status": "True"}]},
        })
    };
    let port = fake_api_server(serde_json::json!([
        node("node-a", Some("payments")),
        node("node-b", None),
        node("node-c", Some("search"))
    ]));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path(), &format!("http://127.0.0.1:{port}"));
    // AWS refuses connections: the header says so and the snapshot's estimates are shown.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = process::output_with_stdin(
        Command::new(BIN)
            .args([
                "nodes",
                "--once",
                "--width",
                "220",
                "--extra-labels",
                "team",
                "--sort",
                "team=dsc",
                "--live-prices",
            ])
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{closed}"))
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            // No controller and no CLUSTER_NAME: no reasons, and the header says why.
            .env_remove("CLUSTER_NAME")
            .env_remove("NODES_CONTROLLER")
            .env_remove("AWS_REGION")
            .env_remove("AWS_DEFAULT_REGION")
            .env_remove("AWS_PROFILE"),
        "",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{text}");
    assert!(text.contains("3 nodes") && text.contains("sort: team=dsc"), "{text}");
    assert!(
        text.contains("prices  the nodes' price annotations, else the built-in snapshot (estimates, ~) (live prices failed: reading the instance types from EC2:"),
        "{text}"
    );
    assert!(
        text.contains("why     - (no reasons: run's settings from the environment: the following required arguments were not provided: --cluster-name <CLUSTER_NAME>)"),
        "{text}"
    );
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("node-")).collect();
    assert_eq!(rows.len(), 3, "{text}");
    for (row, (name, team)) in rows.iter().zip([("node-c", "search"), ("node-a", "payments"), ("node-b", "-")]) {
        assert!(row.starts_with(name), "{name} expected in {row:?}\n{text}");
        assert!(
            row.split_whitespace().any(|cell| cell == team),
            "{team} expected in {row:?}\n{text}"
        );
        assert!(row.contains("~$0."), "a snapshot estimate in {row:?}");
    }

    // A bad flag value names the flag and the value.
    for (flag, value) in [("--sort", "price=up"), ("--extra-labels", "bad key")] {
        let out = Command::new(BIN).args(["nodes", "--once", flag, value]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(flag) && stderr.contains(value), "{stderr}");
    }
}

/// A node as karpenter-rs launches it, created `created` (RFC 3339).
fn launched_node(name: &str, created: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "1", "creationTimestamp": created, "labels": {
            "karpenter.sh/provisioner-name": "default",
            "node.kubernetes.io/instance-type": "t3.large",
            "karpenter.sh/capacity-type": "on-demand",
            "topology.kubernetes.io/zone": "ap-northeast-2a",
        }},
        "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "35"}, "conditions": [{"type": "Ready", "status": "True"}]},
    })
}

/// The explanation of node `name` whose consolidation a do-not-evict pod blocks, as the
/// controller's `/explain/node/NAME?o=json` serializes it.
fn blocked_explanation(name: &str) -> karpenter_rs::explain::Explanation {
    use karpenter_rs::explain::node::{Method, Removal};
    let method = |method: &str, state: &str| Method {
        method: method.to_string(),
        acts: false,
        state: state.to_string(),
        blockers: Vec::new(),
    };
    let mut consolidation = method("consolidation", "blocked: pod default/web has do not evict annotation");
    consolidation.blockers = vec!["pod default/web has do not evict annotation".to_string()];
    karpenter_rs::explain::Explanation::Node(karpenter_rs::explain::NodeExplanation {
        node: name.to_string(),
        provisioner: Some("default".to_string()),
        instance_type: Some("t3.large".to_string()),
        capacity_type: Some("on-demand".to_string()),
        zone: Some("ap-northeast-2a".to_string()),
        price_per_hour: Some(0.104),
        created: Some("2026-01-01T00:00:00Z".to_string()),
        age_seconds: Some(600),
        pods: vec!["default/web".to_string()],
        methods: vec![
            method("expiration", "ttlSecondsUntilExpired is not set"),
            method("drift", "not drifted as of the last check"),
            method("emptiness", "not empty: 1 pod(s), e.g. default/web"),
            consolidation,
        ],
        summary: "consolidation blocked: pod default/web has do not evict annotation".to_string(),
        removal: Removal {
            moves: Vec::new(),
            cluster_price_before: 0.208,
            cluster_price_after: 0.104,
            every_pod_placed: true,
        },
    })
}

/// A controller's metrics port that answers `/explain/node/node-a?o=json` with
/// `blocked_explanation` and any other node with 404, as the real one does for a node it does
/// not know. Serves until the test process ends.
fn fake_controller() -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut stream = stream;
            let mut request = String::new();
            let _ = reader.read_line(&mut request);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let (status, body) = if request.starts_with("GET /explain/node/node-a?o=json ") {
                ("200 OK", serde_json::to_string(&blocked_explanation("node-a")).unwrap())
            } else {
                ("404 Not Found", "node node-b not found".to_string())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// An API server with node-a (the older) and node-b, a kubeconfig for it in a new directory, and
/// the port of a `fake_controller`.
fn two_nodes_and_a_controller() -> (tempfile::TempDir, std::path::PathBuf, u16) {
    let api = fake_api_server(serde_json::json!([
        launched_node("node-a", "2026-01-01T00:00:00Z"),
        launched_node("node-b", "2026-01-02T00:00:00Z")
    ]));
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path(), &format!("http://127.0.0.1:{api}"));
    (dir, kubeconfig, fake_controller())
}

#[test]
fn nodes_once_shows_each_nodes_reason_from_the_controller() {
    let (_dir, kubeconfig, controller) = two_nodes_and_a_controller();
    let url = format!("http://127.0.0.1:{controller}");
    let out = process::output_with_stdin(
        Command::new(BIN)
            .args(["nodes", "--once", "--width", "200", "--controller", &url])
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST"),
        "",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{text}");
    assert!(text.contains(&format!("why     from the controller at {url}")), "{stderr}\n{text}");
    let row = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    assert!(
        row("node-a").ends_with("Ready  consolidation: pod default/web has do not evict annotation"),
        "{text}"
    );
    assert!(row("node-b").ends_with("Ready  node node-b not found"), "{text}");

    // --no-reasons: no column, and no question to the controller.
    let out = Command::new(BIN)
        .args(["nodes", "--once", "--width", "200", "--no-reasons", "--controller", &url])
        .env("KUBECONFIG", &kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !text.contains("WHY") && !text.contains("do not evict"),
        "{text}"
    );
}

/// A tmux server of its own (socket `name`), stopped when dropped.
struct Tmux(String);

impl Tmux {
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.0, "-f", "/dev/null"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane's text once `ready` holds for it, within 30 s.
    fn wait_for(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let pane = self.run(&["capture-pane", "-p", "-t", "viewer"]);
            if ready(&pane) {
                return pane;
            }
            assert!(Instant::now() < deadline, "no {what} within 30s; the pane:\n{pane}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.0, "kill-server"]).output();
    }
}

#[test]
fn nodes_in_a_terminal_shows_reasons_and_enter_opens_the_selected_nodes_explanation() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let (dir, kubeconfig, controller) = two_nodes_and_a_controller();
    let exited = dir.path().join("exit-status");
    let tmux = Tmux(format!("karpenter-rs-binary-{}", std::process::id()));
    let command = format!(
        "env -u KUBERNETES_SERVICE_HOST KUBECONFIG='{}' TERM=xterm-256color '{BIN}' nodes --controller http://127.0.0.1:{controller}; echo $? >'{}'; sleep 30",
        kubeconfig.display(),
        exited.display()
    );
    tmux.run(&["new-session", "-d", "-s", "viewer", "-x", "200", "-y", "30", &command]);
    let table = tmux.wait_for("row with node-a's reason", |p| {
        p.lines()
            .any(|l| l.starts_with("node-a") && l.contains("consolidation: pod default/web has do not evict annotation"))
    });
    assert!(table.contains("explain: Enter"), "{table}");
    // Down selects node-b, Up node-a again; Enter opens node-a's explanation, as `explain node` prints it.
    tmux.run(&["send-keys", "-t", "viewer", "Down"]);
    tmux.run(&["send-keys", "-t", "viewer", "Up"]);
    tmux.run(&["send-keys", "-t", "viewer", "Enter"]);
    let pane = tmux.wait_for("explanation of node-a", |p| {
        p.contains("explain node node-a") && p.contains("METHOD")
    });
    for line in [
        "Node node-a",
        "Provisioner  default",
        "consolidation  no    blocked: pod default/web has do not evict annotation",
    ] {
        assert!(pane.contains(line), "{line:?} missing from\n{pane}");
    }
    // Esc closes it; q then quits.
    tmux.run(&["send-keys", "-t", "viewer", "Escape"]);
    tmux.wait_for("table again", |p| {
        !p.contains("explain node node-a") && p.lines().any(|l| l.starts_with("node-b"))
    });
    tmux.run(&["send-keys", "-t", "viewer", "q"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&exited).unwrap_or_default().trim().is_empty() {
        assert!(Instant::now() < deadline, "the viewer did not exit on q");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(std::fs::read_to_string(&exited).unwrap().trim(), "0");
}
