//! `karpenter-rs explain pod NAMESPACE/NAME` and `explain node NAME`: asks the running
//! controller's metrics port (`--controller`, the leader answers from the state it decides on);
//! when none is given or it does not answer, builds a view of its own the way `run` does (the
//! same settings and variables, the kubeconfig's cluster, the SDK's AWS credentials), read-only,
//! and answers from it with the same code. `Answers` is that order of sources, kept for many
//! questions: `karpenter-rs nodes` asks it for each node's reason and explanation.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::live::NoAnswer;
use super::render::{render, Format};
use super::{Explanation, Question};
use crate::cloudprovider::CloudConfig;
use crate::controllers::deprovisioning::DeprovisioningConfig;
use crate::controllers::provisioning::ProvisioningConfig;
use crate::controllers::term::Term;
use crate::settings::GlobalSettings;

/// What `explain` is asked and with which settings (`config::ExplainArgs`, resolved).
pub struct Request {
    /// The question.
    pub question: Question,
    /// The output format.
    pub output: Format,
    /// The running controller's metrics address, asked first.
    pub controller: Option<String>,
    /// For a view of explain's own: `run`'s settings as given.
    pub settings: Arc<dyn RunSettings>,
}

/// `run`'s settings as given (flags and variables), for a view of one's own, which resolves them
/// against the cluster the way `run` does: the settings ConfigMap's values under the explicit
/// flags (implemented by `config::RunArgs`).
pub trait RunSettings: Send + Sync {
    /// The namespace of the settings ConfigMap (`--system-namespace`).
    fn system_namespace(&self) -> String;
    /// The settings with `global`, the settings ConfigMap's values, applied under the explicit
    /// flags.
    fn resolve(&self, global: &GlobalSettings) -> Settings;
}

/// The cloud, provisioning and deprovisioning settings `run` would use, for a view of one's own.
#[derive(Clone)]
pub struct Settings {
    /// The cloud's.
    pub cloud: CloudConfig,
    /// Provisioning's.
    pub provisioning: ProvisioningConfig,
    /// Deprovisioning's.
    pub deprovisioning: DeprovisioningConfig,
}

/// Runs `explain`: prints the answer, or returns why there is none.
pub fn run(args: Request) -> Result<(), String> {
    let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("starting the async runtime: {e}"))?;
    let answers = Answers::new(args.controller.clone(), Ok(args.settings));
    let answered = runtime.block_on(answers.answer(&args.question)).map_err(|e| e.to_string())?;
    if let (Some(url), Some(why)) = (&args.controller, &answered.controller_failed) {
        eprintln!("explain: the controller at {url} did not answer ({why}); explained from a view of this command's own");
    }
    let colour = args.output == Format::Text && std::io::stdout().is_terminal();
    print!("{}", render(&answered.explanation, args.output, colour));
    Ok(())
}

/// Where answers come from: the running controller when one is given and answers, else a view
/// of this process's own, built when first needed and kept for the next questions (`nodes` asks
/// one per node).
pub struct Answers {
    controller: Option<String>,
    /// `run`'s settings for a view of one's own, or why there are none.
    settings: Result<Arc<dyn RunSettings>, String>,
    /// Built on the first question the controller does not answer. A failure to build it is kept
    /// too: it comes from the settings or the kubeconfig, which do not change while the process runs.
    own: tokio::sync::OnceCell<Result<Own, String>>,
}

/// A view of one's own and what stops its watches when it is dropped.
struct Own {
    explainer: Term,
    _stop: tokio_util::sync::DropGuard,
}

/// An answer and where it came from.
pub struct Answered {
    /// The answer.
    pub explanation: Explanation,
    /// Why the controller, when one was given, did not answer (the view of one's own did).
    pub controller_failed: Option<String>,
}

/// Why there is no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unanswered {
    /// No such node or pod.
    #[error("{0}")]
    NotFound(String),
    /// Neither the controller nor a view of one's own could answer.
    #[error("{0}")]
    Unavailable(String),
}

impl Answers {
    /// Asks `controller` first (when given), else a view built with `settings`.
    pub fn new(controller: Option<String>, settings: Result<Arc<dyn RunSettings>, String>) -> Self {
        Self {
            controller,
            settings,
            own: tokio::sync::OnceCell::new(),
        }
    }

    /// The answer to `question` now.
    pub async fn answer(&self, question: &Question) -> Result<Answered, Unanswered> {
        let mut controller_failed = None;
        if let Some(url) = &self.controller {
            match ask_controller(url, question).await {
                Ok(Asked::Answer(explanation)) => {
                    return Ok(Answered {
                        explanation: *explanation,
                        controller_failed,
                    })
                }
                Ok(Asked::NotFound(why)) => return Err(Unanswered::NotFound(why)),
                Ok(Asked::NoAnswer(why)) | Err(why) => controller_failed = Some(why),
            }
        }
        let unavailable = |why: &str| match (&self.controller, &controller_failed) {
            (Some(url), Some(failed)) => Unanswered::Unavailable(format!("the controller at {url} did not answer ({failed}), and {why}")),
            _ => Unanswered::Unavailable(why.to_string()),
        };
        let own = self
            .own
            .get_or_init(|| async {
                match &self.settings {
                    Ok(settings) => own_view(settings.as_ref()).await,
                    Err(why) => Err(why.clone()),
                }
            })
            .await
            .as_ref()
            .map_err(|why| unavailable(why))?;
        let explanation = own.explainer.answer(question).await.map_err(|e| match e {
            NoAnswer::NotFound(why) => Unanswered::NotFound(why),
            other => unavailable(&other.to_string()),
        })?;
        Ok(Answered {
            explanation,
            controller_failed,
        })
    }
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

/// A view of one's own, built as `run` builds the controllers', read-only: `run`'s settings with
/// the settings ConfigMap's values under the explicit flags (refused values are left out, as
/// `run` leaves them out), the nodes trusting the kube config's CA unless a bundle is
/// configured, and the cluster endpoint looked up when none is set.
async fn own_view(run: &dyn RunSettings) -> Result<Own, String> {
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
    let root_cert = config.root_cert.clone();
    let client = kube::Client::try_from(crate::kube_client::configure(config))
        .map_err(|e| format!("reading the kubeconfig: {}", crate::telemetry::chain(&e)))?;
    let namespace = run.system_namespace();
    let global = match crate::settings::read(client.clone(), &namespace).await {
        Ok(crate::settings::Read::Found(configmap)) => crate::settings::parse(&configmap.data.unwrap_or_default()).0,
        Ok(crate::settings::Read::Missing) => GlobalSettings::default(),
        Err(e) => {
            return Err(format!(
                "reading the settings ConfigMap {}/{}: {}",
                namespace,
                crate::settings::SETTINGS_CONFIGMAP,
                crate::telemetry::chain(&e)
            ))
        }
    };
    let mut settings = run.resolve(&global);
    settings.cloud.trust_kube_config_ca(root_cert.as_deref());
    let mut aws = AwsCloudProvider::new(settings.cloud.clone())
        .await
        .map_err(|e| format!("setting up AWS: {}", crate::telemetry::chain(&e)))?;
    aws.discover_cluster_endpoint()
        .await
        .map_err(|e| format!("setting up AWS: {}", crate::telemetry::chain(&e)))?;
    let cloud: std::sync::Arc<dyn CloudProvider> = std::sync::Arc::new(aws);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let metrics = crate::metrics::Metrics::new();
    let view = state::Cluster::start(&client, &shutdown, &Liveness::default());
    let shared = Shared::new(client, cloud, metrics, view.clone());
    let deprovisioning = &settings.deprovisioning;
    // Always leading: this view's answers are its own.
    let (_, leading) = tokio::sync::watch::channel(true);
    let explainer = Term {
        state: view,
        provisioning: provisioning::Context::new(&shared, settings.provisioning.clone()),
        nomination: deprovisioning.nomination,
        drift_enabled: deprovisioning.drift_enabled,
        leading,
    };
    Ok(Own {
        explainer,
        _stop: shutdown.drop_guard(),
    })
}
