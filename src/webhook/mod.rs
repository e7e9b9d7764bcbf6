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
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
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
/// Most connections served at once; more wait in the listen backlog until one closes. The API
/// server needs a handful (HTTP/2 multiplexes its reviews).
pub const MAX_CONNECTIONS: usize = 1024;
/// Most HTTP/2 streams (requests) one connection may have open at once; a client that wants more
/// waits for one to finish, as HTTP/2 clients do (hyper's default is 200).
pub const MAX_CONCURRENT_STREAMS: u32 = 32;
/// HTTP/2 flow-control window of one stream: what a client may send ahead of a handler reading it.
const STREAM_WINDOW: u32 = 32 * 1024;
/// HTTP/2 flow-control window of a connection: room for every stream's window, so that streams
/// waiting for the body budget can never use up the window of those being read (hyper's
/// default, 1 MiB for both, lets one unread stream stall its connection). With the stream cap it
/// bounds what one connection buffers unread to 1 MiB.
const CONNECTION_WINDOW: u32 = STREAM_WINDOW * MAX_CONCURRENT_STREAMS;
/// Most request-body bytes all requests together hold at once: a body is read only once its
/// room is reserved, so many large bodies at once wait for each other instead of growing the
/// process (which the controllers share) without bound. 40 of the largest bodies.
pub const BODY_BUDGET_BYTES: usize = 40 * MAX_BODY_BYTES;
/// The unit the body budget is counted in.
const BUDGET_UNIT: usize = 1024;
/// HTTP/2 PING interval on idle connections, so a peer that vanished without closing its
/// connection is noticed and its slot among `MAX_CONNECTIONS` given back.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// Pause after a failed `accept` (out of file descriptors and the like), so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

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
    /// A connection with no request in flight for this long is closed (HTTP/2 GOAWAY, or a
    /// close after the last HTTP/1 response); clients reconnect when they need to.
    pub idle_timeout: Duration,
    /// Longest time open connections get to finish on shutdown.
    pub shutdown_grace: Duration,
    /// Cluster name and defaults the admission rules use.
    pub settings: ApiSettings,
}

struct AppState {
    settings: Arc<ApiSettings>,
    metrics: Metrics,
    client_timeout: Duration,
    /// `BODY_BUDGET_BYTES` in `BUDGET_UNIT`s.
    body_budget: Arc<Semaphore>,
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
        body_budget: Arc::new(Semaphore::new(BODY_BUDGET_BYTES / BUDGET_UNIT)),
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
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let too_large = declared.is_some_and(|n| n > MAX_BODY_BYTES);
    let bytes = if too_large {
        Err(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body is larger than {MAX_BODY_BYTES} bytes"),
        ))
    } else {
        let (room, held) = reserve(declared, &state.body_budget).await;
        match tokio::time::timeout(state.client_timeout, read_body(request.into_body(), room)).await {
            Ok(Ok(read)) => Ok((read, held)),
            Ok(Err(BodyError::TooLarge)) => Err(refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body is larger than {MAX_BODY_BYTES} bytes"),
            )),
            Ok(Err(BodyError::Read(e))) => Err(refusal(StatusCode::BAD_REQUEST, format!("reading request body: {e}"))),
            Err(_) => Err(refusal(
                StatusCode::REQUEST_TIMEOUT,
                format!("request body not received within {:?}", state.client_timeout),
            )),
        }
    };
    // The permits go with `_held` once the review is answered: its parse counts against the budget.
    let (bytes, _held) = match bytes {
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

/// Why a body could not be read.
enum BodyError {
    /// Past `MAX_BODY_BYTES`.
    TooLarge,
    /// The connection failed or the stream was reset.
    Read(axum::Error),
}

/// Reserves the room a body may take in `budget`: the declared `Content-Length`, or
/// `MAX_BODY_BYTES` when none is declared. All of it at once, so that many bodies never each
/// hold part of the budget while all wait for more. The wait is not the client's to pay for
/// with its timeout; a client that gives up resets its stream, which drops the wait.
async fn reserve(declared: Option<usize>, budget: &Arc<Semaphore>) -> (usize, OwnedSemaphorePermit) {
    let room = declared.unwrap_or(MAX_BODY_BYTES).min(MAX_BODY_BYTES);
    let units = u32::try_from(room.div_ceil(BUDGET_UNIT).max(1)).unwrap_or(u32::MAX);
    let held = budget.clone().acquire_many_owned(units).await.expect("the budget is never closed");
    (room, held)
}

/// Reads `body` whole, up to `room` bytes (past it: `TooLarge`).
async fn read_body(body: axum::body::Body, room: usize) -> Result<bytes::Bytes, BodyError> {
    let mut body = std::pin::pin!(body);
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BodyError::Read)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if buf.len() + data.len() > room {
            // Past MAX_BODY_BYTES, or past what the client declared (hyper refuses that too).
            return Err(BodyError::TooLarge);
        }
        buf.extend_from_slice(&data);
    }
    Ok(buf.freeze())
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
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.client_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .keep_alive_interval(Some(KEEP_ALIVE_INTERVAL));
    let builder = Arc::new(builder);
    // One permit per open connection; all of them back means every connection has closed.
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let closing = CancellationToken::new();
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = connections.clone().acquire_owned() => permit.expect("the connection semaphore is never closed"),
        };
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    warn!(error = %e, "accepting webhook connection");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let activity = Arc::new(Activity::new());
        let service = TowerToHyperService::new(tower::service_fn({
            let (app, activity) = (app.clone(), activity.clone());
            move |request| {
                let busy = activity.begin();
                let response = tower::ServiceExt::oneshot(app.clone(), request);
                async move {
                    // In flight until the handler has answered.
                    let _busy = busy;
                    response.await
                }
            }
        }));
        let builder = builder.clone();
        let (handshake_timeout, idle_timeout) = (config.client_timeout, config.idle_timeout);
        let closing = closing.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return debug!(peer = %peer, error = %e, "TLS handshake failed"),
                Err(_) => return debug!(peer = %peer, "TLS handshake timed out"),
            };
            let connection = builder.serve_connection(TokioIo::new(tls), service);
            let mut connection = std::pin::pin!(connection);
            let mut ending = false;
            loop {
                tokio::select! {
                    result = connection.as_mut() => {
                        if let Err(e) = result {
                            debug!(peer = %peer, error = %e, "webhook connection ended with an error");
                        }
                        break;
                    }
                    _ = closing.cancelled(), if !ending => {
                        connection.as_mut().graceful_shutdown();
                        ending = true;
                    }
                    _ = activity.idle_for(idle_timeout), if !ending => {
                        debug!(peer = %peer, idle = ?idle_timeout, "closing idle webhook connection");
                        connection.as_mut().graceful_shutdown();
                        ending = true;
                    }
                }
            }
        });
    }
    drop(listener);
    closing.cancel();
    let all = u32::try_from(MAX_CONNECTIONS).unwrap_or(u32::MAX);
    if tokio::time::timeout(config.shutdown_grace, connections.acquire_many(all)).await.is_err() {
        warn!(grace = ?config.shutdown_grace, "webhook connections still open at the end of the shutdown grace period");
    }
    info!("webhook stopped");
}

/// Requests in flight on one connection, and since when it has had none.
struct Activity {
    state: std::sync::Mutex<(usize, Instant)>,
}

/// Ends a request's part in its connection's activity when dropped.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.0 -= 1;
        state.1 = Instant::now();
    }
}

impl Activity {
    fn new() -> Activity {
        Activity {
            state: std::sync::Mutex::new((0, Instant::now())),
        }
    }

    fn begin(self: &Arc<Self>) -> Busy {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).0 += 1;
        Busy(self.clone())
    }

    /// Completes once the connection has had no request in flight for `timeout`.
    async fn idle_for(&self, timeout: Duration) {
        loop {
            let (in_flight, since) = *self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let wait = if in_flight > 0 { timeout } else { timeout.saturating_sub(since.elapsed()) };
            if in_flight == 0 && wait.is_zero() {
                return;
            }
            tokio::time::sleep(wait).await;
        }
    }
}

