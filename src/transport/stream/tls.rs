//! TLS in the native stream transport: ciphertext from the read path goes through the
//! connection's `tls::Session`, plaintext goes on to the protocol; the protocol's writes are
//! encrypted before they join the write buffer (so they still leave in one coalesced
//! `sendmsg`). The protocol above never sees a byte of ciphertext.
//!
//! - `TlsConfig` (Python: `_core.TlsConfig`) is the server's configuration, built once from the
//!   command line's files; passed as `ssl=` to `loop.create_server`, it makes every accepted
//!   transport call `enable_tls` before its first read.
//! - Handshake flights, alerts and close_notify go out through the same write buffer as
//!   application data, in the order the session produced them.
//! - A session error (plain HTTP on the TLS port, garbage for a ClientHello, a client
//!   certificate that is missing or fails verification) sends rustls's alert and calls the
//!   transport's `_tls_failed(reason)`, which logs it at debug and closes that connection.
//! - The read side's pending inbox keeps ciphertext (it is replayed through `receive_tls`), so
//!   pausing and resuming keep the read-order invariant unchanged.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use super::{Received, Sink, StreamIO};
use crate::reactor::RingRead;
use crate::tls::{self, ClientAuth, Options, Session};

/// The server's TLS configuration (see the module docs).
#[pyclass(module = "ringloop._core", frozen)]
pub struct TlsConfig {
    cfg: Arc<rustls::ServerConfig>,
    /// The server certificate in PEM, for the ASGI `tls` extension (made once).
    server_cert: Py<PyAny>,
}

#[pymethods]
impl TlsConfig {
    /// Build from the flags; a problem is a `ValueError` of one line naming the flag, the file
    /// and the problem.
    #[new]
    #[pyo3(signature = (certfile, keyfile, password=None, ca_certs=None, cert_reqs=0, ciphers=None, crls=Vec::new(), min_version=None, alpn=vec!["http/1.1".to_string()], ticket_secret=None))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        certfile: PathBuf,
        keyfile: PathBuf,
        password: Option<String>,
        ca_certs: Option<PathBuf>,
        cert_reqs: i64,
        ciphers: Option<String>,
        crls: Vec<PathBuf>,
        min_version: Option<String>,
        alpn: Vec<String>,
        ticket_secret: Option<Vec<u8>>,
    ) -> PyResult<Self> {
        let client_auth = ClientAuth::from_int(cert_reqs).map_err(PyValueError::new_err)?;
        let opts = Options {
            certfile,
            keyfile,
            password,
            ca_certs,
            client_auth,
            ciphers,
            crls,
            min_version,
            alpn: alpn.into_iter().map(String::into_bytes).collect(),
            ticket_secret,
        };
        let built = py.detach(|| tls::build(&opts)).map_err(|e| PyValueError::new_err(e.0))?;
        let server_cert = pyo3::types::PyString::new(py, &tls::pem(&built.server_cert)).into_any().unbind();
        Ok(TlsConfig { cfg: built.rustls, server_cert })
    }
}

/// The largest records buffer a connection keeps between writes: a few records' worth.
const KEEP_RECORDS: usize = 64 * 1024;

/// A connection's TLS: the session and three buffers kept for their capacity.
pub(super) struct TlsState {
    session: Session,
    server_cert: Py<PyAny>,
    /// The WSGI environ's TLS keys, made on the first request after the handshake (they do
    /// not change for the connection's life).
    environ: Option<Py<PyDict>>,
    plain: Vec<u8>,
    out: Vec<u8>,
    /// What `encrypt` writes the protocol's records into (not `out`: a response written
    /// while a read's output is taken would find it empty).
    records: Vec<u8>,
}

/// Ciphertext as it arrived: a slice, or a read still in the loop's ring buffers (copied
/// straight into rustls's buffer).
pub(super) enum Cipher<'a> {
    Slice(&'a [u8]),
    Ring(RingRead),
}

/// What one `decrypt` produced: plaintext for the protocol, records to send, whether the
/// session failed, and whether these records held the peer's close_notify.
pub(super) struct Fed {
    plain: Vec<u8>,
    out: Vec<u8>,
    res: Result<(), tls::TlsError>,
    peer_closed_now: bool,
}

struct RingReader<'a>(&'a mut RingRead);

impl Read for RingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Ok(self.0.copy_to(buf))
    }
}

impl StreamIO {
    /// Whether this connection runs TLS: a caller that writes to the socket itself (the
    /// static files' `sendfile`) must not when it does, or the bytes would go out in the clear.
    pub fn tls_on(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.st.borrow(py)?.tls.is_some())
    }

    /// Whether the TLS session agreed on ALPN `proto` (the HTTP connection picks its protocol
    /// by it). `false` without TLS, before the handshake, or when the client offered no ALPN.
    pub fn alpn_is(&self, py: Python<'_>, proto: &[u8]) -> PyResult<bool> {
        Ok(self.st.borrow(py)?.tls.as_ref().and_then(|t| t.session.alpn()).is_some_and(|a| a == proto))
    }

    /// Decrypt `data`; send what the session has to say; hand the plaintext to the protocol
    /// (by `sink`'s kind). On a session error, `_tls_failed` closes the connection and nothing
    /// reaches the protocol.
    pub(super) fn receive_tls(slf: &Bound<'_, Self>, sink: &Sink, data: Cipher<'_>) -> PyResult<()> {
        let fed = slf.get().decrypt(slf.py(), data)?;
        Self::after_decrypt(slf, sink, fed)
    }

    /// The session's half of `receive_tls`: runs no Python code, so it may be called while
    /// the thread's scratch buffer is held.
    pub(super) fn decrypt(&self, py: Python<'_>, data: Cipher<'_>) -> PyResult<Option<Fed>> {
        let mut st = self.st.borrow_mut(py)?;
        let Some(t) = st.tls.as_deref_mut() else { return Ok(None) };
        let (mut plain, mut out) = (std::mem::take(&mut t.plain), std::mem::take(&mut t.out));
        let was_closed = t.session.peer_closed();
        let res = match data {
            Cipher::Slice(mut s) => {
                let n = s.len();
                t.session.feed(&mut s, n, &mut plain, &mut out)
            }
            Cipher::Ring(mut r) => {
                let n = r.len();
                t.session.feed(&mut RingReader(&mut r), n, &mut plain, &mut out)
            }
        };
        let peer_closed_now = !was_closed && t.session.peer_closed();
        Ok(Some(Fed { plain, out, res, peer_closed_now }))
    }

    /// The rest of `receive_tls`: send, then deliver (or fail the connection).
    pub(super) fn after_decrypt(slf: &Bound<'_, Self>, sink: &Sink, fed: Option<Fed>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let Some(Fed { plain, out, res, peer_closed_now }) = fed else { return Ok(()) };
        if !out.is_empty() {
            Self::send_raw(slf, &out)?;
        }
        match res {
            Err(e) => {
                if let Some(t) = this.transport(py)? {
                    t.call_method1(py, intern!(py, "_tls_failed"), (e.0,))?;
                }
            }
            Ok(()) if !plain.is_empty() => this.deliver_plain(py, sink, &plain)?,
            Ok(()) => {}
        }
        Self::give_back(slf, plain, out)?;
        // The peer's close_notify ends the connection as in asyncio's SSL transport (an asyncio
        // client keeps its socket open until it hears ours, so no TCP EOF would follow). Not for
        // a native protocol: the HTTP connection ends on the TCP EOF the clients it serves send
        // next, so a response still being written is not cut off.
        if peer_closed_now && !matches!(sink, Sink::Native(_)) {
            if let Some(t) = this.transport(py)? {
                t.call_method0(py, intern!(py, "_tls_peer_closed"))?;
            }
        }
        Ok(())
    }

    /// Put the buffers back (emptied) so their capacity serves the next read.
    fn give_back(slf: &Bound<'_, Self>, mut plain: Vec<u8>, mut out: Vec<u8>) -> PyResult<()> {
        let mut st = slf.get().st.borrow_mut(slf.py())?;
        if let Some(t) = st.tls.as_deref_mut() {
            plain.clear();
            out.clear();
            t.plain = plain;
            t.out = out;
        }
        Ok(())
    }

    fn deliver_plain(&self, py: Python<'_>, sink: &Sink, plain: &[u8]) -> PyResult<()> {
        match sink {
            Sink::None => Ok(()),
            Sink::Native(n) => self.to_native(py, n, Received::Slice(plain)),
            Sink::Data(cb) => self.to_data_received(py, cb, &PyBytes::new(py, plain)),
            // `_make_ssl_transport` never gives a BufferedProtocol native TLS.
            Sink::Buffered { .. } => Ok(()),
        }
    }

    /// Encrypt `payload` for sending; `None` when this transport has no TLS. The records come
    /// in the connection's kept buffer: hand it back with `give_back_records` once sent.
    pub(super) fn encrypt(&self, py: Python<'_>, payload: &[u8]) -> PyResult<Option<Vec<u8>>> {
        let mut st = self.st.borrow_mut(py)?;
        let Some(t) = st.tls.as_deref_mut() else { return Ok(None) };
        let mut out = std::mem::take(&mut t.records);
        t.session.encrypt(payload, &mut out);
        Ok(Some(out))
    }

    /// Keep an emptied records buffer's capacity for the next write, unless a large
    /// body made it large (an idle connection should not hold it).
    pub(super) fn give_back_records(&self, py: Python<'_>, mut out: Vec<u8>) -> PyResult<()> {
        let mut st = self.st.borrow_mut(py)?;
        if let Some(t) = st.tls.as_deref_mut() {
            if t.records.capacity() < out.capacity() && out.capacity() <= KEEP_RECORDS {
                out.clear();
                t.records = out;
            }
        }
        Ok(())
    }
}

#[pymethods]
impl StreamIO {
    /// Serve this connection with TLS (before its first read).
    fn enable_tls(&self, py: Python<'_>, config: &Bound<'_, TlsConfig>) -> PyResult<()> {
        let c = config.get();
        let state = TlsState { session: Session::new(&c.cfg), server_cert: c.server_cert.clone_ref(py), environ: None, plain: Vec::new(), out: Vec::new(), records: Vec::new() };
        self.st.borrow_mut(py)?.tls = Some(Box::new(state));
        Ok(())
    }

    /// The handshake has not finished yet.
    #[getter]
    fn tls_handshaking(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.st.borrow(py)?.tls.as_ref().is_some_and(|t| t.session.is_handshaking()))
    }

    /// Send close_notify (the transport is closing).
    fn tls_close(slf: &Bound<'_, Self>) -> PyResult<()> {
        let out = {
            let mut st = slf.get().st.borrow_mut(slf.py())?;
            let Some(t) = st.tls.as_deref_mut() else { return Ok(()) };
            if t.session.is_handshaking() {
                return Ok(());
            }
            let mut out = Vec::new();
            t.session.close(&mut out);
            out
        };
        if out.is_empty() {
            return Ok(());
        }
        Self::send_raw(slf, &out)
    }

    /// What the ASGI `tls` extension carries (`None` without TLS or before the handshake).
    pub fn tls_extension<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let st = self.st.borrow(py)?;
        let Some(t) = st.tls.as_deref() else { return Ok(None) };
        let s = &t.session;
        let d = PyDict::new(py);
        d.set_item(intern!(py, "server_cert"), t.server_cert.bind(py))?;
        let chain = PyList::empty(py);
        for c in s.peer_certificates().unwrap_or_default() {
            chain.append(tls::pem(c))?;
        }
        d.set_item(intern!(py, "client_cert_chain"), chain)?;
        d.set_item(intern!(py, "client_cert_name"), s.peer_certificates().and_then(|c| c.first()).and_then(|c| tls::subject_name(c)))?;
        // rustls ends the handshake when verification fails: a live connection's client
        // certificate, if any, verified.
        d.set_item(intern!(py, "client_cert_error"), py.None())?;
        d.set_item(intern!(py, "tls_version"), s.version().map(|v| v.0))?;
        d.set_item(intern!(py, "cipher_suite"), s.cipher_suite().map(|c| c.0))?;
        Ok(Some(d))
    }

    /// Session details for `get_extra_info` (`ringloop._streams.TlsObject`): `None` without
    /// TLS, else `(version "TLSv1.3", (cipher OpenSSL name, bits), alpn, [client cert DER…],
    /// server name)`, each part `None` (or empty) until the handshake decided it.
    fn tls_info<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let st = self.st.borrow(py)?;
        let Some(t) = st.tls.as_deref() else { return Ok(None) };
        let s = &t.session;
        let certs: Vec<Bound<'py, PyBytes>> = s.peer_certificates().unwrap_or_default().iter().map(|c| PyBytes::new(py, c)).collect();
        let alpn = s.alpn().map(|a| String::from_utf8_lossy(a).into_owned());
        let v = (s.version_name(), s.cipher_openssl(), alpn, certs, s.server_name().map(str::to_owned));
        Ok(Some(v.into_pyobject(py)?.into_any()))
    }
}

impl StreamIO {
    /// Add this connection's TLS keys to a WSGI environ (mod_ssl's names, which WSGI
    /// middleware reads): `HTTPS`, `SSL_PROTOCOL`, `SSL_CIPHER`, `SSL_CIPHER_USEKEYSIZE`,
    /// `SSL_TLS_SNI`, and `SSL_CLIENT_VERIFY` with, when a client certificate was verified,
    /// `SSL_CLIENT_CERT` (PEM), `SSL_CLIENT_S_DN` and `SSL_CLIENT_CERT_CHAIN_n`. Nothing
    /// without TLS.
    pub fn tls_environ(&self, py: Python<'_>, env: &Bound<'_, PyDict>) -> PyResult<()> {
        let mut st = self.st.borrow_mut(py)?;
        let Some(t) = st.tls.as_deref_mut() else { return Ok(()) };
        if t.environ.is_none() {
            t.environ = Some(Self::make_environ(py, &t.session)?.unbind());
        }
        let keys = t.environ.as_ref().map(|e| e.clone_ref(py));
        drop(st);
        match keys {
            Some(k) => env.update(k.bind(py).as_mapping()),
            None => Ok(()),
        }
    }

    fn make_environ<'py>(py: Python<'py>, s: &Session) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("HTTPS", "on")?;
        if let Some(v) = s.version_name() {
            d.set_item("SSL_PROTOCOL", v)?;
        }
        if let Some((name, bits)) = s.cipher_openssl() {
            d.set_item("SSL_CIPHER", name)?;
            d.set_item("SSL_CIPHER_USEKEYSIZE", bits.to_string())?;
        }
        if let Some(sni) = s.server_name() {
            d.set_item("SSL_TLS_SNI", sni)?;
        }
        match s.peer_certificates() {
            // rustls ends the handshake when verification fails: a chain here verified.
            Some(chain) if !chain.is_empty() => {
                d.set_item("SSL_CLIENT_VERIFY", "SUCCESS")?;
                d.set_item("SSL_CLIENT_CERT", tls::pem(&chain[0]))?;
                if let Some(dn) = tls::subject_name(&chain[0]) {
                    d.set_item("SSL_CLIENT_S_DN", dn)?;
                }
                for (i, c) in chain[1..].iter().enumerate() {
                    d.set_item(format!("SSL_CLIENT_CERT_CHAIN_{i}"), tls::pem(c))?;
                }
            }
            _ => d.set_item("SSL_CLIENT_VERIFY", "NONE")?,
        }
        Ok(d)
    }
}
