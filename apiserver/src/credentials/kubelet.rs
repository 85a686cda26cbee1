//! The kubelet client's credentials (metrics-server `KubeletClientOptions.Config`): the
//! cluster's CA and credentials from the kubeconfig, overridden by the kubelet flags, and a
//! [`Reloader`] for each one read from a file: the bearer token (kubeconfig `tokenFile`, the
//! in-cluster service-account token, as client-go re-reads `BearerTokenFile`), the client
//! certificate and key (`--kubelet-client-certificate` / `--kubelet-client-key`, or the
//! kubeconfig's `client-certificate` / `client-key` files) and the CA bundle
//! (`--kubelet-certificate-authority`, or the in-cluster CA file).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use scraper::kubelet::client::{self, Client};
use secrecy::ExposeSecret as _;
use tls::CertificateDer;
use tls::client::Verify;

use super::{Read, Reloader, Reloads};

const CA_FLAG: &str = "--kubelet-certificate-authority";
const CA_TEXT_FLAG: &str = "--kubelet-certificate-authority-text";
const CERT_FLAG: &str = "--kubelet-client-certificate";
const KUBECONFIG: &str = "--kubeconfig";

/// Where the kubelet client's verification and credentials come from (the kubelet flags),
/// before the cluster's client configuration; its transport settings are a
/// [`client::Config`] of their own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// `--kubelet-certificate-authority`: a CA bundle file, watched.
    pub ca_file: Option<PathBuf>,
    /// `--kubelet-certificate-authority-text`: a CA bundle.
    pub ca_text: Option<String>,
    /// `--kubelet-client-certificate` and `--kubelet-client-key`, watched.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// `--kubelet-insecure-tls`: kubelet serving certificates are not verified.
    pub insecure_tls: bool,
}

/// A kubelet credential named by a flag or the kubeconfig cannot be used (exit code 64).
#[derive(Debug, thiserror::Error)]
#[error("{flag}: {source}")]
pub struct FlagError {
    /// The flag.
    pub flag: &'static str,
    /// The cause.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

fn flag_error<E>(flag: &'static str) -> impl FnOnce(E) -> FlagError
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    move |e| FlagError {
        flag,
        source: e.into(),
    }
}

/// The kubelet client's settings, and the files its credentials were read from.
#[derive(Debug)]
pub struct Settings {
    /// What the client is built with.
    pub config: client::Config,
    /// The files to watch.
    pub files: Files,
}

/// The kubelet credentials that came from files, as read for [`Settings::config`].
#[derive(Debug, Default)]
pub struct Files {
    token: Option<Read>,
    identity: Option<Read>,
    ca: Option<Read>,
}

impl Files {
    /// Whether no credential came from a file.
    pub fn is_empty(&self) -> bool {
        self.token.is_none() && self.identity.is_none() && self.ca.is_none()
    }

    /// A reloader for each file-backed credential, swapping it into `client` when its files
    /// change: the token from the next request on, a client certificate or CA from the next
    /// connection on (the client replaces its connection pool, see
    /// [`Client::set_identity`]).
    pub fn reloaders(self, client: &Client, reloads: &Reloads) -> Vec<Reloader> {
        let mut reloaders = Vec::new();
        if let Some(read) = self.token {
            let client = client.clone();
            reloaders.push(Reloader::new(
                "kubelet bearer token",
                &read,
                reloads.clone(),
                move |read| {
                    let token = token(read)?;
                    client
                        .set_bearer_token(Some(&token))
                        .map_err(|e| e.to_string())
                },
            ));
        }
        if let Some(read) = self.identity {
            let client = client.clone();
            reloaders.push(Reloader::new(
                "kubelet client certificate",
                &read,
                reloads.clone(),
                move |read| {
                    let identity = identity(read)?;
                    client
                        .set_identity(Some(identity))
                        .map_err(|e| e.to_string())
                },
            ));
        }
        if let Some(read) = self.ca {
            let client = client.clone();
            reloaders.push(Reloader::new(
                "kubelet certificate authority",
                &read,
                reloads.clone(),
                move |read| {
                    let roots = roots(read)?;
                    client
                        .set_verify(Verify::Roots(roots))
                        .map_err(|e| e.to_string())
                },
            ));
        }
        reloaders
    }
}

/// The only file of a one-file credential.
fn single(read: &Read) -> &[u8] {
    read.contents.first().map_or(&[][..], Vec::as_slice)
}

/// A token file's content: trimmed, and not empty (client-go refuses an empty one too).
fn token(read: &Read) -> Result<String, String> {
    let text = std::str::from_utf8(single(read)).map_err(|_| "the token is not UTF-8")?;
    let token = text.trim();
    if token.is_empty() {
        return Err("the token file is empty".to_owned());
    }
    Ok(token.to_owned())
}

/// Every certificate of a CA bundle.
fn roots(read: &Read) -> Result<Vec<CertificateDer<'static>>, String> {
    tls::pem::certs_from_slice(single(read), "CA bundle").map_err(|e| e.to_string())
}

/// A certificate chain and its key, read as a pair. Whether the key belongs to the
/// certificate is checked when the client's TLS config is built from them.
fn identity(read: &Read) -> Result<tls::Identity, String> {
    let [cert, key] = read.contents.as_slice() else {
        return Err("a certificate and a key are needed".to_owned());
    };
    tls::pem::identity_from_slices(cert, key).map_err(|e| e.to_string())
}

/// Reads and parses a credential's files at start: any error is a configuration error.
fn load<T>(
    flag: &'static str,
    paths: Vec<PathBuf>,
    parse: impl FnOnce(&Read) -> Result<T, String>,
) -> Result<(T, Read), FlagError> {
    let read = super::read(paths).map_err(flag_error(flag))?;
    let value = parse(&read).map_err(|reason| flag_error(flag)(read.invalid(reason)))?;
    Ok((value, read))
}

/// The kubelet client settings: `client`'s transport settings, with the verification and
/// credentials the kubelet flags and the cluster's client configuration give (none over
/// `client.plain_http`).
pub fn settings(
    flags: &Config,
    client: client::Config,
    kube: Option<&kube::Config>,
) -> Result<Settings, FlagError> {
    let plain_http = client.plain_http;
    let mut files = Files::default();

    let verify = if flags.insecure_tls || plain_http {
        Verify::Insecure
    } else if let Some(path) = &flags.ca_file {
        let (roots, read) = load(CA_FLAG, vec![path.clone()], roots)?;
        files.ca = Some(read);
        Verify::Roots(roots)
    } else if let Some(text) = &flags.ca_text {
        Verify::Roots(
            tls::pem::certs_from_slice(text.as_bytes(), CA_TEXT_FLAG)
                .map_err(flag_error(CA_TEXT_FLAG))?,
        )
    } else {
        match kube {
            Some(kube) if kube.accept_invalid_certs => Verify::Insecure,
            Some(kube) => Verify::Roots(cluster_roots(kube, &mut files)),
            None => {
                tracing::warn!(
                    "no kubeconfig and no --kubelet-certificate-authority: kubelet serving \
                     certificates cannot be verified"
                );
                Verify::Roots(Vec::new())
            }
        }
    };

    let identity = if plain_http {
        None
    } else if let Some((cert, key)) = &flags.client_cert {
        let (identity, read) = load(CERT_FLAG, vec![cert.clone(), key.clone()], identity)?;
        files.identity = Some(read);
        Some(identity)
    } else {
        match kube {
            Some(kube) => kubeconfig_identity(kube, &mut files)?,
            None => None,
        }
    };

    let bearer_token = match kube {
        Some(kube) if !plain_http => kubeconfig_token(kube, &mut files)?,
        _ => None,
    };
    if let Some(kube) = kube
        && !plain_http
        && identity.is_none()
        && bearer_token.is_none()
    {
        let auth = &kube.auth_info;
        let kind = [
            (auth.exec.is_some(), "exec"),
            (auth.auth_provider.is_some(), "auth-provider"),
            (auth.username.is_some(), "basic"),
        ]
        .into_iter()
        .find_map(|(set, kind)| set.then_some(kind));
        if let Some(kind) = kind {
            tracing::warn!(
                credentials = kind,
                "the kubeconfig user's credentials are of a kind sent to the Kubernetes API \
                 only; kubelets are asked without credentials (use a token, a token file or a \
                 client certificate, or --kubelet-client-certificate)"
            );
        }
    }

    Ok(Settings {
        config: client::Config {
            verify,
            identity,
            bearer_token,
            ..client
        },
        files,
    })
}

/// The cluster's CA: from the in-cluster CA file when there is one (watched, as kube-rs
/// re-reads it for its own client), else as the kubeconfig carries it.
fn cluster_roots(kube: &kube::Config, files: &mut Files) -> Vec<CertificateDer<'static>> {
    if let Some(path) = &kube.root_cert_file {
        match load(KUBECONFIG, vec![path.clone()], roots) {
            Ok((roots, read)) => {
                files.ca = Some(read);
                return roots;
            }
            Err(error) => tracing::warn!(
                %error,
                "the cluster CA file cannot be used; using the CA loaded with the kubeconfig"
            ),
        }
    }
    let roots: Vec<CertificateDer<'static>> = kube
        .root_cert
        .iter()
        .flatten()
        .map(|der| CertificateDer::from(der.clone()))
        .collect();
    if roots.is_empty() {
        tracing::warn!(
            "no cluster CA in the kubeconfig and no --kubelet-certificate-authority: \
             kubelet serving certificates cannot be verified"
        );
    }
    roots
}

/// The kubeconfig user's client certificate, when it has one; watched when both the
/// certificate and the key are files.
fn kubeconfig_identity(
    kube: &kube::Config,
    files: &mut Files,
) -> Result<Option<tls::Identity>, FlagError> {
    let auth = &kube.auth_info;
    if auth.client_certificate_data.is_none()
        && auth.client_key_data.is_none()
        && let (Some(cert), Some(key)) = (&auth.client_certificate, &auth.client_key)
    {
        let paths = vec![PathBuf::from(cert), PathBuf::from(key)];
        let (identity, read) = load(KUBECONFIG, paths, identity)?;
        files.identity = Some(read);
        return Ok(Some(identity));
    }
    let bad = |e: String| flag_error(KUBECONFIG)(e);
    let decode = |data: &str, what: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| bad(format!("{what}: {e}")))
    };
    let file = |path: &str| std::fs::read(path).map_err(|e| bad(format!("{path}: {e}")));
    let cert = match (&auth.client_certificate_data, &auth.client_certificate) {
        (Some(data), _) => Some(decode(data, "client-certificate-data")?),
        (None, Some(path)) => Some(file(path)?),
        (None, None) => None,
    };
    let key = match (&auth.client_key_data, &auth.client_key) {
        (Some(data), _) => Some(decode(data.expose_secret(), "client-key-data")?),
        (None, Some(path)) => Some(file(path)?),
        (None, None) => None,
    };
    match (cert, key) {
        (Some(cert), Some(key)) => tls::pem::identity_from_slices(&cert, &key)
            .map(Some)
            .map_err(flag_error(KUBECONFIG)),
        _ => Ok(None),
    }
}

/// The kubeconfig user's bearer token (the service-account token in-cluster); watched when
/// it comes from a file.
fn kubeconfig_token(kube: &kube::Config, files: &mut Files) -> Result<Option<String>, FlagError> {
    let auth = &kube.auth_info;
    if let Some(token) = &auth.token {
        return Ok(Some(token.expose_secret().trim().to_owned()));
    }
    let Some(path) = &auth.token_file else {
        return Ok(None);
    };
    let (token, read) = load(KUBECONFIG, vec![Path::new(path).to_path_buf()], token)?;
    files.token = Some(read);
    Ok(Some(token))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
