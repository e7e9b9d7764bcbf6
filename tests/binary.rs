//! The built binary itself: flags and environment variables, the servers it starts, the
//! subcommands that write files, and a clean exit on SIGTERM.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_karpenter-rs");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Sends SIGTERM and waits (at most 30 s) for the process to exit.
/// The three ports a `webhook` process listens on.
struct Ports {
    webhook: u16,
    metrics: u16,
    health: u16,
}

/// `karpenter-rs webhook` on free 127.0.0.1 ports with its certificates in `cert_dir`; the caller
/// adds what else it needs and spawns it.
fn webhook_command(cert_dir: &std::path::Path) -> (Command, Ports) {
    let ports = Ports {
        webhook: free_port(),
        metrics: free_port(),
        health: free_port(),
    };
    let mut command = Command::new(BIN);
    command
        .arg("webhook")
        .env("CLUSTER_NAME", "ssungz-cluster")
        .env("BIND_ADDRESS", "127.0.0.1")
        .env("WEBHOOK_PORT", ports.webhook.to_string())
        .env("METRICS_PORT", ports.metrics.to_string())
        .env("HEALTH_PROBE_PORT", ports.health.to_string())
        .env("CERT_DIR", cert_dir);
    (command, ports)
}

/// A plain HTTP GET of `path` on 127.0.0.1:`port`: the status and the whole response.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let status = body.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body))
}

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
fn webhook_serves_probes_and_metrics_then_exits_cleanly_on_sigterm() {
    let certs = tempfile::tempdir().unwrap();
    let status = Command::new(BIN)
        .args(["certs", "--out-dir"])
        .arg(certs.path())
        .output()
        .unwrap()
        .status;
    assert!(status.success());
    let (mut command, Ports { webhook, metrics, health }) = webhook_command(certs.path());
    let mut child = command
        .env("LOG_FORMAT", "json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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
    assert!(std::net::TcpStream::connect(("127.0.0.1", webhook)).is_ok());

    let exit = terminate(&mut child);
    assert!(exit.success(), "{exit:?}");
    let mut logs = String::new();
    use std::io::Read;
    child.stdout.take().unwrap().read_to_string(&mut logs).unwrap();
    assert!(logs.contains("\"message\":\"karpenter-rs started\""), "{logs}");
    assert!(logs.contains("webhook stopped"), "{logs}");
}

#[test]
fn crds_subcommand_prints_both_crds() {
    let out = Command::new(BIN).arg("crds").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
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
    let (mut command, Ports { health, .. }) = webhook_command(empty.path());
    let mut child = command
        .env("KUBECONFIG", empty.path().join("no-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
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
    let (mut command, _) = webhook_command(empty.path());
    let out = command
        .args(["--cert-validity", "1h", "--cert-renew-before", "2h"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--cert-validity: invalid value 3600s: must be longer than --cert-renew-before (7200s)"),
        "{stderr}"
    );
}
