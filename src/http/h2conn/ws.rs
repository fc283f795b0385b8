//! WebSocket over HTTP/2 (RFC 8441): an extended CONNECT stream (`:protocol websocket`) as a
//! WebSocket session's `websocket::Channel`, as `conn/channel.rs` makes the HTTP/1.1
//! connection one after its `101`. The session, its codec (`proto::ws`, permessage-deflate
//! included) and the ASGI and native APIs are the HTTP/1.1 ones; what differs lives here:
//!
//! - the handshake is answered `200` on the stream (no `Upgrade`, no `Sec-WebSocket-Accept`);
//!   a refusal or a denial is an HTTP response on the stream like any other (`Sink`);
//! - bytes in: the stream's DATA is fed to the codec as it arrives (before the `200`, it waits
//!   on the stream and opens the session); the client gets credit back (WINDOW_UPDATE) only
//!   for the bytes the codec consumed, which it does when the application asks for a message
//!   (`update_reading`): an application that does not read holds its client at one window,
//!   as the HTTP body path does. The client's END_STREAM is its EOF;
//! - bytes out: the session's frames leave as DATA through `respond::send`, within the
//!   stream's and the connection's windows: what they do not take waits on the stream
//!   (`Strm::pending`), `write_blocked` says so, and an ASGI `send` waits, a native `send`
//!   returns `False` and delivery pauses, until the client gives credit (`writable`);
//! - the end: once the close handshake is done (or failed) the stream ends with END_STREAM
//!   after the close frame (`close`); a RST_STREAM, a GOAWAY that ends the stream or the
//!   connection's loss is the session's EOF (1006 unless a close frame came first: `gone`).
//!
//! The stream (`Strm`) is kept until both its end is out and its application let it go
//! (`release`: an ASGI application returned, a native session was accepted): `receive` and
//! `send` of a late application find the session's end, never another stream.

use bytes::Bytes;
use pyo3::prelude::*;

use super::sink::{h2, sid, H2Sink, SINK};
use super::streams::{is_session, Strm, WsStream};
use super::{respond, H2Conn};
use crate::http::proto::ws;
use crate::http::stream::message::resolve;
use crate::http::websocket::{self, Channel, Parts, Phase, Session, WsState};
use crate::reactor::sys::monotonic_ns;

/// DATA for stream `s` (a session: `is_session`), under the connection's borrow: an open
/// session's codec takes it, one in its handshake keeps it on the stream.
pub(super) fn arrived(s: &mut Strm, data: Bytes, end: bool) {
    let Some(w) = s.ws.as_deref_mut() else { return s.arrived(data, end) };
    match w.slot.as_deref_mut().map(|st| &mut st.phase) {
        Some(Phase::Open(c)) => {
            c.feed(&data);
            if end {
                c.feed_eof();
            }
            w.fed += data.len();
            w.since = monotonic_ns();
        }
        _ => s.arrived(data, end),
    }
}

/// The session of stream `id` has something to act on (bytes, its EOF).
pub(super) fn process(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    websocket::process(Session::new(conn.as_any(), id as u64, &SINK))
}

/// The stream of a session ended under it (RST_STREAM, or the connection ended): the codec's
/// EOF; what it holds is still read, then the session ends with 1006 (a native handler's
/// `on_close`, a waiting `receive`'s `websocket.disconnect`).
pub(super) fn gone(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    let py = conn.py();
    let drain = {
        let mut st = conn.get().st.borrow_mut(py)?;
        let Some(s) = st.streams.get_mut(&id) else { return Ok(()) };
        s.reset = true;
        if let Some(w) = s.ws.as_deref_mut() {
            w.ended = true;
            w.out.clear();
            if let Some(c) = w.slot.as_deref_mut().and_then(WsState::conn) {
                c.feed_eof();
            }
        }
        s.drain.take()
    };
    if let Some(d) = drain {
        resolve(d.bind(py), py.None().bind(py))?;
    }
    let s = Session::new(conn.as_any(), id as u64, &SINK);
    websocket::process(s)?;
    websocket::native::connection_lost(s)?;
    done_if_over(conn, id)
}

/// The client gave stream `id` credit and what waited has left: END_STREAM if the session
/// asked for it; a native session's delivery, paused while the window was closed, goes on.
pub(super) fn writable(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    let (session, native) = {
        let st = conn.get().st.borrow(conn.py())?;
        match st.streams.get(&id) {
            Some(s) if s.pending.is_none() => match s.ws.as_deref() {
                Some(w) => (true, w.slot.as_deref().is_some_and(|w| w.native.is_some() && matches!(w.phase, Phase::Open(_)))),
                None => (false, false),
            },
            _ => (false, false),
        }
    };
    if !session {
        return Ok(());
    }
    end_stream(conn, id)?;
    if native {
        process(conn, id)?;
    }
    Ok(())
}

/// Send END_STREAM on stream `id` if the session asked for it and nothing waits before it.
fn end_stream(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    {
        let mut st = conn.get().st.borrow_mut(conn.py())?;
        let st = &mut *st;
        let Some(s) = st.streams.get_mut(&id) else { return Ok(()) };
        let waiting = s.pending.is_some() || s.reset;
        let Some(w) = s.ws.as_deref_mut() else { return Ok(()) };
        if !w.end_wanted || w.ended || waiting {
            return Ok(());
        }
        w.ended = true;
        // The stream may be gone in the core already (its `Reset` follows): nothing to end.
        let _ = st.core.send_data(id, &[], true);
    }
    H2Conn::queue_flush(conn)?;
    done_if_over(conn, id)
}

/// Forget stream `id` once its end is out and its application let it go.
fn done_if_over(conn: &Bound<'_, H2Conn>, id: u32) -> PyResult<()> {
    let py = conn.py();
    let gone = {
        let mut st = conn.get().st.borrow_mut(py)?;
        let over = st.streams.get(&id).is_some_and(|s| s.ws.as_deref().is_some_and(|w| w.app_done && (w.ended || s.reset)));
        if over {
            st.streams.remove(&id)
        } else {
            None
        }
    };
    if let Some(s) = gone {
        drop(s);
        conn.get().note_idle(py)?;
    }
    Ok(())
}

/// The sessions of the connection (for the sweep and the shutdown).
pub(super) fn sessions(conn: &H2Conn, py: Python<'_>) -> PyResult<Vec<u32>> {
    let st = conn.st.borrow(py)?;
    Ok(st.streams.iter().filter(|(_, s)| is_session(s)).map(|(&id, _)| id).collect())
}

impl Channel for H2Sink {
    fn parts(&self, conn: &Bound<'_, PyAny>, id: u64, f: &mut dyn FnMut(Parts<'_>)) -> PyResult<()> {
        let this = h2(conn).get();
        let frames = {
            let mut st = this.st.borrow_mut(conn.py())?;
            let st = &mut *st;
            let (lost, paused) = (st.lost, st.write_paused);
            match st.streams.get_mut(&sid(id)) {
                Some(s) if s.ws.is_some() => {
                    let (reset, blocked) = (s.reset, s.pending.is_some());
                    let w = s.ws.as_deref_mut().expect("checked above");
                    f(Parts {
                        ws: &mut w.slot,
                        out: &mut w.out,
                        lost: lost || reset,
                        // The window holds bytes back: as a full transport buffer for h1.
                        write_paused: paused || blocked,
                        closing: w.end_wanted,
                        since: w.since,
                    });
                    if w.out.is_empty() {
                        None
                    } else if w.ended || w.end_wanted || reset || lost {
                        w.out.clear();
                        None
                    } else {
                        Some(std::mem::take(&mut w.out))
                    }
                }
                // Before the session began (a refusal) or after its stream was forgotten:
                // nothing to read, nothing to write.
                _ => {
                    let (mut none, mut out) = (None, Vec::new());
                    f(Parts { ws: &mut none, out: &mut out, lost: true, write_paused: false, closing: true, since: 0 });
                    None
                }
            }
        };
        match frames {
            // Within the windows now, the rest waiting on the stream (`write_blocked`). An
            // error means the core forgot the stream: its `Reset` follows.
            Some(out) => respond::send(h2(conn), sid(id), Bytes::from(out), false).or_else(|_| Ok(())),
            None => Ok(()),
        }
    }

    fn begin(&self, conn: &Bound<'_, PyAny>, id: u64, session: Box<WsState>) -> PyResult<()> {
        let mut st = h2(conn).get().st.borrow_mut(conn.py())?;
        if let Some(s) = st.streams.get_mut(&sid(id)) {
            s.ws = Some(Box::new(WsStream {
                slot: Some(session),
                out: Vec::new(),
                fed: 0,
                released: 0,
                since: monotonic_ns(),
                end_wanted: false,
                ended: false,
                app_done: false,
                eof_at_open: false,
            }));
        }
        Ok(())
    }

    fn switch(&self, conn: &Bound<'_, PyAny>, id: u64, fields: &[(&[u8], &[u8])]) -> PyResult<Option<Vec<u8>>> {
        let py = conn.py();
        let this = h2(conn).get();
        let mut fields: Vec<(Vec<u8>, Vec<u8>)> = fields.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        respond::stamped(this, py, &mut fields)?;
        let rest = {
            let mut st = this.st.borrow_mut(py)?;
            let st = &mut *st;
            match st.streams.get(&sid(id)) {
                Some(s) if !s.reset && s.ws.is_some() => {}
                _ => return Ok(None),
            }
            st.core.respond(sid(id), 200, fields.iter().map(|(n, v)| (&n[..], &v[..])), false).map_err(respond::send_error)?;
            let Some(s) = st.streams.get_mut(&sid(id)) else { return Ok(None) };
            (s.start_seen, s.started, s.status) = (true, true, 200);
            let (rest, end) = s.take_all_body();
            if let Some(w) = s.ws.as_deref_mut() {
                w.fed = rest.len();
                w.since = monotonic_ns();
                w.eof_at_open = end;
            }
            rest
        };
        H2Conn::queue_flush(h2(conn))?;
        Ok(Some(rest))
    }

    fn accepted(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        let py = conn.py();
        let this = h2(conn).get();
        let server = this.server.get();
        let line = {
            let mut st = this.st.borrow_mut(py)?;
            let Some(s) = st.streams.get_mut(&sid(id)) else { return Ok(()) };
            if let Some(w) = s.ws.as_deref_mut().filter(|w| w.eof_at_open) {
                if let Some(c) = w.slot.as_deref_mut().and_then(WsState::conn) {
                    c.feed_eof();
                }
            }
            let seconds = monotonic_ns().saturating_sub(s.begun) as f64 / 1e9;
            (s.method.clone_ref(py), s.path.clone_ref(py), s.query.clone_ref(py), seconds)
        };
        if let Some(log) = &server.access_log {
            let (method, path, query, seconds) = line;
            let client = this.st.borrow(py)?.client.clone_ref(py);
            log.call1(py, (client, method, path, query, "2", 200, 0, seconds))?;
        }
        if server.count_request() {
            this.st.borrow_mut(py)?.core.graceful_shutdown();
            if let Some(cb) = &server.on_max_requests {
                cb.call0(py)?;
            }
        }
        Ok(())
    }

    fn release(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        let in_flight = {
            let mut st = h2(conn).get().st.borrow_mut(conn.py())?;
            let Some(s) = st.streams.get_mut(&sid(id)) else { return Ok(()) };
            let Some(w) = s.ws.as_deref_mut() else { return Ok(()) };
            w.app_done = true;
            s.in_flight.take()
        };
        drop(in_flight);
        done_if_over(h2(conn), sid(id))
    }

    fn flush(&self, conn: &Bound<'_, PyAny>) -> PyResult<()> {
        H2Conn::flush(h2(conn))
    }

    fn queue_flush(&self, conn: &Bound<'_, PyAny>) -> PyResult<()> {
        H2Conn::queue_flush(h2(conn))
    }

    /// The session is over: END_STREAM after its last frame (once the window took it). Where
    /// HTTP/1.1 closes the connection, which tells whoever still waits, the stream's end is
    /// told here: a waiting `receive` hears the end the session recorded (1006 if none, as
    /// after a close that went unanswered), a native handler's `on_close` comes if it has not.
    fn close(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        let py = conn.py();
        let (told, native) = {
            let mut st = h2(conn).get().st.borrow_mut(py)?;
            let Some(s) = st.streams.get_mut(&sid(id)) else { return Ok(()) };
            let Some(w) = s.ws.as_deref_mut() else { return Ok(()) };
            w.end_wanted = true;
            let Some(session) = w.slot.as_deref_mut() else { return Ok(()) };
            let native = session.native.is_some() && session.ended.is_none();
            let end = match &session.ended {
                Some(end) => end.clone(),
                None if native => (ws::code::ABNORMAL, String::new()), // `on_close` records it
                None => {
                    let code = session.conn().and_then(|c| c.close_code()).unwrap_or(ws::code::ABNORMAL);
                    session.ended.insert((code, String::new())).clone()
                }
            };
            (s.receive_waiter.take().map(|r| (r, end)), native)
        };
        if let Some((waiter, (code, reason))) = told {
            resolve(waiter.bind(py), &websocket::asgi::disconnect(py, code, &reason)?)?;
        }
        end_stream(h2(conn), sid(id))?;
        if native {
            websocket::native::connection_lost(Session::new(conn, id, &SINK))?;
        }
        Ok(())
    }

    /// The bytes the codec consumed since the last call are the client's credit again.
    fn update_reading(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        let credit = {
            let mut st = h2(conn).get().st.borrow_mut(conn.py())?;
            let st = &mut *st;
            let Some(w) = st.streams.get_mut(&sid(id)).and_then(|s| s.ws.as_deref_mut()) else { return Ok(()) };
            let buffered = match w.slot.as_deref().map(|w| &w.phase) {
                Some(Phase::Open(c)) => c.buffered(),
                _ => return Ok(()),
            };
            let n = w.fed.saturating_sub(buffered).saturating_sub(w.released);
            if n > 0 {
                w.released += n;
                st.core.release(sid(id), n);
            }
            n
        };
        if credit > 0 {
            H2Conn::queue_flush(h2(conn))?;
        }
        Ok(())
    }
}

/// The sweep's look at the connection's sessions (`websocket::check_timeout`: keep-alive
/// pings, an unanswered close).
pub(super) fn check_timeouts(conn: &Bound<'_, H2Conn>, now: u64) -> PyResult<()> {
    for id in sessions(conn.get(), conn.py())? {
        websocket::check_timeout(Session::new(conn.as_any(), id as u64, &SINK), now)?;
    }
    Ok(())
}

/// Graceful shutdown: every open session gets close 1001 (going away).
pub(super) fn begin_shutdown(conn: &Bound<'_, H2Conn>) -> PyResult<()> {
    for id in sessions(conn.get(), conn.py())? {
        websocket::begin_shutdown(Session::new(conn.as_any(), id as u64, &SINK))?;
    }
    Ok(())
}
