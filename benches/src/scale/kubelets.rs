//! The simulated kubelets of a harness: a [`SimFleet`] in the harness process, or split over
//! child processes of the harness binary (`<harness> kubelets ...`), so that a cluster of
//! 15,000 nodes fits the per-process open-file limit (each node holds a listener and a
//! kept-alive connection: two descriptors) and the kubelets' CPU is read apart from the
//! control plane's.
//!
//! A child serves nodes `first..first + count` of the shape, rendered from the same models
//! the parent puts in the control plane ([`super::cluster::model`]), with the serving
//! certificate the parent issued. It prints `LISTENING port,port,...` once it listens,
//! answers each `counts` line on stdin with `COUNTS requests served connections body_bytes`, and exits
//! when its stdin closes (so it never outlives the harness).

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::sync::Arc;

use anyhow::{Context as _, bail};
use conformance::kubelet::{Clock, FleetCounts, SimFleet, SimNode};

use super::cluster::{KubeletSched, Shape, model};
use super::{parse_flags, unix_ms};

/// The subcommand a harness binary dispatches to [`child_main`].
pub const SUBCOMMAND: &str = "kubelets";

/// One child process serving a slice of the nodes.
pub struct KubeletProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    addrs: Vec<SocketAddr>,
}

/// Where the kubelets run.
pub enum Kubelets {
    /// In the harness process.
    InProcess(SimFleet),
    /// In child processes, in node order.
    Processes(Vec<KubeletProcess>),
}

impl std::fmt::Debug for Kubelets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kubelets::InProcess(fleet) => fleet.fmt(f),
            Kubelets::Processes(p) => {
                write!(f, "Kubelets({} processes, {} nodes)", p.len(), self.len())
            }
        }
    }
}

fn parse_ports(line: &str) -> anyhow::Result<Vec<SocketAddr>> {
    let ports = line
        .trim_end()
        .strip_prefix("LISTENING ")
        .with_context(|| format!("expected LISTENING, got {line:?}"))?;
    ports
        .split(',')
        .map(|p| Ok(SocketAddr::from(([127, 0, 0, 1], p.parse::<u16>()?))))
        .collect()
}

fn parse_counts(line: &str) -> anyhow::Result<FleetCounts> {
    let rest = line
        .trim_end()
        .strip_prefix("COUNTS ")
        .with_context(|| format!("expected COUNTS, got {line:?}"))?;
    let v: Vec<u64> = rest.split(' ').map(str::parse).collect::<Result<_, _>>()?;
    let [requests, served, connections, body_bytes] = v[..] else {
        bail!("expected four counts, got {line:?}");
    };
    Ok(FleetCounts {
        requests,
        served,
        connections,
        body_bytes,
    })
}

/// A command that runs `program` scheduled as `sched` says (arguments go after it).
fn scheduled(program: &Path, sched: KubeletSched) -> Command {
    match sched {
        KubeletSched::Normal => Command::new(program),
        KubeletSched::Idle => {
            let mut chrt = Command::new("chrt");
            chrt.args(["--idle", "0"]).arg(program);
            chrt
        }
    }
}

impl KubeletProcess {
    fn spawn(
        self_bin: &Path,
        shape: &Shape,
        first: usize,
        count: usize,
        boot_ms: i64,
        identity: (&Path, &Path),
    ) -> anyhow::Result<KubeletProcess> {
        let mut command = scheduled(self_bin, shape.kubelet_sched);
        let mut child = command
            .arg(SUBCOMMAND)
            .args([
                format!("--first={first}"),
                format!("--count={count}"),
                format!("--pods-per-node={}", shape.pods_per_node),
                format!("--containers={}", shape.containers),
                format!("--housekeeping-ms={}", shape.housekeeping.as_millis()),
                format!("--boot-ms={boot_ms}"),
                format!("--cert={}", identity.0.display()),
                format!("--key={}", identity.1.display()),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("the kubelet process has no pipes");
        };
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .context("reading the kubelet process's ports")?;
        let addrs = parse_ports(&line)?;
        if addrs.len() != count {
            bail!(
                "the kubelet process listens on {} ports for {count} nodes",
                addrs.len()
            );
        }
        Ok(KubeletProcess {
            child,
            stdin,
            stdout,
            addrs,
        })
    }

    fn counts(&mut self) -> anyhow::Result<FleetCounts> {
        self.stdin.write_all(b"counts\n")?;
        self.stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        parse_counts(&line)
    }
}

impl Kubelets {
    /// Starts the kubelets of `models` (node `i` is `models[i]`): in this process when
    /// `shape.kubelet_processes` is 0, else split evenly over that many children of
    /// `self_bin`, which generate the same models from the shape and `boot_ms`.
    pub async fn start(
        ca: &tls::issue::Ca,
        shape: &Shape,
        models: Vec<SimNode>,
        boot_ms: i64,
        clock: Clock,
    ) -> anyhow::Result<Kubelets> {
        if shape.kubelet_processes == 0 {
            return Ok(Kubelets::InProcess(
                SimFleet::start(ca, models, clock).await?,
            ));
        }
        let serving = SimFleet::serving_identity(ca)?;
        let dir = tempfile::Builder::new().prefix("kubelets-").tempdir()?;
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert, &serving.cert_pem)?;
        std::fs::write(&key, &serving.key_pem)?;
        let self_bin = std::env::current_exe().context("the harness binary")?;
        let n = models.len();
        let per = n.div_ceil(shape.kubelet_processes);
        let shape = *shape;
        tokio::task::spawn_blocking(move || {
            let mut processes = Vec::new();
            let mut first = 0;
            while first < n {
                let count = per.min(n - first);
                processes.push(KubeletProcess::spawn(
                    &self_bin,
                    &shape,
                    first,
                    count,
                    boot_ms,
                    (&cert, &key),
                )?);
                first += count;
            }
            drop(dir);
            Ok(Kubelets::Processes(processes))
        })
        .await?
    }

    /// Nodes served.
    pub fn len(&self) -> usize {
        match self {
            Kubelets::InProcess(fleet) => fleet.len(),
            Kubelets::Processes(p) => p.iter().map(|p| p.addrs.len()).sum(),
        }
    }

    /// Whether no node is served.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where node `i` listens.
    pub fn addr(&self, i: usize) -> Option<SocketAddr> {
        match self {
            Kubelets::InProcess(fleet) => fleet.addr(i),
            Kubelets::Processes(p) => p.iter().flat_map(|p| &p.addrs).nth(i).copied(),
        }
    }

    /// The processes' ids (none in process).
    pub fn pids(&self) -> Vec<u32> {
        match self {
            Kubelets::InProcess(_) => Vec::new(),
            Kubelets::Processes(p) => p.iter().map(|p| p.child.id()).collect(),
        }
    }

    /// Request counters summed over every node.
    pub fn counts(&mut self) -> anyhow::Result<FleetCounts> {
        match self {
            Kubelets::InProcess(fleet) => Ok(fleet.counts()),
            Kubelets::Processes(processes) => {
                let mut sum = FleetCounts::default();
                for p in processes {
                    let c = p.counts()?;
                    sum.requests += c.requests;
                    sum.served += c.served;
                    sum.connections += c.connections;
                    sum.body_bytes += c.body_bytes;
                }
                Ok(sum)
            }
        }
    }

    /// Changes node `i`'s model (pod churn); only in process. `false`: no such node here.
    pub fn update(&self, i: usize, f: impl FnOnce(&mut SimNode)) -> bool {
        match self {
            Kubelets::InProcess(fleet) => fleet.update(i, f),
            Kubelets::Processes(_) => false,
        }
    }

    /// Stops every kubelet and waits for it.
    pub async fn shutdown(self) {
        match self {
            Kubelets::InProcess(fleet) => fleet.shutdown().await,
            Kubelets::Processes(processes) => {
                for mut p in processes {
                    drop(p.stdin);
                    let _ = tokio::task::spawn_blocking(move || p.child.wait()).await;
                }
            }
        }
    }
}

/// `<harness> kubelets --first=A --count=K --pods-per-node=P --containers=C
/// --housekeeping-ms=H --boot-ms=B --cert=PATH --key=PATH`: serves nodes `A..A+K`.
pub fn child_main(args: Vec<String>) -> ExitCode {
    match child(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kubelets: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn child(args: Vec<String>) -> anyhow::Result<()> {
    const USAGE: &str = "usage: kubelets --first=A --count=K --pods-per-node=P --containers=C \
        --housekeeping-ms=H --boot-ms=B --cert=PATH --key=PATH";
    let mut shape = Shape {
        nodes: 0,
        pods_per_node: 30,
        containers: 2,
        housekeeping: conformance::kubelet::DEFAULT_HOUSEKEEPING,
        kubelet_processes: 0,
        kubelet_sched: KubeletSched::Normal,
    };
    let (mut first, mut count, mut boot_ms) = (0usize, 0usize, 0i64);
    let (mut cert, mut key) = (PathBuf::new(), PathBuf::new());
    parse_flags(args, USAGE, |flag, value| {
        match flag {
            "--first" => first = value()?.parse()?,
            "--count" => count = value()?.parse()?,
            "--pods-per-node" => shape.pods_per_node = value()?.parse()?,
            "--containers" => shape.containers = value()?.parse()?,
            "--housekeeping-ms" => {
                shape.housekeeping = std::time::Duration::from_millis(value()?.parse()?);
            }
            "--boot-ms" => boot_ms = value()?.parse()?,
            "--cert" => cert = PathBuf::from(value()?),
            "--key" => key = PathBuf::from(value()?),
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
        Ok(())
    })?;
    let serving = tls::issue::Issued {
        cert_pem: std::fs::read_to_string(&cert).with_context(|| cert.display().to_string())?,
        key_pem: std::fs::read_to_string(&key).with_context(|| key.display().to_string())?,
        identity: tls::pem::identity_from_files(&cert, &key)?,
    };
    tls::provider::install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let models = (first..first + count)
            .map(|i| model(&shape, i, boot_ms))
            .collect();
        let clock: Clock = Arc::new(unix_ms);
        let fleet = SimFleet::start_serving(&serving, models, clock).await?;
        let ports: Vec<String> = (0..fleet.len())
            .filter_map(|i| fleet.addr(i).map(|a| a.port().to_string()))
            .collect();
        let fleet = Arc::new(fleet);
        tokio::task::spawn_blocking({
            let fleet = fleet.clone();
            move || -> anyhow::Result<()> {
                let mut out = std::io::stdout().lock();
                writeln!(out, "LISTENING {}", ports.join(","))?;
                out.flush()?;
                for line in std::io::stdin().lock().lines() {
                    if line?.trim() == "counts" {
                        let c = fleet.counts();
                        writeln!(
                            out,
                            "COUNTS {} {} {} {}",
                            c.requests, c.served, c.connections, c.body_bytes
                        )?;
                        out.flush()?;
                    }
                }
                Ok(())
            }
        })
        .await??;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_lines_parse_and_garbage_does_not() {
        let addrs = parse_ports("LISTENING 4100,4101\n").expect("ports");
        assert_eq!(
            addrs,
            [
                SocketAddr::from(([127, 0, 0, 1], 4100)),
                SocketAddr::from(([127, 0, 0, 1], 4101))
            ]
        );
        assert!(parse_ports("LISTENING 4100,x\n").is_err());
        assert!(parse_ports("hello\n").is_err());
        let c = parse_counts("COUNTS 3 2 1 40000\n").expect("counts");
        assert_eq!(
            (c.requests, c.served, c.connections, c.body_bytes),
            (3, 2, 1, 40000)
        );
        assert!(parse_counts("COUNTS 3 2 1\n").is_err());
        assert!(parse_counts("").is_err());
    }

    /// The scheduling policy (`/proc/<pid>/stat` field 41) `program` reports of itself when
    /// started as `sched` says.
    fn policy_of_child(sched: KubeletSched) -> u32 {
        let out = scheduled(Path::new("cat"), sched)
            .arg("/proc/self/stat")
            .output()
            .expect("cat runs");
        assert!(out.status.success(), "{out:?}");
        let stat = String::from_utf8(out.stdout).expect("utf-8");
        // Fields after the command name (which may hold spaces) start with field 3.
        let (_, after_comm) = stat.rsplit_once(')').expect("comm");
        let policy = after_comm.split_whitespace().nth(41 - 3).expect("field 41");
        policy.parse().expect("a number")
    }

    #[test]
    fn idle_kubelets_run_under_sched_idle_and_normal_ones_do_not() {
        const SCHED_OTHER: u32 = 0;
        const SCHED_IDLE: u32 = 5;
        assert_eq!(policy_of_child(KubeletSched::Idle), SCHED_IDLE);
        assert_eq!(policy_of_child(KubeletSched::Normal), SCHED_OTHER);
    }
}
