//! Starting a request's application on the connection: the request object (an ASGI scope,
//! or a native `Request`) and its `Cycle` built from the head, the interface called, and its
//! coroutine run in the connection's host task (`host.rs`); a synchronous native handler's
//! body read whole before it is called (`collect`).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyDict};

use super::cycle::{self, Cycle};
use super::sink::SINK;
use super::{watch, HttpConn};
use crate::eventloop::core::LoopCore;
use crate::http::asgi::{self, Receive, Send};
use crate::http::body::Collected;
use crate::http::host::{Host, RequestName};
use crate::http::native::{self, Request};
use crate::http::request::{self, HeadCopy};
use crate::http::scope::{ConnScope, Origin};
use crate::http::server::Interface;
use crate::http::stream::{InFlight, Stream};
use crate::http::websocket;

impl HttpConn {
    /// A handle on the connection's stream `id` for an interface.
    pub(crate) fn stream(slf: &Bound<'_, Self>, id: u64) -> Stream {
        Stream::new(slf.clone().into_any().unbind(), id, &SINK)
    }

    /// Start the application for the request whose head is `head`. `Ok(true)`: its response
    /// is already complete (go on with the next request).
    pub(super) fn start(slf: &Bound<'_, Self>, head: HeadCopy) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        let server = this.server.get();
        let id = {
            let mut st = this.st.borrow_mut(py)?;
            st.next_cycle += 1;
            st.next_cycle
        };
        match server.interface {
            Interface::Asgi if head.websocket && server.ws.is_some() => return websocket::asgi::start(slf, &head, id),
            Interface::Asgi => {
                let (scope, cycle) = Self::asgi_request(slf, &head, id)?;
                watch::note_start(this, py, id, &scope)?;
                this.st.borrow_mut(py)?.cycle = Some(cycle);
                let spare = this.st.borrow_mut(py)?.spare.take();
                let c = asgi::callables(slf.as_any(), id, &SINK, spare)?;
                match server.app.bind(py).call1((scope, c.receive.bind(py), c.send_fn.bind(py))) {
                    // The app's own coroutine is the task's (no wrapper frame): how it ended is
                    // read off the task (`asgi::watch`).
                    Ok(coro) => Self::spawn(slf, &coro, Some(c.send.bind(py)), Some((head.method.bind(py), head.path.bind(py))))?,
                    Err(e) => c.send.get().failed(py, &e.into_value(py).into_bound(py))?,
                }
                let old = this.st.borrow_mut(py)?.spare.replace(c);
                drop(old);
            }
            Interface::Native | Interface::NativeAsync if head.websocket && server.ws_handler.is_some() => {
                return websocket::native::start(slf, &head, id);
            }
            Interface::Native => {
                let (request, mut cycle, _) = Self::native_request(slf, &head, id, false)?;
                watch::note_start(this, py, id, request.bind(py))?;
                if head.has_body {
                    // The handler gets the whole body: read it first (`collect`).
                    cycle.pending = Some(request);
                    cycle.collected = Some(Collected::new(py, head.body_len)?);
                    this.st.borrow_mut(py)?.cycle = Some(cycle);
                    return Self::collect(slf, id);
                }
                this.st.borrow_mut(py)?.cycle = Some(cycle);
                native::call(py, &Self::stream(slf, id), server.app.bind(py), request.bind(py))?;
            }
            Interface::NativeAsync | Interface::Wsgi => {
                let (request, cycle, send) = Self::native_request(slf, &head, id, true)?;
                watch::note_start(this, py, id, request.bind(py))?;
                this.st.borrow_mut(py)?.cycle = Some(cycle);
                let receive = request.get().receive_of(py);
                if server.interface == Interface::Wsgi {
                    let submit = server.wsgi_submit.as_ref().expect("a WSGI server has its bridge");
                    submit.bind(py).call1((server.app.bind(py), request, receive, send))?;
                } else {
                    let coro = server.runner.bind(py).call_method1(intern!(py, "run_async"), (server.app.bind(py), request, receive, send))?;
                    Self::spawn(slf, &coro, None, Some((head.method.bind(py), head.path.bind(py))))?;
                }
            }
        }
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

    /// Run `coro` as a task of its own whose first step runs now.
    pub(super) fn spawn_task<'py>(slf: &Bound<'py, Self>, coro: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        static EAGER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let py = slf.py();
        let loop_ = slf.get().loop_(py);
        // A name given saves the task formatting its own ("Task-N", a printf per request).
        let kw = [(intern!(py, "loop"), loop_.clone()), (intern!(py, "name"), intern!(py, "ringloop.http").clone().into_any())];
        if *EAGER.get_or_init(|| py.version_info() >= (3, 12)) {
            // The task runs its first step in its constructor (3.12's eager start).
            let kw = kw.into_py_dict(py)?;
            kw.set_item(intern!(py, "eager_start"), true)?;
            return crate::py::asyncio_task(py)?.call((coro,), Some(&kw));
        }
        let task = crate::py::asyncio_task(py)?.call((coro,), Some(&kw.into_py_dict(py)?))?;
        LoopCore::run_task_step_now(loop_.cast::<LoopCore>()?, &task)?;
        Ok(task)
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
                    request.get().set_body(py, body.finish(py))?;
                    native::call(py, &Self::stream(slf, id), this.server.get().app.bind(py), request.bind(py))?;
                }
                Ok(this.st.borrow(py)?.cycle.is_none())
            }
        }
    }
}

impl HttpConn {
    /// The scope and the cycle for the request `head` (after `conn` released its borrow).
    pub(crate) fn asgi_request<'py>(conn: &Bound<'py, HttpConn>, head: &HeadCopy, id: u64) -> PyResult<(Bound<'py, PyDict>, Cycle)> {
        let py = conn.py();
        let this = conn.get();
        let server = this.server.get();
        let (client, local, trusted, base) = {
            let mut st = this.st.borrow_mut(py)?;
            (st.client.clone_ref(py), st.local.clone_ref(py), st.peer_trusted, st.scope.take())
        };
        let (mut client, mut scheme) = (client, server.scheme.clone_ref(py));
        if trusted {
            if let Some(check) = &server.proxy_trusted {
                let (c, s) = request::forwarded(py, head, check.bind(py))?;
                client = c.unwrap_or(client);
                scheme = s.unwrap_or(scheme);
            }
        }
        let state = server.lifespan_state.borrow(py)?.as_ref().map(|s| s.clone_ref(py));
        let origin = Origin { client: &client, local: &local, scheme: &scheme };
        // Taken out of the state while in use: making the scope allocates containers.
        let mut base = match base {
            Some(b) => b,
            None => ConnScope::new(server.scope_template.bind(py))?.with_tls(py, this.st.borrow(py)?.io())?,
        };
        let scope = base.scope(py, head, &origin, state.as_ref())?;
        this.st.borrow_mut(py)?.scope = Some(base);
        Ok((scope, Cycle::new(id, head, py, InFlight::enter(&server.in_flight))))
    }

    /// The request object and the cycle for `head` (native handlers and WSGI); async handlers and
    /// WSGI also get `receive`/`send`.
    pub(crate) fn native_request(conn: &Bound<'_, HttpConn>, head: &HeadCopy, id: u64, with_io: bool) -> PyResult<(Py<Request>, Cycle, Option<Py<Send>>)> {
        let py = conn.py();
        let (receive, send) = if with_io {
            let stream = || Stream::new(conn.clone().into_any().unbind(), id, &SINK);
            (Some(Py::new(py, Receive { stream: stream(), ws: false })?), Some(Py::new(py, Send { stream: stream(), ws: false })?))
        } else {
            (None, None)
        };
        let server = conn.get().server.get();
        let request = {
            let st = conn.get().st.borrow(py)?;
            Request::new(py, head, (&st.client, &st.local), (&server.scheme, &server.root_path), receive, st.io())?
        };
        let request = Py::new(py, request)?;
        Ok((request, Cycle::new(id, head, py, InFlight::enter(&server.in_flight)), send))
    }
}
