//! The connection's side of its streams: `Sink` for `H2Conn`, many streams at once, each call
//! naming its stream by id (the HTTP/2 stream id). A call for a stream that is over answers
//! as `conn`'s does for a cycle that ended; one for a stream the client reset answers as for
//! a lost connection (`http.disconnect`, `ClientDisconnected`) while the others go on.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use super::streams::{self, Strm};
use super::{respond, H2Conn};
use crate::http::asgi;
use crate::http::body::Collected;
use crate::http::host::Host;
use crate::http::request::HeadCopy;
use crate::http::scope::ConnScope;
use crate::http::server::ServerState;
use crate::http::stream::message::{done_future, resolve, Got};
use crate::http::stream::{InFlight, Peer, Progress, Sink, Spare};
use crate::http::websocket::{self, Session};

/// The function table every stream of an `H2Conn` holds.
pub(crate) static SINK: H2Sink = H2Sink;

pub(crate) struct H2Sink;

/// The connection a stream holds (always an `H2Conn`: only this module's `SINK` is given one).
pub(super) fn h2<'a, 'py>(conn: &'a Bound<'py, PyAny>) -> &'a Bound<'py, H2Conn> {
    debug_assert!(conn.is_instance_of::<H2Conn>());
    // SAFETY: every `Stream` made with `SINK` holds an `H2Conn` (`H2Conn::start`,
    // `streams::collect` open them with the connection itself): the cast cannot fail.
    unsafe { conn.cast_unchecked::<H2Conn>() }
}

/// Stream ids are HTTP/2's (31 bits); the `Sink` carries them as `u64`.
pub(super) fn sid(id: u64) -> u32 {
    id as u32
}

impl H2Conn {
    /// The ASGI `http` scope of `head` on this connection, as `HttpConn::asgi_scope` makes it.
    fn asgi_scope<'py>(conn: &Bound<'py, H2Conn>, head: &HeadCopy) -> PyResult<Bound<'py, PyDict>> {
        let py = conn.py();
        let this = conn.get();
        let server = this.server.get();
        let (client, local, trusted, base) = {
            let mut st = this.st.borrow_mut(py)?;
            (st.client.clone_ref(py), st.local.clone_ref(py), st.peer_trusted, st.scope.take())
        };
        let mut base = match base {
            Some(b) => b,
            None => {
                let io = this.st.borrow(py)?.io.as_ref().map(|i| i.clone_ref(py));
                ConnScope::new(server.scope_template.bind(py))?.with_tls(py, io.as_ref())?
            }
        };
        let scope = server.request_scope(py, &mut base, head, client, &local, trusted);
        this.st.borrow_mut(py)?.scope = Some(base);
        scope
    }

    /// Run `coro` in the connection's host task, or, while another stream's coroutine runs
    /// there (the common case with many streams), in a task of its own.
    fn spawn(slf: &Bound<'_, Self>, coro: &Bound<'_, PyAny>, send: Option<&Bound<'_, asgi::Send>>, name: Option<(&Bound<'_, PyString>, &Bound<'_, PyString>)>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let existing = this.st.borrow(py)?.host.as_ref().map(|h| h.clone_ref(py));
        let host = match existing {
            Some(h) => h,
            None => {
                let h = Py::new(py, Host::new())?;
                this.st.borrow_mut(py)?.host = Some(h.clone_ref(py));
                h
            }
        };
        if !host.get().busy(py)? {
            this.note_hosted(py)?;
            return Host::run_first_step(host.bind(py), this.loop_(py), coro, send.map(|s| s.clone().unbind()), name);
        }
        let task = crate::http::host::spawn_task(this.loop_(py), coro)?;
        this.note_spawned(py, &task)?;
        if let Some(s) = send {
            asgi::watch(s, &task)?;
        }
        Ok(())
    }
}

impl Sink for H2Sink {
    fn open(&self, conn: &Bound<'_, PyAny>, id: u64, head: &HeadCopy, subject: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = conn.py();
        let this = h2(conn).get();
        let in_flight = InFlight::enter(&this.server.get().in_flight);
        {
            let mut st = this.st.borrow_mut(py)?;
            match st.streams.get_mut(&sid(id)) {
                Some(s) => s.open(in_flight),
                None => {
                    // Reset before it was opened: kept so that the interface's calls find it
                    // gone.
                    let mut s = Strm::new(py, head);
                    s.reset = true;
                    s.open(in_flight);
                    st.streams.insert(sid(id), s);
                }
            }
        }
        this.note_start(py, id, subject)
    }

    fn scope<'py>(&self, conn: &Bound<'py, PyAny>, head: &HeadCopy) -> PyResult<Bound<'py, PyDict>> {
        H2Conn::asgi_scope(h2(conn), head)
    }

    fn peer(&self, conn: &Bound<'_, PyAny>, f: &mut dyn FnMut(Peer<'_>) -> PyResult<()>) -> PyResult<()> {
        let st = h2(conn).get().st.borrow(conn.py())?;
        f(Peer { client: &st.client, local: &st.local, io: st.io.as_ref() })
    }

    fn server<'a>(&self, conn: &'a Bound<'_, PyAny>) -> &'a ServerState {
        h2(conn).get().server.get()
    }

    fn run(&self, conn: &Bound<'_, PyAny>, coro: &Bound<'_, PyAny>, send: Option<&Bound<'_, PyAny>>, name: Option<(&Bound<'_, PyString>, &Bound<'_, PyString>)>) -> PyResult<()> {
        let send = send.map(|s| s.cast::<asgi::Send>()).transpose()?;
        H2Conn::spawn(h2(conn), coro, send, name)
    }

    fn collect(&self, conn: &Bound<'_, PyAny>, id: u64, request: Py<PyAny>, declared: Option<u64>) -> PyResult<()> {
        let py = conn.py();
        let body = Collected::new(py, declared)?;
        {
            let mut st = h2(conn).get().st.borrow_mut(py)?;
            let Some(s) = st.streams.get_mut(&sid(id)) else { return Ok(()) };
            s.collect = Some((request, body));
        }
        streams::collect(h2(conn), sid(id))
    }

    fn take_spare(&self, conn: &Bound<'_, PyAny>) -> PyResult<Option<Spare>> {
        Ok(h2(conn).get().st.borrow_mut(conn.py())?.spare.take())
    }

    fn keep_spare(&self, conn: &Bound<'_, PyAny>, spare: Spare) -> PyResult<()> {
        let old = h2(conn).get().st.borrow_mut(conn.py())?.spare.replace(spare);
        drop(old);
        Ok(())
    }

    fn poll_body(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<Got> {
        streams::poll_body(h2(conn), id)
    }

    fn wait_body(&self, conn: &Bound<'_, PyAny>, id: u64, waiter: &Bound<'_, PyAny>) -> PyResult<bool> {
        let mut st = h2(conn).get().st.borrow_mut(conn.py())?;
        match st.streams.get_mut(&sid(id)) {
            Some(s) if s.reset => Ok(false),
            Some(s) if s.receive_waiter.is_none() => {
                s.receive_waiter = Some(waiter.clone().unbind());
                Ok(true)
            }
            Some(_) => Err(PyRuntimeError::new_err("receive() called while another receive() is waiting")),
            None => Ok(false),
        }
    }

    /// Credit went back in `poll_body` already; reading the socket is the core's to pause.
    fn body_taken(&self, _conn: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(())
    }

    fn receive_waits(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<bool> {
        let st = h2(conn).get().st.borrow(conn.py())?;
        Ok(st.streams.get(&sid(id)).is_some_and(|s| s.receive_waiter.is_some()))
    }

    fn answer_receive(&self, conn: &Bound<'_, PyAny>, id: u64, msg: &Bound<'_, PyAny>) -> PyResult<()> {
        let waiter = h2(conn).get().st.borrow_mut(conn.py())?.streams.get_mut(&sid(id)).and_then(|s| s.receive_waiter.take());
        match waiter {
            Some(w) => resolve(w.bind(conn.py()), msg),
            None => Ok(()),
        }
    }

    fn start(&self, conn: &Bound<'_, PyAny>, id: u64, status: u16, headers: Option<Py<PyAny>>) -> PyResult<()> {
        if !(100..=999).contains(&status) {
            return Err(PyValueError::new_err(format!("Invalid HTTP status code '{status}' in response.")));
        }
        {
            let mut st = h2(conn).get().st.borrow_mut(conn.py())?;
            let Some(s) = st.streams.get_mut(&sid(id)) else { return Ok(()) };
            if s.start_seen {
                return Err(PyRuntimeError::new_err("Unexpected ASGI message 'http.response.start' sent, after response already started."));
            }
            s.start_seen = true;
            s.status = status;
            s.headers = headers;
        }
        H2Conn::queue_flush(h2(conn))
    }

    fn expect_trailers(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        if let Some(s) = h2(conn).get().st.borrow_mut(conn.py())?.streams.get_mut(&sid(id)) {
            s.expect_trailers = true;
        }
        Ok(())
    }

    fn trailers(&self, conn: &Bound<'_, PyAny>, id: u64, headers: Option<Py<PyAny>>, more: bool) -> PyResult<()> {
        respond::trailers(h2(conn), sid(id), headers, more)
    }

    fn early_hint(&self, conn: &Bound<'_, PyAny>, id: u64, links: &[Vec<u8>]) -> PyResult<()> {
        respond::early_hint(h2(conn), sid(id), links)
    }

    fn body(&self, conn: &Bound<'_, PyAny>, id: u64, body: &Bound<'_, PyBytes>, more: bool) -> PyResult<()> {
        respond::write_body(h2(conn), sid(id), body.as_bytes(), more)
    }

    fn file_head(&self, conn: &Bound<'_, PyAny>, id: u64, size: u64) -> PyResult<bool> {
        {
            let mut st = h2(conn).get().st.borrow_mut(conn.py())?;
            match st.streams.get_mut(&sid(id)) {
                Some(s) if s.reset => return Ok(false),
                Some(s) if s.start_seen => s.sent += size,
                Some(_) => return Err(PyRuntimeError::new_err("Expected ASGI message 'http.response.start', but got 'http.response.pathsend'.")),
                None => return Ok(false),
            }
        }
        respond::write_head(h2(conn), sid(id), false)
    }

    /// Read and sent as DATA (never `sendfile(2)`: see `respond::send_file_bytes`); done once
    /// the windows took it.
    fn send_file<'py>(&self, conn: &Bound<'py, PyAny>, id: u64, file: &Bound<'py, PyAny>, offset: u64, count: u64) -> PyResult<Bound<'py, PyAny>> {
        let py = conn.py();
        let live = h2(conn).get().st.borrow(py)?.streams.get(&sid(id)).is_some_and(|s| !s.reset);
        if !live {
            return done_future(py);
        }
        respond::send_file_bytes(h2(conn), sid(id), file, offset, count)?;
        if self.write_blocked(conn, id)? {
            return Ok(self.drained(conn, id)?.into_bound(py));
        }
        done_future(py)
    }

    fn end(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        respond::end(h2(conn), sid(id))
    }

    fn abandon(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        respond::abandon(h2(conn), sid(id), 500)
    }

    fn fail(&self, conn: &Bound<'_, PyAny>, id: u64, status: u16, rule: &'static str) -> PyResult<()> {
        h2(conn).get().log_rule(conn.py(), &format!("request answered with {status}: {rule}"))?;
        respond::abandon(h2(conn), sid(id), status)
    }

    fn progress(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<Option<Progress>> {
        let st = h2(conn).get().st.borrow(conn.py())?;
        Ok(st.streams.get(&sid(id)).filter(|s| !s.reset).map(|s| Progress {
            started: s.started || s.start_seen,
            complete: s.pending.as_ref().is_some_and(|p| p.1) || s.trailers_ready,
        }))
    }

    fn write_blocked(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<bool> {
        let st = h2(conn).get().st.borrow(conn.py())?;
        let window = st.streams.get(&sid(id)).is_some_and(|s| s.pending.is_some() && !s.reset);
        Ok(window || (st.write_paused && !st.lost))
    }

    fn drained(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<Py<PyAny>> {
        let py = conn.py();
        let this = h2(conn).get();
        let fut = this.loop_(py).call_method0(intern!(py, "create_future"))?.unbind();
        let (replaced, now) = {
            let mut st = this.st.borrow_mut(py)?;
            let st = &mut *st;
            let (paused, lost) = (st.write_paused, st.lost);
            match st.streams.get_mut(&sid(id)) {
                // One `send` at a time awaits a stream (ASGI's `send` is awaited in turn).
                Some(s) if s.pending.is_some() && !s.reset => (s.drain.replace(fut.clone_ref(py)), false),
                _ if paused && !lost => {
                    st.drain_waiters.push(fut.clone_ref(py));
                    (None, false)
                }
                _ => (None, true),
            }
        };
        if let Some(old) = replaced {
            resolve(old.bind(py), py.None().bind(py))?;
        }
        if now {
            resolve(fut.bind(py), py.None().bind(py))?;
        }
        Ok(fut)
    }

    fn is_lost(&self, conn: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(h2(conn).get().st.borrow(conn.py())?.lost)
    }

    fn spawn(&self, conn: &Bound<'_, PyAny>, coro: &Bound<'_, PyAny>) -> PyResult<()> {
        H2Conn::spawn(h2(conn), coro, None, None)
    }

    // WebSocket over HTTP/2 (RFC 8441): the session runs over the stream (`ws.rs`).
    fn ws_receive<'py>(&self, conn: &Bound<'py, PyAny>, id: u64) -> PyResult<Bound<'py, PyAny>> {
        websocket::asgi::receive(Session::new(conn, id, &SINK))
    }

    fn ws_send(&self, conn: &Bound<'_, PyAny>, id: u64, ty: &str, msg: &Bound<'_, PyDict>) -> PyResult<()> {
        websocket::asgi::send(Session::new(conn, id, &SINK), ty, msg)
    }

    fn ws_ended(&self, conn: &Bound<'_, PyAny>, id: u64, error: bool) -> PyResult<bool> {
        websocket::asgi::ended(Session::new(conn, id, &SINK), error)
    }
}
