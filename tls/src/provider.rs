//! The crypto provider: ring, chosen once for the process.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

/// The provider every config in this workspace is built with.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs ring as the process default, for libraries (kube) that build their own configs.
/// Calling it twice is harmless.
pub fn install_default() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
