//! The addresses a karpenter-rs process really bound, read from its "karpenter-rs started" log
//! line. Tests start the binary on port 0 (any free port) and read the ports back: a port found
//! free beforehand can be taken by any other process (an outgoing connection included) before
//! the binary binds it, and the binary then exits at start. Also a plain HTTP GET for its
//! probe and metrics ports, and a run of a subcommand with its stdin fed.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Where a karpenter-rs process listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addresses {
    /// The HTTPS admission webhook.
    pub webhook: SocketAddr,
    /// /metrics.
    pub metrics: SocketAddr,
    /// /healthz and /readyz.
    pub health: SocketAddr,
}

/// The addresses in a "karpenter-rs started" log line, in the text or the JSON log format.
pub fn parse_started(line: &str) -> Option<Addresses> {
    if !line.contains("karpenter-rs started") {
        return None;
    }
    let field = |key: &str| -> Option<SocketAddr> {
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(line) {
            let value = json.get("fields").and_then(|f| f.get(key)).or_else(|| json.get(key))?;
            return value.as_str()?.parse().ok();
        }
        let prefix = format!("{key}=");
        line.split_whitespace()
            .find_map(|token| token.strip_prefix(prefix.as_str())?.parse().ok())
    };
    Some(Addresses {
        webhook: field("webhook")?,
        metrics: field("metrics")?,
        health: field("health")?,
    })
}

/// Waits at most `timeout` for the started line in `log`, the file the process `child` writes
/// its output to. Panics with the log when the process exits first or the line never comes
/// (killing it then, so that nothing is left running).
pub fn wait_started(child: &mut Child, log: &Path, timeout: Duration) -> Addresses {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(addresses) = text.lines().find_map(parse_started) {
            return addresses;
        }
        if let Some(status) = child.try_wait().expect("polling the karpenter-rs process") {
            panic!("karpenter-rs exited ({status}) before it started; log {}:\n{text}", log.display());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "karpenter-rs did not log its start within {timeout:?}; log {}:\n{text}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A plain HTTP GET of `path` on `address`: the status and the whole response.
pub fn http_get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(address).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let status = body.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body))
}

/// Runs `command` to its end with `stdin` piped in; its stdout and stderr are captured.
pub fn output_with_stdin(command: &mut Command, stdin: &str) -> Output {
    use std::io::Write;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(stdin.as_bytes())
        .expect("writing stdin");
    child.wait_with_output().expect("waiting for the binary")
}

/// `karpenter-rs webhook` on 127.0.0.1, every port 0 (any free port), with its certificates in
/// `cert_dir` and its output in `log`; the caller adds what else it needs and spawns it.
pub fn webhook_command(bin: &str, cert_dir: &Path, log: &Path) -> Command {
    let out = std::fs::File::create(log).unwrap();
    let mut command = Command::new(bin);
    command
        .arg("webhook")
        .env("CLUSTER_NAME", "ssungz-cluster")
        .env("BIND_ADDRESS", "127.0.0.1")
        .env("WEBHOOK_PORT", "0")
        .env("METRICS_PORT", "0")
        .env("HEALTH_PROBE_PORT", "0")
        .env("CERT_DIR", cert_dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    command
}

/// Makes serving certificates for a karpenter-rs process with `karpenter-rs certs` into `dir`.
#[allow(dead_code)] // not every test binary that includes this module starts the binary
pub fn make_certs(bin: &str, dir: &Path) {
    let made = Command::new(bin)
        .args(["certs", "--out-dir", dir.to_str().expect("a UTF-8 path")])
        .output()
        .expect("running karpenter-rs certs");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
}

/// A started process, killed when dropped: a failing test leaves nothing running.
pub struct Running(pub Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
