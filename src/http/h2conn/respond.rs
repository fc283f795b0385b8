//! A stream's response out: the head (held, as h1 holds it, until the first body or the end
//! of the loop iteration), the body given to the core as far as the windows allow, the rest
//! kept on the stream (`Strm::pending`) with a future its `send()` awaits until `Writable`
//! says the client gave credit; early hints (103) before the head and trailers after the body;
//! the end, counted and logged; the server's own answers.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use bytes::Bytes;

use crate::reactor::sys::monotonic_ns;

use super::H2Conn;
use crate::http::proto::h1::encode::check_field;
use crate::http::proto::h2::{Reason, SendError};
use crate::http::stream::message::{disconnect, header_fields, resolve, ClientDisconnected};

/// The most of a static file read at once for a stream (`pump`): four full frames,
/// `Settings::max_send_buffer`. Here, not in `files.rs`, which calls this room: one direction.
pub(super) const PIECE: u64 = 64 * 1024;

/// The body of the server's own answers (as h1's `write_error` words them).
fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

pub(super) fn send_error(e: SendError) -> PyErr {
    match e {
        SendError::UnknownStream | SendError::StreamClosed => ClientDisconnected::new_err("the client reset the stream"),
        e => PyValueError::new_err(format!("invalid response: {e}")),
    }
}

/// The stamp fields every response gets unless the application set them: `date`, `server`,
/// and `--header`'s.
pub(super) fn stamped(conn: &H2Conn, py: Python<'_>, fields: &mut Vec<(Vec<u8>, Vec<u8>)>) -> PyResult<()> {
    let server = conn.server.get();
    let has = |fields: &[(Vec<u8>, Vec<u8>)], n: &[u8]| fields.iter().any(|(f, _)| f.eq_ignore_ascii_case(n));
    for (n, v) in &server.default_headers {
        if !has(fields, n) {
            fields.push((n.clone(), v.clone()));
        }
    }
    if let Some(s) = &server.server_header {
        if !has(fields, b"server") {
            fields.push((b"server".to_vec(), s.clone()));
        }
    }
    let date = server.with_date(py, |d| d.map(<[u8]>::to_vec))?;
    if let Some(d) = date {
        if !has(fields, b"date") {
            fields.push((b"date".to_vec(), d));
        }
    }
    Ok(())
}

/// The server's own answer on stream `id` (no application, or one that failed before its
/// response started): `status` with a short text body.
pub(super) fn error_answer(conn: &H2Conn, py: Python<'_>, id: u32, status: u16) -> PyResult<()> {
    let body = reason_phrase(status).as_bytes();
    let mut fields = vec![(b"content-type".to_vec(), b"text/plain; charset=utf-8".to_vec()), (b"content-length".to_vec(), body.len().to_string().into_bytes())];
    stamped(conn, py, &mut fields)?;
    let mut st = conn.st.borrow_mut(py)?;
    if st.core.respond(id, status, fields.iter().map(|(n, v)| (&n[..], &v[..])), false).is_ok() {
        // The window always has room for a few bytes at a stream's start; if not, the client
        // gets the head alone and a reset.
        if !matches!(st.core.send_data(id, body, true), Ok(n) if n == body.len()) {
            st.core.reset(id, Reason::INTERNAL_ERROR);
        }
    }
    Ok(())
}

/// Send stream `id`'s response head now, if it is due and not sent (`end`: no body follows).
/// `false`: the stream is over.
pub(super) fn write_head(conn: &Bound<'_, H2Conn>, id: u32, end: bool) -> PyResult<bool> {
    let py = conn.py();
    let this = conn.get();
    let (status, headers) = {
        let st = this.st.borrow(py)?;
        let Some(s) = st.streams.get(&id) else { return Ok(false) };
        if s.reset {
            return Ok(false);
        }
        if s.started {
            return Ok(true);
        }
        (s.status, s.headers.as_ref().map(|h| h.clone_ref(py)))
    };
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = match headers {
        Some(h) => header_fields(h.bind(py))?.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())).collect(),
        None => Vec::new(),
    };
    stamped(this, py, &mut fields)?;
    {
        let mut st = this.st.borrow_mut(py)?;
        st.core.respond(id, status, fields.iter().map(|(n, v)| (&n[..], &v[..])), end).map_err(send_error)?;
        if let Some(s) = st.streams.get_mut(&id) {
            s.started = true;
            s.headers = None;
        }
    }
    if end {
        response_ended(conn, id)?;
    }
    Ok(true)
}

/// The head a stream recorded and has not sent (the end of the iteration sends it).
pub(super) fn heads_due(conn: &H2Conn, py: Python<'_>) -> PyResult<Vec<u32>> {
    let st = conn.st.borrow(py)?;
    Ok(st.streams.iter().filter(|(_, s)| s.start_seen && !s.started && !s.reset).map(|(&id, _)| id).collect())
}

/// `http.response.body` on stream `id` (`more`: not the last).
pub(super) fn write_body(conn: &Bound<'_, H2Conn>, id: u32, body: &[u8], more: bool) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    {
        let mut st = this.st.borrow_mut(py)?;
        let lost = st.lost;
        match st.streams.get_mut(&id) {
            None if lost => return Err(ClientDisconnected::new_err("the client disconnected")),
            None => return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.body' sent, after response already completed.")),
            Some(s) if s.reset || lost => return Err(ClientDisconnected::new_err("the client reset the stream")),
            Some(s) if !s.start_seen => return Err(PyRuntimeError::new_err("Expected ASGI message 'http.response.start', but got 'http.response.body'.")),
            Some(s) if s.body_ended => {
                return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.body' sent, after response already completed."))
            }
            Some(s) => {
                s.sent += body.len() as u64;
                s.body_ended = !more;
            }
        }
    }
    // With trailers to come, the last body does not end the stream.
    let trailers = this.st.borrow(py)?.streams.get(&id).is_some_and(|s| s.expect_trailers);
    let ends = !more && !trailers;
    if !write_head(conn, id, ends && body.is_empty())? {
        return Ok(());
    }
    if body.is_empty() && !ends {
        return H2Conn::queue_flush(conn);
    }
    if !this.st.borrow(py)?.streams.contains_key(&id) {
        return Ok(()); // the head ended it
    }
    send(conn, id, Bytes::copy_from_slice(body), ends)
}

/// `http.response.trailers` on stream `id`: the fields gathered; the last message sends
/// them (after the body has left: `send_trailers`), which ends the stream.
pub(super) fn trailers(conn: &Bound<'_, H2Conn>, id: u32, headers: Option<Py<PyAny>>, more: bool) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    let fields: Vec<(Vec<u8>, Vec<u8>)> = match &headers {
        Some(h) => header_fields(h.bind(py))?.iter().map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec())).collect(),
        None => Vec::new(),
    };
    // Refused now, to the application (as HTTP/1.1 does), not when the last message sends them.
    for (n, v) in &fields {
        check_field(n, v).map_err(|e| PyValueError::new_err(format!("invalid response trailers: {e}")))?;
    }
    let started = {
        let mut st = this.st.borrow_mut(py)?;
        let lost = st.lost;
        let s = match st.streams.get_mut(&id) {
            None if lost => return Err(ClientDisconnected::new_err("the client disconnected")),
            None => return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.trailers' sent, after response already completed.")),
            Some(s) if s.reset || lost => return Err(ClientDisconnected::new_err("the client reset the stream")),
            Some(s) => s,
        };
        if !s.expect_trailers || s.trailers_ready {
            return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.trailers' sent, without 'trailers': True or after the last one."));
        }
        s.trailer_fields.extend(fields);
        if more {
            return Ok(());
        }
        s.trailers_ready = true;
        s.body_ended = true;
        s.started
    };
    if !started && !write_head(conn, id, false)? {
        return Ok(());
    }
    send_trailers(conn, id)?;
    H2Conn::queue_flush(conn)
}

/// `http.response.early_hint` on stream `id`: a 103 HEADERS frame (no END_STREAM) with a
/// `link` field per entry, before the response head.
pub(super) fn early_hint(conn: &Bound<'_, H2Conn>, id: u32, links: &[Vec<u8>]) -> PyResult<()> {
    let py = conn.py();
    {
        let mut st = conn.get().st.borrow_mut(py)?;
        let st = &mut *st;
        let lost = st.lost;
        match st.streams.get(&id) {
            None if lost => return Err(ClientDisconnected::new_err("the client disconnected")),
            None => return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.early_hint' sent, after response already completed.")),
            Some(s) if s.reset || lost => return Err(ClientDisconnected::new_err("the client reset the stream")),
            Some(s) if s.start_seen => {
                return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.early_hint' sent, after response already started."))
            }
            Some(_) => {}
        }
        st.core.informational(id, 103, links.iter().map(|l| (&b"link"[..], &l[..]))).map_err(send_error)?;
    }
    H2Conn::queue_flush(conn)
}

/// Send stream `id`'s trailers if they are ready and its body has left; they end it.
fn send_trailers(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    let py = conn.py();
    let sent = {
        let mut st = conn.get().st.borrow_mut(py)?;
        let st = &mut *st;
        let Some(s) = st.streams.get_mut(&id) else { return Ok(()) };
        if !s.trailers_ready || s.pending.is_some() {
            return Ok(());
        }
        let fields = std::mem::take(&mut s.trailer_fields);
        if s.te_trailers {
            st.core.send_trailers(id, fields.iter().map(|(n, v)| (&n[..], &v[..]))).map_err(send_error)?;
        } else {
            // The client did not ask for trailers (nor were they announced): the end alone.
            st.core.send_data(id, b"", true).map_err(send_error)?;
        }
        true
    };
    if sent {
        response_ended(conn, id)?;
    }
    Ok(())
}

/// Give the core what it takes of `data` (after what already waits); keep the rest.
pub(super) fn send(conn: &Bound<'_, H2Conn>, id: u32, data: Bytes, end: bool) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    let ended = {
        let mut st = this.st.borrow_mut(py)?;
        let st = &mut *st;
        let Some(s) = st.streams.get_mut(&id) else { return Ok(()) };
        if let Some((waiting, _)) = s.pending.take() {
            // Behind what the window has not taken yet: one buffer, in order.
            let mut v = Vec::with_capacity(waiting.len() + data.len());
            v.extend_from_slice(&waiting);
            v.extend_from_slice(&data);
            s.pending = Some((Bytes::from(v), end));
            false
        } else {
            let n = st.core.send_data(id, &data, end).map_err(send_error)?;
            if n < data.len() {
                if let Some(s) = st.streams.get_mut(&id) {
                    s.pending = Some((data.slice(n..), end));
                    s.pending_since = monotonic_ns();
                }
                false
            } else {
                end
            }
        }
    };
    if ended {
        response_ended(conn, id)?;
    }
    H2Conn::queue_flush(conn)
}

/// The client gave stream `id` credit: send more of what waits; once nothing does, the
/// `send()` that waited goes on.
pub(super) fn writable(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    let (ended, drained) = {
        let mut st = this.st.borrow_mut(py)?;
        let st = &mut *st;
        let Some(s) = st.streams.get_mut(&id) else { return Ok(()) };
        let Some((data, end)) = s.pending.take() else { return Ok(()) };
        match st.core.send_data(id, &data, end) {
            Ok(n) if n < data.len() => {
                if let Some(s) = st.streams.get_mut(&id) {
                    s.pending = Some((data.slice(n..), end));
                    // The clock of the send timeout counts from the last byte taken.
                    if n > 0 {
                        s.pending_since = monotonic_ns();
                    }
                }
                (false, None)
            }
            // A static file's piece went: read the next one (below).
            Ok(_) if st.streams.get(&id).is_some_and(|s| s.file.is_some()) => (false, None),
            Ok(_) => (end, st.streams.get_mut(&id).and_then(|s| s.drain.take())),
            // The stream is gone: its `Reset` follows.
            Err(_) => (false, st.streams.get_mut(&id).and_then(|s| s.drain.take())),
        }
    };
    if let Some(d) = drained {
        resolve(d.bind(py), py.None().bind(py))?;
    }
    if ended {
        response_ended(conn, id)?;
    }
    send_trailers(conn, id)?;
    pump(conn, id)
}

/// Send a static file's body on stream `id` (`files.rs`): a piece at a time, the next read
/// once the windows took the last, until the file's bytes are all out or a window closes
/// (`writable` goes on).
pub(super) fn pump(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    loop {
        let ended = {
            let mut st = this.st.borrow_mut(py)?;
            let st = &mut *st;
            let Some(s) = st.streams.get_mut(&id) else { return Ok(()) };
            if s.pending.is_some() {
                return Ok(());
            }
            let Some((file, offset, left)) = s.file.as_mut() else { return Ok(()) };
            let n = (*left).min(PIECE);
            let mut piece = Vec::with_capacity(n as usize);
            if crate::http::files::fsio::read_into(file, *offset, n, &mut piece).is_err() || piece.len() as u64 != n {
                // Unreadable, or shrunk under us: the length sent cannot be kept.
                st.core.reset(id, Reason::INTERNAL_ERROR);
                st.streams.remove(&id);
                return Ok(());
            }
            *offset += n;
            *left -= n;
            let last = *left == 0;
            if last {
                s.file = None;
            }
            let taken = st.core.send_data(id, &piece, last).unwrap_or(piece.len());
            if taken < piece.len() {
                if let Some(s) = st.streams.get_mut(&id) {
                    s.pending = Some((Bytes::from(piece).slice(taken..), last));
                    s.pending_since = monotonic_ns();
                }
                return Ok(());
            }
            last
        };
        if ended {
            return response_ended(conn, id);
        }
    }
}

/// End the response of stream `id` (after `file_head`, or a body that was not the last).
pub(super) fn end(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    let py = conn.py();
    let started = match conn.get().st.borrow(py)?.streams.get(&id) {
        Some(s) if !s.reset => s.started,
        _ => return Ok(()),
    };
    if !started {
        write_head(conn, id, true)?;
        return Ok(());
    }
    send(conn, id, Bytes::new(), true)
}

/// The application ended stream `id` unfinished: the server's 500 if nothing was sent, else
/// RST_STREAM (the client cannot tell a cut body otherwise; the connection lives on).
pub(super) fn abandon(conn: &Bound<'_, H2Conn>, id: u32, status: u16) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    let (reset, started, ending) = match this.st.borrow(py)?.streams.get(&id) {
        Some(s) => (s.reset, s.started, s.pending.as_ref().is_some_and(|p| p.1) || s.trailers_ready),
        None => return Ok(()),
    };
    if ending && !reset {
        return Ok(()); // complete, waiting for the window: it ends by itself
    }
    if !reset {
        if started {
            this.st.borrow_mut(py)?.core.reset(id, Reason::INTERNAL_ERROR);
        } else {
            error_answer(this, py, id, status)?;
        }
    }
    forget(conn, id)?;
    H2Conn::queue_flush(conn)
}

/// The response of stream `id` ended: log it, count it, and forget the stream.
pub(super) fn response_ended(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    let py = conn.py();
    let this = conn.get();
    let server = this.server.get();
    if let Some(log) = &server.access_log {
        let line = this.st.borrow(py)?.streams.get(&id).map(|s| {
            let seconds = crate::reactor::sys::monotonic_ns().saturating_sub(s.begun) as f64 / 1e9;
            (s.method.clone_ref(py), s.path.clone_ref(py), s.query.clone_ref(py), s.status, s.sent, seconds)
        });
        if let Some((method, path, query, status, sent, seconds)) = line {
            let client = this.st.borrow(py)?.client.clone_ref(py);
            log.call1(py, (client, method, path, query, "2", status, sent, seconds))?;
        }
    }
    forget(conn, id)?;
    if server.count_request() {
        this.st.borrow_mut(py)?.core.graceful_shutdown();
        if let Some(cb) = &server.on_max_requests {
            cb.call0(py)?;
        }
    }
    Ok(())
}

/// Drop stream `id`: a `receive` still waiting hears `http.disconnect`, a `send` waiting
/// wakes; it no longer counts in flight.
pub(super) fn forget(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    let py = conn.py();
    let gone = conn.get().st.borrow_mut(py)?.streams.remove(&id);
    if let Some(mut s) = gone {
        if let Some(w) = s.receive_waiter.take() {
            resolve(w.bind(py), &disconnect(py)?)?;
        }
        if let Some(d) = s.drain.take() {
            resolve(d.bind(py), py.None().bind(py))?;
        }
        drop(s);
    }
    conn.get().note_idle(py)
}

/// A file's bytes for `Sink::send_file`: read here and sent as body (never `sendfile(2)`: the
/// bytes must be framed and go through the windows).
pub(super) fn send_file_bytes(conn: &Bound<'_, H2Conn>, id: u32, file: &Bound<'_, PyAny>, offset: u64, count: u64) -> PyResult<()> {
    let py = conn.py();
    file.call_method1(pyo3::intern!(py, "seek"), (offset,))?;
    let data = file.call_method1(pyo3::intern!(py, "read"), (count,))?;
    let data = data.cast::<PyBytes>()?;
    send(conn, id, Bytes::copy_from_slice(data.as_bytes()), false)
}
