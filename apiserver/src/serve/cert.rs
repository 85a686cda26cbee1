//! The serving certificate: from `--tls-cert-file`/`--tls-private-key-file`, reloaded when the
//! files change on disk, or a self-signed one kept in `--cert-dir`.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::credentials::{self, Reloader, Reloads};

/// File names inside `--cert-dir`, as the generic apiserver's `MaybeDefaultWithSelfSignedCerts`.
pub const SELF_SIGNED_CERT: &str = "apiserver.crt";
/// See [`SELF_SIGNED_CERT`].
pub const SELF_SIGNED_KEY: &str = "apiserver.key";

/// Why a certificate could not be loaded or made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading, parsing or signing-key errors from the TLS crate.
    #[error(transparent)]
    Tls(#[from] tls::Error),
    /// The certificate or key file cannot be read or used.
    #[error(transparent)]
    File(#[from] credentials::Error),
    /// The key does not belong to the certificate.
    #[error("{cert}: the private key does not match the certificate: {source}")]
    KeyMismatch {
        /// The certificate file.
        cert: String,
        /// rustls's reason.
        #[source]
        source: rustls::Error,
    },
    /// `--cert-dir` could not be written.
    #[error("writing the self-signed certificate into {path}: {source}")]
    CertDir {
        /// The file or directory.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The certificate served right now, with the names it is for; swapped whole on reload.
#[derive(Debug)]
pub struct Certs {
    current: RwLock<(Arc<CertifiedKey>, Arc<[String]>)>,
}

impl Certs {
    /// Serves `key`.
    pub fn new(key: CertifiedKey) -> Self {
        let names = names_of(&key);
        Certs {
            current: RwLock::new((Arc::new(key), names)),
        }
    }

    /// The certificate being served.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.read().0.clone()
    }

    /// The names of the certificate being served, as k8s.io/apiserver extracts them for
    /// SNI: the common name when it is a DNS name (not an IP address), then the DNS and IP
    /// subject alternative names; lower-cased.
    pub fn names(&self) -> Arc<[String]> {
        self.current.read().1.clone()
    }

    /// Serves `key` from the next handshake on.
    pub fn replace(&self, key: CertifiedKey) {
        let names = names_of(&key);
        *self.current.write() = (Arc::new(key), names);
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// See [`Certs::names`].
fn names_of(key: &CertifiedKey) -> Arc<[String]> {
    let Some(Ok((_, leaf))) = key
        .cert
        .first()
        .map(|c| x509_parser::parse_x509_certificate(c))
    else {
        return Arc::from([]);
    };
    let common_name = leaf
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .filter(|cn| cn.parse::<std::net::IpAddr>().is_err() && is_dns_pattern(cn));
    common_name
        .map(str::to_owned)
        .into_iter()
        .chain(subject_alt_names(&leaf))
        .map(|name| name.to_ascii_lowercase())
        .collect()
}

/// A DNS name, or one with a leading `*.` label (RFC 1123 labels).
fn is_dns_pattern(name: &str) -> bool {
    let name = name.strip_prefix("*.").unwrap_or(name);
    name == "*"
        || (!name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            }))
}

/// `--tls-sni-cert-key` pairs before the default certificate, as k8s.io/apiserver chooses
/// (`dynamiccertificates`): for the name a client asks for (SNI), an exact match before a
/// wildcard one (the name with its first label as `*`), a pair's explicit patterns before
/// the names taken from a pair's certificate when it has none, earlier pairs first; the
/// default certificate when nothing matches or no name was sent.
#[derive(Debug)]
pub struct Sni {
    default: Arc<Certs>,
    named: Vec<Named>,
}

/// One `--tls-sni-cert-key` pair.
#[derive(Debug)]
pub struct Named {
    certs: Arc<Certs>,
    /// Lower-cased; empty: the certificate's own names.
    patterns: Vec<String>,
}

impl Named {
    /// `certs`, for `patterns` (none: the certificate's own names).
    pub fn new(certs: Arc<Certs>, patterns: &[String]) -> Self {
        Named {
            certs,
            patterns: patterns
                .iter()
                .map(|p| p.trim().to_ascii_lowercase())
                .filter(|p| !p.is_empty())
                .collect(),
        }
    }
}

impl Sni {
    /// `named` in priority order, `default` for everything else.
    pub fn new(default: Arc<Certs>, named: Vec<Named>) -> Self {
        Sni { default, named }
    }

    /// The certificate for a client asking for `server_name`.
    pub fn for_name(&self, server_name: Option<&str>) -> Arc<CertifiedKey> {
        let Some(name) = server_name.map(str::to_ascii_lowercase) else {
            return self.default.current();
        };
        let wildcard = name.split_once('.').map(|(_, rest)| format!("*.{rest}"));
        for candidate in std::iter::once(name.as_str()).chain(wildcard.as_deref()) {
            let explicit = self
                .named
                .iter()
                .find(|n| n.patterns.iter().any(|p| p == candidate));
            let extracted = || {
                self.named
                    .iter()
                    .filter(|n| n.patterns.is_empty())
                    .find(|n| n.certs.names().iter().any(|p| p == candidate))
            };
            if let Some(named) = explicit.or_else(extracted) {
                return named.certs.current();
            }
        }
        self.default.current()
    }
}

impl ResolvesServerCert for Sni {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.for_name(client_hello.server_name()))
    }
}

/// A certificate and key from PEM bytes, checked to belong together.
fn certified(cert_pem: &[u8], key_pem: &[u8], what: &str) -> Result<CertifiedKey, Error> {
    let identity = tls::pem::identity_from_slices(cert_pem, key_pem)?;
    let key = tls::server::certified_key(&identity)?;
    key.keys_match().map_err(|source| Error::KeyMismatch {
        cert: what.to_owned(),
        source,
    })?;
    Ok(key)
}

/// Loads `--tls-cert-file` / `--tls-private-key-file`.
pub fn from_files(cert: &Path, key: &Path) -> Result<CertifiedKey, Error> {
    let (cert_pem, key_pem) = read_pair(cert, key)?;
    certified(&cert_pem, &key_pem, &cert.display().to_string())
}

fn read_pair(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| {
            Error::Tls(tls::Error::Read {
                path: path.display().to_string(),
                source,
            })
        })
    };
    Ok((read(cert)?, read(key)?))
}

/// The self-signed certificate in `dir` (`apiserver.crt`, `apiserver.key`): reused when it is
/// valid and covers `sans`, otherwise generated (common name `localhost`) and written there.
pub fn self_signed_in(dir: &Path, sans: &[String]) -> Result<CertifiedKey, Error> {
    let cert_path = dir.join(SELF_SIGNED_CERT);
    let key_path = dir.join(SELF_SIGNED_KEY);
    if cert_path.exists() || key_path.exists() {
        match reuse(&cert_path, &key_path, sans) {
            Ok(key) => {
                tracing::info!(cert = %cert_path.display(), "reusing the self-signed serving certificate");
                return Ok(key);
            }
            Err(reason) => tracing::warn!(
                cert = %cert_path.display(),
                %reason,
                "regenerating the self-signed serving certificate"
            ),
        }
    }
    let issued = tls::issue::self_signed("localhost", sans)?;
    let dir_error = |path: &Path, source| Error::CertDir {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| dir_error(dir, e))?;
    write_file(&key_path, issued.key_pem.as_bytes(), true).map_err(|e| dir_error(&key_path, e))?;
    write_file(&cert_path, issued.cert_pem.as_bytes(), false)
        .map_err(|e| dir_error(&cert_path, e))?;
    tracing::info!(cert = %cert_path.display(), sans = ?sans, "generated a self-signed serving certificate");
    let key = tls::server::certified_key(&issued.identity)?;
    Ok(key)
}

fn reuse(cert: &Path, key: &Path, sans: &[String]) -> Result<CertifiedKey, String> {
    let (cert_pem, key_pem) = read_pair(cert, key).map_err(|e| e.to_string())?;
    let certified =
        certified(&cert_pem, &key_pem, &cert.display().to_string()).map_err(|e| e.to_string())?;
    let leaf = certified
        .cert
        .first()
        .ok_or_else(|| "no certificate".to_owned())?;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(leaf).map_err(|e| format!("unparsable: {e}"))?;
    if !parsed.validity().is_valid() {
        return Err("expired or not yet valid".to_owned());
    }
    let present = subject_alt_names(&parsed);
    if let Some(missing) = sans.iter().find(|s| !present.contains(s)) {
        return Err(format!("does not cover {missing}"));
    }
    Ok(certified)
}

/// DNS names and IP addresses of a certificate, as strings.
pub fn subject_alt_names(cert: &x509_parser::certificate::X509Certificate<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok(Some(ext)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    ext.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => <[u8; 4]>::try_from(*bytes)
                    .ok()
                    .map(|b| std::net::IpAddr::from(b).to_string()),
                16 => <[u8; 16]>::try_from(*bytes)
                    .ok()
                    .map(|b| std::net::IpAddr::from(b).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn write_file(path: &Path, contents: &[u8], private: bool) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options.open(path)?;
    file.write_all(contents)?;
    file.sync_all()
}

/// Loads `--tls-cert-file` / `--tls-private-key-file` into the returned [`Certs`], and a
/// reloader that swaps the served certificate when the files change (from the next
/// handshake on). A bad new pair is logged and the old certificate kept.
pub fn reloaded(
    cert: &Path,
    key: &Path,
    reloads: &Reloads,
) -> Result<(Arc<Certs>, Reloader), Error> {
    let initial = credentials::read(vec![cert.to_path_buf(), key.to_path_buf()])?;
    let what = cert.display().to_string();
    let certs = Arc::new(Certs::new(pair(&initial, &what)?));
    let target = certs.clone();
    let reloader = Reloader::new(
        "serving certificate",
        &initial,
        reloads.clone(),
        move |read| {
            target.replace(pair(read, &what).map_err(|e| e.to_string())?);
            Ok(())
        },
    );
    Ok((certs, reloader))
}

/// The certificate and key of a [`credentials::Read`] of the pair.
fn pair(read: &credentials::Read, what: &str) -> Result<CertifiedKey, Error> {
    match read.contents.as_slice() {
        [cert_pem, key_pem] => certified(cert_pem, key_pem, what),
        _ => Err(read.invalid("a certificate and a key are needed").into()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sans() -> Vec<String> {
        ["localhost", "127.0.0.1", "metrics-server.kube-system.svc"]
            .map(str::to_owned)
            .to_vec()
    }

    fn leaf_sans(key: &CertifiedKey) -> Vec<String> {
        let (_, parsed) = x509_parser::parse_x509_certificate(&key.cert[0]).unwrap();
        subject_alt_names(&parsed)
    }

    #[test]
    fn sni_names_are_the_dns_common_name_and_the_sans() {
        let names = |cn: &str, sans: &[&str]| {
            let issued = tls::issue::self_signed(
                cn,
                &sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
            )
            .unwrap();
            Certs::new(tls::server::certified_key(&issued.identity).unwrap()).names()
        };
        assert_eq!(
            &*names("Web.Example", &["alt.example", "10.0.0.2"]),
            ["web.example", "alt.example", "10.0.0.2"]
        );
        assert_eq!(&*names("*.wild.example", &[]), ["*.wild.example"]);
        // A common name that is an address, or no DNS name at all, is not a name.
        assert_eq!(&*names("10.0.0.1", &["x.example"]), ["x.example"]);
        assert_eq!(&*names("metrics server", &["x.example"]), ["x.example"]);
    }

    #[test]
    fn self_signed_is_generated_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("certs");
        let first = self_signed_in(&sub, &sans()).unwrap();
        assert_eq!(leaf_sans(&first), sans());
        assert!(sub.join(SELF_SIGNED_CERT).exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(sub.join(SELF_SIGNED_KEY))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let again = self_signed_in(&sub, &sans()).unwrap();
        assert_eq!(
            first.cert, again.cert,
            "an existing valid certificate is reused"
        );
        // Asking for another name regenerates.
        let mut more = sans();
        more.push("metrics.example".to_owned());
        let third = self_signed_in(&sub, &more).unwrap();
        assert_ne!(third.cert, first.cert);
        assert!(leaf_sans(&third).contains(&"metrics.example".to_owned()));
        // Garbage in the directory is replaced, not fatal.
        std::fs::write(sub.join(SELF_SIGNED_CERT), "junk").unwrap();
        let fourth = self_signed_in(&sub, &sans()).unwrap();
        assert_eq!(leaf_sans(&fourth), sans());
    }

    fn write_pair(
        dir: &Path,
        issued: &tls::issue::Issued,
    ) -> (std::path::PathBuf, std::path::PathBuf) {
        let cert = dir.join("tls.crt");
        let key = dir.join("tls.key");
        std::fs::write(&cert, &issued.cert_pem).unwrap();
        std::fs::write(&key, &issued.key_pem).unwrap();
        (cert, key)
    }

    #[test]
    fn reloads_changed_files_and_keeps_the_old_on_bad_ones() {
        let dir = tempfile::tempdir().unwrap();
        let one = tls::issue::self_signed("one", &["one.test".to_owned()]).unwrap();
        let (cert, key) = write_pair(dir.path(), &one);
        let (certs, mut reloader) = reloaded(&cert, &key, &Reloads::default()).unwrap();
        assert_eq!(leaf_sans(&certs.current()), ["one.test"]);
        assert!(!reloader.check().unwrap(), "nothing changed");

        let two = tls::issue::self_signed("two", &["two.test".to_owned()]).unwrap();
        write_pair(dir.path(), &two);
        assert!(reloader.check().unwrap());
        assert_eq!(leaf_sans(&certs.current()), ["two.test"]);

        // A key that does not match: error, old certificate kept.
        let three = tls::issue::self_signed("three", &["three.test".to_owned()]).unwrap();
        std::fs::write(&cert, &three.cert_pem).unwrap();
        let err = reloader.check().unwrap_err();
        assert!(
            err.to_string().contains("does not match the certificate"),
            "{err}"
        );
        assert_eq!(leaf_sans(&certs.current()), ["two.test"]);
        // Reported once, not on every poll.
        assert!(!reloader.check().unwrap());
        // The matching key arrives: served.
        std::fs::write(&key, &three.key_pem).unwrap();
        assert!(reloader.check().unwrap());
        assert_eq!(leaf_sans(&certs.current()), ["three.test"]);

        // Garbage: error, old kept.
        std::fs::write(&cert, "not a certificate").unwrap();
        assert!(reloader.check().is_err());
        assert_eq!(leaf_sans(&certs.current()), ["three.test"]);
        // A file that disappears: error, old kept.
        std::fs::remove_file(&cert).unwrap();
        assert!(reloader.check().is_err());
        assert_eq!(leaf_sans(&certs.current()), ["three.test"]);
    }

    #[test]
    fn mismatched_files_are_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let one = tls::issue::self_signed("one", &["one.test".to_owned()]).unwrap();
        let two = tls::issue::self_signed("two", &["two.test".to_owned()]).unwrap();
        let (cert, key) = write_pair(dir.path(), &one);
        std::fs::write(&key, &two.key_pem).unwrap();
        assert!(matches!(
            from_files(&cert, &key),
            Err(Error::KeyMismatch { .. })
        ));
        assert!(from_files(&dir.path().join("absent"), &key).is_err());
    }
}
