//! The `metrics-server` binary: parse flags ([`apiserver::cli`]) into settings, install the
//! crypto provider, set up logging, call [`apiserver::run()`] and turn its result into an exit
//! code (64 for bad configuration).

use std::process::ExitCode;

use apiserver::cli::Flags;
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
    apiserver::cli::logging::init(&flags.logging);
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
