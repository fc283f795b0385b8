//! The connection's side of its streams: `Sink` for `HttpConn` (HTTP/1.1, one stream at a
//! time), each call the `cycle` function of the stream's id. Its `websocket::Channel` (the
//! same table, for a session after the upgrade) is `channel.rs`.

use pyo3::exceptions::PyRuntimeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use super::cycle::{self, current, Cycle};
use super::{watch, HttpConn};
use crate::http::asgi;
use crate::http::body::Collected;
use crate::http::request::HeadCopy;
use crate::http::server::ServerState;
use crate::http::stream::message::{done_future, resolve, Got};
use crate::http::stream::{InFlight, Peer, Progress, Sink, Spare};
use crate::http::websocket::{self, Session};

/// The function table every stream of an `HttpConn` holds.
pub(crate) static SINK: H1Sink = H1Sink;

pub(crate) struct H1Sink;

/// The connection a stream holds (always an `HttpConn`: only this module's `SINK` is given
/// one).
pub(super) fn http<'a, 'py>(conn: &'a Bound<'py, PyAny>) -> &'a Bound<'py, HttpConn> {
    debug_assert!(conn.is_instance_of::<HttpConn>());
    // SAFETY: every `Stream` and `websocket::Session` made with `SINK` holds an `HttpConn`
    // (`HttpConn::sink`, `HttpConn::session`, `start.rs`): the cast cannot fail.
    unsafe { conn.cast_unchecked::<HttpConn>() }
}

impl Sink for H1Sink {
    fn open(&self, conn: &Bound<'_, PyAny>, id: u64, head: &HeadCopy, subject: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = conn.py();
        let this = http(conn).get();
        watch::note_start(this, py, id, subject)?;
        let cycle = Cycle::new(id, head, py, InFlight::enter(&this.server.get().in_flight));
        this.st.borrow_mut(py)?.cycle = Some(cycle);
        Ok(())
    }

    fn scope<'py>(&self, conn: &Bound<'py, PyAny>, head: &HeadCopy) -> PyResult<Bound<'py, PyDict>> {
        HttpConn::asgi_scope(http(conn), head)
    }

    fn peer(&self, conn: &Bound<'_, PyAny>, f: &mut dyn FnMut(Peer<'_>) -> PyResult<()>) -> PyResult<()> {
        let st = http(conn).get().st.borrow(conn.py())?;
        f(Peer { client: &st.client, local: &st.local, io: st.io() })
    }

    fn server<'a>(&self, conn: &'a Bound<'_, PyAny>) -> &'a ServerState {
        http(conn).get().server.get()
    }

    fn run(&self, conn: &Bound<'_, PyAny>, coro: &Bound<'_, PyAny>, send: Option<&Bound<'_, PyAny>>, name: Option<(&Bound<'_, PyString>, &Bound<'_, PyString>)>) -> PyResult<()> {
        let send = send.map(|s| s.cast::<asgi::Send>()).transpose()?;
        HttpConn::spawn(http(conn), coro, send, name)
    }

    fn collect(&self, conn: &Bound<'_, PyAny>, id: u64, request: Py<PyAny>, declared: Option<u64>) -> PyResult<()> {
        let py = conn.py();
        let body = Collected::new(py, declared)?;
        {
            let mut st = http(conn).get().st.borrow_mut(py)?;
            let Some(c) = current(&mut st, id) else { return Ok(()) };
            c.pending = Some(request);
            c.collected = Some(body);
        }
        HttpConn::collect(http(conn), id).map(drop)
    }

    fn take_spare(&self, conn: &Bound<'_, PyAny>) -> PyResult<Option<Spare>> {
        Ok(http(conn).get().st.borrow_mut(conn.py())?.spare.take())
    }

    fn keep_spare(&self, conn: &Bound<'_, PyAny>, spare: Spare) -> PyResult<()> {
        let old = http(conn).get().st.borrow_mut(conn.py())?.spare.replace(spare);
        drop(old);
        Ok(())
    }

    fn poll_body(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<Got> {
        cycle::poll_body(http(conn), id)
    }

    fn wait_body(&self, conn: &Bound<'_, PyAny>, id: u64, waiter: &Bound<'_, PyAny>) -> PyResult<bool> {
        let mut st = http(conn).get().st.borrow_mut(conn.py())?;
        match current(&mut st, id) {
            Some(c) if c.receive_waiter.is_none() => {
                c.receive_waiter = Some(waiter.clone().unbind());
                Ok(true)
            }
            Some(_) => Err(PyRuntimeError::new_err("receive() called while another receive() is waiting")),
            None => Ok(false),
        }
    }

    fn body_taken(&self, conn: &Bound<'_, PyAny>) -> PyResult<()> {
        HttpConn::update_reading(http(conn))
    }

    fn receive_waits(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<bool> {
        let mut st = http(conn).get().st.borrow_mut(conn.py())?;
        Ok(current(&mut st, id).is_some_and(|c| c.receive_waiter.is_some()))
    }

    fn answer_receive(&self, conn: &Bound<'_, PyAny>, id: u64, msg: &Bound<'_, PyAny>) -> PyResult<()> {
        let waiter = {
            let mut st = http(conn).get().st.borrow_mut(conn.py())?;
            current(&mut st, id).and_then(|c| c.receive_waiter.take())
        };
        match waiter {
            Some(w) => resolve(w.bind(conn.py()), msg),
            None => Ok(()),
        }
    }

    fn start(&self, conn: &Bound<'_, PyAny>, id: u64, status: u16, headers: Option<Py<PyAny>>) -> PyResult<()> {
        cycle::record_start(http(conn), id, status, headers)
    }

    fn expect_trailers(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        if let Some(c) = current(&mut *http(conn).get().st.borrow_mut(conn.py())?, id) {
            c.expect_trailers = true;
        }
        Ok(())
    }

    fn trailers(&self, conn: &Bound<'_, PyAny>, id: u64, headers: Option<Py<PyAny>>, more: bool) -> PyResult<()> {
        cycle::trailers(http(conn), id, headers, more)
    }

    fn early_hint(&self, conn: &Bound<'_, PyAny>, id: u64, links: &[Vec<u8>]) -> PyResult<()> {
        cycle::early_hint(http(conn), id, links)
    }

    fn body(&self, conn: &Bound<'_, PyAny>, id: u64, body: &Bound<'_, PyBytes>, more: bool) -> PyResult<()> {
        cycle::write_body(http(conn), id, body, more)
    }

    fn file_head(&self, conn: &Bound<'_, PyAny>, id: u64, size: u64) -> PyResult<bool> {
        cycle::write_file_head(http(conn), id, size)
    }

    fn end(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        cycle::end(http(conn), id)
    }

    fn abandon(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<()> {
        cycle::abandon(http(conn), id)
    }

    fn fail(&self, conn: &Bound<'_, PyAny>, id: u64, status: u16, rule: &'static str) -> PyResult<()> {
        cycle::end_with_error(http(conn), id, status, rule)
    }

    fn progress(&self, conn: &Bound<'_, PyAny>, id: u64) -> PyResult<Option<Progress>> {
        let mut st = http(conn).get().st.borrow_mut(conn.py())?;
        Ok(current(&mut st, id).map(|c| Progress { started: c.started, complete: c.complete }))
    }

    fn write_blocked(&self, conn: &Bound<'_, PyAny>, _id: u64) -> PyResult<bool> {
        http(conn).get().write_blocked(conn.py())
    }

    fn drained(&self, conn: &Bound<'_, PyAny>, _id: u64) -> PyResult<Py<PyAny>> {
        HttpConn::drained(http(conn))
    }

    /// `loop.sendfile` on the connection's transport: a native one sends with `sendfile(2)`,
    /// and falls back to reading and writing (so encrypting) once TLS is on
    /// (`_streams.py`'s `_start_tls`).
    fn send_file<'py>(&self, conn: &Bound<'py, PyAny>, id: u64, file: &Bound<'py, PyAny>, offset: u64, count: u64) -> PyResult<Bound<'py, PyAny>> {
        let py = conn.py();
        let this = http(conn).get();
        let live = current(&mut *this.st.borrow_mut(py)?, id).is_some();
        let transport = this.transport(py)?;
        if !live || transport.is_none(py) {
            return done_future(py);
        }
        this.server.get().loop_.bind(py).call_method1(intern!(py, "sendfile"), (transport, file, offset, count))
    }

    fn is_lost(&self, conn: &Bound<'_, PyAny>) -> PyResult<bool> {
        http(conn).get().is_lost(conn.py())
    }

    fn spawn(&self, conn: &Bound<'_, PyAny>, coro: &Bound<'_, PyAny>) -> PyResult<()> {
        HttpConn::spawn(http(conn), coro, None, None)
    }

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
