//! `karpenter-rs explain pod NAMESPACE/NAME` and `explain node NAME`: asks the running
//! controller's metrics port (`--controller`, the leader answers from the state it decides on);
//! when none is given or it does not answer, builds a view of its own the way `run` does (the
//! same settings and variables, the kubeconfig's cluster, the SDK's AWS credentials), read-only,
//! and answers from it with the same code.

use std::io::IsTerminal;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::live::NoAnswer;
use crate::controllers::term::Term;
use super::render::{render, Format};
use super::{Explanation, Question};
use crate::cloudprovider::CloudConfig;
use crate::controllers::deprovisioning::DeprovisioningConfig;
use crate::controllers::provisioning::ProvisioningConfig;

/// What `explain` is asked and with which settings (`config::ExplainArgs`, resolved).
pub struct Request {
    /// The question.
    pub question: Question,
    /// The output format.
    pub output: Format,
    /// The running controller's metrics address, asked first.
    pub controller: Option<String>,
    /// For a view of explain's own: the cloud, provisioning and deprovisioning settings `run`
    /// would use.
    pub cloud: CloudConfig,
    /// Provisioning's settings.
    pub provisioning: ProvisioningConfig,
    /// Deprovisioning's settings.
    pub deprovisioning: DeprovisioningConfig,
}

/// Runs `explain`: prints the answer, or returns why there is none.
pub fn run(args: Request) -> Result<(), String> {
    let question = &args.question;
    let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("starting the async runtime: {e}"))?;
    let answer = runtime.block_on(async {
        if let Some(url) = &args.controller {
            match ask_controller(url, question).await {
                Ok(Asked::Answer(answer)) => return Ok(*answer),
                Ok(Asked::NotFound(why)) => return Err(why),
                Ok(Asked::NoAnswer(why)) | Err(why) => {
                    eprintln!("explain: the controller at {url} did not answer ({why}); explaining from a view of this command's own");
                }
            }
        }
        own_answer(&args, question).await
    })?;
    let colour = args.output == Format::Text && std::io::stdout().is_terminal();
    print!("{}", render(&answer, args.output, colour));
    Ok(())
}

/// What the controller said.
enum Asked {
    Answer(Box<Explanation>),
    NotFound(String),
    NoAnswer(String),
}

/// How long the controller has to answer.
const CONTROLLER_TIMEOUT: Duration = Duration::from_secs(30);

/// `GET <url>/explain/...?o=json` over plain HTTP/1.1 (the metrics port).
async fn ask_controller(url: &str, question: &Question) -> Result<Asked, String> {
    let authority = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("--controller {url:?}: only http://HOST:PORT (the metrics port) is supported"))?
        .trim_end_matches('/');
    let path = match question {
        Question::Node(name) => format!("/explain/node/{name}?o=json"),
        Question::Pod { namespace, name } => format!("/explain/pod/{namespace}/{name}?o=json"),
    };
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(authority).await.map_err(|e| e.to_string())?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(response)
    };
    let response = tokio::time::timeout(CONTROLLER_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {CONTROLLER_TIMEOUT:?}"))??;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("a response without a body")?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("a response without a status")?;
    match status {
        200 => serde_json::from_str::<Explanation>(body)
            .map(|e| Asked::Answer(Box::new(e)))
            .map_err(|e| format!("an answer that does not read: {e}")),
        404 => Ok(Asked::NotFound(body.trim().to_string())),
        _ => Ok(Asked::NoAnswer(format!("HTTP {status}: {}", body.trim()))),
    }
}

/// The answer from a view of explain's own, built as `run` builds the controllers'.
async fn own_answer(args: &Request, question: &Question) -> Result<Explanation, String> {
    use crate::cloudprovider::aws::AwsCloudProvider;
    use crate::cloudprovider::CloudProvider;
    use crate::controllers::{provisioning, state, supervisor::Liveness, Shared};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube::Config::infer().await.map_err(|e| {
        format!(
            "no kubeconfig (KUBECONFIG, ~/.kube/config) and not in a cluster: {}",
            crate::telemetry::chain(&e)
        )
    })?;
    let client = kube::Client::try_from(crate::kube_client::configure(config))
        .map_err(|e| format!("reading the kubeconfig: {}", crate::telemetry::chain(&e)))?;
    let cloud: std::sync::Arc<dyn CloudProvider> = std::sync::Arc::new(
        AwsCloudProvider::new(args.cloud.clone())
            .await
            .map_err(|e| format!("setting up AWS: {}", crate::telemetry::chain(&e)))?,
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    let metrics = crate::metrics::Metrics::new();
    let view = state::Cluster::start(&client, &shutdown, &Liveness::default());
    let shared = Shared::new(client, cloud, metrics, view.clone());
    let deprovisioning = &args.deprovisioning;
    let (_leading_tx, leading) = tokio::sync::watch::channel(true);
    let explainer = Term {
        state: view,
        provisioning: provisioning::Context::new(&shared, args.provisioning.clone()),
        nomination: deprovisioning.nomination,
        drift_enabled: deprovisioning.drift_enabled,
        leading,
    };
    explainer.answer(question).await.map_err(|e| match e {
        NoAnswer::NotFound(why) => why,
        other => other.to_string(),
    })
}
