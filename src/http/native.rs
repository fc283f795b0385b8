//! The native handler API: `Request` and `Response`, and calling a plain `def handler(request)`
//! straight from the connection — no task, no scope dict, no ASGI messages.
//!
//! A synchronous handler gets the whole body in `request.body` (read before it is called,
//! within `--limit-request-body`); its `Response` with a `bytes`/`str` body is written here,
//! natively. A body that is a file or an iterator, and every `async def` handler, go through
//! `ringloop.server.native` (Python), which writes through the same `Stream` as ASGI's
//! `send`, back-pressure included. `Request` is also what the WSGI bridge builds its environ
//! from.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::asgi::{pair, Receive, Send};
use super::request::HeadCopy;
use super::stream::{Dispatch, Opening, Stream};
use crate::eventloop::gil_cell::GilCell;

/// The native handler API's `Dispatch`: a plain `def handler(request)` (`SYNC`), or an
/// `async def` one run by `ringloop.server.native` (`ASYNC`).
pub(crate) static SYNC: Native = Native { run_async: false };
pub(crate) static ASYNC: Native = Native { run_async: true };

pub(crate) struct Native {
    run_async: bool,
}

/// The `Request` of the stream `at`, and the stream opened with it; with `io`, its
/// `receive` and a `send` beside it (an async handler's, WSGI's).
pub(crate) fn open_request(at: &Opening<'_, '_>, head: &HeadCopy, io: bool) -> PyResult<(Py<Request>, Option<Py<Send>>)> {
    let (py, sink) = (at.conn.py(), at.sink);
    let (receive, send) = match io {
        true => pair(at.conn, at.id, sink, false).map(|(r, s)| (Some(r), Some(s)))?,
        false => (None, None),
    };
    let server = sink.server(at.conn);
    let (mut receive, mut request) = (receive, None);
    sink.peer(at.conn, &mut |p| {
        request = Some(Request::new(py, head, (p.client, p.local), (&server.scheme, &server.root_path), receive.take(), p.io)?);
        Ok(())
    })?;
    let request = Py::new(py, request.expect("`peer` calls its function"))?;
    sink.open(at.conn, at.id, head, request.bind(py).as_any())?;
    Ok((request, send))
}

impl Dispatch for Native {
    /// A synchronous handler is called now, or once its body is whole (`collected`); an
    /// async one's coroutine runs in the connection's task.
    fn start(&self, at: Opening<'_, '_>, head: &HeadCopy) -> PyResult<()> {
        let (py, sink) = (at.conn.py(), at.sink);
        let (request, send) = open_request(&at, head, self.run_async)?;
        let server = sink.server(at.conn);
        if !self.run_async {
            if head.has_body {
                return sink.collect(at.conn, at.id, request.into_any(), head.body_len);
            }
            return call(py, &Stream::new(at.conn.clone().unbind(), at.id, sink), server.app.bind(py), request.bind(py));
        }
        let receive = request.get().receive_of(py);
        let coro = server.runner.bind(py).call_method1(intern!(py, "run_async"), (server.app.bind(py), request, receive, send))?;
        sink.run(at.conn, &coro, None, Some((head.method.bind(py), head.path.bind(py))))
    }

    fn collected(&self, at: Opening<'_, '_>, request: Py<PyAny>, body: Py<PyBytes>) -> PyResult<()> {
        let py = at.conn.py();
        // What `start` gave `Sink::collect`.
        let request = request.into_bound(py).cast_into::<Request>()?;
        request.get().set_body(py, body)?;
        let app = at.sink.server(at.conn).app.bind(py);
        call(py, &Stream::new(at.conn.clone().unbind(), at.id, at.sink), app, &request)
    }
}

/// A request as a native handler (or the WSGI bridge) sees it.
#[pyclass(module = "ringloop._core", frozen)]
pub struct Request {
    pub(super) method: Py<PyString>,
    pub(super) path: Py<PyString>,
    pub(super) raw_path: Py<PyBytes>,
    pub(super) query: Py<PyBytes>,
    pub(super) version: Py<PyString>,
    pub(super) fields: Vec<(Py<PyBytes>, Py<PyBytes>)>,
    /// `headers`, made on first use.
    pub(super) headers: GilCell<Option<Py<PyList>>>,
    pub(super) client: Py<PyAny>,
    pub(super) server: Py<PyAny>,
    pub(super) scheme: Py<PyString>,
    pub(super) root_path: Py<PyString>,
    /// The whole body, for synchronous handlers (`None` until read, and for async handlers).
    pub(super) body: GilCell<Option<Py<PyBytes>>>,
    /// For `await request.read()` (async handlers, WSGI).
    pub(super) receive: Option<Py<Receive>>,
    /// The request has a body (Content-Length > 0 or chunked).
    pub(super) has_body: bool,
    /// The connection's transport: WSGI's environ reads the TLS session's details from it.
    pub(super) io: Option<Py<crate::transport::stream::StreamIO>>,
}

/// A native handler's answer: `Response(status=200, headers=None, body=b"")`. `headers` is a
/// list of `(name, value)` bytes pairs; `body` is `bytes`, `str` (UTF-8), a file
/// (`ringloop.server.native.FileBody`) or an iterator (or async iterator) of bytes.
#[pyclass(module = "ringloop._core", frozen)]
pub struct Response {
    #[pyo3(get)]
    status: u16,
    #[pyo3(get)]
    headers: Option<Py<PyAny>>,
    #[pyo3(get)]
    body: Py<PyAny>,
}

#[pymethods]
impl Response {
    #[new]
    #[pyo3(signature = (status = 200, headers = None, body = None))]
    fn py_new(py: Python<'_>, status: u16, headers: Option<Py<PyAny>>, body: Option<Py<PyAny>>) -> Response {
        Response { status, headers, body: body.unwrap_or_else(|| PyBytes::new(py, b"").into_any().unbind()) }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Response(status={}, body={})", self.status, self.body.bind(py).get_type().name()?))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.headers)?;
        visit.call(&self.body)
    }
}

/// `[(b"content-type", b"text/plain; charset=utf-8")]`, for a handler that returns bytes.
fn text_plain(py: Python<'_>) -> PyResult<Py<PyAny>> {
    static CELL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(CELL
        .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            let pair = PyTuple::new(py, [PyBytes::new(py, b"content-type"), PyBytes::new(py, b"text/plain; charset=utf-8")])?;
            Ok(PyTuple::new(py, [pair])?.into_any().unbind())
        })?
        .clone_ref(py))
}

impl Request {
    /// `peer`: the client's and the server's `(host, port)` (or `None`); `site`: the scheme
    /// and the root path.
    /// `io`: the connection's transport, for the TLS details a handler may ask of it.
    pub(crate) fn new(py: Python<'_>, head: &HeadCopy, peer: (&Py<PyAny>, &Py<PyAny>), site: (&Py<PyString>, &Py<PyString>), receive: Option<Py<Receive>>, io: Option<&Py<crate::transport::stream::StreamIO>>) -> PyResult<Request> {
        Ok(Request {
            method: head.method.clone_ref(py),
            path: head.path.clone_ref(py),
            raw_path: head.raw_path.clone_ref(py),
            query: head.query.clone_ref(py),
            version: head.http_version(py),
            fields: head.headers.iter().map(|f| (f.name.clone_ref(py), f.value.clone_ref(py))).collect(),
            headers: GilCell::new(None),
            client: peer.0.clone_ref(py),
            server: peer.1.clone_ref(py),
            scheme: site.0.clone_ref(py),
            root_path: site.1.clone_ref(py),
            body: GilCell::new(None),
            receive,
            has_body: head.has_body,
            io: io.map(|io| io.clone_ref(py)),
        })
    }

    pub(crate) fn receive_of(&self, py: Python<'_>) -> Option<Py<Receive>> {
        self.receive.as_ref().map(|r| r.clone_ref(py))
    }

    pub(crate) fn set_body(&self, py: Python<'_>, body: Py<PyBytes>) -> PyResult<()> {
        *self.body.borrow_mut(py)? = Some(body);
        Ok(())
    }
}

#[pymethods]
impl Request {
    #[getter]
    fn method(&self, py: Python<'_>) -> Py<PyString> {
        self.method.clone_ref(py)
    }

    /// The path, percent-decoded (with the root path, as ASGI's).
    #[getter]
    fn path(&self, py: Python<'_>) -> Py<PyString> {
        self.path.clone_ref(py)
    }

    #[getter]
    fn raw_path(&self, py: Python<'_>) -> Py<PyBytes> {
        self.raw_path.clone_ref(py)
    }

    #[getter]
    fn query_string(&self, py: Python<'_>) -> Py<PyBytes> {
        self.query.clone_ref(py)
    }

    #[getter]
    fn http_version(&self, py: Python<'_>) -> Py<PyString> {
        self.version.clone_ref(py)
    }

    #[getter]
    fn client(&self, py: Python<'_>) -> Py<PyAny> {
        self.client.clone_ref(py)
    }

    #[getter]
    fn server(&self, py: Python<'_>) -> Py<PyAny> {
        self.server.clone_ref(py)
    }

    #[getter]
    fn scheme(&self, py: Python<'_>) -> Py<PyString> {
        self.scheme.clone_ref(py)
    }

    #[getter]
    fn root_path(&self, py: Python<'_>) -> Py<PyString> {
        self.root_path.clone_ref(py)
    }

    /// `[(name, value), ...]`: lowercased names, as received (bytes).
    #[getter]
    fn headers(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        if let Some(h) = self.headers.borrow(py)?.as_ref() {
            return Ok(h.clone_ref(py));
        }
        let items = self.fields.iter().map(|(n, v)| PyTuple::new(py, [n.bind(py), v.bind(py)])).collect::<PyResult<Vec<_>>>()?;
        let list = PyList::new(py, items)?.unbind();
        *self.headers.borrow_mut(py)? = Some(list.clone_ref(py));
        Ok(list)
    }

    /// The first value of header `name` (any case), or `None`.
    fn header(&self, py: Python<'_>, name: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyBytes>>> {
        let name: Vec<u8> = match name.cast::<PyString>() {
            Ok(s) => s.to_str()?.as_bytes().to_ascii_lowercase(),
            Err(_) => name.cast::<PyBytes>().map_err(|_| PyTypeError::new_err("a header name is str or bytes"))?.as_bytes().to_ascii_lowercase(),
        };
        Ok(self.fields.iter().find(|(n, _)| n.bind(py).as_bytes() == name.as_slice()).map(|(_, v)| v.clone_ref(py)))
    }

    /// The whole body (synchronous handlers); `b""` for a request without one; `None` for an
    /// async handler's request with a body (`await read()`).
    #[getter]
    fn body(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        match self.body.borrow(py)?.as_ref() {
            Some(b) => Ok(Some(b.clone_ref(py))),
            None if !self.has_body => Ok(Some(PyBytes::new(py, b"").unbind())),
            None => Ok(None),
        }
    }

    /// `await request.read()`: the whole body (async handlers).
    fn read<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let helper = py.import(intern!(py, "ringloop.server.native"))?.getattr(intern!(py, "read_body"))?;
        helper.call1((self.receive.as_ref().map(|r| r.clone_ref(py)),))
    }

    /// `async for chunk in request.stream()`: the body as it arrives (async handlers).
    fn stream<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let helper = py.import(intern!(py, "ringloop.server.native"))?.getattr(intern!(py, "stream_body"))?;
        helper.call1((self.receive.as_ref().map(|r| r.clone_ref(py)),))
    }

    /// The `receive` of the request's cycle (the WSGI bridge reads the body through it).
    #[getter]
    fn _receive(&self, py: Python<'_>) -> Option<Py<Receive>> {
        self.receive.as_ref().map(|r| r.clone_ref(py))
    }

    /// Whether the request has a body to read (Content-Length > 0 or chunked).
    #[getter]
    fn _has_body(&self) -> bool {
        self.has_body
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("<Request {} {}>", self.method.bind(py), self.path.bind(py))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for (n, v) in &self.fields {
            visit.call(n)?;
            visit.call(v)?;
        }
        visit.call(&self.client)?;
        visit.call(&self.server)?;
        visit.call(&self.receive)?;
        visit.call(&self.io)?;
        if let Some(h) = self.headers.try_borrow_unattached() {
            visit.call(&*h)?;
        }
        Ok(())
    }
}

/// Write a handler's answer natively, if it can be (status, headers, and a `bytes`/`str`
/// body). `Ok(false)`: the body needs the Python writer (a file or an iterator).
pub(crate) fn respond(py: Python<'_>, stream: &Stream, answer: &Bound<'_, PyAny>) -> PyResult<bool> {
    let (status, headers, body) = if let Ok(r) = answer.cast::<Response>() {
        let r = r.get();
        (r.status, r.headers.as_ref().map(|h| h.clone_ref(py)), r.body.bind(py).clone())
    } else if answer.is_instance_of::<PyBytes>() || answer.is_instance_of::<PyString>() {
        (200, Some(text_plain(py)?), answer.clone())
    } else {
        return Err(PyTypeError::new_err(format!(
            "a native handler must return a ringloop Response, bytes or str, not {}",
            answer.get_type().name()?
        )));
    };
    let body = if body.is_none() {
        PyBytes::new(py, b"")
    } else if let Ok(s) = body.cast::<PyString>() {
        PyBytes::new(py, s.to_str()?.as_bytes())
    } else if let Ok(b) = body.cast::<PyBytes>() {
        b.clone()
    } else {
        return Ok(false);
    };
    let conn = stream.conn(py);
    stream.sink().start(conn, stream.id(), status, headers)?;
    stream.sink().body(conn, stream.id(), &body, false)?;
    Ok(true)
}

/// Call the synchronous handler `app` for `request` on `stream` and answer with what it
/// returned; an exception is logged and answered with 500 (or the connection closed).
pub(crate) fn call(py: Python<'_>, stream: &Stream, app: &Bound<'_, PyAny>, request: &Bound<'_, Request>) -> PyResult<()> {
    let answer = app.call1((request,));
    let outcome = answer.and_then(|a| respond(py, stream, &a).map(|done| (a, done)));
    let conn = stream.conn(py);
    match outcome {
        Ok((_, true)) => Ok(()),
        Ok((answer, false)) => {
            // A file or an iterator: the Python writer sends it, in a task.
            let send = Py::new(py, Send { stream: stream.clone_ref(py), ws: false })?;
            let coro = stream.sink().runner(conn)?.call_method1(intern!(py, "stream"), (send, answer))?;
            stream.sink().spawn(conn, &coro)
        }
        Err(e) => {
            if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) || e.is_instance_of::<pyo3::exceptions::PySystemExit>(py) {
                return Err(e);
            }
            stream.sink().log_error(conn, "Exception in native handler\n".to_owned(), e.into_value(py).bind(py))?;
            stream.sink().abandon(conn, stream.id())
        }
    }
}

#[pymethods]
impl Send {
    /// Write a native handler's answer if it can be written natively (see `respond`):
    /// `ringloop.server.native`'s writer asks it of the request's `send`.
    fn _respond(&self, py: Python<'_>, answer: &Bound<'_, PyAny>) -> PyResult<bool> {
        respond(py, &self.stream, answer)
    }
}
