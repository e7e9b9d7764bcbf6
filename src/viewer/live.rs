//! The edges of `karpenter-rs nodes`: watches of Nodes and Pods through the user's kubeconfig,
//! the live prices from EC2 and the Pricing API (`--live-prices`, through the cloud provider
//! `run` uses), the WHY column's explanations (one node at a time in the background, from the
//! controller or a view of the command's own, as `explain` answers), and the terminal (or one text
//! frame with `--once`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::config::KubeConfigOptions;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use ratatui::crossterm::event::{self, Event, KeyEventKind};

use super::prices::region_of_nodes;
use super::{
    explanation_scroll_limit, render, render_text, view, Effect, Fallback, Key, LivePrices, NodesArgs, Pane, PriceBook, Reasons,
    SnapshotPrices, Ui, View, ViewOptions,
};
use crate::cloudprovider::aws::AwsCloudProvider;
use crate::cloudprovider::CloudConfig;
use crate::explain::cli::{Answered, Answers, Unanswered};
use crate::explain::render::node_text;
use crate::explain::{Explanation, Question};

/// How long `--once` waits for the first lists.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the screen is redrawn without a key press (ages, watch updates).
const REDRAW: Duration = Duration::from_millis(500);
/// Longest the live prices may take to load before the snapshot's are shown instead (the AWS
/// clients retry; the Pricing API has its own 60 s bound).
const LIVE_PRICES_TIMEOUT: Duration = Duration::from_secs(90);
/// How often live prices are read again (the cloud provider's catalogue time to live).
const LIVE_PRICES_REFRESH: Duration = Duration::from_secs(5 * 60);

/// Longest one node's explanation may take (a view of one's own first lists the cluster and
/// reads the instance types).
const EXPLAIN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `--once` waits for every shown node's reason.
const ONCE_REASONS_TIMEOUT: Duration = Duration::from_secs(30);
/// A node is explained again at most this often (a full round of 1,000 nodes takes longer).
const REASON_MIN_AGE: Duration = Duration::from_secs(15);
/// The pause after nothing could be explained, before trying again.
const EXPLAIN_RETRY: Duration = Duration::from_secs(15);

/// The price book in use, swapped when live prices arrive.
type SharedPrices = Arc<Mutex<Arc<dyn PriceBook + Send + Sync>>>;
/// The WHY column's cache.
type SharedReasons = Arc<Mutex<Reasons>>;
/// The explanation open in the pane: the node and its text, or why there is none.
type SharedPane = Arc<Mutex<Option<(String, String)>>>;

/// The cluster as the watches last saw it.
#[derive(Clone)]
struct Watched {
    nodes: Store<Node>,
    pods: Store<Pod>,
    /// The latest watch error per kind, cleared when that watch delivers again.
    errors: Arc<Mutex<[Option<String>; 2]>>,
}

impl Watched {
    fn view(&self, args: &NodesArgs, sort: &super::Sort, prices: &SharedPrices) -> View {
        let prices = prices.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let nodes = self.nodes.state();
        let pods = self.pods.state();
        let nodes: Vec<&Node> = nodes.iter().map(Arc::as_ref).collect();
        let pods: Vec<&Pod> = pods.iter().map(Arc::as_ref).collect();
        let options = ViewOptions {
            resources: &args.resources,
            sort: sort.clone(),
            selector: &args.node_selector,
            extra_labels: &args.extra_labels,
        };
        let mut v = view(&nodes, &pods, &options, Timestamp::now(), prices.as_ref());
        v.error = self.error();
        v
    }

    /// The names of the shown nodes, by name.
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.nodes.state().iter().filter_map(|n| n.metadata.name.clone()).collect();
        names.sort();
        names
    }

    fn error(&self) -> Option<String> {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .flatten()
            .next()
            .cloned()
    }
}

/// Runs `nodes` until the user quits (or, with `--once`, prints one frame). `settings` are what a
/// view of this command's own explains nodes with (`run`'s, from the environment), or why there
/// are none.
pub async fn run(args: NodesArgs, settings: Result<Arc<dyn crate::explain::cli::RunSettings>, String>) -> anyhow::Result<()> {
    let config = match &args.context {
        Some(context) => {
            let options = KubeConfigOptions {
                context: Some(context.clone()),
                ..Default::default()
            };
            kube::Config::from_kubeconfig(&options)
                .await
                .with_context(|| format!("kubeconfig context {context:?}"))?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig (KUBECONFIG, ~/.kube/config) and not in a cluster")?,
    };
    let client = Client::try_from(crate::kube_client::configure(config)).context("kubeconfig")?;
    let watched = watch(client, &args.node_selector);
    let prices: SharedPrices = Arc::new(Mutex::new(if args.live_prices {
        fallback("loading live prices".to_string())
    } else {
        Arc::new(SnapshotPrices::default())
    }));

    let answers = Arc::new(Answers::new(args.controller.clone(), settings));
    let reasons: SharedReasons = Arc::new(Mutex::new(Reasons::new(match &args.controller {
        Some(url) => format!("from the controller at {url}"),
        None => "from a view of this command's own (no --controller)".to_string(),
    })));
    if !args.no_reasons {
        tokio::spawn(explain_round_robin(
            answers.clone(),
            watched.clone(),
            reasons.clone(),
            args.controller.clone(),
        ));
    }

    if args.once {
        // Both lists, or the first watch error (a one-shot does not wait out retries).
        let ready = async { tokio::join!(watched.nodes.wait_until_ready(), watched.pods.wait_until_ready()) };
        let mut ready = std::pin::pin!(ready);
        let deadline = tokio::time::Instant::now() + LIST_TIMEOUT;
        loop {
            tokio::select! {
                _ = &mut ready => break,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    if let Some(error) = watched.error() {
                        anyhow::bail!("listing {error}");
                    }
                    if tokio::time::Instant::now() > deadline {
                        anyhow::bail!("listing nodes and pods took over {}s", LIST_TIMEOUT.as_secs());
                    }
                }
            }
        }
        if args.live_prices {
            let book = match live_prices(&args, &watched).await {
                Ok(live) => Arc::new(live),
                Err(reason) => fallback(reason),
            };
            *prices.lock().unwrap_or_else(|e| e.into_inner()) = book;
        }
        let mut v = watched.view(&args, &args.sort, &prices);
        if !args.no_reasons {
            let names = watched.names();
            let deadline = tokio::time::Instant::now() + ONCE_REASONS_TIMEOUT;
            loop {
                let done = {
                    let r = reasons.lock().unwrap_or_else(|e| e.into_inner());
                    r.knows_all(&names) || r.is_unavailable()
                };
                if done {
                    break;
                }
                if tokio::time::Instant::now() > deadline {
                    let why = format!("explaining the nodes took over {}s", ONCE_REASONS_TIMEOUT.as_secs());
                    reasons.lock().unwrap_or_else(|e| e.into_inner()).unavailable(why);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            v = v.with_reasons(&reasons.lock().unwrap_or_else(|e| e.into_inner()));
        }
        print!("{}", render_text(&v, args.width));
        return Ok(());
    }
    if args.live_prices {
        tokio::spawn(refresh_prices(args.clone(), watched.clone(), prices.clone()));
    }
    let handle = tokio::runtime::Handle::current();
    let live = Live {
        watched,
        prices,
        reasons,
        answers,
        pane: Arc::default(),
        handle,
    };
    tokio::task::spawn_blocking(move || interactive(&live, &args))
        .await
        .context("the terminal loop panicked")?
}

/// Asks `answers` about node `name`, within `EXPLAIN_TIMEOUT`.
async fn explain(answers: &Answers, name: &str) -> Result<Answered, Unanswered> {
    let question = Question::Node(name.to_string());
    tokio::time::timeout(EXPLAIN_TIMEOUT, answers.answer(&question))
        .await
        .unwrap_or_else(|_| {
            Err(Unanswered::Unavailable(format!(
                "explaining node {name} took over {}s",
                EXPLAIN_TIMEOUT.as_secs()
            )))
        })
}

/// Explains the shown nodes one at a time, round robin, into `reasons`, for as long as the
/// process runs. One at a time: each answer costs about a consolidation evaluation, on the
/// controller or here.
async fn explain_round_robin(answers: Arc<Answers>, watched: Watched, reasons: SharedReasons, controller: Option<String>) {
    // No `wait_until_ready` here: a store wakes only the last task that polled it, and `--once`
    // waits on it too. Until the nodes are listed there is simply nothing to explain.
    loop {
        let names = watched.names();
        let next = reasons
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .next(&names, Timestamp::now(), REASON_MIN_AGE);
        let Some(name) = next else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        let answer = explain(&answers, &name).await;
        let retry = {
            let mut r = reasons.lock().unwrap_or_else(|e| e.into_inner());
            match answer {
                Ok(Answered {
                    explanation: Explanation::Node(n),
                    controller_failed,
                }) => {
                    let source = match (&controller, controller_failed) {
                        (Some(url), None) => format!("from the controller at {url}"),
                        (Some(url), Some(why)) => {
                            format!("from a view of this command's own (the controller at {url} did not answer: {why})")
                        }
                        (None, _) => "from a view of this command's own (no --controller)".to_string(),
                    };
                    r.explained(&name, n, Timestamp::now(), source);
                    false
                }
                Ok(_) => {
                    r.unexplained(&name, "-".to_string(), Timestamp::now());
                    false
                }
                Err(Unanswered::NotFound(why)) => {
                    r.unexplained(&name, why, Timestamp::now());
                    false
                }
                Err(Unanswered::Unavailable(why)) => {
                    r.unavailable(why);
                    true
                }
            }
        };
        if retry {
            tokio::time::sleep(EXPLAIN_RETRY).await;
        }
    }
}

/// The live prices for `--region`, else the shown nodes' region (else the AWS SDK's); the error
/// is the reason to show beside the snapshot's prices.
async fn live_prices(args: &NodesArgs, watched: &Watched) -> Result<LivePrices, String> {
    let region = Some(args.region.clone()).filter(|r| !r.is_empty()).or_else(|| {
        let nodes = watched.nodes.state();
        region_of_nodes(nodes.iter().map(Arc::as_ref))
    });
    let mut config = CloudConfig::new("", "");
    config.region = region;
    config.price_overrides = args.price_overrides.clone();
    match tokio::time::timeout(LIVE_PRICES_TIMEOUT, load_live_prices(config)).await {
        Ok(Ok(live)) => Ok(live),
        Ok(Err(error)) => Err(format!("live prices failed: {error}")),
        Err(_) => Err(format!("live prices took over {}s", LIVE_PRICES_TIMEOUT.as_secs())),
    }
}

/// The snapshot's prices, saying why they are shown.
fn fallback(reason: String) -> Arc<dyn PriceBook + Send + Sync> {
    Arc::new(Fallback {
        reason,
        snapshot: SnapshotPrices::default(),
    })
}

/// Loads live prices once the nodes are listed, then every `LIVE_PRICES_REFRESH`; a failure
/// after a success keeps the last live prices, as `run` keeps its last catalogue.
async fn refresh_prices(args: NodesArgs, watched: Watched, prices: SharedPrices) {
    let _ = watched.nodes.wait_until_ready().await;
    let mut loaded = false;
    loop {
        let book = match live_prices(&args, &watched).await {
            Ok(live) => {
                loaded = true;
                Some(Arc::new(live) as Arc<dyn PriceBook + Send + Sync>)
            }
            Err(reason) => (!loaded).then(|| fallback(reason)),
        };
        if let Some(book) = book {
            *prices.lock().unwrap_or_else(|e| e.into_inner()) = book;
        }
        tokio::time::sleep(LIVE_PRICES_REFRESH).await;
    }
}

/// The region's prices as `run` reads its catalogue: EC2's instance types, offerings and spot
/// price history and the Pricing API's on-demand prices, with `config`'s price overrides, region
/// (the AWS SDK's when unset), endpoint and credentials. The error is the message to show.
pub async fn load_live_prices(config: CloudConfig) -> Result<LivePrices, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let configured = config.region.clone();
    let cloud = AwsCloudProvider::new(config).await.map_err(|e| crate::telemetry::chain(&e))?;
    let (types, pricing) = cloud
        .instance_types_with_pricing()
        .await
        .map_err(|e| format!("reading the instance types from EC2: {}", crate::telemetry::chain(&e)))?;
    let region = configured
        .or_else(|| {
            types
                .iter()
                .flat_map(|t| &t.offerings)
                .find_map(|o| crate::simulate::catalogue::region_of_zone(&o.zone))
                .map(str::to_string)
        })
        .ok_or("EC2 offers no instance type in any zone")?;
    Ok(LivePrices::new(&region, &types, &pricing))
}

/// Starts the two watches; they retry with back-off for as long as the process runs.
fn watch(client: Client, selector: &str) -> Watched {
    let (nodes, node_writer) = reflector::store::<Node>();
    let (pods, pod_writer) = reflector::store::<Pod>();
    let errors: Arc<Mutex<[Option<String>; 2]>> = Arc::default();
    let node_config = watcher::Config::default().labels(selector);
    let node_stream = watcher(Api::<Node>::all(client.clone()), node_config)
        .default_backoff()
        .reflect(node_writer);
    let pod_stream = watcher(Api::<Pod>::all(client), watcher::Config::default())
        .default_backoff()
        .reflect(pod_writer);
    tokio::spawn(drive(node_stream, errors.clone(), 0, "nodes"));
    tokio::spawn(drive(pod_stream, errors.clone(), 1, "pods"));
    Watched { nodes, pods, errors }
}

async fn drive<K>(
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    errors: Arc<Mutex<[Option<String>; 2]>>,
    slot: usize,
    kind: &'static str,
) {
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        let mut errors = errors.lock().unwrap_or_else(|e| e.into_inner());
        errors[slot] = item.err().map(|e| format!("{kind}: {e}"));
    }
}

/// What the terminal loop reads and asks.
struct Live {
    watched: Watched,
    prices: SharedPrices,
    reasons: SharedReasons,
    answers: Arc<Answers>,
    /// The explanation asked for the pane.
    pane: SharedPane,
    /// The runtime the pane's explanation is asked on.
    handle: tokio::runtime::Handle,
}

impl Live {
    /// The view for `ui`: its order, selection and open explanation.
    fn view(&self, args: &NodesArgs, ui: &Ui) -> View {
        let mut v = self.watched.view(args, &ui.sort, &self.prices);
        if !args.no_reasons {
            v = v.with_reasons(&self.reasons.lock().unwrap_or_else(|e| e.into_inner()));
        }
        v.selected = ui.selected_index(&v.names());
        if let super::Screen::Explanation { node, scroll } = &ui.screen {
            let asked = self.pane.lock().unwrap_or_else(|e| e.into_inner()).clone();
            v.explanation = Some(Pane {
                node: node.clone(),
                text: asked.filter(|(n, _)| n == node).map(|(_, text)| text),
                scroll: *scroll,
            });
        }
        v
    }

    /// Asks for `node`'s explanation afresh, for the pane.
    fn ask(&self, node: String) {
        *self.pane.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let (answers, pane) = (self.answers.clone(), self.pane.clone());
        self.handle.spawn(async move {
            let text = match explain(&answers, &node).await {
                Ok(answered) => match answered.explanation {
                    Explanation::Node(n) => node_text(&n, false),
                    Explanation::Pod(_) => "not a node's explanation".to_string(),
                },
                Err(why) => format!("no explanation: {why}"),
            };
            *pane.lock().unwrap_or_else(|e| e.into_inner()) = Some((node, text));
        });
    }
}

/// The full-screen loop: redraw every `REDRAW`; keys go through `Ui::on_key` (`s` cycles the
/// order, ↑↓ select, Enter opens the selected node's explanation, `q`, Esc or Ctrl-C quit).
fn interactive(live: &Live, args: &NodesArgs) -> anyhow::Result<()> {
    let mut terminal = ratatui::init();
    let result = (|| -> anyhow::Result<()> {
        let mut ui = Ui::new(args.sort.clone());
        let mut last = Instant::now() - REDRAW;
        let mut shown = live.view(args, &ui);
        loop {
            if last.elapsed() >= REDRAW {
                shown = live.view(args, &ui);
                terminal.draw(|frame| render(frame, &shown)).context("drawing")?;
                last = Instant::now();
            }
            if !event::poll(REDRAW.saturating_sub(last.elapsed())).context("reading the terminal")? {
                continue;
            }
            if let Event::Key(key) = event::read().context("reading the terminal")? {
                if key.kind != KeyEventKind::Press {
                    continue;
                }
                let max_scroll = shown.explanation.as_ref().map_or(0, explanation_scroll_limit);
                match ui.on_key(Key::from(key), &shown.names(), max_scroll) {
                    Effect::Quit => return Ok(()),
                    Effect::Explain(node) => live.ask(node),
                    Effect::Redraw => {}
                }
            }
            // A key or a resize: draw the new state now.
            last = Instant::now() - REDRAW;
        }
    })();
    ratatui::restore();
    result
}
