//! The time-to-data harness: seconds from the release `metrics-server` binary's start to the
//! first node served, every node served, every pod served and `/readyz` 200, against a
//! simulated cluster of NODES x PODS x CONTAINERS on loopback whose kubelets refresh their
//! stats every 10 s (see `benches::ttd`).
//!
//! ```text
//! cargo build --release -p apiserver --bin metrics-server -p benches --bin ttd
//! ./target/release/ttd --nodes 100,1000 --resolution 15s,60s --source resource,summary
//! ```
//!
//! Each size prints a line per server start and a `RESULT {json}` line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use benches::scale::cluster::{KubeletSched, Shape};
use benches::scale::{parse_duration, parse_flags, run_sizes};
use benches::ttd::{Case, Options, run};

const USAGE: &str = "usage: ttd [--nodes N[,N...]] [--pods-per-node P] [--containers C] \
[--resolution 15s[,60s...]] [--source resource[,summary]] [--repeat R] [--poll 100ms] \
[--server-bin PATH] [--server-arg FLAG]... [--pod-starts N] [--restarts N]";

fn list<T>(text: &str, f: impl Fn(&str) -> anyhow::Result<T>) -> anyhow::Result<Vec<T>> {
    text.split(',').map(|s| f(s.trim())).collect()
}

fn parse(args: Vec<String>) -> anyhow::Result<(Vec<usize>, Options)> {
    let server_bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("metrics-server")))
        .unwrap_or_else(|| PathBuf::from("target/release/metrics-server"));
    let mut nodes = vec![100];
    let mut resolutions = vec![Duration::from_secs(15)];
    let mut sources = vec!["resource".to_owned()];
    let mut o = Options {
        shape: Shape {
            nodes: 100,
            pods_per_node: 30,
            containers: 2,
            housekeeping: conformance::kubelet::DEFAULT_HOUSEKEEPING,
            kubelet_processes: 0,
            kubelet_sched: KubeletSched::Normal,
        },
        cases: Vec::new(),
        repeat: 1,
        server_bin,
        poll: Duration::from_millis(100),
        server_args: Vec::new(),
        pod_starts: 0,
        restarts: 0,
    };
    parse_flags(args, USAGE, |flag, value| {
        match flag {
            "--nodes" => nodes = list(&value()?, |s| s.parse().context("--nodes"))?,
            "--pods-per-node" => o.shape.pods_per_node = value()?.parse()?,
            "--containers" => o.shape.containers = value()?.parse()?,
            "--resolution" => resolutions = list(&value()?, parse_duration)?,
            "--source" => sources = list(&value()?, |s| Ok(s.to_owned()))?,
            "--repeat" => o.repeat = value()?.parse()?,
            "--poll" => o.poll = parse_duration(&value()?)?,
            "--server-bin" => o.server_bin = PathBuf::from(value()?),
            "--server-arg" => o.server_args.push(value()?),
            "--pod-starts" => o.pod_starts = value()?.parse().context("--pod-starts")?,
            "--restarts" => o.restarts = value()?.parse().context("--restarts")?,
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
        Ok(())
    })?;
    if nodes.iter().any(|&n| n == 0 || n > 20_000) {
        bail!("--nodes must be within 1..=20000");
    }
    if let Some(s) = sources
        .iter()
        .find(|s| !["resource", "summary"].contains(&s.as_str()))
    {
        bail!("--source {s:?}: resource or summary");
    }
    for source in &sources {
        for &resolution in &resolutions {
            o.cases.push(Case {
                resolution,
                source: source.clone(),
            });
        }
    }
    Ok((nodes, o))
}

fn main() -> ExitCode {
    let parsed = parse(std::env::args().skip(1).collect());
    run_sizes("ttd", parsed, |mut o, nodes| {
        o.shape.nodes = nodes;
        run(o)
    })
}
