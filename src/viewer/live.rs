//! The edges of `karpenter-rs nodes`: watches of Nodes and Pods through the user's kubeconfig,
//! and the terminal (or one text frame with `--once`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::chrono::Utc;
use kube::config::KubeConfigOptions;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use super::{render, render_text, view, NodesArgs, SnapshotPrices, SortBy, View, ViewOptions};

/// How long `--once` waits for the first lists.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the screen is redrawn without a key press (ages, watch updates).
const REDRAW: Duration = Duration::from_millis(500);

/// The cluster as the watches last saw it.
#[derive(Clone)]
struct Watched {
    nodes: Store<Node>,
    pods: Store<Pod>,
    /// The latest watch error per kind, cleared when that watch delivers again.
    errors: Arc<Mutex<[Option<String>; 2]>>,
}

impl Watched {
    fn view(&self, args: &NodesArgs, sort: SortBy, prices: &SnapshotPrices) -> View {
        let nodes = self.nodes.state();
        let pods = self.pods.state();
        let nodes: Vec<&Node> = nodes.iter().map(Arc::as_ref).collect();
        let pods: Vec<&Pod> = pods.iter().map(Arc::as_ref).collect();
        let options = ViewOptions {
            resources: &args.resources,
            sort,
            selector: &args.node_selector,
        };
        let mut v = view(&nodes, &pods, &options, Utc::now(), prices);
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
    let client = Client::try_from(config).context("kubeconfig")?;
    let watched = watch(client, &args.node_selector);
    let prices = SnapshotPrices::default();

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
        print!("{}", render_text(&watched.view(&args, args.sort, &prices), args.width));
        return Ok(());
    }
    tokio::task::spawn_blocking(move || interactive(&watched, &args, &prices))
        .await
        .context("the terminal loop panicked")?
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
fn interactive(watched: &Watched, args: &NodesArgs, prices: &SnapshotPrices) -> anyhow::Result<()> {
    let mut terminal = ratatui::init();
    let result = (|| -> anyhow::Result<()> {
        let mut sort = args.sort;
        let mut last = Instant::now() - REDRAW;
        loop {
            if last.elapsed() >= REDRAW {
                let v = watched.view(args, sort, prices);
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
