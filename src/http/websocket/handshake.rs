//! The opening handshake on the connection, for ASGI and native sessions alike: judging the
//! upgrade request (`check`, which answers a refused one), answering with HTTP instead
//! (`refuse`), and the 101 that switches the connection to the session (`switch`, then
//! `accepted`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::{Phase, WsState};
use crate::http::conn::HttpConn;
use crate::http::conn::cycle::{self, current, Cycle};
use crate::http::request::HeadCopy;
use crate::http::proto::ws;
use crate::reactor::sys::monotonic_ns;

/// Judge the upgrade request of cycle `id` (the cycle is in place): the offers, or `None`
/// when it was refused (400, or 426 with the version we speak) and answered.
pub(crate) fn check(conn: &Bound<'_, HttpConn>, head: &HeadCopy, id: u64) -> PyResult<Option<ws::Upgrade>> {
    let py = conn.py();
    let checked = {
        let method = head.method.bind(py).to_str()?.as_bytes().to_vec();
        let version: &[u8] = if head.http_version(py).bind(py).to_str()? == "1.1" { b"HTTP/1.1" } else { b"HTTP/1.0" };
        let fields: Vec<(&[u8], &[u8])> = head.headers.iter().map(|f| (f.name.bind(py).as_bytes(), f.value.bind(py).as_bytes())).collect();
        ws::check(&method, version, fields)
    };
    match checked {
        Ok(u) => Ok(Some(u)),
        Err(e) => {
            if let Some(debug) = &conn.get().server.get().log_debug {
                let client = conn.get().st.borrow(py)?.client.clone_ref(py);
                debug.call1(py, (format!("WebSocket upgrade refused with {}: {}", e.status(), e.rule()), client))?;
            }
            let body = format!("Invalid WebSocket upgrade request: {e}\n");
            refuse(conn, id, e.status(), e.header(), body.as_bytes())?;
            Ok(None)
        }
    }
}

/// An HTTP answer to the upgrade request with `body` (a refused handshake, a close before the
/// accept): written whole, and the connection goes on as HTTP/1.1.
pub(crate) fn refuse(conn: &Bound<'_, HttpConn>, id: u64, status: u16, header: Option<(&[u8], &[u8])>, body: &[u8]) -> PyResult<()> {
    let py = conn.py();
    conn.get().st.borrow_mut(py)?.ws = None;
    let written = conn.get().write_stamped(py, |st, stamp| {
        let st = &mut *st;
        let Some(c) = current(st, id) else { return Ok(false) };
        (c.start_seen, c.started, c.status) = (true, true, status);
        c.sent = body.len() as u64;
        let mut r = st.h1.response(&mut st.out, status)?;
        if let Some((n, v)) = header {
            r.header(n, v)?;
        }
        if !body.is_empty() {
            r.header(b"content-type", b"text/plain; charset=utf-8")?;
        }
        r.end(Some(body.len() as u64), stamp)?;
        st.h1.write_body(&mut st.out, body)?;
        Ok(true)
    })?;
    if written {
        cycle::end(conn, id)?;
    }
    Ok(())
}

/// The 101 (the subprotocol chosen, permessage-deflate if agreed, the application's fields),
/// and the session opens on the bytes that followed the request. `false`: no session in its
/// handshake for cycle `id` (nothing written).
pub(crate) fn switch(conn: &Bound<'_, HttpConn>, id: u64, subprotocol: Option<&str>, fields: &[(Bound<'_, PyBytes>, Bound<'_, PyBytes>)]) -> PyResult<bool> {
    let py = conn.py();
    let this = conn.get();
    let settings = this.server.get().ws.as_ref().expect("a WebSocket session exists only with WebSocket on");
    if subprotocol.is_some_and(|p| p.is_empty() || p.bytes().any(|b| b <= b' ' || b == b',' || b >= 0x7f)) {
        return Err(PyValueError::new_err(format!("the subprotocol is not a token: {subprotocol:?}")));
    }
    this.write_stamped(py, |st, stamp| {
        let st = &mut *st;
        let Some(w) = st.ws.as_deref_mut().filter(|w| w.cycle == id) else { return Ok(false) };
        let Phase::Handshake(up) = &w.phase else { return Ok(false) };
        let deflate = settings.deflate.as_ref().and_then(|cfg| up.negotiate_deflate(cfg));
        let mut r = st.h1.response(&mut st.out, 101)?;
        for (n, v) in up.response_headers(subprotocol.map(str::as_bytes), deflate.as_ref().map(|d| d.1.as_slice())) {
            r.header(n, v)?;
        }
        for (n, v) in fields {
            r.header(n.as_bytes(), v.as_bytes())?;
        }
        r.end(None, stamp)?;
        st.h1.end_response(&mut st.out)?;
        let rest = st.h1.take_upgraded();
        let mut c = ws::Conn::new(settings.config.clone(), deflate.map(|d| d.0));
        c.feed(&rest);
        w.phase = Phase::Open(Box::new(c));
        if let Some(c) = current(st, id) {
            (c.start_seen, c.started, c.status) = (true, true, 101);
        }
        st.since = monotonic_ns();
        Ok(true)
    })
}

/// After the 101: the access log line, the request counted, and close 1001 at once if the
/// server is shutting down.
pub(crate) fn accepted(conn: &Bound<'_, HttpConn>, id: u64) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    let server = this.server.get();
    if let Some(log) = &server.access_log {
        let entry = {
            let mut st = this.st.borrow_mut(py)?;
            current(&mut st, id).map(|c: &mut Cycle| {
                let seconds = monotonic_ns().saturating_sub(c.begun) as f64 / 1e9;
                (c.method.clone_ref(py), c.path.clone_ref(py), c.query.clone_ref(py), c.version.clone_ref(py), seconds)
            })
        };
        if let Some((method, path, query, version, seconds)) = entry {
            let client = this.st.borrow(py)?.client.clone_ref(py);
            log.call1(py, (client, method, path, query, version, 101, 0, seconds))?;
        }
    }
    if server.count_request() {
        if let Some(cb) = &server.on_max_requests {
            cb.call0(py)?;
        }
    }
    if server.shutting_down.load(std::sync::atomic::Ordering::Relaxed) {
        let mut st = this.st.borrow_mut(py)?;
        let st = &mut *st;
        if let Some(w) = st.ws.as_deref_mut() {
            w.close(&mut st.out, ws::code::GOING_AWAY, "");
        }
    }
    Ok(())
}

/// A session in its handshake for cycle `id`, made after `check`.
pub(crate) fn begin(conn: &Bound<'_, HttpConn>, id: u64, upgrade: ws::Upgrade) -> PyResult<()> {
    conn.get().st.borrow_mut(conn.py())?.ws = Some(Box::new(WsState::new(id, upgrade)));
    Ok(())
}
