//! ASGI's `http` scope (spec 2.4): the server's template, and each connection's own copy of
//! it (`ConnScope`) that a request's scope is copied from.
//!
//! Why a copy per connection: setting a key of a dict costs about 190 instructions on 3.11
//! (a lookup and `insertdict`), and a scope has eight keys whose values are the request's —
//! 1,500 of the ~20,600 instructions of an ASGI "hello world" request (callgrind). Most of
//! those values are the very same objects from one request of a connection to the next:
//! `server` and `client` are the connection's; `method`, `http_version`, `query_string`
//! (when empty) and `scheme` are cached objects for the common cases; and a request for the
//! same target as the connection's previous one gets that request's `path` and `raw_path`
//! objects again (`HeadCopy::from_head`, with `ConnScope`'s `Previous::last_target`; both immutable), and
//! a header field that is the same, at the same place, as the previous request's gets that
//! request's `(name, value)` tuple (`last_headers`: a client sends the same fields on each
//! request of a connection, `host` and `user-agent` at least). So
//! each connection keeps a dict with the values of its latest request: a request sets there
//! only the values that are not the objects it already holds, copies it (a dict copy clones
//! its key table at once) and adds `headers` — a new list per request (of tuples that may be
//! the previous request's), since an application may change the list — and `state` (a shallow copy of the lifespan state, as the spec asks).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::request::{HeadCopy, Previous};

/// Where the request came from and how, after `--proxy-headers`.
pub(crate) struct Origin<'a> {
    pub(crate) client: &'a Py<PyAny>,
    pub(crate) local: &'a Py<PyAny>,
    pub(crate) scheme: &'a Py<PyString>,
}

/// The keys every `http` scope has, in the order uvicorn builds them, with the values that
/// are the same for every request of a server; `ConnScope` copies it and fills in the rest.
pub(crate) fn scope_template<'py>(py: Python<'py>, scheme: &Bound<'py, PyString>, root_path: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyDict>> {
    // `asgi` and `extensions` are shared by every request: nothing in the spec lets an
    // application change them.
    let asgi = PyDict::new(py);
    asgi.set_item(intern!(py, "version"), intern!(py, "3.0"))?;
    asgi.set_item(intern!(py, "spec_version"), intern!(py, "2.4"))?;
    let extensions = PyDict::new(py);
    extensions.set_item(intern!(py, "http.response.pathsend"), PyDict::new(py))?;
    // 103 Early Hints on both versions (dropped for an HTTP/1.0 client, RFC 8297 §3).
    extensions.set_item(intern!(py, "http.response.early_hint"), PyDict::new(py))?;
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), intern!(py, "http"))?;
    d.set_item(intern!(py, "asgi"), asgi)?;
    d.set_item(intern!(py, "http_version"), intern!(py, "1.1"))?;
    d.set_item(intern!(py, "server"), py.None())?;
    d.set_item(intern!(py, "client"), py.None())?;
    d.set_item(intern!(py, "scheme"), scheme)?;
    d.set_item(intern!(py, "method"), py.None())?;
    d.set_item(intern!(py, "root_path"), root_path)?;
    d.set_item(intern!(py, "path"), py.None())?;
    d.set_item(intern!(py, "raw_path"), py.None())?;
    d.set_item(intern!(py, "query_string"), py.None())?;
    d.set_item(intern!(py, "headers"), py.None())?;
    d.set_item(intern!(py, "extensions"), extensions)?;
    Ok(d)
}

/// One connection's scope: the template with the values of its latest request, and those
/// values (`None`: not set yet, the template's).
pub(crate) struct ConnScope {
    dict: Py<PyDict>,
    version: Option<Py<PyString>>,
    server: Option<Py<PyAny>>,
    client: Option<Py<PyAny>>,
    scheme: Option<Py<PyString>>,
    method: Option<Py<PyString>>,
    path: Option<Py<PyString>>,
    raw_path: Option<Py<PyBytes>>,
    query: Option<Py<PyBytes>>,
    /// The `scope["headers"]` tuples of the latest request.
    headers: Vec<Py<PyTuple>>,
    /// `extensions` with `http.response.trailers`, for the requests that say `te: trailers`
    /// (made at the first one): the extension is announced only to a client that accepts
    /// trailers, and a request without `te` pays nothing for it.
    trailers_ext: Option<Py<PyDict>>,
}

/// `d[key] = value` unless `held` is `value` already.
fn put<T: pyo3::PyTypeInfo>(d: &Bound<'_, PyDict>, key: &Bound<'_, PyString>, held: &mut Option<Py<T>>, value: &Py<T>) -> PyResult<()> {
    if held.as_ref().is_some_and(|h| h.as_ptr() == value.as_ptr()) {
        return Ok(());
    }
    d.set_item(key, value.bind(d.py()))?;
    *held = Some(value.clone_ref(d.py()));
    Ok(())
}

impl Previous for ConnScope {
    fn last_target(&self) -> Option<(&Py<PyBytes>, &Py<PyString>)> {
        Some((self.raw_path.as_ref()?, self.path.as_ref()?))
    }

    fn last_headers(&self) -> &[Py<PyTuple>] {
        &self.headers
    }
}

impl ConnScope {
    pub(crate) fn new(template: &Bound<'_, PyDict>) -> PyResult<ConnScope> {
        Ok(ConnScope {
            dict: template.copy()?.unbind(),
            version: None,
            server: None,
            client: None,
            scheme: None,
            method: None,
            path: None,
            raw_path: None,
            query: None,
            headers: Vec::new(),
            trailers_ext: None,
        })
    }

    /// Over TLS, this connection's scopes carry the ASGI `tls` extension: its own copy of
    /// `extensions` (the template's is shared by every connection).
    pub(crate) fn with_tls(self, py: Python<'_>, io: Option<&Py<crate::transport::stream::StreamIO>>) -> PyResult<ConnScope> {
        let Some(tls) = io.map(|io| io.get().tls_extension(py)).transpose()?.flatten() else { return Ok(self) };
        let d = self.dict.bind(py);
        let ext = d.get_item(intern!(py, "extensions"))?.map(|e| e.cast_into::<PyDict>()).transpose()?.map(|e| e.copy()).transpose()?.unwrap_or_else(|| PyDict::new(py));
        ext.set_item(intern!(py, "tls"), tls)?;
        d.set_item(intern!(py, "extensions"), ext)?;
        Ok(self)
    }

    /// This connection's `extensions` with `http.response.trailers` added (see `trailers_ext`).
    fn trailers_ext<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if let Some(e) = &self.trailers_ext {
            return Ok(e.bind(py).clone());
        }
        let d = self.dict.bind(py);
        let ext = d.get_item(intern!(py, "extensions"))?.map(|e| e.cast_into::<PyDict>()).transpose()?.map(|e| e.copy()).transpose()?.unwrap_or_else(|| PyDict::new(py));
        ext.set_item(intern!(py, "http.response.trailers"), PyDict::new(py))?;
        self.trailers_ext = Some(ext.clone().unbind());
        Ok(ext)
    }

    /// The scope of the request `head` (with `state`: the lifespan state, copied).
    pub(crate) fn scope<'py>(&mut self, py: Python<'py>, head: &HeadCopy, origin: &Origin<'_>, state: Option<&Py<PyDict>>) -> PyResult<Bound<'py, PyDict>> {
        let d = self.dict.bind(py);
        put(d, intern!(py, "http_version"), &mut self.version, &head.http_version(py))?;
        put(d, intern!(py, "server"), &mut self.server, origin.local)?;
        put(d, intern!(py, "client"), &mut self.client, origin.client)?;
        put(d, intern!(py, "scheme"), &mut self.scheme, origin.scheme)?;
        put(d, intern!(py, "method"), &mut self.method, &head.method)?;
        put(d, intern!(py, "path"), &mut self.path, &head.path)?;
        put(d, intern!(py, "raw_path"), &mut self.raw_path, &head.raw_path)?;
        put(d, intern!(py, "query_string"), &mut self.query, &head.query)?;
        let scope = d.copy()?;
        if head.te_trailers {
            scope.set_item(intern!(py, "extensions"), self.trailers_ext(py)?)?;
        }
        // Filled in place: the vector keeps its allocation from one request to the next.
        head.header_tuples(py, &mut self.headers)?;
        scope.set_item(intern!(py, "headers"), PyList::new(py, &self.headers)?)?;
        if let Some(state) = state {
            scope.set_item(intern!(py, "state"), state.bind(py).copy()?)?;
        }
        Ok(scope)
    }

    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.dict)?;
        visit.call(&self.version)?;
        visit.call(&self.server)?;
        visit.call(&self.client)?;
        visit.call(&self.scheme)?;
        visit.call(&self.method)?;
        visit.call(&self.path)?;
        visit.call(&self.raw_path)?;
        visit.call(&self.query)?;
        for t in &self.headers {
            visit.call(t)?;
        }
        visit.call(&self.trailers_ext)
    }
}
