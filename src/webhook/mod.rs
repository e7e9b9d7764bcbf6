//! The HTTPS admission webhook: `POST /mutate` and `POST /validate` for both kinds, on rustls.
//! HTTP concerns only (body limits, timeouts, TLS, graceful shutdown, metrics and one log line per
//! decision); the decisions themselves are `admission::review`, which does no I/O. The serving
//! certificate comes from `--cert-dir` (`tls`) or, when none is mounted, from a Secret that
//! `cert_reconciler` keeps (the only part of the webhook that talks to the Kubernetes API).

pub mod admission;
pub mod cert_reconciler;
pub mod registration;
pub mod self_signed;
pub mod spec_patch;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::apis::ApiSettings;
use crate::metrics::{result, Metrics};
use admission::Endpoint;
use tls::{CertStore, TlsError};

/// Largest AdmissionReview accepted; the API server sends at most a few hundred KiB.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Settings of the webhook server.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// Directory holding `tls.crt` and `tls.key`.
    pub cert_dir: PathBuf,
    /// How often the certificate files are checked for changes.
    pub cert_reload_interval: Duration,
    /// Longest time a client may take to complete the TLS handshake, send its headers, or send
    /// its body.
    pub client_timeout: Duration,
    /// Longest time open connections get to finish on shutdown.
    pub shutdown_grace: Duration,
    /// Cluster name and defaults the admission rules use.
    pub settings: ApiSettings,
}

struct AppState {
    settings: Arc<ApiSettings>,
    metrics: Metrics,
    client_timeout: Duration,
}

/// The routes, without TLS: usable on any listener (the benchmark uses it directly too).
pub fn router(settings: ApiSettings, metrics: Metrics, client_timeout: Duration) -> Router {
    // Latency series exist from the start, at zero, for every path and kind served: a rate over
    // them then shows the first requests too (a series born at its first request never rises).
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        for kind in [admission::Kind::Provisioner, admission::Kind::AwsNodeTemplate] {
            metrics.webhook_duration.with_label_values(&[endpoint.path(), kind.as_str()]);
        }
    }
    // Shared, not copied: axum hands every request its own clone of the state, and `Metrics`
    // holds a handle per metric.
    let state = Arc::new(AppState {
        settings: Arc::new(settings),
        metrics,
        client_timeout,
    });
    Router::new()
        .route(
            "/mutate",
            post(|s: State<Arc<AppState>>, r: Request| handle(Endpoint::Mutate, s, r)),
        )
        .route(
            "/validate",
            post(|s: State<Arc<AppState>>, r: Request| handle(Endpoint::Validate, s, r)),
        )
        .route("/healthz", get(|| async { "ok" }))
        .with_state(state)
}

/// The whole request is taken, not a `HeaderMap` and a body: that extractor clones the headers.
async fn handle(endpoint: Endpoint, State(state): State<Arc<AppState>>, request: Request) -> Response {
    let started = Instant::now();
    let too_large = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n > MAX_BODY_BYTES);
    let bytes = if too_large {
        Err(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body is larger than {MAX_BODY_BYTES} bytes"),
        ))
    } else {
        match tokio::time::timeout(state.client_timeout, Limited::new(request.into_body(), MAX_BODY_BYTES).collect()).await {
            Ok(Ok(collected)) => Ok(collected.to_bytes()),
            Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body is larger than {MAX_BODY_BYTES} bytes"),
            )),
            Ok(Err(e)) => Err(refusal(StatusCode::BAD_REQUEST, format!("reading request body: {e}"))),
            Err(_) => Err(refusal(
                StatusCode::REQUEST_TIMEOUT,
                format!("request body not received within {:?}", state.client_timeout),
            )),
        }
    };
    let bytes = match bytes {
        Ok(b) => b,
        Err(response) => {
            state
                .metrics
                .webhook_requests
                .with_label_values(&[endpoint.path(), "unknown", "unknown", result::INVALID])
                .inc();
            return response;
        }
    };
    let outcome = admission::review(endpoint, &bytes, &state.settings);
    state
        .metrics
        .webhook_requests
        .with_label_values(&[endpoint.path(), outcome.kind, outcome.operation, outcome.result])
        .inc();
    state
        .metrics
        .webhook_duration
        .with_label_values(&[endpoint.path(), outcome.kind])
        .observe(started.elapsed().as_secs_f64());
    // A refusal (or an unreadable review) is what a user looks for in the log: their apply
    // failed. Every other review is in the metrics, and logged at debug: a line per review costs
    // the webhook about a seventh of its throughput.
    if matches!(outcome.result, result::DENIED | result::INVALID) {
        let reason = outcome.reason.as_deref().unwrap_or("");
        info!(path = endpoint.path(), kind = outcome.kind, name = %outcome.name, operation = outcome.operation, result = outcome.result, reason, "admission");
    } else {
        debug!(path = endpoint.path(), kind = outcome.kind, name = %outcome.name, operation = outcome.operation, result = outcome.result, "admission");
    }
    let status = StatusCode::from_u16(outcome.http_status).unwrap_or(StatusCode::OK);
    (status, [(header::CONTENT_TYPE, "application/json")], outcome.body).into_response()
}

fn refusal(status: StatusCode, message: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], message).into_response()
}

/// A running webhook server.
pub struct Webhook {
    /// Where it listens.
    pub local_addr: SocketAddr,
    /// Finishes once the server has stopped after shutdown.
    pub task: JoinHandle<()>,
    /// The certificate in use (reloaded or replaced in the background).
    pub certs: Arc<CertStore>,
}

/// Loads the certificate from `--cert-dir` (reloaded on change) and serves HTTPS on `listener`
/// until `shutdown` is cancelled; then stops accepting, lets open requests finish (up to
/// `shutdown_grace`) and returns.
pub fn start(listener: TcpListener, config: WebhookConfig, metrics: Metrics, shutdown: CancellationToken) -> Result<Webhook, TlsError> {
    let certs = CertStore::load(&config.cert_dir)?;
    tokio::spawn(certs.clone().watch(config.cert_reload_interval, metrics.clone(), shutdown.clone()));
    Ok(serve(listener, certs, config, metrics, shutdown))
}

/// Serves HTTPS on `listener` with whatever certificate `certs` holds (none yet: handshakes
/// fail until one is set) until `shutdown`, like [`start`]. `config.cert_dir` is not read.
pub fn serve(
    listener: TcpListener,
    certs: Arc<CertStore>,
    config: WebhookConfig,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Webhook {
    let local_addr = listener.local_addr().expect("a bound listener has an address");
    let acceptor = TlsAcceptor::from(tls::server_config(certs.clone()));
    let app = router(config.settings.clone(), metrics, config.client_timeout);
    let task = tokio::spawn(accept_loop(listener, acceptor, app, config, shutdown));
    info!(address = %local_addr, "webhook serving HTTPS");
    Webhook { local_addr, task, certs }
}

async fn accept_loop(listener: TcpListener, acceptor: TlsAcceptor, app: Router, config: WebhookConfig, shutdown: CancellationToken) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.client_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)));
    let builder = Arc::new(builder);
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    warn!(error = %e, "accepting webhook connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let handshake_timeout = config.client_timeout;
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return debug!(peer = %peer, error = %e, "TLS handshake failed"),
                Err(_) => return debug!(peer = %peer, "TLS handshake timed out"),
            };
            let connection = builder.serve_connection(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(connection.into_owned()).await {
                debug!(peer = %peer, error = %e, "webhook connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(config.shutdown_grace, graceful.shutdown()).await.is_err() {
        warn!(grace = ?config.shutdown_grace, "webhook connections still open at the end of the shutdown grace period");
    }
    info!("webhook stopped");
}
