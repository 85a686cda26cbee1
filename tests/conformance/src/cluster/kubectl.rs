//! The real `kubectl` binaries the conformance suite drives: the machine's v1.32 (speaks only
//! `metrics.k8s.io/v1beta1`) and v1.37 (prefers `metrics.k8s.io/v1`), each run with an
//! isolated environment, home and discovery cache.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A kubectl release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kubectl {
    /// `/usr/bin/kubectl` (override with `KUBECTL_1_32`).
    V1_32,
    /// `_output/kubectl-1.37/bin/kubectl` (override with `KUBECTL_1_37`), installed by
    /// `tests/conformance/install-kubectl.sh`.
    V1_37,
}

impl Kubectl {
    /// Both releases, oldest first.
    pub const ALL: [Kubectl; 2] = [Kubectl::V1_32, Kubectl::V1_37];

    /// `1.32` or `1.37`.
    pub fn version(self) -> &'static str {
        match self {
            Kubectl::V1_32 => "1.32",
            Kubectl::V1_37 => "1.37",
        }
    }

    /// The newest `metrics.k8s.io` version this release asks for.
    pub fn metrics_version(self) -> &'static str {
        match self {
            Kubectl::V1_32 => "v1beta1",
            Kubectl::V1_37 => "v1",
        }
    }

    /// Where the binary is.
    pub fn path(self) -> PathBuf {
        let (var, default) = match self {
            Kubectl::V1_32 => ("KUBECTL_1_32", PathBuf::from("/usr/bin/kubectl")),
            Kubectl::V1_37 => (
                "KUBECTL_1_37",
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../_output/kubectl-1.37/bin/kubectl"),
            ),
        };
        std::env::var_os(var).map_or(default, PathBuf::from)
    }

    /// The binary's path, or an error naming how to install it.
    pub fn require(self) -> Result<PathBuf, super::Error> {
        let path = self.path();
        if path.is_file() {
            Ok(path)
        } else {
            Err(super::Error::KubectlMissing {
                version: self.version(),
                path,
            })
        }
    }
}

impl std::fmt::Display for Kubectl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kubectl {}", self.version())
    }
}

/// What one kubectl run printed.
#[derive(Clone, Debug)]
pub struct Output {
    /// Exit status 0.
    pub success: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Output {
    /// Standard output when the run succeeded, else an error with both streams.
    pub fn ok(self) -> Result<String, String> {
        if self.success {
            Ok(self.stdout)
        } else {
            Err(format!(
                "kubectl failed\nstdout:\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            ))
        }
    }
}

/// Runs `bin` with `args` against `kubeconfig`, with only `PATH` from the environment, `HOME`
/// set to `home` and the discovery cache under it.
pub(super) async fn run(
    bin: PathBuf,
    home: PathBuf,
    kubeconfig: PathBuf,
    args: Vec<String>,
    timeout: Duration,
) -> Result<Output, super::Error> {
    let path = bin.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&bin)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("KUBECONFIG", &kubeconfig)
            .arg(format!("--cache-dir={}", home.join("cache").display()))
            .arg(format!("--request-timeout={}s", timeout.as_secs().max(1)))
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
    })
    .await
    .map_err(|e| super::Error::Kubectl {
        path: path.clone(),
        source: std::io::Error::other(e),
    })?
    .map_err(|source| super::Error::Kubectl { path, source })?;
    Ok(Output {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}
