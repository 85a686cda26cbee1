//! The soak run: the server's resident set across many scrape periods of a simulated cluster
//! whose pods keep being replaced (see `benches::soak`).
//!
//! ```text
//! cargo build --release -p benches --bin soak
//! ./target/release/soak --nodes 100 --periods 1000 --resolution 1s --churn 10
//! ```
//!
//! `soak serve --resolution=1000ms -- FLAGS...` is the server it starts: `metrics-server`'s
//! flags and [`apiserver::run::run_until_signalled`], with the resolution set below the
//! flag's 10 s floor.

// A harness, not the product: it may read std's clocks (clippy.toml disallows them).
#![allow(clippy::disallowed_methods)]

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use apiserver::cli::Flags;
use benches::scale::cluster::{KubeletSched, Shape};
use benches::scale::{parse_duration, parse_flags, run_sizes};
use benches::soak::{Options, run};
use clap::Parser as _;

const USAGE: &str = "usage: soak [--nodes N] [--pods-per-node P] [--containers C] \
[--resolution 1s] [--periods 1000] [--churn 10] [--sample-every 10] [--baseline-from 100] \
[--bound 1.25] [--setup-timeout 300s] [--server-arg FLAG]...\n\
       soak serve --resolution=D -- METRICS-SERVER-FLAGS...";

fn parse(args: Vec<String>) -> anyhow::Result<(Vec<usize>, Options)> {
    let self_bin = std::env::current_exe().context("this binary's path")?;
    let mut nodes = 100;
    let mut o = Options {
        shape: Shape {
            nodes,
            pods_per_node: 30,
            containers: 2,
            housekeeping: Duration::ZERO,
            kubelet_processes: 0,
            kubelet_sched: KubeletSched::Normal,
        },
        resolution: Duration::from_secs(1),
        periods: 1000,
        churn: 10,
        sample_every: 10,
        baseline_from: 100,
        bound_factor: 1.25,
        self_bin,
        setup_timeout: Duration::from_secs(300),
        server_args: Vec::new(),
    };
    parse_flags(args, USAGE, |flag, value| {
        match flag {
            "--nodes" => nodes = value()?.parse().context("--nodes")?,
            "--pods-per-node" => o.shape.pods_per_node = value()?.parse()?,
            "--containers" => o.shape.containers = value()?.parse()?,
            "--resolution" => o.resolution = parse_duration(&value()?)?,
            "--periods" => o.periods = value()?.parse()?,
            "--churn" => o.churn = value()?.parse()?,
            "--sample-every" => o.sample_every = value()?.parse()?,
            "--baseline-from" => o.baseline_from = value()?.parse()?,
            "--bound" => o.bound_factor = value()?.parse()?,
            "--setup-timeout" => o.setup_timeout = parse_duration(&value()?)?,
            "--server-arg" => o.server_args.push(value()?),
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
        Ok(())
    })?;
    if nodes == 0 || o.shape.pods_per_node == 0 || o.shape.containers == 0 {
        bail!("--nodes, --pods-per-node and --containers must be positive");
    }
    if o.resolution < Duration::from_millis(200) || o.sample_every == 0 || o.baseline_from == 0 {
        bail!("--resolution must be at least 200ms, --sample-every and --baseline-from positive");
    }
    if o.periods < 2 * o.baseline_from {
        bail!("--periods must be at least 2 x --baseline-from");
    }
    Ok((vec![nodes], o))
}

/// `soak serve --resolution=D -- FLAGS...`: the server, as `metrics-server FLAGS...` runs it
/// but at resolution D.
fn serve(args: &[String]) -> ExitCode {
    let Some((resolution, flags)) = args.split_first().and_then(|(r, rest)| {
        Some((
            r.strip_prefix("--resolution=")?,
            rest.strip_prefix(&["--".to_owned()])?,
        ))
    }) else {
        eprintln!("{USAGE}");
        return ExitCode::from(64);
    };
    let settings = parse_duration(resolution).and_then(|resolution| {
        let flags = Flags::try_parse_from(
            std::iter::once("metrics-server".to_owned()).chain(flags.iter().cloned()),
        )?;
        let mut settings = flags.settings()?;
        settings.set_resolution(resolution);
        Ok(settings)
    });
    let settings = match settings {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("Error: {error:#}");
            return ExitCode::from(64);
        }
    };
    tls::provider::install_default();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let result = apiserver::run::run_until_signalled(settings);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "serve") {
        return serve(&args[1..]);
    }
    run_sizes("soak", parse(args), |mut o, nodes| {
        o.shape.nodes = nodes;
        run(o)
    })
}
