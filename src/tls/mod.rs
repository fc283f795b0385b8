//! TLS for the server, sans-I/O: rustls's buffered `ServerConnection` behind ciphertext in,
//! plaintext out. No sockets, no rings, no Python (the transport in `transport::stream::tls`
//! drives it), so it is unit-tested and fuzzed on its own.
//!
//! The contract of a `Session`:
//! - `feed` takes every ciphertext byte the peer sent, in order, and appends the plaintext
//!   they decrypt to (possibly none: a handshake flight, a ticket) to `plain`;
//! - whatever the session has to send (handshake flights, alerts, encrypted application data,
//!   close_notify) is appended to `out` by the call that produced it: the caller sends `out`,
//!   in order, after every call;
//! - a `feed` error is fatal: the alert that tells the peer why is already in `out`; the
//!   caller sends it and closes the connection. Nothing fed after an error is looked at.
//! - `encrypt` before the handshake finished is held by rustls and comes out (in `out`) with
//!   the flight that completes it.
//!
//! `config` builds rustls's configuration from the command line's PEM files; `keys` reads
//! them; `error` is the one-line error both make; `ciphers` maps OpenSSL cipher names onto rustls's suites; `tickets` seals session
//! tickets with keys every worker of one server derives from a shared secret.

pub mod ciphers;
pub mod config;
pub mod error;
pub mod keys;
pub mod tickets;

use std::io::{BufRead, Read, Write};
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::{ServerConfig, ServerConnection};

pub use config::{build, ClientAuth, Config, Options};
pub use error::ConfigError;

/// Why a session ended badly: for the debug log line, and the fuzz target.
#[derive(Debug)]
pub struct TlsError(pub String);

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One connection's TLS state (see the module docs).
pub struct Session {
    conn: ServerConnection,
    /// The peer sent close_notify: nothing more will be decrypted.
    peer_closed: bool,
    failed: bool,
}

impl Session {
    pub fn new(config: &Arc<ServerConfig>) -> Session {
        // `ServerConnection::new` fails only for a configuration that asks for something this
        // build cannot do (QUIC-only settings), which `config::build` never makes.
        let mut conn = ServerConnection::new(config.clone()).expect("a ServerConfig from config::build");
        // rustls holds at most 64 KiB of unsent records by default and then takes a write
        // only in part; the transport does the flow control (its write buffer and water
        // marks), so the session takes every write whole.
        conn.set_buffer_limit(None);
        Session { conn, peer_closed: false, failed: false }
    }

    /// Take the `len` ciphertext bytes `src` holds (see the module docs). `src` is never
    /// read past them: a read of 0 would tell rustls the peer's stream ended.
    pub fn feed(&mut self, src: &mut dyn Read, len: usize, plain: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<(), TlsError> {
        if self.failed {
            return Err(TlsError("fed after an error".into()));
        }
        let mut left = len;
        while left > 0 {
            let n = match self.conn.read_tls(&mut Read::take(&mut *src, left as u64)) {
                Ok(0) => return Ok(()), // cannot happen with bytes left; never spin
                Ok(n) => n,
                Err(e) => {
                    // The deframer's buffer is full: a record larger than TLS allows.
                    self.failed = true;
                    return Err(TlsError(format!("reading TLS records: {e}")));
                }
            };
            left -= n;
            let processed = self.conn.process_new_packets();
            self.drain_out(out);
            match processed {
                Ok(state) => {
                    if state.plaintext_bytes_to_read() > 0 {
                        self.drain_plain(plain);
                    }
                    if state.peer_has_closed() {
                        self.peer_closed = true;
                    }
                }
                Err(e) => {
                    self.failed = true;
                    return Err(TlsError(e.to_string()));
                }
            }
        }
        Ok(())
    }

    fn drain_plain(&mut self, plain: &mut Vec<u8>) {
        let mut rd = self.conn.reader();
        loop {
            let n = match rd.fill_buf() {
                Ok([]) | Err(_) => return,
                Ok(chunk) => {
                    plain.extend_from_slice(chunk);
                    chunk.len()
                }
            };
            rd.consume(n);
        }
    }

    fn drain_out(&mut self, out: &mut Vec<u8>) {
        while self.conn.wants_write() {
            // Writing into a Vec cannot fail.
            if self.conn.write_tls(out).is_err() {
                return;
            }
        }
    }

    /// Encrypt `data` as application data, appending the records to `out`.
    pub fn encrypt(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        // With no buffer limit (see `new`) rustls takes everything: `write_all` cannot stop
        // short.
        let _ = self.conn.writer().write_all(data);
        self.drain_out(out);
    }

    /// Send close_notify (once the handshake is done; before it, nothing useful is said).
    pub fn close(&mut self, out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        self.conn.send_close_notify();
        self.drain_out(out);
    }

    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// The ALPN protocol agreed on, if any.
    pub fn alpn(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// The protocol version as its wire number (0x0303, 0x0304) and its name.
    pub fn version(&self) -> Option<(u16, &'static str)> {
        let v = self.conn.protocol_version()?;
        Some((u16::from(v), v.as_str().unwrap_or("TLS")))
    }

    /// The protocol version as OpenSSL names it ("TLSv1.3"), as Python's `ssl` and mod_ssl's
    /// `SSL_PROTOCOL` do.
    pub fn version_name(&self) -> Option<&'static str> {
        Some(match u16::from(self.conn.protocol_version()?) {
            0x0304 => "TLSv1.3",
            0x0303 => "TLSv1.2",
            _ => "TLS",
        })
    }

    /// The negotiated suite as OpenSSL names it, and its key size in bits.
    pub fn cipher_openssl(&self) -> Option<(String, u32)> {
        let s = self.conn.negotiated_cipher_suite()?.suite();
        let name = ciphers::openssl_cipher_name(s);
        let bits = if name.contains("AES128") || name.contains("AES_128") { 128 } else { 256 };
        Some((name, bits))
    }

    /// The negotiated cipher suite as its wire number and its IANA name.
    pub fn cipher_suite(&self) -> Option<(u16, &'static str)> {
        let s = self.conn.negotiated_cipher_suite()?.suite();
        Some((u16::from(s), s.as_str().unwrap_or("")))
    }

    /// The client's certificate chain (its own first), if it sent one that was verified.
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.conn.peer_certificates()
    }

    /// The SNI name the client asked for.
    pub fn server_name(&self) -> Option<&str> {
        self.conn.server_name()
    }
}

/// A certificate's subject as an RFC 4514 distinguished name (`CN=client,O=Example`).
pub fn subject_name(der: &[u8]) -> Option<String> {
    use x509_cert::der::Decode;
    let cert = x509_cert::Certificate::from_der(der).ok()?;
    Some(cert.tbs_certificate.subject.to_string())
}

/// PEM text of a DER certificate (what the ASGI `tls` extension carries).
pub fn pem(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut s = String::with_capacity(b64.len() + b64.len() / 64 + 60);
    s.push_str("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        s.push_str(std::str::from_utf8(line).unwrap_or_default());
        s.push('\n');
    }
    s.push_str("-----END CERTIFICATE-----\n");
    s
}

#[cfg(test)]
mod tests;
