//! The `metrics-server` binary: parse flags ([`apiserver::cli`]) into settings, install the
//! crypto provider, set up logging, call [`apiserver::run()`] and turn its result into an exit
//! code (64 for bad configuration).

use std::process::ExitCode;

use apiserver::cli::{Flags, Logging, LoggingFormat};
use clap::Parser;
use clap::error::ErrorKind;

/// `EX_USAGE`: the command was used incorrectly.
const EXIT_USAGE: u8 = 64;

fn main() -> ExitCode {
    let flags = match Flags::try_parse() {
        Ok(flags) => flags,
        Err(error) => {
            return match error.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = error.print();
                    ExitCode::SUCCESS
                }
                _ => {
                    let rendered = error.render().to_string();
                    eprintln!("{}", rendered.lines().next().unwrap_or("invalid arguments"));
                    ExitCode::from(EXIT_USAGE)
                }
            };
        }
    };
    if flags.server.version {
        println!("v{}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let settings = match flags.settings() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("Error: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    tls::provider::install_default();
    init_tracing(&flags.logging);
    let without_effect = flags.without_effect();
    if !without_effect.is_empty() {
        tracing::warn!(
            flags = ?without_effect,
            "accepted for compatibility with metrics-server; these flags change nothing in this server"
        );
    }
    if let Ok((_, left_out)) = flags.tls_policy()
        && !left_out.is_empty()
    {
        tracing::warn!(
            names = ?left_out,
            "--tls-cipher-suites / --tls-curve-preferences: not implemented here, left out"
        );
    }

    let result = apiserver::run::run_until_signalled(settings);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "metrics-server stopped");
            eprintln!("Error: {error}");
            ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(1))
        }
    }
}

/// Text or JSON lines on stderr; `-v` maps klog verbosity onto levels (0-1 info, 2-5 debug,
/// 6+ trace for our crates), and from `-v=3` one line per request (k8s.io/apiserver's
/// `httplog`); `RUST_LOG` overrides.
fn init_tracing(logging: &Logging) {
    use tracing_subscriber::EnvFilter;
    let ours = match logging.verbosity {
        0..=1 => "info",
        2..=5 => "debug",
        _ => "trace",
    };
    let others = if logging.verbosity >= 8 {
        "debug"
    } else {
        "info"
    };
    let requests = if logging.verbosity >= 3 {
        "info"
    } else {
        "off"
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "{others},apiserver={ours},metrics_server={ours},scraper={ours},tls={ours},{}={requests}",
            apiserver::serve::httplog::TARGET
        ))
    });
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    // As k8s.io/component-base's formats write: text to stderr and JSON to stdout, each as
    // one stream; split, errors to stderr and the rest to stdout.
    let _ = match logging.logging_format {
        LoggingFormat::Text if logging.log_text_split_stream => {
            builder.with_writer(split()).with_ansi(false).try_init()
        }
        LoggingFormat::Text => builder
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .try_init(),
        LoggingFormat::Json if logging.log_json_split_stream => {
            builder.with_writer(split()).json().try_init()
        }
        LoggingFormat::Json => builder.with_writer(std::io::stdout).json().try_init(),
    };
}

/// Errors to stderr, everything else to stdout (`--log-*-split-stream`).
fn split() -> impl for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static {
    use tracing_subscriber::fmt::writer::MakeWriterExt as _;
    std::io::stderr
        .with_max_level(tracing::Level::ERROR)
        .or_else(std::io::stdout)
}
