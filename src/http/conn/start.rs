//! Starting a request's application on the connection: a new stream id, and the interface's
//! `Dispatch` called with it (`http::dispatch`), or a WebSocket session begun; what the
//! interfaces ask of the driver meanwhile (`Sink::scope`, `open`, `run`, `collect`): the ASGI
//! scope from the connection's facts, the coroutine run in the connection's host task
//! (`host.rs`), a synchronous native handler's body read whole before it is called.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::cycle;
use super::sink::SINK;
use super::{watch, HttpConn};
use crate::http::asgi;
use crate::http::host::{Host, RequestName};
use crate::http::request::HeadCopy;
use crate::http::scope::ConnScope;
use crate::http::server::Interface;
use crate::http::stream::Opening;
use crate::http::websocket::{self, Session};

impl HttpConn {
    /// Start the application for the request whose head is `head`: a WebSocket upgrade
    /// becomes a session (`websocket`), any other request goes to the interface's `Dispatch`.
    /// `Ok(true)`: its response is already complete (go on with the next request).
    pub(super) fn start(slf: &Bound<'_, Self>, head: HeadCopy) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        let id = {
            let mut st = this.st.borrow_mut(py)?;
            st.next_cycle += 1;
            st.next_cycle
        };
        if head.websocket {
            match server.interface {
                Interface::Asgi if server.ws.is_some() => return websocket::asgi::start(Session::new(slf.as_any(), id, &SINK), &head),
                Interface::Native | Interface::NativeAsync if server.ws_handler.is_some() => {
                    return websocket::native::start(Session::new(slf.as_any(), id, &SINK), &head)
                }
                _ => {}
            }
        }
        crate::http::dispatch(server.interface).start(Opening { conn: slf.as_any(), sink: &SINK, id }, &head)?;
        Ok(this.st.borrow(py)?.cycle.is_none())
    }

    /// Run `coro` for the current request in the connection's host task (`host.rs`), or,
    /// while a coroutine of an earlier request still runs there, in a task of its own whose
    /// first step runs now. `send`: told how it ended (ASGI). `request`: the method and path
    /// the host task is named after.
    pub(crate) fn spawn(slf: &Bound<'_, Self>, coro: &Bound<'_, PyAny>, send: Option<&Bound<'_, asgi::Send>>, request: RequestName<'_, '_>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let existing = this.st.borrow(py)?.host.as_ref().map(|h| h.clone_ref(py));
        let host = match existing {
            Some(h) => h,
            None => {
                // Made outside the state's borrow: allocating a GC object may run finalizers.
                let h = Py::new(py, Host::new())?;
                this.st.borrow_mut(py)?.host = Some(h.clone_ref(py));
                h
            }
        };
        if !host.get().busy(py)? {
            watch::note_hosted(this, py)?;
            return Host::run_first_step(host.bind(py), this.loop_(py), coro, send.map(|s| s.clone().unbind()), request);
        }
        let task = Self::spawn_task(slf, coro)?;
        watch::note_spawned(this, py, &task)?;
        if let Some(s) = send {
            asgi::watch(s, &task)?;
        }
        Ok(())
    }

    /// Run `coro` as a task of its own whose first step runs now (`host::spawn_task`).
    pub(super) fn spawn_task<'py>(slf: &Bound<'py, Self>, coro: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        crate::http::host::spawn_task(slf.get().loop_(slf.py()), coro)
    }

    /// Read more of a synchronous native handler's body; call it once the body is whole.
    /// `Ok(true)`: its response is already complete (go on with the next request).
    pub(super) fn collect(slf: &Bound<'_, Self>, id: u64) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        let drained = cycle::drain_body(slf, id, |c, d| {
            if let Some(buf) = c.collected.as_mut() {
                buf.push(py, d);
            }
        })?;
        match drained {
            cycle::Drained::Wait | cycle::Drained::Read { done: false } => Ok(false),
            cycle::Drained::Disconnect => Ok(this.st.borrow(py)?.cycle.is_none()),
            cycle::Drained::Read { done: true } => {
                let ready = {
                    let mut st = this.st.borrow_mut(py)?;
                    let Some(c) = cycle::current(&mut st, id) else { return Ok(true) };
                    match (c.pending.take(), c.collected.take()) {
                        (Some(request), Some(body)) => Some((request, body)),
                        _ => None,
                    }
                };
                if let Some((request, body)) = ready {
                    let dispatch = crate::http::dispatch(this.server.get().interface);
                    dispatch.collected(Opening { conn: slf.as_any(), sink: &SINK, id }, request, body.finish(py))?;
                }
                Ok(this.st.borrow(py)?.cycle.is_none())
            }
        }
    }
}

impl HttpConn {
    /// The ASGI `http` scope of `head` on this connection (`Sink::scope`).
    pub(super) fn asgi_scope<'py>(conn: &Bound<'py, HttpConn>, head: &HeadCopy) -> PyResult<Bound<'py, PyDict>> {
        let py = conn.py();
        let this = conn.get();
        let server = this.server.get();
        let (client, local, trusted, base) = {
            let mut st = this.st.borrow_mut(py)?;
            (st.client.clone_ref(py), st.local.clone_ref(py), st.peer_trusted, st.scope.take())
        };
        // Taken out of the state while in use: making the scope allocates containers.
        let mut base = match base {
            Some(b) => b,
            None => ConnScope::new(server.scope_template.bind(py))?.with_tls(py, this.st.borrow(py)?.io())?,
        };
        let scope = server.request_scope(py, &mut base, head, client, &local, trusted)?;
        this.st.borrow_mut(py)?.scope = Some(base);
        Ok(scope)
    }
}
