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
    let refused = dir.path().join("kubeconfig");
    std::fs::write(
        &refused,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    let out = nodes_once(&refused);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("listing nodes:") || stderr.contains("listing pods:"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
