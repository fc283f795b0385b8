//! `--ssl-ciphers`: an OpenSSL-style cipher list mapped onto rustls's suites.
//!
//! rustls offers only AEAD suites with forward secrecy, so most of an OpenSSL cipher string
//! is about things it never does. The rules:
//! - items are separated by `:` (or `,` or spaces), as OpenSSL's;
//! - a suite is named by its IANA name (`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`,
//!   `TLS_AES_128_GCM_SHA256`), its rustls name (`TLS13_AES_128_GCM_SHA256`) or its OpenSSL
//!   name (`ECDHE-RSA-AES128-GCM-SHA256`);
//! - the group words OpenSSL users write for "the defaults" (`TLSv1`, `TLSv1.2`, `DEFAULT`,
//!   `HIGH`, `ALL`, `ECDHE`, `EECDH`, `AESGCM`, …; uvicorn's default is `TLSv1`) select every
//!   suite rustls has;
//! - an exclusion (`!X`, `-X`) of a suite removes it; of anything rustls never offers
//!   (`aNULL`, `MD5`, `RC4`, `3DES`, …) changes nothing;
//! - any other word is an error naming it.
//!
//! TLS 1.3 is offered when a TLS 1.3 suite is selected, TLS 1.2 when a TLS 1.2 one is.

use rustls::SupportedCipherSuite;

/// Words that mean "whatever the library considers good": all of rustls's suites.
const GROUPS: &[&str] = &[
    "TLSV1", "TLSV1.2", "TLSV1.3", "SSLV3", "DEFAULT", "HIGH", "ALL", "COMPLEMENTOFDEFAULT", "SECURE", "ECDHE", "EECDH", "ECDH",
    "KEECDH", "AESGCM", "AES", "AES128", "AES256", "CHACHA20", "ECDSA", "AECDSA", "RSA", "ARSA", "SHA256", "SHA384", "AEAD", "FIPS",
    "@STRENGTH", "@SECLEVEL=0", "@SECLEVEL=1", "@SECLEVEL=2", "@SECLEVEL=3",
];

/// Things excluded in common cipher strings that rustls never offers anyway.
const NEVER_OFFERED: &[&str] = &[
    "ANULL", "ENULL", "NULL", "MD5", "RC4", "3DES", "DES", "EXPORT", "EXP", "LOW", "MEDIUM", "PSK", "SRP", "CAMELLIA", "SEED", "IDEA",
    "DSS", "ADH", "AECDH", "KRB5", "SHA1", "SHA", "CBC", "DHE", "EDH", "KRSA", "ARIA", "CCM", "CCM8", "SSLV2",
];

/// The OpenSSL name of a rustls suite (IANA names of TLS 1.3 suites are OpenSSL's too).
fn openssl_name(iana: &str) -> Option<String> {
    let rest = iana.strip_prefix("TLS_ECDHE_")?;
    let (kx, cipher) = rest.split_once("_WITH_")?;
    let cipher = match cipher {
        "AES_128_GCM_SHA256" => "AES128-GCM-SHA256",
        "AES_256_GCM_SHA384" => "AES256-GCM-SHA384",
        "CHACHA20_POLY1305_SHA256" => "CHACHA20-POLY1305",
        _ => return None,
    };
    Some(format!("ECDHE-{kx}-{cipher}"))
}

/// The name OpenSSL (and so Python's `ssl`, mod_ssl's `SSL_CIPHER`) gives a negotiated suite:
/// `TLS_AES_256_GCM_SHA384`, `ECDHE-RSA-AES128-GCM-SHA256`.
pub fn openssl_cipher_name(suite: rustls::CipherSuite) -> String {
    let iana = suite.as_str().unwrap_or_default();
    if let Some(short) = iana.strip_prefix("TLS13_") {
        return format!("TLS_{short}");
    }
    openssl_name(iana).unwrap_or_else(|| iana.to_string())
}

fn names(s: &SupportedCipherSuite) -> Vec<String> {
    let iana = s.suite().as_str().unwrap_or_default().to_string();
    let mut v = vec![iana.to_ascii_uppercase()];
    if let Some(o) = openssl_name(&iana) {
        v.push(o);
    }
    if let Some(short) = iana.strip_prefix("TLS13_") {
        v.push(format!("TLS_{short}"));
    }
    v
}

/// The suites `spec` selects, in the order of `all` (rustls's preference order).
pub fn select(spec: &str, all: &[SupportedCipherSuite]) -> Result<Vec<SupportedCipherSuite>, String> {
    let mut chosen = vec![false; all.len()];
    let mut removed = vec![false; all.len()];
    for word in spec.split([':', ',', ' ']).map(str::trim).filter(|w| !w.is_empty()) {
        let (exclude, name) = match word.strip_prefix(['!', '-']) {
            Some(n) => (true, n),
            None => (false, word.strip_prefix('+').unwrap_or(word)),
        };
        let upper = name.to_ascii_uppercase();
        let hit: Vec<usize> = all.iter().enumerate().filter(|(_, s)| names(s).iter().any(|n| n == &upper)).map(|(i, _)| i).collect();
        if !hit.is_empty() {
            for i in hit {
                if exclude {
                    removed[i] = true;
                } else {
                    chosen[i] = true;
                }
            }
        } else if GROUPS.contains(&upper.as_str()) && !exclude {
            chosen.iter_mut().for_each(|c| *c = true);
        } else if exclude && (NEVER_OFFERED.contains(&upper.as_str()) || GROUPS.contains(&upper.as_str())) {
            // Nothing rustls offers (or a group whose exclusion OpenSSL users mean as a
            // hardening of the defaults): no change.
        } else {
            let known: Vec<String> = all.iter().map(|s| names(s)[0].clone()).collect();
            return Err(format!("unknown cipher {name:?} (rustls offers: {})", known.join(", ")));
        }
    }
    let out: Vec<SupportedCipherSuite> = all.iter().enumerate().filter(|(i, _)| chosen[*i] && !removed[*i]).map(|(_, s)| *s).collect();
    if out.is_empty() {
        return Err(format!("{spec:?} selects no cipher suite"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<SupportedCipherSuite> {
        super::super::config::provider().cipher_suites.clone()
    }

    #[test]
    fn uvicorns_default_selects_everything() {
        assert_eq!(select("TLSv1", &all()).unwrap().len(), all().len());
    }

    #[test]
    fn openssl_and_iana_names() {
        let got = select("ECDHE-RSA-AES128-GCM-SHA256:TLS_AES_256_GCM_SHA384", &all()).unwrap();
        let names: Vec<_> = got.iter().map(|s| s.suite().as_str().unwrap()).collect();
        assert_eq!(names, ["TLS13_AES_256_GCM_SHA384", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]);
    }

    #[test]
    fn exclusions() {
        let got = select("HIGH:!aNULL:!MD5:!TLS13_CHACHA20_POLY1305_SHA256", &all()).unwrap();
        assert_eq!(got.len(), all().len() - 1);
    }

    #[test]
    fn unknown_names_are_errors() {
        let e = select("ECDHE-RSA-AES128-SHA256:NOPE", &all()).unwrap_err();
        assert!(e.contains("unknown cipher \"ECDHE-RSA-AES128-SHA256\""), "{e}");
        assert!(select("!ALL", &all()).unwrap_err().contains("selects no cipher suite"));
    }
}
