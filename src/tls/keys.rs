//! Certificates and private keys from PEM files, with one clear error line each.
//!
//! Keys: RSA and ECDSA (and Ed25519) in PKCS#1 (`RSA PRIVATE KEY`), PKCS#8 (`PRIVATE KEY`)
//! and SEC1 (`EC PRIVATE KEY`) form, parsed by rustls-pki-types; encrypted PKCS#8
//! (`ENCRYPTED PRIVATE KEY`, PBES2 with PBKDF2 or scrypt and AES-CBC, what `openssl pkcs8
//! -topk8 -v2 aes-256-cbc` and `openssl genpkey -aes256` write) decrypted by RustCrypto's
//! `pkcs8`. OpenSSL's older per-PEM encryption (`Proc-Type: 4,ENCRYPTED`, MD5-derived keys)
//! is refused with the command that converts it.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject, SectionKind};
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use super::error::ConfigError;

fn read(flag: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| ConfigError::new(flag, path, format!("cannot read: {e}")))
}

/// Every certificate of a PEM file, in order (a chain: the server's first).
pub fn load_certs(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let data = read(flag, path)?;
    let certs = CertificateDer::pem_slice_iter(&data)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::new(flag, path, format!("not a PEM certificate file: {}", pem_error(&e))))?;
    if certs.is_empty() {
        return Err(ConfigError::new(flag, path, "no certificate in it (expected PEM `BEGIN CERTIFICATE`)"));
    }
    Ok(certs)
}

/// Every CRL of a PEM file.
pub fn load_crls(flag: &str, path: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>, ConfigError> {
    let data = read(flag, path)?;
    let crls = CertificateRevocationListDer::pem_slice_iter(&data)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::new(flag, path, format!("not a PEM CRL file: {}", pem_error(&e))))?;
    if crls.is_empty() {
        return Err(ConfigError::new(flag, path, "no CRL in it (expected PEM `BEGIN X509 CRL`)"));
    }
    Ok(crls)
}

fn pem_error(e: &pem::Error) -> String {
    match e {
        pem::Error::Io(e) => e.to_string(),
        other => format!("{other:?}"),
    }
}

/// The private key of `path`, decrypted with `password` when it is encrypted.
pub fn load_key(path: &Path, password: Option<&str>) -> Result<PrivateKeyDer<'static>, ConfigError> {
    const FLAG: &str = "--ssl-keyfile";
    let data = read(FLAG, path)?;
    for item in pem::PemObject::pem_slice_iter(&data) {
        let (kind, der): (SectionKind, Vec<u8>) = match item {
            Ok(v) => v,
            Err(e) => return Err(ConfigError::new(FLAG, path, format!("not a PEM key file: {}", pem_error(&e)))),
        };
        match kind {
            SectionKind::PrivateKey => return Ok(PrivateKeyDer::Pkcs8(der.into())),
            SectionKind::RsaPrivateKey => return Ok(PrivateKeyDer::Pkcs1(der.into())),
            SectionKind::EcPrivateKey => return Ok(PrivateKeyDer::Sec1(der.into())),
            _ => {}
        }
    }
    if is_encrypted_pkcs8(&data) {
        let Some(password) = password else {
            return Err(ConfigError::new(FLAG, path, "the key is encrypted and no --ssl-keyfile-password was given"));
        };
        return decrypt_pkcs8(path, &data, password);
    }
    if std::str::from_utf8(&data).is_ok_and(|s| s.contains("Proc-Type: 4,ENCRYPTED")) {
        return Err(ConfigError::new(
            FLAG,
            path,
            "the key uses OpenSSL's legacy PEM encryption, which is not supported; convert it with `openssl pkcs8 -topk8 -v2 aes-256-cbc -in OLD -out NEW`",
        ));
    }
    Err(ConfigError::new(FLAG, path, "no private key in it (expected PEM `PRIVATE KEY`, `RSA PRIVATE KEY`, `EC PRIVATE KEY` or `ENCRYPTED PRIVATE KEY`)"))
}

fn is_encrypted_pkcs8(data: &[u8]) -> bool {
    std::str::from_utf8(data).is_ok_and(|s| s.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----"))
}

fn decrypt_pkcs8(path: &Path, data: &[u8], password: &str) -> Result<PrivateKeyDer<'static>, ConfigError> {
    const FLAG: &str = "--ssl-keyfile";
    let text = std::str::from_utf8(data).map_err(|_| ConfigError::new(FLAG, path, "not a PEM key file"))?;
    const END: &str = "-----END ENCRYPTED PRIVATE KEY-----";
    let start = text.find("-----BEGIN ENCRYPTED PRIVATE KEY-----").unwrap_or(0);
    let end = text[start..].find(END).map(|i| start + i + END.len()).unwrap_or(text.len());
    let damaged = |e: &dyn std::fmt::Display| ConfigError::new(FLAG, path, format!("a damaged encrypted key: {e}"));
    let (_, der) = pkcs8::der::pem::decode_vec(&text.as_bytes()[start..end]).map_err(|e| damaged(&e))?;
    let info = pkcs8::EncryptedPrivateKeyInfo::try_from(der.as_slice()).map_err(|e| damaged(&e))?;
    let doc = info
        .decrypt(password.as_bytes())
        .map_err(|_| ConfigError::new(FLAG, path, "cannot decrypt the key: wrong --ssl-keyfile-password (or an unsupported cipher)"))?;
    // A wrong password can still "decrypt" (CBC padding checks pass by chance ~1/256 times):
    // the result must also be a PrivateKeyInfo.
    if pkcs8::PrivateKeyInfo::try_from(doc.as_bytes()).is_err() {
        return Err(ConfigError::new(FLAG, path, "cannot decrypt the key: wrong --ssl-keyfile-password"));
    }
    Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(doc.as_bytes().to_vec())))
}

/// The certificate chain and the key, checked to belong together.
pub fn certified_key(provider: &CryptoProvider, certfile: &Path, keyfile: &Path, password: Option<&str>) -> Result<Arc<CertifiedKey>, ConfigError> {
    let certs = load_certs("--ssl-certfile", certfile)?;
    let key = load_key(keyfile, password)?;
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| ConfigError::new("--ssl-keyfile", keyfile, format!("unusable private key: {e}")))?;
    let ck = CertifiedKey::new(certs, signer);
    match ck.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(Arc::new(ck)),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => Err(ConfigError::new(
            "--ssl-keyfile",
            keyfile,
            format!("the key does not match the certificate in {}", certfile.display()),
        )),
        Err(e) => Err(ConfigError::new("--ssl-certfile", certfile, format!("unusable certificate: {e}"))),
    }
}
