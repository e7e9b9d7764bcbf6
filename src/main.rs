//! The karpenter-rs binary: parse the configuration, set up logging, start the servers, and wait
//! for SIGTERM or Ctrl-C.
#![forbid(unsafe_code)]

use std::net::SocketAddr;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use karpenter_rs::cloudprovider::aws::AwsCloudProvider;
use karpenter_rs::config::{self, CertsArgs, Command, ConvertArgs, CrdsArgs, RunArgs, WebhookConfigArgs};
use karpenter_rs::controllers::{leader, Stopped};
use karpenter_rs::metrics::Metrics;
use karpenter_rs::probes::{self, Readiness};
use karpenter_rs::ratelimit::RateLimitLayer;
use karpenter_rs::webhook::cert_reconciler;
use karpenter_rs::webhook::registration::{self, Target};
use karpenter_rs::{certs, crds, settings, telemetry, webhook};

fn main() -> anyhow::Result<()> {
    let cli = config::parse_cli(std::env::args_os()).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::Run(args) => serve(args, true),
        Command::Webhook(args) => serve(args, false),
        Command::Crds(args) => write_crds(&args),
        Command::Certs(args) => write_certs(&args),
        Command::WebhookConfig(args) => print_webhook_config(&args),
        Command::Simulate(args) => simulate(&args),
        Command::Convert(args) => convert(&args),
        Command::Nodes(args) => nodes(args),
        Command::Explain(args) => explain(&args),
    }
}

fn serve(args: RunArgs, with_controllers: bool) -> anyhow::Result<()> {
    let _flush_logs_on_exit = telemetry::init(&args.log_level, args.log_format)?;
    // Several TLS backends are linked in (ring for our servers, the AWS SDK's own); pick one
    // for every client that asks for the process default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let result = runtime.block_on(run(args, with_controllers));
    // A pass abandoned in blocking work (`Stopped::Abandoned`) must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

async fn run(args: RunArgs, with_controllers: bool) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    let metrics = Metrics::new();
    metrics.liveness.set_deadline_override(args.liveness_deadline_override());
    let readiness = Readiness::default();

    let bind = |port| SocketAddr::new(args.bind_address, port);
    let metrics_listener = TcpListener::bind(bind(args.metrics_port))
        .await
        .with_context(|| format!("binding metrics port {}", bind(args.metrics_port)))?;
    let health_listener = TcpListener::bind(bind(args.health_probe_port))
        .await
        .with_context(|| format!("binding health probe port {}", bind(args.health_probe_port)))?;
    let webhook_listener = TcpListener::bind(bind(args.webhook_port))
        .await
        .with_context(|| format!("binding webhook port {}", bind(args.webhook_port)))?;

    // Port 0 binds any free port; the addresses logged below are the ones really bound.
    let metrics_addr = metrics_listener.local_addr().context("reading the metrics address")?;
    let health_addr = health_listener.local_addr().context("reading the health probe address")?;
    let explain_slot = karpenter_rs::controllers::term::TermSlot::default();
    let metrics_task = probes::serve(
        metrics_listener,
        probes::metrics_router(metrics.clone()).merge(probes::explain_router(explain_slot.clone())),
        shutdown.clone(),
    );
    let health_task = probes::serve(
        health_listener,
        probes::health_router(readiness.clone(), metrics.liveness.clone()),
        shutdown.clone(),
    );
    let webhook = if webhook::tls::has_certificate_files(&args.cert_dir) {
        webhook::start(webhook_listener, args.webhook(), metrics.clone(), shutdown.clone())
            .with_context(|| format!("loading the serving certificate from {}", args.cert_dir.display()))?
    } else {
        // No certificate mounted: keep one in a Secret, serve it from memory.
        let self_managed = args.self_managed_certs().map_err(anyhow::Error::msg)?;
        let certs = webhook::tls::CertStore::in_memory();
        tokio::spawn(cert_reconciler::connect_and_run(
            self_managed,
            certs.clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
        webhook::serve(webhook_listener, certs, args.webhook(), metrics.clone(), shutdown.clone())
    };
    // Ready once a certificate is served: at once with mounted files, after the Secret is read otherwise.
    let ready = tokio::spawn({
        let (certs, readiness) = (webhook.certs.clone(), readiness.clone());
        async move {
            certs.wait_until_loaded().await;
            readiness.set(true);
        }
    });
    // The controllers need the Kubernetes API and AWS; the webhook needs neither and keeps
    // serving whatever happens to them.
    let controllers = with_controllers.then(|| {
        tokio::spawn(run_controllers(
            args.clone(),
            metrics.clone(),
            shutdown.clone(),
            explain_slot.clone(),
        ))
    });
    info!(
        cluster = %args.cluster_name,
        webhook = %webhook.local_addr,
        metrics = %metrics_addr,
        health = %health_addr,
        "karpenter-rs started"
    );

    wait_for_signal().await;
    info!("shutting down");
    ready.abort();
    let _ = ready.await;
    readiness.set(false);
    shutdown.cancel();
    if let Err(e) = webhook.task.await {
        error!(error = %e, "webhook task failed");
    }
    if let Some(task) = controllers {
        if let Err(e) = task.await {
            error!(error = %e, "controller task failed");
        }
    }
    for task in [metrics_task, health_task] {
        match task.await {
            Ok(Err(e)) => error!(error = %e, "side listener failed"),
            Err(e) => error!(error = %e, "side listener task failed"),
            Ok(Ok(())) => {}
        }
    }
    Ok(())
}

/// mimalloc rather than the system allocator: glibc's per-thread arenas keep the peak of every
/// thread that ever allocated (a burst of thousands of pods left the process at its peak RSS
/// after the pods were gone); mimalloc returns freed pages to the system. Built without
/// transparent huge pages (`no_thp`: it never asks for them): with them, each 2 MiB page the heap
/// touched counted in full, 20-25 MiB of the RSS at idle and 35 MiB at a 1,000-pod burst
/// (tests/benches/results/scale.md). The `system-allocator` feature builds with glibc's
/// allocator instead, for heap profilers that hook `malloc` (heaptrack).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What karpenter-rs sends as its HTTP user agent to the API server.
const USER_AGENT: &str = concat!("karpenter-rs/", env!("CARGO_PKG_VERSION"));

/// Retries `attempt` with a back-off of 1 s doubling to 60 s, jittered (`retry::Backoff`), logging each failure as `what`,
/// until it succeeds (Some) or `shutdown` (None).
async fn retrying<T, F, Fut>(shutdown: &CancellationToken, what: &str, mut attempt: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut backoff = karpenter_rs::retry::Backoff::new(std::time::Duration::from_secs(1), std::time::Duration::from_secs(60));
    loop {
        let wait = backoff.next_wait();
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            result = attempt() => match result {
                Ok(value) => return Some(value),
                Err(e) => error!(error = format!("{e:#}"), retry_in = ?wait, "{what}"),
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The Kubernetes clients: the controllers' (rate-limited) and the Lease's own, and the CA the
/// API server is trusted by.
async fn connect(args: &RunArgs) -> anyhow::Result<(kube::Client, kube::Client, Option<Vec<Vec<u8>>>)> {
    let mut kube_config = karpenter_rs::kube_client::infer().await.context("reading the kube config")?;
    // Named in the API server's audit log and request metrics, as client-go programs are.
    kube_config
        .headers
        .push((axum::http::header::USER_AGENT, axum::http::HeaderValue::from_static(USER_AGENT)));
    let root_cert = kube_config.root_cert.clone();
    // The Lease has a client of its own: its renewals never queue behind the controllers'
    // rate-limited traffic or share a hung connection with it.
    let lease_client = kube::Client::try_from(kube_config.clone()).context("connecting to the Kubernetes API")?;
    let client = kube::client::ClientBuilder::try_from(kube_config)
        .context("connecting to the Kubernetes API")?
        .with_layer(&RateLimitLayer::new(args.kube_client_qps, args.kube_client_burst))
        .build();
    Ok((client, lease_client, root_cert))
}

/// `args` with the settings ConfigMap applied, the AWS cloud provider they describe, and what
/// was read. A ConfigMap that cannot be read is an error (retried), never run past on defaults.
async fn configure(
    client: &kube::Client,
    args: &RunArgs,
    root_cert: Option<&[Vec<u8>]>,
) -> anyhow::Result<(RunArgs, AwsCloudProvider, settings::Loaded)> {
    let mut args = args.clone();
    if !args.allow_coexistence {
        let found = karpenter_rs::coexistence::find_karpenter(client, &args.system_namespace)
            .await
            .context("looking for a running Karpenter")?;
        if !found.is_empty() {
            anyhow::bail!(karpenter_rs::coexistence::refusal(&found));
        }
    }
    let loaded = settings::load(client.clone(), &args.system_namespace)
        .await
        .context("reading the settings ConfigMap karpenter-global-settings")?;
    for note in args.apply_settings(&loaded.settings) {
        tracing::warn!(namespace = %args.system_namespace, "{note}");
    }
    let mut cloud_config = args.cloud();
    cloud_config.trust_kube_config_ca(root_cert);
    let mut cloud = AwsCloudProvider::new(cloud_config)
        .await
        .context("setting up the AWS cloud provider")?;
    cloud.discover_cluster_endpoint().await.context("finding the cluster endpoint")?;
    Ok((args, cloud, loaded))
}

/// How a term of the controllers ended.
enum TermEnd {
    /// Shutdown: the process exits.
    Shutdown,
    /// The Lease was lost: a new term starts, a follower until it leads again.
    LeaseLost,
    /// The settings ConfigMap changed: the settings are read again and a new term starts.
    SettingsChanged,
}

/// Connects to Kubernetes and AWS (retrying until both answer), then runs leader election and
/// the provisioning, termination, deprovisioning and garbage-collection controllers until shutdown.
///
/// A term lasts until shutdown, until this replica loses the Lease, or until the settings
/// ConfigMap changes. Ending a term drops every pass in flight at once (nothing more is written;
/// each step is idempotent and re-read from the API, as after a crash), and the next term starts
/// with the controllers' in-memory state made afresh: a follower until it leads again after a
/// lost Lease; with the settings read again, and the Lease released first, after a change. The
/// cluster view (one watch per kind) is kept across terms, and the webhook serves throughout.
async fn run_controllers(args: RunArgs, metrics: Metrics, shutdown: CancellationToken, explain: karpenter_rs::controllers::term::TermSlot) {
    let Some((client, lease_client, root_cert)) = retrying(&shutdown, "controllers cannot start", || connect(&args)).await else {
        return;
    };
    if let Some(name) = &args.pod_name {
        karpenter_rs::controllers::events::set_instance(name);
    }
    let process = Process {
        state: karpenter_rs::controllers::state::Cluster::start(&client, &shutdown, &metrics.liveness),
        identity: args
            .pod_name
            .clone()
            .unwrap_or_else(|| format!("karpenter-rs-{}", std::process::id())),
        client,
        lease_client,
        metrics,
        explain,
        shutdown,
    };
    loop {
        let Some((args, cloud, loaded)) = retrying(&process.shutdown, "controllers cannot start", || {
            configure(&process.client, &args, root_cert.as_deref())
        })
        .await
        else {
            return;
        };
        let settings_changed = settings::changed(process.client.clone(), args.system_namespace.clone(), loaded.data);
        tokio::pin!(settings_changed);
        let queue = std::sync::Arc::new(cloud.interruption_queue());
        let cloud: std::sync::Arc<dyn karpenter_rs::cloudprovider::CloudProvider> = std::sync::Arc::new(cloud);
        loop {
            match term(&process, &args, &cloud, &queue, settings_changed.as_mut()).await {
                TermEnd::Shutdown => return,
                TermEnd::LeaseLost => continue,
                TermEnd::SettingsChanged => break,
            }
        }
    }
}

/// What every term of the controllers shares, made once per process.
struct Process {
    /// This replica's name in the leader Lease.
    identity: String,
    /// The controllers' (rate-limited) client.
    client: kube::Client,
    /// The Lease's own client.
    lease_client: kube::Client,
    /// The cluster view, kept across terms.
    state: std::sync::Arc<karpenter_rs::controllers::state::Cluster>,
    metrics: Metrics,
    shutdown: CancellationToken,
    /// What the metrics port's `/explain` answers from, set by each term.
    explain: karpenter_rs::controllers::term::TermSlot,
}

/// One term of the controllers (see `run_controllers`), with `args` and the cloud they describe.
async fn term(
    process: &Process,
    args: &RunArgs,
    cloud: &std::sync::Arc<dyn karpenter_rs::cloudprovider::CloudProvider>,
    queue: &std::sync::Arc<karpenter_rs::cloudprovider::aws::queue::SqsQueue>,
    settings_changed: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> TermEnd {
    use karpenter_rs::controllers;
    let Process {
        identity,
        client,
        lease_client,
        state,
        metrics,
        shutdown,
        explain,
    } = process;
    let (leading_tx, leading_rx) = tokio::sync::watch::channel(!args.leader_elect);
    // Stopped only after the passes have: on SIGTERM the Lease is released once nothing acts.
    let election_stop = CancellationToken::new();
    let mut election = args.leader_elect.then(|| {
        let config = leader::LeaderConfig::new(&args.leader_election_namespace, "karpenter-rs-leader-election", identity);
        let api = kube::Api::namespaced(lease_client.clone(), &args.leader_election_namespace);
        tokio::spawn(leader::run(api, config, leading_tx, election_stop.clone()))
    });
    // Termination runs only on the leader, like every other controller (Karpenter runs them
    // all in its leader-elected manager): two replicas would evict and terminate side by side.
    let mut shared = controllers::Shared::new(client.clone(), cloud.clone(), metrics.clone(), state.clone());
    shared.explain = explain.clone();
    let settings = controllers::Settings {
        provisioning: args.provisioning(),
        termination: Some(Default::default()),
        deprovisioning: Some(args.deprovisioning()),
        garbage_collection: Some(args.garbage_collection()),
        interruption: Some((args.interruption(), queue.clone())),
    };
    info!(leader_elect = args.leader_elect, "controllers started");
    let controllers = controllers::run_all(shared, settings, leading_rx, shutdown.clone());
    enum Ended {
        Controllers(Stopped),
        Lost(Result<leader::Ended, tokio::task::JoinError>),
        SettingsChanged,
    }
    let ended = {
        let lost = async {
            match election.as_mut() {
                Some(election) => election.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            stopped = controllers => Ended::Controllers(stopped),
            ended = lost => Ended::Lost(ended),
            () = settings_changed => Ended::SettingsChanged,
        }
    };
    match ended {
        Ended::Controllers(Stopped::Cleanly) => {
            if let Some(election) = election {
                info!("controllers stopped; releasing the leader lease");
                election_stop.cancel();
                let _ = election.await;
            }
            TermEnd::Shutdown
        }
        Ended::Controllers(Stopped::Abandoned(left)) => {
            // One of them may still write once its blocking work ends: the next leader waits for
            // the Lease to expire instead.
            warn!(?left, "controllers still in a pass after the stop grace; exiting without them, the leader lease (if held) left to expire, not released");
            if let Some(election) = election {
                election.abort();
            }
            TermEnd::Shutdown
        }
        Ended::Lost(ended) => {
            error!(ended = ?ended, "lost the leader lease: every pass in flight is stopped; following until this replica leads again");
            TermEnd::LeaseLost
        }
        Ended::SettingsChanged => {
            info!("the settings ConfigMap changed: every pass in flight is stopped and the controllers start again with the new settings");
            if let Some(election) = election {
                election_stop.cancel();
                let _ = election.await;
            }
            TermEnd::SettingsChanged
        }
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("installing a SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}

fn write_crds(args: &CrdsArgs) -> anyhow::Result<()> {
    let rendered = crds::render();
    match &args.out_dir {
        None => {
            use std::io::Write;
            let documents: Vec<String> = rendered.into_iter().map(|(_, yaml)| yaml).collect();
            let mut out = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth a panic.
            let _ = out.write_all(documents.join("---\n").as_bytes()).and_then(|_| out.flush());
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (file, yaml) in rendered {
                let path = dir.join(file);
                std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}

fn write_certs(args: &CertsArgs) -> anyhow::Result<()> {
    let mut extra = args.names.clone();
    if let Some(service) = &args.service {
        extra.extend(certs::service_dns_names(service, &args.namespace));
    }
    let names = certs::serving_names(&extra);
    let ca = certs::Ca::generate("karpenter-rs webhook CA", args.validity)?;
    let serving = ca.issue(&names, args.validity)?;
    certs::write(&args.out_dir, &ca, &serving)?;
    eprintln!(
        "wrote {} (ca.crt, ca.key, tls.crt, tls.key) for {}",
        args.out_dir.display(),
        names.join(", ")
    );
    Ok(())
}

fn print_webhook_config(args: &WebhookConfigArgs) -> anyhow::Result<()> {
    let ca = std::fs::read(&args.ca_file).with_context(|| format!("reading {}", args.ca_file.display()))?;
    let target = match (&args.url, &args.service) {
        (Some(url), _) => Target::Url(url.clone()),
        (None, Some(service)) => Target::Service {
            namespace: args.namespace.clone(),
            name: service.clone(),
            port: args.port,
        },
        (None, None) => anyhow::bail!("give --url or --service"),
    };
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(registration::to_yaml(&target, &ca).as_bytes())
        .and_then(|_| out.flush());
    Ok(())
}

/// `nodes`: the terminal view until the user quits (or one frame with `--once`).
fn nodes(args: karpenter_rs::viewer::NodesArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(karpenter_rs::viewer::live::run(args, karpenter_rs::config::settings_from_env()))
}

/// `explain`: the answer on stdout; why there is none on stderr with exit code 1.
fn explain(args: &karpenter_rs::config::ExplainArgs) -> anyhow::Result<()> {
    if let Err(message) = args.request().and_then(karpenter_rs::explain::cli::run) {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
    Ok(())
}

/// `simulate`: the report on stdout; an input error on stderr with exit code 1.
fn simulate(args: &karpenter_rs::simulate::args::SimulateArgs) -> anyhow::Result<()> {
    use std::io::Write;
    match karpenter_rs::simulate::cli::run(args) {
        Ok(report) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(report.as_bytes()).and_then(|_| out.flush());
            Ok(())
        }
        Err(message) => {
            eprintln!("error: {message}");
            std::process::exit(1);
        }
    }
}

/// `convert`: the v1 objects on stdout, skipped documents and notes on stderr; an input error on
/// stderr with exit code 1.
fn convert(args: &ConvertArgs) -> anyhow::Result<()> {
    use std::io::Write;
    match karpenter_rs::convert::cli::run(args) {
        Ok(printed) => {
            for line in &printed.stderr {
                eprintln!("{line}");
            }
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(printed.stdout.as_bytes()).and_then(|_| out.flush());
            Ok(())
        }
        Err(message) => {
            eprintln!("error: {message}");
            std::process::exit(1);
        }
    }
}
