//! Reading certificates and keys from PEM.

use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::{Error, Identity};

/// Every certificate in a PEM file; an empty file is an error.
pub fn certs_from_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let bytes = read(path)?;
    certs_from_slice(&bytes, &path.display().to_string())
}

/// Every certificate in PEM bytes; `what` names the source in errors.
pub fn certs_from_slice(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Pem {
            what: what.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(Error::Pem {
            what: what.to_owned(),
            reason: "no CERTIFICATE block found".to_owned(),
        });
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in PEM bytes.
pub fn key_from_slice(pem: &[u8], what: &str) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| Error::Pem {
        what: what.to_owned(),
        reason: e.to_string(),
    })
}

/// A certificate chain file and a key file.
pub fn identity_from_files(cert: &Path, key: &Path) -> Result<Identity, Error> {
    let chain = certs_from_file(cert)?;
    let key_bytes = read(key)?;
    let key = key_from_slice(&key_bytes, &key.display().to_string())?;
    Ok(Identity { chain, key })
}

/// A certificate chain and key from PEM bytes.
pub fn identity_from_slices(cert: &[u8], key: &[u8]) -> Result<Identity, Error> {
    Ok(Identity {
        chain: certs_from_slice(cert, "certificate")?,
        key: key_from_slice(key, "private key")?,
    })
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::Read {
        path: path.display().to_string(),
        source,
    })
}
