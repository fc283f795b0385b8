//! The server's TLS configuration: rustls's `ServerConfig` from the command line's files and
//! choices, every problem one `ConfigError` line naming the flag, the file and the problem.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::{ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::version::{TLS12, TLS13};
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};

use super::error::ConfigError;
use super::{ciphers, keys};

/// The crypto provider: aws-lc-rs (see the commit that chose it: its RSA-2048 signature is
/// about 3x cheaper than ring's, and a full RSA handshake is dominated by it).
pub fn provider() -> CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

/// Session ids remembered per worker for stateful resumption (TLS 1.2 session ids, TLS 1.3
/// when tickets are off). rustls's default is 256; a busy server sees more clients than that
/// within a ticket's lifetime. About 200 bytes each.
const SESSION_CACHE: usize = 16 * 1024;

/// `--ssl-cert-reqs`: the stdlib's `ssl.CERT_NONE`, `CERT_OPTIONAL`, `CERT_REQUIRED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Optional,
    Required,
}

impl ClientAuth {
    pub fn from_int(v: i64) -> Result<ClientAuth, String> {
        match v {
            0 => Ok(ClientAuth::None),
            1 => Ok(ClientAuth::Optional),
            2 => Ok(ClientAuth::Required),
            _ => Err(format!("--ssl-cert-reqs: {v} is not 0 (none), 1 (optional) or 2 (required)")),
        }
    }
}

/// What the command line says about TLS.
#[derive(Clone, Debug)]
pub struct Options {
    pub certfile: PathBuf,
    pub keyfile: PathBuf,
    pub password: Option<String>,
    pub ca_certs: Option<PathBuf>,
    pub client_auth: ClientAuth,
    pub ciphers: Option<String>,
    pub crls: Vec<PathBuf>,
    /// `--ssl-protocol-min`: "tls1.2" or "tls1.3".
    pub min_version: Option<String>,
    /// ALPN protocols offered, in preference order.
    pub alpn: Vec<Vec<u8>>,
    /// The secret the workers of one server share for session tickets (`tickets`); `None`:
    /// keys of this process's own (rustls's ticketer).
    pub ticket_secret: Option<Vec<u8>>,
}

/// A built configuration: rustls's, and the server certificate for the ASGI `tls` extension.
#[derive(Debug)]
pub struct Config {
    pub rustls: Arc<ServerConfig>,
    pub server_cert: rustls::pki_types::CertificateDer<'static>,
}

fn versions(min: Option<&str>, suites: &[rustls::SupportedCipherSuite]) -> Result<Vec<&'static SupportedProtocolVersion>, ConfigError> {
    let lowest = match min.map(|m| m.to_ascii_lowercase()) {
        None => 2,
        Some(m) if matches!(m.as_str(), "tls1.2" | "tlsv1.2" | "1.2") => 2,
        Some(m) if matches!(m.as_str(), "tls1.3" | "tlsv1.3" | "1.3") => 3,
        Some(m) => return Err(ConfigError(format!("--ssl-protocol-min: {m:?} is not tls1.2 or tls1.3 (rustls has no older version)"))),
    };
    let has13 = suites.iter().any(|s| s.version() == &TLS13);
    let has12 = suites.iter().any(|s| s.version() == &TLS12);
    let mut v = Vec::new();
    if has13 {
        v.push(&TLS13);
    }
    if has12 && lowest <= 2 {
        v.push(&TLS12);
    }
    if v.is_empty() {
        return Err(ConfigError("--ssl-ciphers/--ssl-protocol-min: no cipher suite left for the allowed protocol versions".into()));
    }
    Ok(v)
}

/// AES-128-GCM first among the suites offered (aws-lc-rs lists AES-256-GCM/SHA-384 first;
/// `--ssl-ciphers` selects suites, never an order).
/// TLS_AES_128_GCM_SHA256 is TLS 1.3's mandatory suite (RFC 8446 9.1) and as safe; the
/// server's preference decides, and this one is cheaper twice: the handshake's key schedule
/// runs HKDF on SHA-256 instead of SHA-384 (about 0.2 M of the 1.4 M instructions of an
/// ECDSA handshake, counted by `benchmarks/https_callgrind.py`), and every record is
/// encrypted with 10 AES rounds instead of 14. The order within each cipher is kept.
fn prefer_aes128(suites: &mut [rustls::SupportedCipherSuite]) {
    let rank = |s: &rustls::SupportedCipherSuite| {
        let name = s.suite().as_str().unwrap_or_default();
        u8::from(!name.contains("AES_128_GCM"))
    };
    suites.sort_by_key(rank);
}

/// Build the server's configuration from `opts`.
pub fn build(opts: &Options) -> Result<Config, ConfigError> {
    let mut provider = provider();
    if let Some(spec) = &opts.ciphers {
        provider.cipher_suites = ciphers::select(spec, &provider.cipher_suites).map_err(|e| ConfigError(format!("--ssl-ciphers: {e}")))?;
    }
    prefer_aes128(&mut provider.cipher_suites);
    let versions = versions(opts.min_version.as_deref(), &provider.cipher_suites)?;
    let provider = Arc::new(provider);
    let certified = keys::certified_key(&provider, &opts.certfile, &opts.keyfile, opts.password.as_deref())?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| ConfigError(format!("--ssl-ciphers: {e}")))?;
    let builder = match (opts.client_auth, &opts.ca_certs) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (_, None) => return Err(ConfigError("--ssl-cert-reqs 1 or 2 (client certificates) needs --ssl-ca-certs".into())),
        (auth, Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for cert in keys::load_certs("--ssl-ca-certs", ca)? {
                roots.add(cert).map_err(|e| ConfigError::new("--ssl-ca-certs", ca, format!("unusable CA certificate: {e}")))?;
            }
            let mut crls = Vec::new();
            for path in &opts.crls {
                crls.extend(keys::load_crls("--ssl-crl", path)?);
            }
            let mut v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).with_crls(crls);
            if auth == ClientAuth::Optional {
                v = v.allow_unauthenticated();
            }
            let verifier = v.build().map_err(|e| ConfigError::new("--ssl-ca-certs", ca, format!("cannot verify clients with it: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    if !opts.crls.is_empty() && opts.client_auth == ClientAuth::None {
        return Err(ConfigError("--ssl-crl: revocation lists check client certificates: it needs --ssl-cert-reqs 1 or 2".into()));
    }
    let server_cert = certified.cert[0].clone();

    let resolver = Arc::new(rustls::sign::SingleCertAndKey::from(certified));
    let mut cfg = builder.with_cert_resolver(resolver);
    cfg.alpn_protocols = opts.alpn.clone();
    // The server's order of suites decides (`prefer_aes128`), as
    // nginx's `ssl_prefer_server_ciphers on`: clients list AES-256 first.
    cfg.ignore_client_order = true;
    cfg.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE);
    cfg.ticketer = match &opts.ticket_secret {
        Some(secret) => Arc::new(super::tickets::SharedTicketer::new(secret).map_err(|e| ConfigError(format!("TLS session tickets: {e}")))?),
        None => rustls::crypto::aws_lc_rs::Ticketer::new().map_err(|e| ConfigError(format!("TLS session tickets: {e}")))?,
    };
    cfg.send_tls13_tickets = 1;
    Ok(Config { rustls: Arc::new(cfg), server_cert })
}
