//! Idle TLS connections against the release `metrics-server` while an HPA-shaped client keeps
//! asking (see `benches::idle`).
//!
//! ```text
//! cargo build --release -p apiserver --bin metrics-server -p benches --bin idle
//! ./target/release/idle --nodes 100 --idle 5000 --window 20s
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use benches::idle::{Options, run};
use benches::scale::cluster::{KubeletSched, Shape};
use benches::scale::{parse_duration, parse_flags, run_sizes};

const USAGE: &str = "usage: idle [--nodes N] [--idle CONNECTIONS] [--window 20s] \
[--server-bin PATH] [--server-arg FLAG]...";

fn parse(args: Vec<String>) -> anyhow::Result<(Vec<usize>, Options)> {
    let server_bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("metrics-server")))
        .unwrap_or_else(|| PathBuf::from("target/release/metrics-server"));
    let mut nodes = 100;
    let mut o = Options {
        shape: Shape {
            nodes,
            pods_per_node: 30,
            containers: 2,
            housekeeping: conformance::kubelet::DEFAULT_HOUSEKEEPING,
            kubelet_processes: 0,
            kubelet_sched: KubeletSched::Normal,
        },
        idle: 5000,
        window: Duration::from_secs(20),
        server_bin,
        server_args: Vec::new(),
    };
    parse_flags(args, USAGE, |flag, value| {
        match flag {
            "--nodes" => nodes = value()?.parse()?,
            "--idle" => o.idle = value()?.parse()?,
            "--window" => o.window = parse_duration(&value()?)?,
            "--server-bin" => o.server_bin = PathBuf::from(value()?),
            "--server-arg" => o.server_args.push(value()?),
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
        Ok(())
    })?;
    if nodes == 0 || nodes > 20_000 || o.idle > 15_000 {
        bail!("--nodes must be within 1..=20000 and --idle at most 15000 (open files)");
    }
    Ok((vec![nodes], o))
}

fn main() -> ExitCode {
    run_sizes(
        "idle",
        parse(std::env::args().skip(1).collect()),
        |mut o, nodes| {
            o.shape.nodes = nodes;
            run(o)
        },
    )
}
