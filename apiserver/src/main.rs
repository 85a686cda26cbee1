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
    if !flags.serving.tls_cipher_suites.is_empty() {
        tracing::warn!("--tls-cipher-suites is accepted but rustls's safe default suites are used");
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
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match logging.logging_format {
        LoggingFormat::Text => builder.with_ansi(false).try_init(),
        LoggingFormat::Json => builder.json().try_init(),
    };
}
