//! The webhook binary (`karpenter-rs webhook`, real HTTPS on 127.0.0.1 with certificates from
//! `karpenter-rs certs`) under hostile clients: 1,000 concurrent connections, hundreds of idle
//! ones, slowloris (headers and bodies trickled a byte at a time), TLS 1.0 and 1.1 hellos, garbage
//! handshakes, bodies just over 3 MiB. Each gets an answer or a clean refusal, ordinary requests
//! keep being answered in the middle of it, and the process's memory (VmHWM and VmRSS from
//! /proc) stays bounded and comes back down. Every wait has a deadline (a bound, not a timing
//! assertion); the figures are printed.

use std::io::Read;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[path = "support/process.rs"]
#[allow(dead_code)]
mod process;

use process::Running;

const BIN: &str = env!("CARGO_BIN_EXE_karpenter-rs");
/// The server's `--webhook-client-timeout` here: the shipped default.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A /proc/PID/status field in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim_start_matches(':')
                .trim()
                .strip_suffix(" kB")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{field} missing from /proc/{pid}/status"))
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// The first write-up's Provisioner as a CREATE review.
fn review() -> Vec<u8> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/first-writeup/provisioner.yaml"
    ))
    .unwrap();
    let object: Value = serde_yaml_ng::from_str(&text).unwrap();
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "karpenter.sh", "version": "v1alpha5", "kind": "Provisioner"},
        "operation": "CREATE", "name": "service", "object": object}}))
    .unwrap()
}

/// The CA certificate (DER) from a PEM file.
fn ca_der(pem: &str) -> Vec<u8> {
    use base64::Engine;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD.decode(body).unwrap()
}

/// A TLS client trusting only the CA in `ca_pem`.
fn tls_config(ca_pem: &str) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls_pki_types::CertificateDer::from(ca_der(ca_pem))).unwrap();
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

fn tls_connector(ca_pem: &str) -> tokio_rustls::TlsConnector {
    tokio_rustls::TlsConnector::from(Arc::new(tls_config(ca_pem)))
}

/// Whether the server closes `stream` (EOF, reset, or an alert then EOF) before `deadline`; reads
/// and discards what it sends meanwhile.
async fn closed_by_server<S: AsyncReadExt + Unpin>(stream: &mut S, deadline: Duration) -> bool {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(deadline, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await
    .is_ok()
}

/// A ClientHello offering only `version` (0x0301 TLS 1.0, 0x0302 TLS 1.1) and one RSA cipher,
/// without the supported_versions extension.
fn old_client_hello(version: u16) -> Vec<u8> {
    let [major, minor] = version.to_be_bytes();
    let mut body = vec![major, minor];
    body.extend([7u8; 32]); // random
    body.push(0); // session id
    body.extend([0, 2, 0x00, 0x2f]); // TLS_RSA_WITH_AES_128_CBC_SHA
    body.extend([1, 0]); // null compression
    let mut handshake = vec![1, 0, 0, body.len() as u8];
    handshake.extend(body);
    let mut record = vec![0x16, 3, 1, 0, handshake.len() as u8];
    record.extend(handshake);
    record
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_clients_get_answers_or_clean_refusals_and_memory_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Command::new(BIN).args(["certs", "--out-dir"]).arg(dir.path()).output().unwrap();
    assert!(certs.status.success());
    let log = dir.path().join("webhook.log");
    let mut child = Running(
        process::webhook_command(BIN, dir.path(), &log)
            .env("WEBHOOK_CLIENT_TIMEOUT", format!("{}s", CLIENT_TIMEOUT.as_secs()))
            .spawn()
            .unwrap(),
    );
    let addresses = process::wait_started(&mut child.0, &log, Duration::from_secs(30));
    let pid = child.0.id();
    let webhook: SocketAddr = addresses.webhook;
    let url = format!("https://127.0.0.1:{}/validate", webhook.port());
    let ca_pem = std::fs::read_to_string(dir.path().join("ca.crt")).unwrap();
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .http1_only()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let body = review();
    let allowed = |client: reqwest::Client, body: Vec<u8>, url: String| async move {
        let response = client.post(url).header("content-type", "application/json").body(body).send().await;
        match response {
            Ok(r) if r.status() == 200 => r.json::<Value>().await.map(|v| v["response"]["allowed"] == true).unwrap_or(false),
            Ok(r) => {
                eprintln!("status {}", r.status());
                false
            }
            Err(e) => {
                eprintln!("error {e:?}");
                false
            }
        }
    };
    for _ in 0..50 {
        assert!(allowed(client.clone(), body.clone(), url.clone()).await, "warm-up request");
    }
    let idle_rss = status_kib(pid, "VmRSS");
    let idle_fds = open_fds(pid);

    // 1,000 concurrent requests, each on its own connection (HTTP/1.1, no pooling).
    let started = Instant::now();
    let answers: Vec<bool> = futures::future::join_all((0..1000).map(|_| tokio::spawn(allowed(client.clone(), body.clone(), url.clone()))))
        .await
        .into_iter()
        .map(|r| r.unwrap_or(false))
        .collect();
    let concurrent_seconds = started.elapsed().as_secs_f64();
    let answered = answers.iter().filter(|a| **a).count();
    assert_eq!(answered, 1000, "every concurrent request answered");
    let after_concurrent_hwm = status_kib(pid, "VmHWM");
    // A second burst reuses what the first took: the peak does not grow with each burst.
    let again = futures::future::join_all((0..1000).map(|_| tokio::spawn(allowed(client.clone(), body.clone(), url.clone())))).await;
    assert!(
        again.into_iter().all(|r| r.unwrap_or(false)),
        "every request of the second burst answered"
    );
    let after_second_hwm = status_kib(pid, "VmHWM");
    assert!(
        after_second_hwm < after_concurrent_hwm + 16 * 1024,
        "peak RSS grew from {after_concurrent_hwm} KiB to {after_second_hwm} KiB over a second burst"
    );

    // 500 idle connections and 100 slowloris ones (TLS done, headers a byte every 300 ms), and
    // 50 slow bodies; ordinary requests are answered meanwhile, and the server closes every
    // hostile connection after its client timeout.
    let mut idle = Vec::new();
    for _ in 0..500 {
        idle.push(TcpStream::connect(webhook).await.unwrap());
    }
    let connector = tls_connector(&ca_pem);
    let mut slowloris = Vec::new();
    for _ in 0..100 {
        let tcp = TcpStream::connect(webhook).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
        slowloris.push(tokio::spawn({
            let connector = connector.clone();
            async move {
                let mut tls = connector.connect(name, tcp).await.expect("handshake");
                let request = b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Slow: ";
                let deadline = Instant::now() + Duration::from_secs(30);
                for byte in request.iter().chain(std::iter::repeat(&b'a')) {
                    if tls.write_all(&[*byte]).await.is_err() || tls.flush().await.is_err() {
                        return true; // closed by the server
                    }
                    if Instant::now() > deadline {
                        return false;
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                unreachable!()
            }
        }));
    }
    let slow_bodies: Vec<_> = (0..50)
        .map(|_| {
            let client = client.clone();
            let url = url.clone();
            tokio::spawn(async move {
                let trickle = futures::stream::unfold(0u32, |n| async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    (n < 200).then(|| (Ok::<_, std::io::Error>(bytes::Bytes::from_static(b" ")), n + 1))
                });
                let response = client
                    .post(url)
                    .header("content-length", "100000")
                    .body(reqwest::Body::wrap_stream(trickle))
                    .send()
                    .await;
                // Refused (408/400) or cut off; never held for the 60 s the body would take.
                !matches!(response, Ok(r) if r.status() == 200)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..20 {
        assert!(
            allowed(client.clone(), body.clone(), url.clone()).await,
            "served while under attack"
        );
    }
    let under_attack_fds = open_fds(pid);
    let mut idle_closed = 0;
    for stream in idle.iter_mut() {
        if closed_by_server(stream, CLIENT_TIMEOUT + Duration::from_secs(20)).await {
            idle_closed += 1;
        }
    }
    assert_eq!(idle_closed, 500, "idle connections closed by the server");
    let mut slowloris_closed = 0;
    for task in slowloris {
        slowloris_closed += usize::from(task.await.unwrap());
    }
    assert_eq!(slowloris_closed, 100, "slowloris connections closed by the server");
    for task in slow_bodies {
        assert!(task.await.unwrap(), "a trickled body was refused or cut off");
    }

    // Old protocol versions and garbage handshakes: an alert or a close, nothing else.
    for hello in [
        old_client_hello(0x0301),
        old_client_hello(0x0302),
        b"\x16\x03\x01\xff\xffgarbage".to_vec(),
        vec![0u8; 1000],
    ] {
        let mut stream = TcpStream::connect(webhook).await.unwrap();
        stream.write_all(&hello).await.unwrap();
        let mut first = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut first))
            .await
            .expect("an answer or a close");
        assert!(
            matches!(read, Ok(0) | Err(_)) || first[0] == 0x15,
            "expected an alert or a close, got {read:?} {first:?}"
        );
        assert!(closed_by_server(&mut stream, Duration::from_secs(20)).await);
    }
    // A body just over 3 MiB is refused with 413. The server may answer before the body is
    // sent, and close: the body is written beside the read, and a write the server cut is fine.
    let response = {
        let tcp = TcpStream::connect(webhook).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let tls = connector.connect(name, tcp).await.expect("handshake");
        let (mut read, mut write) = tokio::io::split(tls);
        let size = 3 * 1024 * 1024 + 1;
        let writer = tokio::spawn(async move {
            let head =
                format!("POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n");
            if write.write_all(head.as_bytes()).await.is_ok() {
                let _ = write.write_all(&vec![b' '; size]).await;
                let _ = write.flush().await;
            }
        });
        let mut response = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(30), async {
            let mut buf = [0u8; 4096];
            while let Ok(n) = read.read(&mut buf).await {
                if n == 0 || response.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
                response.extend_from_slice(&buf[..n]);
            }
        })
        .await;
        writer.abort();
        String::from_utf8_lossy(&response).into_owned()
    };
    assert!(response.starts_with("HTTP/1.1 413"), "{response:?}");
    assert!(allowed(client.clone(), body.clone(), url.clone()).await, "served after it all");

    let peak = status_kib(pid, "VmHWM");
    // Memory comes back: allow the allocator a few seconds to return what 1,000 connections took.
    let mut after = status_kib(pid, "VmRSS");
    for _ in 0..20 {
        if after < idle_rss + 64 * 1024 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        after = status_kib(pid, "VmRSS");
    }
    let after_fds = open_fds(pid);
    eprintln!(
        "webhook_hostile: idle RSS {} MiB, peak {} MiB ({} MiB after 1,000 concurrent requests answered in {concurrent_seconds:.1} s, {} MiB after 1,000 more), after {} MiB; fds idle {idle_fds}, under attack {under_attack_fds}, after {after_fds}",
        idle_rss / 1024,
        peak / 1024,
        after_concurrent_hwm / 1024,
        after_second_hwm / 1024,
        after / 1024
    );
    assert!(peak < idle_rss + 256 * 1024, "peak RSS {peak} KiB, idle {idle_rss} KiB");
    assert!(after < idle_rss + 64 * 1024, "RSS after {after} KiB, idle {idle_rss} KiB");
    assert!(after_fds <= idle_fds + 5, "file descriptors: {idle_fds} idle, {after_fds} after");
    let mut text = String::new();
    std::fs::File::open(&log).unwrap().read_to_string(&mut text).unwrap();
    assert!(!text.contains("panicked"), "{text}");
}

/// A TLS connection to the webhook speaking HTTP/2 (ALPN `h2`), driven in the background: the
/// sender, and the driver's task, which ends when the server closes the connection.
async fn http2_connection(
    webhook: SocketAddr,
    ca_pem: &str,
) -> (hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>, tokio::task::JoinHandle<()>) {
    let mut config = tls_config(ca_pem);
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = TcpStream::connect(webhook).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "the server speaks HTTP/2");
    let (sender, connection) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), hyper_util::rt::TokioIo::new(tls))
            .await
            .expect("HTTP/2 handshake");
    (sender, tokio::spawn(async move {
        let _ = connection.await;
    }))
}

/// Whether an HTTP/2 review was answered with `allowed: true`. A stream the server refused
/// (`REFUSED_STREAM`: opened past its stream limit before the client had its settings, and not
/// processed) is sent again, as HTTP/2 clients do (Go's, the API server's, among them).
async fn http2_allowed(mut sender: hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>, body: bytes::Bytes) -> bool {
    use http_body_util::BodyExt;
    let mut refused = 0;
    let response = loop {
        if sender.ready().await.is_err() {
            return false;
        }
        let request = hyper::Request::post("https://127.0.0.1/validate")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(body.clone()))
            .unwrap();
        match sender.send_request(request).await {
            Ok(response) => break response,
            Err(e) if format!("{e:?}").contains("REFUSED_STREAM") && refused < 5 => refused += 1,
            Err(e) => {
                eprintln!("error {e:?}");
                return false;
            }
        }
    };
    if response.status() != 200 {
        eprintln!("status {}", response.status());
        return false;
    }
    let Ok(collected) = response.into_body().collect().await else {
        return false;
    };
    serde_json::from_slice::<Value>(&collected.to_bytes()).is_ok_and(|v| v["response"]["allowed"] == true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_with_large_bodies_keep_memory_bounded_and_idle_connections_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let certs = Command::new(BIN).args(["certs", "--out-dir"]).arg(dir.path()).output().unwrap();
    assert!(certs.status.success());
    let log = dir.path().join("webhook.log");
    let idle_timeout = Duration::from_secs(3);
    let mut child = Running(
        process::webhook_command(BIN, dir.path(), &log)
            .env("WEBHOOK_CLIENT_TIMEOUT", format!("{}s", CLIENT_TIMEOUT.as_secs()))
            .env("WEBHOOK_IDLE_TIMEOUT", format!("{}s", idle_timeout.as_secs()))
            .spawn()
            .unwrap(),
    );
    let addresses = process::wait_started(&mut child.0, &log, Duration::from_secs(30));
    let pid = child.0.id();
    let webhook: SocketAddr = addresses.webhook;
    let ca_pem = std::fs::read_to_string(dir.path().join("ca.crt")).unwrap();
    let small = bytes::Bytes::from(review());
    // A review padded with leading whitespace to just under 3 MiB: valid, and allowed.
    let large = {
        let mut body = vec![b' '; 3 * 1024 * 1024 - small.len() - 16];
        body.extend_from_slice(&small);
        bytes::Bytes::from(body)
    };
    let (warm, _) = http2_connection(webhook, &ca_pem).await;
    for _ in 0..20 {
        assert!(http2_allowed(warm.clone(), large.clone()).await, "warm-up request");
    }
    let idle_rss = status_kib(pid, "VmRSS");

    // 4 connections × 100 large reviews at once: 1.2 GiB of bodies, were they all read at once.
    let started = Instant::now();
    let mut attack = Vec::new();
    for _ in 0..4 {
        let (sender, _driver) = http2_connection(webhook, &ca_pem).await;
        for _ in 0..100 {
            attack.push(tokio::spawn(http2_allowed(sender.clone(), large.clone())));
        }
    }
    // An ordinary review on a connection of its own is answered in the middle of it.
    let (ordinary, _) = http2_connection(webhook, &ca_pem).await;
    let mut ordinary_answered = 0;
    for _ in 0..5 {
        let answered = tokio::time::timeout(CLIENT_TIMEOUT, http2_allowed(ordinary.clone(), small.clone())).await;
        ordinary_answered += usize::from(answered == Ok(true));
    }
    let answered = futures::future::join_all(attack).await.into_iter().filter(|r| matches!(r, Ok(true))).count();
    let attack_seconds = started.elapsed().as_secs_f64();
    let peak = status_kib(pid, "VmHWM");
    eprintln!(
        "webhook_hostile http2: idle RSS {} MiB, peak {} MiB over 400 reviews of 3 MiB on 4 connections ({answered} answered in {attack_seconds:.1} s), {ordinary_answered} of 5 ordinary reviews answered meanwhile",
        idle_rss / 1024,
        peak / 1024
    );
    assert_eq!(answered, 400, "every large review answered");
    assert_eq!(ordinary_answered, 5, "ordinary reviews answered in the middle of it");
    // The body budget (120 MiB) and what parsing them takes, not 800 bodies at once.
    assert!(peak < idle_rss + 384 * 1024, "peak RSS {peak} KiB, idle {idle_rss} KiB");

    // An HTTP/2 connection with nothing in flight is closed by the server after the idle timeout.
    let (sender, driver) = http2_connection(webhook, &ca_pem).await;
    assert!(http2_allowed(sender.clone(), small.clone()).await);
    let closed = tokio::time::timeout(idle_timeout + Duration::from_secs(10), driver).await;
    assert!(closed.is_ok(), "the idle HTTP/2 connection is still open after {:?}", idle_timeout + Duration::from_secs(10));
    let mut text = String::new();
    std::fs::File::open(&log).unwrap().read_to_string(&mut text).unwrap();
    assert!(!text.contains("panicked"), "{text}");
}
