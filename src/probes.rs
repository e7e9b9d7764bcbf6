//! Plain-HTTP side listeners: Prometheus metrics (`/metrics`) and, beside them, the leader's
//! answers to `/explain/node/NAME` and `/explain/pod/NAMESPACE/NAME` (read-only); health probes
//! (`/healthz`, `/readyz`), apart from the webhook's HTTPS port so that scraping and probing never
//! depend on TLS.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::controllers::supervisor::Liveness;
use crate::controllers::term::TermSlot;
use crate::explain::live::NoAnswer;
use crate::explain::render::{render, Format};
use crate::explain::Question;
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

/// `/explain/node/{name}` and `/explain/pod/{namespace}/{name}`: the leader's answer, as text, or
/// as JSON or YAML with `?o=json` / `?o=yaml`; 404 when there is no such node or pod, 503 when
/// this replica does not lead (`karpenter-rs explain` then builds its own view).
pub fn explain_router(slot: TermSlot) -> Router {
    let node = {
        let slot = slot.clone();
        move |axum::extract::Path(name): axum::extract::Path<String>, query: axum::extract::Query<ExplainQuery>| {
            let slot = slot.clone();
            async move { explain(slot, Question::Node(name), query.0).await }
        }
    };
    let pod = move |axum::extract::Path((namespace, name)): axum::extract::Path<(String, String)>,
                    query: axum::extract::Query<ExplainQuery>| {
        let slot = slot.clone();
        async move { explain(slot, Question::Pod { namespace, name }, query.0).await }
    };
    Router::new()
        .route("/explain/node/{name}", get(node))
        .route("/explain/pod/{namespace}/{name}", get(pod))
}

/// `/explain`'s query: `o` = `text` (default), `json` or `yaml`.
#[derive(Debug, Default, serde::Deserialize)]
pub struct ExplainQuery {
    o: Option<String>,
}

async fn explain(
    slot: TermSlot,
    question: Question,
    query: ExplainQuery,
) -> (StatusCode, [(axum::http::HeaderName, &'static str); 1], String) {
    let text = [(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    let format = match query.o.as_deref() {
        None | Some("text") => Format::Text,
        Some("json") => Format::Json,
        Some("yaml") => Format::Yaml,
        Some(other) => {
            return (
                StatusCode::BAD_REQUEST,
                text,
                format!("o: unknown output format {other:?}; use text, json or yaml\n"),
            )
        }
    };
    let Some(explainer) = slot.get() else {
        return (StatusCode::SERVICE_UNAVAILABLE, text, format!("{}\n", NoAnswer::NotLeading));
    };
    match explainer.answer(&question).await {
        Ok(answer) => {
            let content_type = match format {
                Format::Text => "text/plain; charset=utf-8",
                Format::Json => "application/json",
                Format::Yaml => "application/yaml",
            };
            (
                StatusCode::OK,
                [(axum::http::header::CONTENT_TYPE, content_type)],
                render(&answer, format, false),
            )
        }
        Err(e @ NoAnswer::NotFound(_)) => (StatusCode::NOT_FOUND, text, format!("{e}\n")),
        Err(e @ NoAnswer::NotLeading) => (StatusCode::SERVICE_UNAVAILABLE, text, format!("{e}\n")),
        Err(e @ NoAnswer::Unavailable(_)) => (StatusCode::SERVICE_UNAVAILABLE, text, format!("{e}\n")),
    }
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
