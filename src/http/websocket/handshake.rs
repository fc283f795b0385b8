//! The opening handshake over a stream, for ASGI and native sessions alike: judging the
//! upgrade request (`check`, which answers a refused one), answering with HTTP instead
//! (`refuse`: a response on the stream like any other), and the acceptance that switches the
//! stream to the session (`switch`, then `accepted`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use super::{Phase, Session, WsState};
use crate::http::proto::ws;
use crate::http::request::HeadCopy;

/// Judge the upgrade request of stream `s.id` (open already): the offers, or `None` when it
/// was refused (400, or 426 with the version we speak) and answered.
pub(crate) fn check(s: Session<'_, '_>, head: &HeadCopy) -> PyResult<Option<ws::Upgrade>> {
    let py = s.py();
    let checked = {
        let method = head.method.bind(py).to_str()?.as_bytes().to_vec();
        let fields: Vec<(&[u8], &[u8])> = head.headers.iter().map(|f| (f.name.bind(py).as_bytes(), f.value.bind(py).as_bytes())).collect();
        match head.http_version(py).bind(py).to_str()? {
            // RFC 8441: an extended CONNECT on an HTTP/2 stream (`:protocol websocket`).
            "2" => ws::check_extended_connect(&method, fields),
            "1.1" => ws::check(&method, b"HTTP/1.1", fields),
            _ => ws::check(&method, b"HTTP/1.0", fields),
        }
    };
    match checked {
        Ok(u) => Ok(Some(u)),
        Err(e) => {
            if let Some(debug) = &s.server().log_debug {
                let mut client = None;
                s.sink().peer(s.conn, &mut |p| {
                    client = Some(p.client.clone_ref(py));
                    Ok(())
                })?;
                debug.call1(py, (format!("WebSocket upgrade refused with {}: {}", e.status(), e.rule()), client))?;
            }
            let body = format!("Invalid WebSocket upgrade request: {e}\n");
            refuse(s, e.status(), e.header(), body.as_bytes())?;
            Ok(None)
        }
    }
}

/// An HTTP answer to the upgrade request with `body` (a refused handshake, a close before the
/// accept): the session is dropped and the stream answered as any request is (its `Sink`),
/// whole; over HTTP/1.1 the connection goes on as such.
pub(crate) fn refuse(s: Session<'_, '_>, status: u16, header: Option<(&[u8], &[u8])>, body: &[u8]) -> PyResult<()> {
    let py = s.py();
    s.with(|p| *p.ws = None)?;
    let fields = PyList::empty(py);
    if let Some((n, v)) = header {
        fields.append(PyTuple::new(py, [PyBytes::new(py, n), PyBytes::new(py, v)])?)?;
    }
    if !body.is_empty() {
        fields.append(PyTuple::new(py, [PyBytes::new(py, b"content-type"), PyBytes::new(py, b"text/plain; charset=utf-8")])?)?;
    }
    let sink = s.sink();
    sink.start(s.conn, s.id, status, Some(fields.into_any().unbind()))?;
    sink.body(s.conn, s.id, &PyBytes::new(py, body), false)
}

/// The acceptance (the subprotocol chosen, permessage-deflate if agreed, the application's
/// fields), and the session opens on the bytes that followed the request. `false`: no session
/// in its handshake for the stream (nothing written).
pub(crate) fn switch(s: Session<'_, '_>, subprotocol: Option<&str>, fields: &[(Bound<'_, PyBytes>, Bound<'_, PyBytes>)]) -> PyResult<bool> {
    let settings = s.server().ws.as_ref().expect("a WebSocket session exists only with WebSocket on");
    if subprotocol.is_some_and(|p| p.is_empty() || p.bytes().any(|b| b <= b' ' || b == b',' || b >= 0x7f)) {
        return Err(PyValueError::new_err(format!("the subprotocol is not a token: {subprotocol:?}")));
    }
    // The offers, copied out of the session: the channel writes the head under its own borrow.
    let upgrade = s.with(|p| match p.ws.as_deref().filter(|w| w.stream == s.id).map(|w| &w.phase) {
        Some(Phase::Handshake(up)) => Some(up.clone()),
        _ => None,
    })?;
    let Some(up) = upgrade else { return Ok(false) };
    let deflate = settings.deflate.as_ref().and_then(|cfg| up.negotiate_deflate(cfg));
    let mut head: Vec<(&[u8], &[u8])> = up.response_headers(subprotocol.map(str::as_bytes), deflate.as_ref().map(|d| d.1.as_slice())).collect();
    head.extend(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
    let Some(rest) = s.ch.switch(s.conn, s.id, &head)? else { return Ok(false) };
    let mut c = ws::Conn::new(settings.config.clone(), deflate.map(|d| d.0));
    c.feed(&rest);
    s.with(|p| {
        if let Some(w) = p.ws.as_deref_mut().filter(|w| w.stream == s.id) {
            w.phase = Phase::Open(Box::new(c));
        }
    })?;
    Ok(true)
}

/// After the acceptance: its access-log line, the request counted, and close 1001 at once if
/// the server is shutting down.
pub(crate) fn accepted(s: Session<'_, '_>) -> PyResult<()> {
    s.ch.accepted(s.conn, s.id)?;
    if s.server().shutting_down.load(std::sync::atomic::Ordering::Relaxed) {
        s.with(|p| {
            if let Some(w) = p.ws.as_deref_mut() {
                w.close(p.out, ws::code::GOING_AWAY, "");
            }
        })?;
    }
    Ok(())
}

/// A session in its handshake for the stream, made after `check`.
pub(crate) fn begin(s: Session<'_, '_>, upgrade: ws::Upgrade) -> PyResult<()> {
    s.ch.begin(s.conn, s.id, Box::new(WsState::new(s.id, upgrade)))
}
