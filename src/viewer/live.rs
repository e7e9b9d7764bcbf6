//! The edges of `karpenter-rs nodes`: watches of Nodes and Pods through the user's kubeconfig,
//! the live prices from EC2 and the Pricing API (`--live-prices`, through the cloud provider
//! `run` uses), and the terminal (or one text frame with `--once`).

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
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use super::prices::region_of_nodes;
use super::{render, render_text, view, Fallback, LivePrices, NodesArgs, PriceBook, SnapshotPrices, Sort, View, ViewOptions};
use crate::cloudprovider::aws::AwsCloudProvider;
use crate::cloudprovider::CloudConfig;

/// How long `--once` waits for the first lists.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the screen is redrawn without a key press (ages, watch updates).
const REDRAW: Duration = Duration::from_millis(500);
/// Longest the live prices may take to load before the snapshot's are shown instead (the AWS
/// clients retry; the Pricing API has its own 60 s bound).
const LIVE_PRICES_TIMEOUT: Duration = Duration::from_secs(90);
/// How often live prices are read again (the cloud provider's catalogue time to live).
const LIVE_PRICES_REFRESH: Duration = Duration::from_secs(5 * 60);

/// The price book in use, swapped when live prices arrive.
type SharedPrices = Arc<Mutex<Arc<dyn PriceBook + Send + Sync>>>;

/// The cluster as the watches last saw it.
#[derive(Clone)]
struct Watched {
    nodes: Store<Node>,
    pods: Store<Pod>,
    /// The latest watch error per kind, cleared when that watch delivers again.
    errors: Arc<Mutex<[Option<String>; 2]>>,
}

impl Watched {
    fn view(&self, args: &NodesArgs, sort: &Sort, prices: &SharedPrices) -> View {
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

/// Runs `nodes` until the user quits (or, with `--once`, prints one frame).
pub async fn run(args: NodesArgs) -> anyhow::Result<()> {
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
        print!("{}", render_text(&watched.view(&args, &args.sort, &prices), args.width));
        return Ok(());
    }
    if args.live_prices {
        tokio::spawn(refresh_prices(args.clone(), watched.clone(), prices.clone()));
    }
    tokio::task::spawn_blocking(move || interactive(&watched, &args, &prices))
        .await
        .context("the terminal loop panicked")?
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

/// The full-screen loop: redraw every `REDRAW`, `s` cycles the order, `q`, Esc or Ctrl-C quit.
fn interactive(watched: &Watched, args: &NodesArgs, prices: &SharedPrices) -> anyhow::Result<()> {
    let mut terminal = ratatui::init();
    let result = (|| -> anyhow::Result<()> {
        let mut sort = args.sort.clone();
        let mut last = Instant::now() - REDRAW;
        loop {
            if last.elapsed() >= REDRAW {
                let v = watched.view(args, &sort, prices);
                terminal.draw(|frame| render(frame, &v)).context("drawing")?;
                last = Instant::now();
            }
            if !event::poll(REDRAW.saturating_sub(last.elapsed())).context("reading the terminal")? {
                continue;
            }
            if let Event::Key(key) = event::read().context("reading the terminal")? {
                if key.kind != KeyEventKind::Press {
                    continue;
                }
                match key.code {
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                    KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return Ok(()),
                    KeyCode::Char('s') => {
                        sort = sort.next();
                        last = Instant::now() - REDRAW;
                    }
                    _ => {}
                }
            } else {
                // A resize: draw at the new size now.
                last = Instant::now() - REDRAW;
            }
        }
    })();
    ratatui::restore();
    result
}
