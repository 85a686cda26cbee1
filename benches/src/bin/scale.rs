//! The scale harness: the release `metrics-server` binary against a simulated cluster of
//! NODES x PODS x CONTAINERS on loopback, measuring the server's resident set and CPU per node,
//! the scrape success rate and cluster-wide list latency (see `benches::scale`).
//!
//! ```text
//! cargo build --release -p apiserver --bin metrics-server -p benches --bin scale
//! ./target/release/scale --nodes 5000 --pods-per-node 30 --containers 2 \
//!     --resolution 15s --duration 120s
//! ```
//!
//! Several sizes in one invocation: `--nodes 500,1000,2000,5000`. Each size prints a
//! report and a `RESULT {json}` line. `--kubelet-processes 3` runs the simulated kubelets in
//! three child processes (`scale kubelets ...`), which 15,000 nodes need: each node holds two
//! descriptors (its listener and the server's kept-alive connection) against a limit of
//! 20,000 per process. `--kubelet-sched idle` runs those processes under `SCHED_IDLE`, so
//! their bursts do not take the cores from the server and the load client, as kubelets on
//! other machines take none. `--hpa-arrivals even` sends the HPA-shaped requests as spread
//! as their schedule (one every 100 us at 10,000/s) instead of on Tokio's millisecond ticks
//! (see `benches::scale::hpa::Arrivals`). `--hpa-server-share` also times each of those
//! exchanges from the kernel's view, from the request in to the answer out, without the load
//! client's own delays (`perf record -e tcp:tcp_probe`; root; see `benches::scale::tcpprobe`).
//! `--protocol h2` asks for the lists and the HPA-shaped requests over h2, as kube-apiserver's
//! aggregator does (Go's transport windows and frame size), the HPA-shaped clients' streams
//! multiplexed over `--hpa-h2-connections` connections (default 1, as the aggregator pools one
//! connection per backend). `--hpa-list-beside protobuf|json` asks for the cluster-wide pod list
//! over and over during each HPA-shaped phase (over h2 on the same connection), as
//! `kubectl top pods -A` beside the HPA controller.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use benches::scale::client::Protocol;
use benches::scale::cluster::{KubeletSched, Shape};
use benches::scale::hpa::Arrivals;
use benches::scale::kubelets;
use benches::scale::{
    Options, parse_choice, parse_duration as duration, parse_flags, run, run_sizes,
};

const USAGE: &str = "usage: scale [--nodes N[,N...]] [--pods-per-node P] [--containers C] \
[--resolution 15s] [--duration 120s] [--warmup-periods 2] [--lists 5] \
[--setup-timeout 900s] [--kubelet-processes K] [--kubelet-sched normal|idle] [--server-bin PATH] [--server-arg FLAG]... \
[--hpa-rates 1000,10000] [--hpa-connections 64] [--hpa-duration 10s] [--hpa-arrivals ticks|even] \
[--hpa-server-share] [--protocol http1|h2] [--hpa-h2-connections 1] [--hpa-list-beside protobuf|json] \
[--beside-bin PATH]";

fn parse(args: Vec<String>) -> anyhow::Result<(Vec<usize>, Options)> {
    let server_bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("metrics-server")))
        .unwrap_or_else(|| PathBuf::from("target/release/metrics-server"));
    let mut nodes = vec![5000];
    let mut o = Options {
        shape: Shape {
            nodes: 5000,
            pods_per_node: 30,
            containers: 2,
            housekeeping: conformance::kubelet::DEFAULT_HOUSEKEEPING,
            kubelet_processes: 0,
            kubelet_sched: KubeletSched::Normal,
        },
        resolution: Duration::from_secs(15),
        duration: Duration::from_secs(120),
        warmup_periods: 2,
        lists: 5,
        server_bin,
        setup_timeout: Duration::from_secs(900),
        server_args: Vec::new(),
        hpa_rates: Vec::new(),
        hpa_connections: 64,
        hpa_duration: Duration::from_secs(10),
        hpa_arrivals: Arrivals::Ticks,
        hpa_server_share: false,
        protocol: Protocol::Http1,
        hpa_h2_connections: 1,
        hpa_list_beside: None,
        beside_bin: None,
    };
    parse_flags(args, USAGE, |flag, value| {
        match flag {
            "--nodes" => {
                nodes = value()?
                    .split(',')
                    .map(|s| s.trim().parse().context("--nodes"))
                    .collect::<anyhow::Result<_>>()?;
            }
            "--pods-per-node" => o.shape.pods_per_node = value()?.parse()?,
            "--containers" => o.shape.containers = value()?.parse()?,
            "--kubelet-processes" => o.shape.kubelet_processes = value()?.parse()?,
            "--kubelet-sched" => {
                o.shape.kubelet_sched = parse_choice("--kubelet-sched", &value()?)?
            }
            "--resolution" => o.resolution = duration(&value()?)?,
            "--duration" => o.duration = duration(&value()?)?,
            "--warmup-periods" => o.warmup_periods = value()?.parse()?,
            "--lists" => o.lists = value()?.parse()?,
            "--setup-timeout" => o.setup_timeout = duration(&value()?)?,
            "--server-bin" => o.server_bin = PathBuf::from(value()?),
            "--server-arg" => o.server_args.push(value()?),
            "--beside-bin" => o.beside_bin = Some(PathBuf::from(value()?)),
            "--hpa-rates" => {
                o.hpa_rates = value()?
                    .split(',')
                    .map(|s| match s.trim().parse::<u32>().context("--hpa-rates")? {
                        0 => anyhow::bail!("--hpa-rates: a rate is requests a second, above 0 (leave the flag out for no HPA-shaped phase)"),
                        rate => Ok(rate),
                    })
                    .collect::<anyhow::Result<_>>()?;
            }
            "--hpa-connections" => o.hpa_connections = value()?.parse()?,
            "--hpa-duration" => o.hpa_duration = duration(&value()?)?,
            "--hpa-arrivals" => o.hpa_arrivals = parse_choice("--hpa-arrivals", &value()?)?,
            "--hpa-server-share" => o.hpa_server_share = true,
            "--protocol" => o.protocol = parse_choice("--protocol", &value()?)?,
            "--hpa-h2-connections" => o.hpa_h2_connections = value()?.parse()?,
            "--hpa-list-beside" => {
                o.hpa_list_beside = Some(parse_choice("--hpa-list-beside", &value()?)?)
            }
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
        Ok(())
    })?;
    if nodes.iter().any(|&n| n == 0 || n > 20_000) {
        bail!("--nodes must be within 1..=20000");
    }
    if o.shape.kubelet_sched != KubeletSched::Normal && o.shape.kubelet_processes == 0 {
        bail!(
            "--kubelet-sched idle needs --kubelet-processes (in-process kubelets share the harness's threads)"
        );
    }
    if o.hpa_server_share && o.hpa_list_beside.is_some() {
        bail!(
            "--hpa-server-share times the HPA-shaped exchanges alone: not with --hpa-list-beside"
        );
    }
    if o.hpa_server_share && o.protocol == Protocol::H2 {
        bail!(
            "--hpa-server-share pairs one request and one answer per connection at a time: HTTP/1.1 only"
        );
    }
    if o.duration > Duration::from_secs(3600) || o.resolution < Duration::from_secs(1) {
        bail!("--duration must be at most 1h and --resolution at least 1s");
    }
    Ok((nodes, o))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == kubelets::SUBCOMMAND) {
        return kubelets::child_main(args[1..].to_vec());
    }
    let parsed = parse(args);
    run_sizes("scale", parsed, |mut o, nodes| {
        o.shape.nodes = nodes;
        run(o)
    })
}
