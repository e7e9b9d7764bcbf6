//! Plain-HTTP side listeners: Prometheus metrics (`/metrics`) and health probes (`/healthz`,
//! `/readyz`), apart from the webhook's HTTPS port so that scraping and probing never depend on TLS.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::controllers::supervisor::Liveness;
use crate::metrics::Metrics;

/// Whether the process is ready to serve: set once the webhook listens, cleared on shutdown.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Marks the process ready or not.
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }

    /// True when ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// `/metrics` in Prometheus text format.
pub fn metrics_router(metrics: Metrics) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move { ([(axum::http::header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], metrics.render()) }
        }),
    )
}

/// `/healthz` (alive: 500 naming the controllers stuck in a pass past its deadline or panicking
/// again and again, so that the kubelet restarts the process) and `/readyz` (serving).
pub fn health_router(readiness: Readiness, liveness: Liveness) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(move || {
                let problems = liveness.problems(std::time::Instant::now());
                async move {
                    if problems.is_empty() {
                        (StatusCode::OK, "ok".to_string())
                    } else {
                        (StatusCode::INTERNAL_SERVER_ERROR, format!("unhealthy: {}\n", problems.join("; ")))
                    }
                }
            }),
        )
        .route(
        "/readyz",
        get(move || {
            let ready = readiness.is_ready();
            async move {
                if ready {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                }
            }
        }),
    )
}

/// Serves `router` on `listener` until `shutdown`.
pub fn serve(listener: TcpListener, router: Router, shutdown: CancellationToken) -> JoinHandle<std::io::Result<()>> {
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
    })
}
