//! A TCP proxy to the API server on loopback that connects from a chosen loopback address and,
//! once its latencies are set (in ms), delivers every chunk that late: a slow or hung connection,
//! which the real API server cannot be made to have. Requests (client to server) and responses
//! (server to client) are slowed apart: with responses alone slowed, every request still reaches
//! the API server when it is sent, so the audit log's time of a write is when it was sent.
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The latencies of one proxy, settable while it runs.
#[derive(Clone, Default)]
pub struct Latency {
    /// Milliseconds each chunk a client sends is held.
    pub requests: Arc<AtomicU64>,
    /// Milliseconds each chunk the API server answers is held.
    pub responses: Arc<AtomicU64>,
}

impl Latency {
    /// Both directions `ms` late.
    pub fn set_both(&self, ms: u64) {
        self.requests.store(ms, Ordering::Relaxed);
        self.responses.store(ms, Ordering::Relaxed);
    }
}

/// Starts the proxy on the current runtime: connections to the returned address are forwarded
/// to `upstream` from `source`, with `latency`.
pub async fn start(upstream: SocketAddr, source: IpAddr, latency: Latency) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let latency = latency.clone();
            tokio::spawn(async move {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket.bind((source, 0).into()).unwrap();
                let Ok(server) = socket.connect(upstream).await else { return };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::join!(pipe(cr, sw, latency.requests), pipe(sr, cw, latency.responses));
            });
        }
    });
    addr
}

async fn pipe(mut from: tokio::net::tcp::OwnedReadHalf, mut to: tokio::net::tcp::OwnedWriteHalf, latency: Arc<AtomicU64>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let delay = latency.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
