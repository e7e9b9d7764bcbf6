//! Logging set-up and error-chain formatting.

use std::error::Error;

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

/// Log lines queued for the writer thread before a logging call waits.
pub const LOG_QUEUE_LINES: usize = 4096;

/// Installs the global subscriber. `level` is an `EnvFilter` directive (`info`,
/// `karpenter_rs=debug,info`). Lines are written to stdout by a background thread, so a request
/// never waits on the terminal or the log pipe; keep the returned guard alive until exit, it
/// flushes what is left.
pub fn init(level: &str, format: LogFormat) -> anyhow::Result<WorkerGuard> {
    let filter = EnvFilter::try_new(level).map_err(|e| anyhow::anyhow!("invalid --log-level {level:?}: {e}"))?;
    // Not lossy: under a flood the writer applies back-pressure instead of dropping lines. The
    // queue's slots are allocated (and touched) up front: the default 128,000 lines held 4 MiB of
    // every process's memory for a queue that a log pipe drains in microseconds.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .buffered_lines_limit(LOG_QUEUE_LINES)
        .finish(std::io::stdout());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi)
        .with_writer(writer);
    let result = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))?;
    log_panics();
    Ok(guard)
}

/// Logs every panic as an error with where it happened and its backtrace, through the log
/// subscriber (a panic caught by the controllers' supervisor would otherwise leave only the
/// default hook's line on stderr, without a backtrace unless RUST_BACKTRACE was set).
pub fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let location = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        let backtrace = std::backtrace::Backtrace::force_capture();
        tracing::error!(panic = %message, location = %location, backtrace = %backtrace, "panicked");
    }));
}

/// An error with all its sources, `outer: inner: innermost`.
pub fn chain(err: &(dyn Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
