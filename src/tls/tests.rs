//! The session against rustls's own client, in memory; the configuration's error lines.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use super::*;

struct Files {
    dir: PathBuf,
    cert_der: CertificateDer<'static>,
}

fn files(name: &str) -> Files {
    let dir = std::env::temp_dir().join(format!("ringloop-tls-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    std::fs::write(dir.join("other.pem"), other.serialize_pem()).unwrap();
    Files { dir, cert_der: cert.der().clone() }
}

fn options(f: &Files) -> Options {
    Options {
        certfile: f.dir.join("cert.pem"),
        keyfile: f.dir.join("key.pem"),
        password: None,
        ca_certs: None,
        client_auth: ClientAuth::None,
        ciphers: None,
        crls: Vec::new(),
        min_version: None,
        alpn: vec![b"http/1.1".to_vec()],
        ticket_secret: None,
    }
}

fn client(f: &Files, alpn: &[&[u8]]) -> ClientConnection {
    let mut roots = RootCertStore::empty();
    roots.add(f.cert_der.clone()).unwrap();
    let mut cfg = ClientConfig::builder_with_provider(Arc::new(config::provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    ClientConnection::new(Arc::new(cfg), ServerName::try_from("localhost").unwrap()).unwrap()
}

/// Run the handshake; returns the server's plaintext seen on the way (none expected).
fn handshake(c: &mut ClientConnection, s: &mut Session) -> Result<(), TlsError> {
    let mut plain = Vec::new();
    for _ in 0..10 {
        let mut wire = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut wire).unwrap();
        }
        let mut out = Vec::new();
        s.feed(&mut &wire[..], wire.len(), &mut plain, &mut out)?;
        let mut rd = &out[..];
        while !rd.is_empty() {
            c.read_tls(&mut rd).unwrap();
            c.process_new_packets().map_err(|e| TlsError(format!("client: {e}")))?;
        }
        if !c.is_handshaking() && !s.is_handshaking() {
            assert!(plain.is_empty());
            return Ok(());
        }
    }
    panic!("handshake did not finish");
}

#[test]
fn handshake_data_both_ways_and_session_info() {
    let f = files("roundtrip");
    let cfg = build(&options(&f)).unwrap();
    let mut s = Session::new(&cfg.rustls);
    let mut c = client(&f, &[b"h2", b"http/1.1"]);
    handshake(&mut c, &mut s).unwrap();
    assert_eq!(s.alpn(), Some(&b"http/1.1"[..]));
    assert_eq!(s.version(), Some((0x0304, "TLSv1_3")));
    // The server's preference (AES-128-GCM), though rustls's client lists AES-256 first.
    assert_eq!(s.cipher_suite().unwrap().1, "TLS13_AES_128_GCM_SHA256");
    assert_eq!(s.version_name(), Some("TLSv1.3"));
    assert_eq!(s.cipher_openssl(), Some(("TLS_AES_128_GCM_SHA256".to_string(), 128)));
    assert!(s.peer_certificates().is_none());
    // A request in, split at every byte boundary the client's record allows.
    c.writer().write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut wire = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut wire).unwrap();
    }
    let (mut plain, mut out) = (Vec::new(), Vec::new());
    for b in wire.chunks(3) {
        s.feed(&mut &b[..], b.len(), &mut plain, &mut out).unwrap();
    }
    assert_eq!(plain, b"GET / HTTP/1.1\r\n\r\n");
    // A response out.
    let mut records = Vec::new();
    s.encrypt(b"HTTP/1.1 200 OK\r\n\r\n", &mut records);
    s.close(&mut records);
    let mut rd = &records[..];
    while !rd.is_empty() {
        c.read_tls(&mut rd).unwrap();
    }
    let state = c.process_new_packets().unwrap();
    assert!(state.peer_has_closed());
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut c.reader(), &mut got);
    assert_eq!(got, b"HTTP/1.1 200 OK\r\n\r\n");
}

#[test]
fn plain_http_and_garbage_fail_with_an_alert_or_nothing() {
    let f = files("garbage");
    let cfg = build(&options(&f)).unwrap();
    for input in [&b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"[..], &[0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5][..]] {
        let mut s = Session::new(&cfg.rustls);
        let (mut plain, mut out) = (Vec::new(), Vec::new());
        let err = s.feed(&mut &input[..], input.len(), &mut plain, &mut out).unwrap_err();
        assert!(!err.0.is_empty());
        assert!(plain.is_empty());
        // An alert record goes back where rustls can frame one; for bytes that are not TLS
        // records at all it says nothing and the connection is closed.
        assert!(out.is_empty() || out[0] == 0x15, "only an alert goes back: {out:?}");
        assert!(s.feed(&mut &b"more"[..], 4, &mut plain, &mut out).is_err());
    }
}

#[test]
fn a_client_without_alpn_overlap_is_refused() {
    let f = files("alpn");
    let cfg = build(&options(&f)).unwrap();
    let mut s = Session::new(&cfg.rustls);
    let mut c = client(&f, &[b"h2"]);
    assert!(handshake(&mut c, &mut s).is_err());
}

#[test]
fn required_client_certificates_are_required() {
    let f = files("mtls");
    let mut o = options(&f);
    o.ca_certs = Some(f.dir.join("cert.pem"));
    o.client_auth = ClientAuth::Required;
    let cfg = build(&o).unwrap();
    let mut s = Session::new(&cfg.rustls);
    let mut c = client(&f, &[]);
    let e = handshake(&mut c, &mut s).unwrap_err();
    assert!(e.0.contains("certificate"), "{e}");
}

#[test]
fn configuration_errors_are_one_line_naming_the_file() {
    let f = files("errors");
    let check = |o: Options, want: &str| {
        let Err(e) = build(&o) else { panic!("{want}: built") };
        assert!(e.0.contains(want), "{e} lacks {want:?}");
        assert!(!e.0.contains('\n'), "{e}");
    };
    let mut o = options(&f);
    o.keyfile = f.dir.join("missing.pem");
    check(o, "missing.pem: cannot read");
    let mut o = options(&f);
    o.keyfile = f.dir.join("cert.pem");
    check(o, "cert.pem: no private key in it");
    let mut o = options(&f);
    o.certfile = f.dir.join("key.pem");
    check(o, "key.pem: no certificate in it");
    let mut o = options(&f);
    o.keyfile = f.dir.join("other.pem");
    check(o, "other.pem: the key does not match the certificate");
    let mut o = options(&f);
    o.client_auth = ClientAuth::Required;
    check(o, "needs --ssl-ca-certs");
    let mut o = options(&f);
    o.ciphers = Some("RC4-SHA".into());
    check(o, "--ssl-ciphers: unknown cipher \"RC4-SHA\"");
    let mut o = options(&f);
    o.min_version = Some("tls1.1".into());
    check(o, "--ssl-protocol-min");
    let enc = f.dir.join("enc.pem");
    std::fs::write(&enc, "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n").unwrap();
    let mut o = options(&f);
    o.keyfile = enc;
    check(o, "is encrypted and no --ssl-keyfile-password was given");
}

#[test]
fn min_version_tls13_turns_tls12_off() {
    let f = files("min");
    let mut o = options(&f);
    o.min_version = Some("tls1.3".into());
    let cfg = build(&o).unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(f.cert_der.clone()).unwrap();
    let tls12_only = ClientConfig::builder_with_provider(Arc::new(config::provider()))
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut c = ClientConnection::new(Arc::new(tls12_only), ServerName::try_from("localhost").unwrap()).unwrap();
    assert!(handshake(&mut c, &mut Session::new(&cfg.rustls)).is_err());
    let mut c = client(&f, &[]);
    handshake(&mut c, &mut Session::new(&build(&options(&f)).unwrap().rustls)).unwrap();
    o.ciphers = Some("ECDHE-ECDSA-AES128-GCM-SHA256".into());
    assert!(build(&o).unwrap_err().0.contains("no cipher suite left"));
}
