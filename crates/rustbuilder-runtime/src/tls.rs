//! The serving certificate of the metrics endpoint and of the webhook server: a mounted one (e.g.
//! issued by cert-manager into a Secret), re-read when its files change, or else a self-signed one made
//! at start.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tracing::{info, warn};

use crate::error::{Cause, Error};

/// How often mounted certificate files are checked for changes. Kubernetes updates mounted Secrets
/// within about a minute, so this adds little to a rotation.
const RELOAD_PERIOD: Duration = Duration::from_secs(10);

/// Where the certificate comes from.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// A self-signed certificate for these DNS names or IP addresses, made at start.
    SelfSigned(Vec<String>),
    /// PEM files, e.g. `tls.crt` (certificate chain) and `tls.key` of a mounted `kubernetes.io/tls`
    /// Secret.
    Files {
        /// The certificate chain, PEM.
        cert: PathBuf,
        /// The private key, PEM.
        key: PathBuf,
    },
}

/// rustls' `ring` provider, the one kube's client uses. rustls 0.23.48 deprecates it for its lack of
/// post-quantum key exchange; the provider that has it (aws-lc-rs) needs cmake and a C toolchain to
/// build, which an operator's image build should not. Served here: the manager's own endpoints.
#[allow(deprecated)]
fn ring_provider() -> CryptoProvider {
    ring::default_provider()
}

/// A TLS acceptor for HTTP/1.1 with the certificate from `source`. For files, also starts a task that
/// swaps in a new certificate when the files change (a broken update keeps the old one), until the
/// acceptor is dropped.
pub fn acceptor(source: CertSource) -> Result<TlsAcceptor, Error> {
    let provider = Arc::new(ring_provider());
    let certified = match &source {
        CertSource::SelfSigned(names) => self_signed(names, &provider)?,
        CertSource::Files { cert, key } => load(cert, key, &provider)?,
    };
    let current = Arc::new(CurrentCert(RwLock::new(Arc::new(certified))));
    if let CertSource::Files { cert, key } = source {
        tokio::spawn(reload(
            cert,
            key,
            provider.clone(),
            Arc::downgrade(&current),
        ));
    }
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("choosing the protocol versions", e))?
        .with_no_client_auth()
        .with_cert_resolver(current);
    // HTTP/2 is off, as in Kubebuilder (its rapid-reset and stream-cancel CVEs); metrics need no more.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn self_signed(names: &[String], provider: &CryptoProvider) -> Result<CertifiedKey, Error> {
    let generated = rcgen::generate_simple_self_signed(names.to_vec())
        .map_err(|e| tls_error("generating a self-signed certificate", e))?;
    let key = PrivateKeyDer::Pkcs8(generated.signing_key.serialize_der().into());
    info!(?names, "serving with a self-signed certificate");
    CertifiedKey::from_der(vec![generated.cert.der().clone()], key, provider)
        .map_err(|e| tls_error("loading the self-signed certificate", e))
}

fn tls_error(context: impl Into<String>, source: impl Into<Cause>) -> Error {
    Error::Tls {
        context: context.into(),
        source: source.into(),
    }
}

fn load(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, Error> {
    let fail = |path: &Path, e: Cause| tls_error(path.display().to_string(), e);
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| fail(cert, e.into()))?;
    if chain.is_empty() {
        return Err(fail(cert, "no certificate in the file".into()));
    }
    let private_key = PrivateKeyDer::from_pem_file(key).map_err(|e| fail(key, e.into()))?;
    CertifiedKey::from_der(chain, private_key, provider).map_err(|e| fail(key, e.into()))
}

/// Polls the files' modification times and reloads them when they change, while `current` is in use.
async fn reload(
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Weak<CurrentCert>,
) {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let stamp =
        |cert: &Path, key: &Path| -> [Option<SystemTime>; 2] { [modified(cert), modified(key)] };
    let mut loaded = stamp(&cert, &key);
    loop {
        tokio::time::sleep(RELOAD_PERIOD).await;
        let Some(current) = current.upgrade() else {
            return; // the server is gone
        };
        let now = stamp(&cert, &key);
        if now == loaded {
            continue;
        }
        match load(&cert, &key, &provider) {
            Ok(certified) => {
                *current.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(certified);
                loaded = now;
                info!(cert = %cert.display(), "reloaded the serving certificate");
            }
            // Possibly half-written: try again next time, serving the old certificate meanwhile.
            Err(error) => warn!(%error, "cannot reload the serving certificate"),
        }
    }
}

/// The certificate handed to every TLS handshake.
#[derive(Debug)]
struct CurrentCert(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for CurrentCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

/// Names for the self-signed certificate: localhost and the host (pod) name.
pub fn default_names() -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if let Some(host) = crate::lease::hostname() {
        names.push(host);
    }
    names
}
