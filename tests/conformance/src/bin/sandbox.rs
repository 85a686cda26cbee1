//! `sandbox`: a simulated cluster with the server registered as `metrics.k8s.io`, for trying
//! `kubectl top` with no cluster. Prints the `KUBECONFIG` to export, runs until Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use conformance::cluster::{Cluster, ClusterConfig, SKIP_LABEL, SKIP_SELECTOR};
use tokio_util::sync::CancellationToken;

/// A simulated Kubernetes cluster (control plane, kubelets, workloads) with metrics-server-rs
/// registered as the metrics.k8s.io APIService.
#[derive(Debug, Parser)]
#[command(name = "sandbox", version)]
struct Args {
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 20)]
    nodes: usize,
    /// Pods per node (the first node also runs metrics-server's e2e workloads).
    #[arg(long, default_value_t = 15)]
    pods_per_node: usize,
    /// Most containers in one pod.
    #[arg(long, default_value_t = 2)]
    containers: usize,
    /// Metric resolution in seconds (at least 10).
    #[arg(long, default_value_t = 15)]
    resolution: u64,
    /// How often each kubelet refreshes its stats, in seconds (cAdvisor's
    /// --housekeeping_interval; 0 renders them at every request).
    #[arg(long, default_value_t = 10)]
    housekeeping: u64,
    /// Every Nth node has swap on (kubelet NodeSwap): `kubectl top node --show-swap` and
    /// `kubectl top pod --show-swap` (kubectl 1.37) show it. 0: no node has swap.
    #[arg(long, default_value_t = 2)]
    swap_every: usize,
    /// Seed of the generated workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Label the last node metrics-server-skip=true and pass
    /// --node-selector=metrics-server-skip!=true (metrics-server's e2e topology).
    #[arg(long)]
    skip_last_node: bool,
    /// Also copy the admin kubeconfig here.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// More server flags, e.g. --server-arg=--kubelet-source=summary.
    #[arg(long = "server-arg", value_name = "FLAG")]
    server_args: Vec<String>,
    /// Server replicas behind the APIServices (requests are balanced over the ready ones).
    #[arg(long, default_value_t = 1)]
    replicas: usize,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sandbox: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    if args.resolution < 10 {
        anyhow::bail!("--resolution must be at least 10 (seconds)");
    }
    let mut config = ClusterConfig {
        nodes: args.nodes.max(1),
        pods_per_node: args.pods_per_node,
        containers: args.containers.max(1),
        seed: args.seed,
        resolution: Duration::from_secs(args.resolution),
        housekeeping: Duration::from_secs(args.housekeeping),
        server_args: args.server_args,
        replicas: args.replicas.max(1),
        swap_nodes: (0..args.nodes.max(1))
            .filter(|i| args.swap_every > 0 && i % args.swap_every == 1 % args.swap_every)
            .map(ClusterConfig::node_name)
            .collect(),
        ready_timeout: Duration::from_secs(args.resolution * 4 + 60),
        ..ClusterConfig::default()
    };
    if args.skip_last_node && config.nodes > 1 {
        config.node_labels = vec![(
            ClusterConfig::node_name(config.nodes - 1),
            vec![(SKIP_LABEL.to_owned(), "true".to_owned())],
        )];
        config.node_selector = SKIP_SELECTOR.to_owned();
    } else {
        config.node_labels = Vec::new();
        config.node_selector = String::new();
    }

    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(stop_on_signal(shutdown.clone()));
    eprintln!(
        "starting {} nodes with {} pods each, resolution {}s ...",
        config.nodes, config.pods_per_node, args.resolution
    );
    let cluster = tokio::select! {
        started = Cluster::start(config, shutdown.clone()) => started?,
        () = shutdown.cancelled() => {
            signals.abort();
            return Ok(());
        }
    };
    let kubeconfig = match &args.kubeconfig {
        Some(path) => {
            std::fs::copy(cluster.kubeconfig(), path)?;
            path.clone()
        }
        None => cluster.kubeconfig().to_path_buf(),
    };
    let pods = cluster.pods().len();
    println!(
        "\nmetrics-server-rs is serving metrics.k8s.io (v1 and v1beta1) for {} nodes and {pods} pods.\n\
         \n    export KUBECONFIG={}\n\
         \n    kubectl top nodes\
         \n    kubectl top pods -A --sort-by=cpu\
         \n    kubectl top pod -n default --containers\
         \n    kubectl get --raw /apis/metrics.k8s.io/v1/nodes | head -c 600\
         \n    kubectl get podmetrics -n default\
         \n    kubectl explain podmetrics.containers\
         \n\nNumbers move every {}s. Ctrl-C stops everything.",
        cluster.node_names().len(),
        kubeconfig.display(),
        args.resolution,
    );
    shutdown.cancelled().await;
    eprintln!("stopping ...");
    let stopped = cluster.stop().await;
    signals.abort();
    if args.kubeconfig.is_some() {
        let _ = std::fs::remove_file(&kubeconfig);
    }
    stopped?;
    Ok(())
}

/// Cancels `shutdown` on Ctrl-C (SIGINT) or SIGTERM.
async fn stop_on_signal(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    shutdown.cancel();
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    shutdown.cancel();
}
