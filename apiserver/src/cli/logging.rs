//! Logging as metrics-server logs (k8s.io/component-base's `logsapi`): `-v` maps klog
//! verbosity onto levels, text goes to stderr and JSON to stdout, each as one stream, or
//! errors to stderr and the rest to stdout with `--log-{text,json}-split-stream`. Text lines
//! are klog's (`I1207 00:11:10.711444       1 run.rs:402] "msg" key="value"`) and JSON lines
//! carry klog's fields (`ts`, `caller`, `msg`, `v`, `err`), so that a log pipeline built for
//! metrics-server reads either.

use std::fmt::{self, Write as _};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, Ordering};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::writer::{BoxMakeWriter, MakeWriterExt as _};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use super::{Logging, LoggingFormat};

/// The klog verbosity in effect: `-v`, then whatever `/debug/flags/v` set.
static VERBOSITY: AtomicI64 = AtomicI64::new(0);

/// Replaces the installed subscriber's filter; set once by [`init`].
type Reload = Box<dyn Fn(EnvFilter) -> bool + Send + Sync>;
static RELOAD: OnceLock<Reload> = OnceLock::new();

/// The filter for klog verbosity `v`: ours at info up to 1, debug up to 5, trace above;
/// the libraries' at info, debug from 8; one line per request (k8s.io/apiserver's
/// `httplog`) from 3.
fn filter_for(v: i64) -> EnvFilter {
    let ours = match v {
        ..=1 => "info",
        2..=5 => "debug",
        _ => "trace",
    };
    let others = if v >= 8 { "debug" } else { "info" };
    let requests = if v >= 3 { "info" } else { "off" };
    EnvFilter::new(format!(
        "{others},apiserver={ours},metrics_server={ours},scraper={ours},tls={ours},{}={requests}",
        crate::serve::httplog::TARGET
    ))
}

/// Installs the global subscriber for `logging`, its filter replaceable by
/// [`set_verbosity`]. `RUST_LOG` overrides the levels until then.
pub fn init(logging: &Logging) {
    let verbosity = i64::from(logging.verbosity);
    VERBOSITY.store(verbosity, Ordering::Relaxed);
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| filter_for(verbosity));
    // As component-base's formats write: text to stderr and JSON to stdout, each as one
    // stream; split, errors to stderr and the rest to stdout.
    let (text, split) = match logging.logging_format {
        LoggingFormat::Text => (true, logging.log_text_split_stream),
        LoggingFormat::Json => (false, logging.log_json_split_stream),
    };
    let writer = match (text, split) {
        (_, true) => BoxMakeWriter::new(
            std::io::stderr
                .with_max_level(Level::ERROR)
                .or_else(std::io::stdout),
        ),
        (true, false) => BoxMakeWriter::new(std::io::stderr),
        (false, false) => BoxMakeWriter::new(std::io::stdout),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    // A disabled call site stays disabled without a look at the filter (the interest is
    // cached, and rebuilt on a reload), so the reload layer costs nothing on the hot path.
    let format = if text { Klog::Text } else { Klog::Json };
    let builder = builder.event_format(format).with_filter_reloading();
    let handle = builder.reload_handle();
    let _ = RELOAD.set(Box::new(move |f| handle.reload(f).is_ok()));
    let _ = builder.try_init();
}

/// The klog verbosity in effect.
pub fn verbosity() -> i64 {
    VERBOSITY.load(Ordering::Relaxed)
}

/// klog's `GlogSetter` behind `PUT /debug/flags/v`: `value` must be an int32 as Go parses
/// it (no whitespace, no newline); the levels change at once, `RUST_LOG` or not. The
/// answer's text is upstream's.
pub fn set_verbosity(value: &str) -> Result<String, String> {
    let v = scraper::go::parse_int(value, 32)
        .map_err(|e| format!("failed set klog.logging.verbosity {value}: {e}"))?;
    VERBOSITY.store(v, Ordering::Relaxed);
    if let Some(reload) = RELOAD.get()
        && !reload(filter_for(v))
    {
        return Err(format!(
            "failed set klog.logging.verbosity {value}: the log filter could not be replaced"
        ));
    }
    tracing::info!(
        verbosity = v,
        "log verbosity changed through /debug/flags/v"
    );
    Ok(format!(
        "successfully set klog.logging.verbosity to {value}"
    ))
}

/// component-base's two log formats, as klog writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Klog {
    /// One line per event in klog's text format: klog's header (severity `I`, `W` or `E`,
    /// the UTC date and time to the microsecond, the process ID in seven columns, the source
    /// file's name and line), then the message and the event's fields as klog's structured
    /// calls write them: strings quoted as Go's `%q`, numbers and booleans bare, the `error`
    /// field as `err`.
    Text,
    /// One JSON object per event: `ts` (Unix seconds), `caller` (directory/file:line, zap's
    /// short form), `msg`, then `v` (the klog verbosity the level stands for; errors have
    /// none) and the event's fields, its `error` as `err`.
    Json,
}

impl<S, N> FormatEvent<S, N> for Klog
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let now_ns = scraper::clock::unix_now_ns();
        let line = match self {
            Klog::Text => klog_text_line(event, now_ns, std::process::id()),
            Klog::Json => klog_json_line(event, now_ns),
        };
        writeln!(writer, "{line}")
    }
}

/// The text line of `event` logged at `now_ns` by process `pid`.
fn klog_text_line(event: &Event<'_>, now_ns: i64, pid: u32) -> String {
    let meta = event.metadata();
    let mut fields = Fields::default();
    event.record(&mut fields);
    let severity = match *meta.level() {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    };
    let at = crate::api::time::Civil::from_unix_ns(now_ns);
    let micros = now_ns.rem_euclid(1_000_000_000) / 1_000;
    // klog writes the file's base name, and `???:1` when it has none.
    let (file, number) = match (meta.file(), meta.line()) {
        (Some(file), Some(number)) => (file.rsplit('/').next().unwrap_or(file), number),
        _ => ("???", 1),
    };
    let mut line = String::with_capacity(128);
    let _ = write!(
        line,
        "{severity}{:02}{:02} {:02}:{:02}:{:02}.{micros:06} {pid:>7} {file}:{number}] {}",
        at.month,
        at.day,
        at.hour,
        at.minute,
        at.second,
        scraper::go::quote(&fields.message.unwrap_or_default()),
    );
    for (name, value) in fields.rest {
        let _ = match value {
            serde_json::Value::String(s) => write!(line, " {name}={}", scraper::go::quote(&s)),
            other => write!(line, " {name}={other}"),
        };
    }
    line
}

/// The JSON line of `event` logged at `now_ns`.
fn klog_json_line(event: &Event<'_>, now_ns: i64) -> String {
    let meta = event.metadata();
    let mut fields = Fields::default();
    event.record(&mut fields);
    let mut line = String::with_capacity(128);
    line.push_str("{\"ts\":");
    line.push_str(&json(&serde_json::Value::from(now_ns as f64 / 1e9)));
    if let (Some(file), Some(number)) = (meta.file(), meta.line()) {
        // zap's short form: the file and its directory.
        let file = file
            .rmatch_indices('/')
            .nth(1)
            .map_or(file, |(at, _)| &file[at + 1..]);
        line.push_str(",\"caller\":");
        line.push_str(&json(&format!("{file}:{number}").into()));
    }
    line.push_str(",\"msg\":");
    line.push_str(&json(&fields.message.unwrap_or_default().into()));
    let verbosity = match *meta.level() {
        Level::ERROR => None,
        Level::WARN | Level::INFO => Some(0),
        Level::DEBUG => Some(2),
        Level::TRACE => Some(6),
    };
    if let Some(v) = verbosity {
        line.push_str(",\"v\":");
        line.push_str(&v.to_string());
    }
    for (name, value) in fields.rest {
        line.push(',');
        line.push_str(&json(&name.into()));
        line.push(':');
        line.push_str(&json(&value));
    }
    line.push('}');
    line
}

fn json(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// An event's message and other fields, in the order they were recorded; the `error` field
/// named `err`, as klog names an error.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    rest: Vec<(&'static str, serde_json::Value)>,
}

impl Fields {
    fn push(&mut self, field: &Field, value: serde_json::Value) {
        if field.name() == "message" {
            self.message = Some(match value {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            });
        } else {
            let name = match field.name() {
                "error" => "err",
                name => name,
            };
            self.rest.push((name, value));
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.push(field, format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field, value.to_string().into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, value.into());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Lines written by a subscriber formatting with [`Klog::Json`].
    fn logged(emit: impl FnOnce()) -> Vec<serde_json::Value> {
        logged_as(Klog::Json, emit)
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// Lines written by a subscriber formatting with `format`.
    fn logged_as<F>(format: F, emit: impl FnOnce()) -> Vec<String>
    where
        F: FormatEvent<
                tracing_subscriber::Registry,
                tracing_subscriber::fmt::format::DefaultFields,
            > + Send
            + Sync
            + 'static,
    {
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(Level::TRACE)
            .with_writer(move || writer.clone())
            .event_format(format)
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn text_lines_are_klog_s() {
        let error = std::io::Error::other("x509: certificate signed by unknown authority");
        let before = scraper::clock::unix_now_ns();
        let lines = logged_as(Klog::Text, || {
            tracing::info!(
                node = "node-1",
                pods = 30_u64,
                ready = true,
                "Scrape finished"
            );
            tracing::warn!(quote = "a \"b\"\n", "Scraping node");
            tracing::error!(error = &error as &dyn std::error::Error, node = %"node-2", "Failed to scrape node");
        });
        assert_eq!(lines.len(), 3, "{lines:?}");
        // The header: severity, MMDD, the time to the microsecond, the PID in seven
        // columns, the file's base name and line.
        let at = crate::api::time::Civil::from_unix_ns(before);
        let (header, rest) = lines[0].split_once("] ").unwrap();
        let fields: Vec<&str> = header.split_whitespace().collect();
        assert_eq!(fields.len(), 4, "{header}");
        assert_eq!(
            fields[0],
            format!("I{:02}{:02}", at.month, at.day),
            "{header}"
        );
        let clock = fields[1].as_bytes();
        assert_eq!(clock.len(), "15:04:05.000000".len(), "{header}");
        assert_eq!(
            (clock[2], clock[5], clock[8]),
            (b':', b':', b'.'),
            "{header}"
        );
        assert_eq!(fields[2], std::process::id().to_string());
        assert_eq!(
            &header[header.len() - fields[3].len() - 8..header.len() - fields[3].len()],
            format!("{:>7} ", std::process::id()),
            "{header}"
        );
        assert!(fields[3].starts_with("logging.rs:"), "{header}");
        assert!(fields[3]["logging.rs:".len()..].parse::<u32>().is_ok());
        // Then the message and the fields as klog's structured calls write them.
        assert_eq!(
            rest,
            "\"Scrape finished\" node=\"node-1\" pods=30 ready=true"
        );
        assert!(lines[1].starts_with('W'), "{}", lines[1]);
        assert!(
            lines[1].ends_with("] \"Scraping node\" quote=\"a \\\"b\\\"\\n\""),
            "{}",
            lines[1]
        );
        assert!(lines[2].starts_with('E'), "{}", lines[2]);
        assert!(
            lines[2].ends_with(
                "] \"Failed to scrape node\" \
                 err=\"x509: certificate signed by unknown authority\" node=\"node-2\""
            ),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn json_lines_carry_klog_s_fields() {
        let error = std::io::Error::other("connection refused");
        let lines = logged(|| {
            tracing::info!(
                node = "node-1",
                pods = 30_u64,
                ready = true,
                "Scrape finished"
            );
            tracing::debug!(quote = "a \"b\"", "Scraping node");
            tracing::error!(error = &error as &dyn std::error::Error, node = %"node-2", "Failed to scrape node");
        });
        assert_eq!(lines.len(), 3);
        let info = &lines[0];
        assert!(info["ts"].as_f64().unwrap() > 1.7e9, "{info}");
        assert!(
            info["caller"]
                .as_str()
                .unwrap()
                .starts_with("cli/logging.rs:"),
            "{info}"
        );
        assert_eq!(info["msg"], "Scrape finished");
        assert_eq!(info["v"], 0);
        assert_eq!(info["node"], "node-1");
        assert_eq!(info["pods"], 30);
        assert_eq!(info["ready"], true);
        assert_eq!(lines[1]["v"], 2);
        assert_eq!(lines[1]["quote"], "a \"b\"");
        let failed = &lines[2];
        assert_eq!(failed["msg"], "Failed to scrape node");
        assert!(
            failed.get("v").is_none(),
            "errors carry no verbosity: {failed}"
        );
        assert_eq!(failed["err"], "connection refused");
        assert_eq!(failed["node"], "node-2");
    }
}
