//! Credentials read from files and kept current while the server runs: a server lives for
//! months, and the files under it are rotated (a projected service-account token about
//! hourly, certificates and CA bundles whenever their Secret or ConfigMap is updated).
//!
//! A [`Reloader`] polls its files on an interval (k8s.io/apiserver's `DynamicFileCAContent`
//! polls every minute and also uses fsnotify; polling alone is simpler and sees every kind of
//! update: an in-place rewrite, a rename over the file, or the `..data` symlink swap of a
//! projected volume, since the path is opened anew each time). It compares the content, not
//! the modification time, so two writes within the file system's timestamp granularity are
//! still seen. New content is handed to the credential's `apply`, which parses it and swaps it
//! in; content that cannot be used (unparsable PEM, an empty token, a key that does not match
//! its certificate, a missing file) is logged once per distinct failure with the paths and the
//! reason, and the last good credential stays in force.
//!
//! # Layout
//! - this module: [`read`], [`Reloader`], and [`Reloads`], the count of what every reloader
//!   did (tests wait on it instead of sleeping).
//! - [`kubelet`]: the kubelet client's credentials (token, client certificate, CA) from the
//!   flags and the kubeconfig, and their reloaders.

pub mod kubelet;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest as _, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Why a credential's files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read (missing, unreadable).
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The files were read but their content cannot be used.
    #[error("{paths}: {reason}")]
    Invalid {
        /// The files, comma-separated.
        paths: String,
        /// What is wrong with them.
        reason: String,
    },
}

/// A SHA-256 over every file's length and content, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digest([u8; 32]);

/// The contents of a credential's files, read together, and their digest.
#[derive(Clone, Debug)]
pub struct Read {
    /// The files, in the order given.
    pub paths: Vec<PathBuf>,
    /// Their contents, in the same order.
    pub contents: Vec<Vec<u8>>,
    /// What the reloader compares.
    pub digest: Digest,
}

impl Read {
    /// The paths for messages: `a, b`.
    pub fn describe(&self) -> String {
        describe(&self.paths)
    }

    /// An [`Error::Invalid`] for these files.
    pub fn invalid(&self, reason: impl std::fmt::Display) -> Error {
        Error::Invalid {
            paths: self.describe(),
            reason: reason.to_string(),
        }
    }
}

fn describe(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads every file of a credential.
pub fn read(paths: Vec<PathBuf>) -> Result<Read, Error> {
    let mut hash = Sha256::new();
    let mut contents = Vec::with_capacity(paths.len());
    for path in &paths {
        let bytes = std::fs::read(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(&bytes);
        contents.push(bytes);
    }
    Ok(Read {
        paths,
        contents,
        digest: Digest(hash.finalize().into()),
    })
}

/// What the reloaders have done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// New content taken into use.
    pub applied: u64,
    /// Failures logged (new content that cannot be used, or a file that cannot be read),
    /// each distinct one once.
    pub rejected: u64,
}

/// The [`Counts`] of every reloader sharing it; cheap to clone. Tests wait on it for a
/// reload instead of sleeping.
#[derive(Clone, Debug)]
pub struct Reloads {
    counts: Arc<watch::Sender<Counts>>,
}

impl Default for Reloads {
    fn default() -> Self {
        Reloads {
            counts: Arc::new(watch::Sender::new(Counts::default())),
        }
    }
}

impl Reloads {
    /// The counts now.
    pub fn counts(&self) -> Counts {
        *self.counts.borrow()
    }

    /// Waits until `done` holds for the counts (at once if it holds now) and returns them.
    pub async fn wait_for(&self, mut done: impl FnMut(&Counts) -> bool) -> Counts {
        let mut receiver = self.counts.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        match receiver.wait_for(|c| done(c)).await {
            Ok(counts) => *counts,
            Err(_) => self.counts(),
        }
    }

    fn applied(&self) {
        self.counts.send_modify(|c| c.applied += 1);
    }

    fn rejected(&self) {
        self.counts.send_modify(|c| c.rejected += 1);
    }
}

/// Takes new file content into use: parses it and swaps it in, or says why it cannot.
type Apply = Box<dyn FnMut(&Read) -> Result<(), String> + Send>;

/// Watches one credential's files and applies their content when it changes.
pub struct Reloader {
    /// What the credential is, for logs: `kubelet bearer token`.
    what: &'static str,
    paths: Vec<PathBuf>,
    /// The digest of the last content tried, good or bad.
    seen: Digest,
    apply: Apply,
    /// The last failure logged, so the same one is not logged on every poll.
    last_error: Option<String>,
    reloads: Reloads,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("what", &self.what)
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

impl Reloader {
    /// A reloader for a credential whose `initial` content is already in use; `apply` takes
    /// later content into use. Reading the files once for both, rather than again here,
    /// means a change in between is not missed.
    pub fn new(
        what: &'static str,
        initial: &Read,
        reloads: Reloads,
        apply: impl FnMut(&Read) -> Result<(), String> + Send + 'static,
    ) -> Self {
        Reloader {
            what,
            paths: initial.paths.clone(),
            seen: initial.digest,
            apply: Box::new(apply),
            last_error: None,
            reloads,
        }
    }

    /// What the credential is.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// Looks once: `Ok(true)` when new content is now in use, `Ok(false)` when nothing
    /// changed, `Err` when the files cannot be read or their new content cannot be used (the
    /// last good credential stays). Bad content is remembered, so it fails once, not on every
    /// look; the next write changes the digest and is tried again.
    pub fn check(&mut self) -> Result<bool, Error> {
        let read = read(self.paths.clone())?;
        if read.digest == self.seen {
            return Ok(false);
        }
        self.seen = read.digest;
        (self.apply)(&read).map_err(|reason| read.invalid(reason))?;
        Ok(true)
    }

    /// [`Reloader::check`], logged and counted: a reload at info, a failure at error once
    /// per distinct failure (a missing file is not reported again on every poll).
    pub fn poll(&mut self) {
        match self.check() {
            Ok(true) => {
                self.last_error = None;
                tracing::info!(
                    credential = self.what,
                    path = %describe(&self.paths),
                    "reloaded"
                );
                self.reloads.applied();
            }
            Ok(false) => self.last_error = None,
            Err(error) => {
                let message = error.to_string();
                if self.last_error.as_deref() != Some(message.as_str()) {
                    tracing::error!(
                        credential = self.what,
                        path = %describe(&self.paths),
                        error = %message,
                        "changed but cannot be used; keeping the last good one"
                    );
                    self.last_error = Some(message);
                    self.reloads.rejected();
                }
            }
        }
    }

    /// Polls every `interval` until `shutdown`.
    pub async fn run(mut self, interval: Duration, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            self.poll();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
