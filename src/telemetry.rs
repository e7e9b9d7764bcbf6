//! Logging set-up and error-chain formatting.

use std::error::Error;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;
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
        LogFormat::Json => builder.fmt_fields(JsonFields::new()).event_format(FlatJson).try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))?;
    log_panics();
    Ok(guard)
}

/// One JSON object per line with every field at the top level: `timestamp`, `level`, `message`,
/// the fields of every span the event is in (outermost first, so the controller's
/// `controller` field and a pass's `provisioner`, `node` or `pod` can be filtered on as they
/// are), the event's own fields over them, and `spans`, the span names joined by `:`. The
/// spans' fields are recorded as JSON (`JsonFields`), so they keep their types.
pub struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let mut line = Map::new();
        line.insert("timestamp".into(), Value::String(format!("{:.6}", jiff::Timestamp::now())));
        line.insert("level".into(), Value::String(event.metadata().level().to_string()));
        if let Some(scope) = ctx.event_scope() {
            let mut names = Vec::new();
            for span in scope.from_root() {
                names.push(span.name());
                if let Some(fields) = span.extensions().get::<FormattedFields<N>>() {
                    if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(fields.as_str()) {
                        line.extend(fields);
                    }
                }
            }
            if !names.is_empty() {
                line.insert("spans".into(), Value::String(names.join(":")));
            }
        }
        event.record(&mut JsonVisitor(&mut line));
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// Records an event's fields into a JSON object.
struct JsonVisitor<'a>(&'a mut Map<String, Value>);

impl Visit for JsonVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), Value::String(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn Error + 'static)) {
        self.0.insert(field.name().to_string(), Value::String(chain(value)));
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer, for the subscriber under test.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn json_lines_carry_the_controller_and_the_object_as_top_level_fields() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let controller = tracing::info_span!("controller", controller = "provisioning");
            let _c = controller.enter();
            let launch = tracing::info_span!("launch", provisioner = "service");
            let _l = launch.enter();
            tracing::info!(node = "ip-10-0-0-1", pods = 2u64, "launched node");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let line: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(line["controller"], "provisioning", "{line}");
        assert_eq!(line["provisioner"], "service", "{line}");
        assert_eq!(line["node"], "ip-10-0-0-1", "{line}");
        assert_eq!(line["pods"], 2, "{line}");
        assert_eq!(line["message"], "launched node", "{line}");
        assert_eq!(line["level"], "INFO", "{line}");
        assert_eq!(line["spans"], "controller:launch", "{line}");
        assert!(line["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{line}");
    }
}
