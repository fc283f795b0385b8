//! The native half of the WSGI bridge (`ringloop.server.wsgi`): PEP 3333's environ built from a
//! `Request`, and a whole response written in one call. The pool that calls the application
//! is `wsgi_pool`, its `start_response` `wsgi_start`.
//!
//! Why native: built in Python, the environ of a small request cost more than the rest of the
//! server's work for it (15 µs: a dict of twenty entries, a percent-decoded path, a string
//! operation per header). Here it is a copy of a template dict (the keys every request shares)
//! plus this request's keys, with latin-1 strings made straight from the bytes received.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3::intern;

use super::asgi::Send;
use super::native::{open_request, Request};
use super::request::HeadCopy;
use super::stream::message::ClientDisconnected;
use super::stream::{Dispatch, Opening};
use super::proto::head::percent_decode;

/// The WSGI bridge's `Dispatch`: the application is submitted to the thread pool
/// (`wsgi_pool`) with the request, its `receive` and `send`.
pub(crate) static DISPATCH: Wsgi = Wsgi;

pub(crate) struct Wsgi;

impl Dispatch for Wsgi {
    fn start(&self, at: Opening<'_, '_>, head: &HeadCopy) -> PyResult<()> {
        let py = at.conn.py();
        let (request, send) = open_request(&at, head, true)?;
        let server = at.sink.server(at.conn);
        let receive = request.get().receive_of(py);
        let submit = server.wsgi_submit.as_ref().expect("a WSGI server has its bridge");
        submit.bind(py).call1((server.app.bind(py), request, receive, send))?;
        Ok(())
    }

    /// Never asked: the bridge reads the body through `receive`.
    fn collected(&self, _at: Opening<'_, '_>, _request: Py<PyAny>, _body: Py<PyBytes>) -> PyResult<()> {
        Ok(())
    }
}

/// `bytes` as PEP 3333's "bytes as str": each byte one code point (latin-1).
fn latin1<'py>(py: Python<'py>, b: &[u8]) -> Bound<'py, PyString> {
    match std::str::from_utf8(b) {
        Ok(s) if b.is_ascii() => PyString::new(py, s),
        _ => PyString::new(py, &b.iter().map(|&c| c as char).collect::<String>()),
    }
}

/// The environ key of a request header: `CONTENT_TYPE`, `CONTENT_LENGTH`, or `HTTP_` and the
/// name upper-cased with `-` as `_`.
fn environ_key(name: &[u8]) -> String {
    match name {
        b"content-type" => "CONTENT_TYPE".to_owned(),
        b"content-length" => "CONTENT_LENGTH".to_owned(),
        _ => {
            let mut k = String::with_capacity(5 + name.len());
            k.push_str("HTTP_");
            k.extend(name.iter().map(|&c| if c == b'-' { '_' } else { c.to_ascii_uppercase() as char }));
            k
        }
    }
}

/// One part of an address as the environ's string: a `str` host as it is, an `int` port
/// formatted here (`str()` through Python cost four calls a request).
fn address_part<'py>(part: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyString>> {
    if let Ok(s) = part.cast::<PyString>() {
        return Ok(s.clone());
    }
    if let Ok(port) = part.extract::<u16>() {
        return Ok(PyString::new(part.py(), &port.to_string()));
    }
    part.str()
}

/// `(host, port)` as the environ's two strings; a Unix socket's path (or nothing) as `("", "")`.
fn address_strings<'py>(addr: &Bound<'py, PyAny>) -> PyResult<Option<(Bound<'py, PyString>, Bound<'py, PyString>)>> {
    let Ok(t) = addr.cast::<PyTuple>() else { return Ok(None) };
    if t.len() < 2 {
        return Ok(None);
    }
    Ok(Some((address_part(t.get_item(0)?)?, address_part(t.get_item(1)?)?)))
}

/// The environ key of a request header as a Python `str`: the common ones made once.
fn environ_key_str<'py>(py: Python<'py>, name: &[u8]) -> Bound<'py, PyString> {
    match name {
        b"host" => intern!(py, "HTTP_HOST").clone(),
        b"user-agent" => intern!(py, "HTTP_USER_AGENT").clone(),
        b"accept" => intern!(py, "HTTP_ACCEPT").clone(),
        b"accept-encoding" => intern!(py, "HTTP_ACCEPT_ENCODING").clone(),
        b"accept-language" => intern!(py, "HTTP_ACCEPT_LANGUAGE").clone(),
        b"connection" => intern!(py, "HTTP_CONNECTION").clone(),
        b"content-length" => intern!(py, "CONTENT_LENGTH").clone(),
        b"content-type" => intern!(py, "CONTENT_TYPE").clone(),
        b"cookie" => intern!(py, "HTTP_COOKIE").clone(),
        b"authorization" => intern!(py, "HTTP_AUTHORIZATION").clone(),
        _ => PyString::new(py, &environ_key(name)),
    }
}

impl Request {
    /// PEP 3333's environ for this request: a copy of `template` (the keys every request shares:
    /// `wsgi.version`, `wsgi.errors`, …) with this request's keys and `wsgi.input` = `input`.
    pub(crate) fn wsgi_environ<'py>(&self, py: Python<'py>, template: &Bound<'py, PyDict>, input: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let env = template.copy()?;
        env.set_item(intern!(py, "REQUEST_METHOD"), self.method.bind(py))?;
        let root = self.root_path.bind(py);
        env.set_item(intern!(py, "SCRIPT_NAME"), root)?;
        let raw = self.raw_path.bind(py).as_bytes();
        let decoded = percent_decode(raw);
        let root_s = root.to_str()?;
        // The root path is matched on the decoded path as latin-1 text, as WSGI servers do.
        let path = if !root_s.is_empty() && root_s.chars().all(|c| (c as u32) < 256) {
            let root_bytes: Vec<u8> = root_s.chars().map(|c| c as u8).collect();
            decoded.strip_prefix(root_bytes.as_slice()).unwrap_or(&decoded)
        } else {
            &decoded
        };
        env.set_item(intern!(py, "PATH_INFO"), latin1(py, path))?;
        env.set_item(intern!(py, "QUERY_STRING"), latin1(py, self.query.bind(py).as_bytes()))?;
        match address_strings(self.server.bind(py))? {
            Some((host, port)) => {
                env.set_item(intern!(py, "SERVER_NAME"), host)?;
                env.set_item(intern!(py, "SERVER_PORT"), port)?;
            }
            None => {
                env.set_item(intern!(py, "SERVER_NAME"), intern!(py, ""))?;
                env.set_item(intern!(py, "SERVER_PORT"), intern!(py, ""))?;
            }
        }
        let protocol = match self.version.bind(py).to_str()? {
            "1.1" => intern!(py, "HTTP/1.1").clone(),
            "1.0" => intern!(py, "HTTP/1.0").clone(),
            "2" => intern!(py, "HTTP/2").clone(),
            v => PyString::new(py, &format!("HTTP/{v}")),
        };
        env.set_item(intern!(py, "SERVER_PROTOCOL"), protocol)?;
        env.set_item(intern!(py, "wsgi.url_scheme"), self.scheme.bind(py))?;
        if self.scheme.bind(py).to_str()? == "https" {
            env.set_item(intern!(py, "HTTPS"), intern!(py, "on"))?;
        }
        if let Some(io) = &self.io {
            io.get().tls_environ(py, &env)?;
        }
        env.set_item(intern!(py, "wsgi.input"), input)?;
        if let Some((host, port)) = address_strings(self.client.bind(py))? {
            env.set_item(intern!(py, "REMOTE_ADDR"), host)?;
            env.set_item(intern!(py, "REMOTE_PORT"), port)?;
        }
        for (n, v) in &self.fields {
            let name = n.bind(py).as_bytes();
            let key = environ_key_str(py, name);
            let value = latin1(py, v.bind(py).as_bytes());
            let joined = match env.get_item(&key)? {
                // Repeated fields joined as one (RFC 9110 5.3), cookies with "; " (RFC 6265).
                Some(prev) if !name.starts_with(b"content-") => {
                    let sep = if name == b"cookie" { "; " } else { "," };
                    PyString::new(py, &format!("{}{}{}", prev.str()?.to_str()?, sep, value.to_str()?))
                }
                _ => value,
            };
            env.set_item(key, joined)?;
        }
        Ok(env)
    }
}

/// A WSGI application's headers (`str` pairs, latin-1 by PEP 3333) as the `bytes` pairs the
/// response is written from.
fn latin1_headers<'py>(py: Python<'py>, headers: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    let encode = |s: &Bound<'py, PyAny>, what: &str| -> PyResult<Bound<'py, PyBytes>> {
        let s = s.cast::<PyString>().map_err(|_| PyTypeError::new_err(format!("WSGI header {what}s must be str, got {}", s.repr().map(|r| r.to_string()).unwrap_or_default())))?;
        let text = s.to_str()?;
        if text.is_ascii() {
            return Ok(PyBytes::new(py, text.as_bytes()));
        }
        let bytes: Option<Vec<u8>> = text.chars().map(|c| u8::try_from(c as u32).ok()).collect();
        bytes.map(|b| PyBytes::new(py, &b)).ok_or_else(|| PyValueError::new_err(format!("WSGI header {what} {text:?} is not latin-1")))
    };
    let out = PyList::empty(py);
    for item in headers.try_iter()? {
        let item = item?;
        let pair = item.cast::<PyTuple>().map_err(|_| PyTypeError::new_err("WSGI headers are (name, value) tuples"))?;
        if pair.len() != 2 {
            return Err(PyValueError::new_err(format!("a WSGI header must be a (name, value) pair, got {}", item.repr()?)));
        }
        out.append(PyTuple::new(py, [encode(&pair.get_item(0)?, "name")?, encode(&pair.get_item(1)?, "value")?])?)?;
    }
    Ok(out)
}

impl Send {
    /// A WSGI response known whole: its head and body written at once, on the loop thread. A
    /// client that left meanwhile is not an error; invalid headers fail the response as an
    /// exception of the application's would (500, logged).
    pub(crate) fn wsgi_respond(&self, py: Python<'_>, status: u16, headers: &Bound<'_, PyAny>, body: &Bound<'_, PyBytes>) -> PyResult<()> {
        let (s, conn) = (&self.stream, self.stream.conn(py));
        let written = latin1_headers(py, headers)
            .and_then(|h| s.sink().start(conn, s.id(), status, Some(h.into_any().unbind())))
            .and_then(|()| s.sink().body(conn, s.id(), body, false));
        match written {
            Ok(()) => Ok(()),
            Err(e) if e.is_instance_of::<ClientDisconnected>(py) => Ok(()),
            Err(e) => self.failed(py, &e.into_value(py).into_bound(py)),
        }
    }
}

#[pymethods]
impl Send {
    /// `wsgi_respond`, for the bridge's streaming path (a body that was not a list of `bytes`
    /// but ended up whole, e.g. a one-item list of `bytearray`).
    fn _wsgi_respond(&self, py: Python<'_>, status: u16, headers: &Bound<'_, PyAny>, body: &Bound<'_, PyBytes>) -> PyResult<()> {
        self.wsgi_respond(py, status, headers, body)
    }

    /// The latin-1 `bytes` pairs of a WSGI application's `str` headers (a streamed response's
    /// head is sent as an ASGI message).
    #[staticmethod]
    fn _wsgi_headers<'py>(py: Python<'py>, headers: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        latin1_headers(py, headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environ_keys() {
        assert_eq!(environ_key(b"content-type"), "CONTENT_TYPE");
        assert_eq!(environ_key(b"x-forwarded-for"), "HTTP_X_FORWARDED_FOR");
        Python::initialize();
        Python::attach(|py| {
            // The cached keys are the ones `environ_key` makes.
            for name in [&b"host"[..], b"user-agent", b"accept", b"accept-encoding", b"accept-language", b"connection", b"content-length", b"content-type", b"cookie", b"authorization"] {
                assert_eq!(environ_key_str(py, name).to_str().unwrap(), environ_key(name));
            }
        });
    }

    #[test]
    fn address_parts() {
        Python::initialize();
        Python::attach(|py| {
            let t = PyTuple::new(py, [PyString::new(py, "127.0.0.1").into_any(), 8080u16.into_pyobject(py).unwrap().into_any()]).unwrap();
            let (h, p) = address_strings(t.as_any()).unwrap().unwrap();
            assert_eq!((h.to_str().unwrap(), p.to_str().unwrap()), ("127.0.0.1", "8080"));
        });
    }
}
