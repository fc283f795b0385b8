//! Arbitrary bytes to the server side of the TLS core (src/tls, included by path): as the
//! first flight of a connection, cut into reads where the input's first byte says. Whatever
//! comes in, `Session::feed` returns (plaintext or an error with its alert), never panics,
//! and never hands out plaintext before a handshake finished.
#![no_main]

#[path = "../../src/tls/mod.rs"]
#[allow(dead_code, unused_imports)] // the server's re-exports the target does not use
mod tls;

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;

fn config() -> &'static Arc<rustls::ServerConfig> {
    static CFG: OnceLock<Arc<rustls::ServerConfig>> = OnceLock::new();
    CFG.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ringloop-fuzz-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap().self_signed(&key).unwrap();
        std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
        let opts = tls::Options {
            certfile: dir.join("cert.pem"),
            keyfile: dir.join("key.pem"),
            password: None,
            ca_certs: None,
            client_auth: tls::ClientAuth::None,
            ciphers: None,
            crls: Vec::new(),
            min_version: None,
            alpn: vec![b"http/1.1".to_vec()],
            ticket_secret: None,
        };
        tls::build(&opts).unwrap().rustls
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else { return };
    let step = usize::from(cut).max(1);
    let mut s = tls::Session::new(config());
    let (mut plain, mut out) = (Vec::new(), Vec::new());
    for chunk in rest.chunks(step) {
        let r = s.feed(&mut &chunk[..], chunk.len(), &mut plain, &mut out);
        assert!(plain.is_empty() || !s.is_handshaking());
        if r.is_err() {
            break;
        }
    }
    s.encrypt(b"HTTP/1.1 200 OK\r\n\r\n", &mut out);
    s.close(&mut out);
});
