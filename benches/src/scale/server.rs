//! The server under test as a child process: the release `metrics-server` binary with a
//! kubeconfig for the simulated control plane. SIGTERM on [`Server::stop`], SIGKILL on drop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// A running `metrics-server` child process.
pub struct Server {
    child: Child,
    /// Where it serves HTTPS.
    pub addr: SocketAddr,
    /// Its stderr log.
    pub log: PathBuf,
    /// The command line it was started with.
    pub args: Vec<String>,
}

/// A free port on 127.0.0.1 (bound and released; the server binds it a moment later), never
/// one this process handed out before: a second server started while the first has not yet
/// bound its port could otherwise be given the same one by the kernel (seen: `--beside-bin`'s
/// server failed with "Address already in use").
fn free_port() -> anyhow::Result<u16> {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // A port handed out before stays bound while the next is drawn: the kernel tends to give
    // a just-released port again (seen: 64 draws in a row), so it must not be free to.
    let mut held = Vec::new();
    for _ in 0..64 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        if !given.contains(&port) {
            given.push(port);
            return Ok(port);
        }
        held.push(l);
    }
    anyhow::bail!("no free port on 127.0.0.1 that was not handed out before")
}

impl Server {
    /// Starts `binary` against the control plane of `kubeconfig`, scraping every node's
    /// kubelet over HTTPS at the node's InternalIP and status port, every `resolution`.
    pub fn start(
        binary: &Path,
        kubeconfig: &Path,
        dir: &Path,
        resolution: &str,
        extra: &[String],
    ) -> anyhow::Result<Server> {
        Server::start_with(binary, &[], kubeconfig, dir, resolution, extra)
    }

    /// [`Server::start`] with `leading` arguments before the server's flags (a harness that
    /// runs the server as a subcommand of itself).
    pub fn start_with(
        binary: &Path,
        leading: &[String],
        kubeconfig: &Path,
        dir: &Path,
        resolution: &str,
        extra: &[String],
    ) -> anyhow::Result<Server> {
        let port = free_port()?;
        let mut args = vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", dir.join("certs").display()),
            format!("--metric-resolution={resolution}"),
            "--kubelet-use-node-status-port".to_owned(),
            "--kubelet-preferred-address-types=InternalIP".to_owned(),
        ];
        args.extend(extra.iter().cloned());
        let log = dir.join("metrics-server.log");
        let stderr =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(binary)
            .args(leading)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
            args,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then SIGKILL after `grace`; returns the exit status text.
    pub fn stop(mut self, grace: Duration) -> String {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.to_string();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        match self.child.wait() {
            Ok(status) => format!("killed after {grace:?} ({status})"),
            Err(e) => format!("killed, wait failed: {e}"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::free_port;

    /// Ports handed out are never handed out again in the process, though the kernel gives
    /// a released port again (a thousand draws from its ~28,000 ephemeral ports repeat one
    /// with near certainty).
    #[test]
    fn a_port_is_handed_out_once() {
        let mut ports: Vec<u16> = (0..1000)
            .map(|_| free_port().expect("a free port"))
            .collect();
        ports.sort_unstable();
        let before = ports.len();
        ports.dedup();
        assert_eq!(ports.len(), before);
    }
}
