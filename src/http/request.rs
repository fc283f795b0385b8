//! A request head as Python objects: `HeadCopy` takes what the application will see out of
//! `h1`'s receive buffer, and `scope` builds ASGI's `http` scope from it.
//!
//! Two steps because of the connection's rule (see `conn`): under the connection's borrow
//! only `str` and `bytes` are made (objects the cycle collector does not track, so making them
//! can run no Python code); the tuples, the list and the dict come after the borrow ends.
//! Keys are interned strings, common header names and methods cached objects, so a small GET
//! costs one `str` for its path, one `bytes` per header field and value, and the containers.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyString, PyTuple};
use pyo3::IntoPyObjectExt;

use super::proto::head::{percent_decode, Framing, Method, RequestHead, Version};

/// The values of the connection's previous request that the next may reuse (kept by the
/// interface: ASGI's per-connection scope, `scope::ConnScope`).
pub(crate) trait Previous {
    /// Its `raw_path` and `path` (a request for the same target reuses them).
    fn last_target(&self) -> Option<(&Py<PyBytes>, &Py<PyString>)>;
    /// Its header tuples (a request with the same field at the same place reuses its tuple).
    fn last_headers(&self) -> &[Py<PyTuple>];
}

/// A header field: its lowercased name and its value.
pub(crate) struct Field {
    pub(crate) name: Py<PyBytes>,
    pub(crate) value: Py<PyBytes>,
    /// The `(name, value)` tuple of the connection's previous request, when that request had
    /// this very field at the same place (`from_head`).
    tuple: Option<Py<PyTuple>>,
}

/// A request's fields, out of `h1`'s buffer.
pub(crate) struct HeadCopy {
    pub(crate) method: Py<PyString>,
    pub(crate) version: Version,
    pub(crate) path: Py<PyString>,
    pub(crate) raw_path: Py<PyBytes>,
    pub(crate) query: Py<PyBytes>,
    /// The header fields in the order received.
    pub(crate) headers: Vec<Field>,
    /// Forwarding headers, kept for `--proxy-headers`.
    pub(crate) forwarded_for: Option<Vec<u8>>,
    pub(crate) forwarded_proto: Option<Vec<u8>>,
    /// The request has a body to read (Content-Length > 0 or chunked).
    pub(crate) has_body: bool,
    /// Its Content-Length (`None` when chunked or absent).
    pub(crate) body_len: Option<u64>,
    /// It asks to upgrade to WebSocket (`Connection: upgrade`, `Upgrade: websocket`).
    pub(crate) websocket: bool,
    /// The client accepts response trailers (`te: trailers`): the scope announces
    /// `http.response.trailers` (`ConnScope::scope`) and trailers are sent.
    pub(crate) te_trailers: bool,
}

macro_rules! cached_str {
    ($py:expr, $s:literal) => {{
        static CELL: PyOnceLock<Py<PyString>> = PyOnceLock::new();
        CELL.get_or_init($py, || PyString::intern($py, $s).unbind()).clone_ref($py)
    }};
}

macro_rules! cached_bytes {
    ($py:expr, $s:literal) => {{
        static CELL: PyOnceLock<Py<PyBytes>> = PyOnceLock::new();
        CELL.get_or_init($py, || PyBytes::new($py, $s).unbind()).clone_ref($py)
    }};
}

fn method_str(py: Python<'_>, kind: Method, raw: &[u8]) -> Py<PyString> {
    match kind {
        Method::Get => cached_str!(py, "GET"),
        Method::Post => cached_str!(py, "POST"),
        Method::Head => cached_str!(py, "HEAD"),
        Method::Put => cached_str!(py, "PUT"),
        Method::Delete => cached_str!(py, "DELETE"),
        Method::Patch => cached_str!(py, "PATCH"),
        Method::Options => cached_str!(py, "OPTIONS"),
        // A method token is ASCII (h1 checked it).
        _ => PyString::new(py, std::str::from_utf8(raw).unwrap_or("")).unbind(),
    }
}

/// A header name, lowercased, as `bytes` (the common ones cached).
fn header_name(py: Python<'_>, name: &[u8]) -> Py<PyBytes> {
    let mut buf = [0u8; 64];
    let lower: &[u8] = if name.len() <= buf.len() {
        for (d, s) in buf.iter_mut().zip(name) {
            *d = s.to_ascii_lowercase();
        }
        &buf[..name.len()]
    } else {
        return PyBytes::new(py, &name.to_ascii_lowercase()).unbind();
    };
    match lower {
        b"host" => cached_bytes!(py, b"host"),
        b"user-agent" => cached_bytes!(py, b"user-agent"),
        b"accept" => cached_bytes!(py, b"accept"),
        b"accept-encoding" => cached_bytes!(py, b"accept-encoding"),
        b"accept-language" => cached_bytes!(py, b"accept-language"),
        b"connection" => cached_bytes!(py, b"connection"),
        b"content-length" => cached_bytes!(py, b"content-length"),
        b"content-type" => cached_bytes!(py, b"content-type"),
        b"cookie" => cached_bytes!(py, b"cookie"),
        b"authorization" => cached_bytes!(py, b"authorization"),
        b"cache-control" => cached_bytes!(py, b"cache-control"),
        b"origin" => cached_bytes!(py, b"origin"),
        b"referer" => cached_bytes!(py, b"referer"),
        b"x-request-id" => cached_bytes!(py, b"x-request-id"),
        _ => PyBytes::new(py, lower).unbind(),
    }
}

/// Percent-decode a path (ASGI's `path` is decoded, `raw_path` is not); invalid UTF-8 becomes
/// U+FFFD, as `urllib.parse.unquote` does.
fn decode_path(py: Python<'_>, raw: &[u8]) -> Py<PyString> {
    if !raw.contains(&b'%') {
        // h1 let only visible ASCII through: no decoding, no check.
        return PyString::new(py, std::str::from_utf8(raw).unwrap_or("")).unbind();
    }
    PyString::new(py, &String::from_utf8_lossy(&percent_decode(raw))).unbind()
}

impl HeadCopy {
    /// Copy what the application sees of `head` (under the connection's borrow: `str` and
    /// `bytes` only).
    /// `last`: the connection's previous ASGI request: its `raw_path` and `path` objects are
    /// reused when this request has the same target, and its header tuples where this request
    /// has the same field at the same place (see `scope`).
    pub(crate) fn from_head<'a>(py: Python<'_>, head: &impl RequestHead<'a>, root_path: &[u8], last: Option<&impl Previous>) -> HeadCopy {
        let path = head.path();
        let same = |raw: &[u8]| raw.len() == root_path.len() + path.len() && raw.starts_with(root_path) && &raw[root_path.len()..] == path;
        let (path_obj, raw_path) = if let Some((raw, decoded)) = last.and_then(Previous::last_target).filter(|(raw, _)| same(raw.bind(py).as_bytes())) {
            (decoded.clone_ref(py), raw.clone_ref(py))
        } else if root_path.is_empty() {
            (decode_path(py, path), PyBytes::new(py, path).unbind())
        } else {
            // As uvicorn: `path` and `raw_path` include the root path.
            let mut full = root_path.to_vec();
            full.extend_from_slice(path);
            (decode_path(py, &full), PyBytes::new(py, &full).unbind())
        };
        let query = head.query();
        let mut forwarded_for = None;
        let mut forwarded_proto = None;
        let authority = head.authority();
        let last_fields = last.map_or(&[][..], Previous::last_headers);
        let mut headers: Vec<Field> = head
            .headers()
            .enumerate()
            .map(|(i, (n, v))| {
                // An absolute-form target's authority replaces Host (h1 has checked that a
                // request has exactly one Host field).
                let v = match authority {
                    Some(a) if n.eq_ignore_ascii_case(b"host") => a,
                    _ => v,
                };
                if n.len() > 10 && n[0] | 0x20 == b'x' && n[1] == b'-' {
                    if n.eq_ignore_ascii_case(b"x-forwarded-for") {
                        forwarded_for = Some(v.to_vec());
                    } else if n.eq_ignore_ascii_case(b"x-forwarded-proto") {
                        forwarded_proto = Some(v.to_vec());
                    }
                }
                if let Some(t) = last_fields.get(i) {
                    let t = t.bind(py);
                    let item = |k| t.get_borrowed_item(k).ok().and_then(|b| b.cast::<PyBytes>().ok());
                    if let (Some(name), Some(value)) = (item(0), item(1)) {
                        // The name is lowercase already (we made it).
                        if name.as_bytes().eq_ignore_ascii_case(n) && value.as_bytes() == v {
                            let (name, value) = (name.to_owned().unbind(), value.to_owned().unbind());
                            return Field { name, value, tuple: Some(t.clone().unbind()) };
                        }
                    }
                }
                Field { name: header_name(py, n), value: PyBytes::new(py, v).unbind(), tuple: None }
            })
            .collect();
        if let Some(a) = authority {
            if head.header(b"host").is_none() {
                headers.push(Field { name: header_name(py, b"host"), value: PyBytes::new(py, a).unbind(), tuple: None });
            }
        }
        HeadCopy {
            method: method_str(py, head.method_kind(), head.method()),
            version: head.version(),
            path: path_obj,
            raw_path,
            query: if query.is_empty() { cached_bytes!(py, b"") } else { PyBytes::new(py, query).unbind() },
            headers,
            forwarded_for,
            forwarded_proto,
            has_body: head.framing() != Framing::None,
            body_len: match head.framing() {
                Framing::Length(n) => Some(n),
                _ => None,
            },
            te_trailers: head.te_trailers(),
            websocket: head.upgrade().is_some_and(|u| u.split(|&b| b == b',').any(|p| p.trim_ascii().eq_ignore_ascii_case(b"websocket"))),
        }
    }

    /// The `(name, value)` tuples of `scope["headers"]`, into `out` (emptied first).
    pub(crate) fn header_tuples(&self, py: Python<'_>, out: &mut Vec<Py<PyTuple>>) -> PyResult<()> {
        out.clear();
        for f in &self.headers {
            out.push(match &f.tuple {
                Some(t) => t.clone_ref(py),
                None => PyTuple::new(py, [f.name.bind(py).as_any(), f.value.bind(py).as_any()])?.unbind(),
            });
        }
        Ok(())
    }

    pub(crate) fn http_version(&self, py: Python<'_>) -> Py<PyString> {
        match self.version {
            Version::Http11 => cached_str!(py, "1.1"),
            Version::Http10 => cached_str!(py, "1.0"),
            Version::Http2 => cached_str!(py, "2"),
        }
    }
}

/// `(host, port)` of a socket address as asyncio reports it (IPv6's four-tuple cut to two,
/// as ASGI asks), or `None` (a Unix socket).
pub(crate) fn address(addr: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let py = addr.py();
    match addr.cast::<PyTuple>() {
        // An IPv4 `(host, port)` is already the scope's form (tuples are immutable).
        Ok(t) if t.len() == 2 => Ok(t.clone().into_any().unbind()),
        Ok(t) if t.len() > 2 => Ok(PyTuple::new(py, [t.get_item(0)?, t.get_item(1)?])?.into_any().unbind()),
        _ => Ok(py.None()),
    }
}

/// What a trusted proxy's headers say: the client and the scheme (each `None`: not said).
pub(crate) type Forwarded = (Option<Py<PyAny>>, Option<Py<PyString>>);

/// `--proxy-headers`: the client and scheme a trusted proxy says it forwarded for. The client
/// is the right-most address of `X-Forwarded-For` that is not itself a trusted proxy, or the
/// left-most when every one is (as uvicorn); the scheme is `X-Forwarded-Proto` when it is one
/// of ASGI's.
pub(crate) fn forwarded(py: Python<'_>, head: &HeadCopy, trusted: &Bound<'_, PyAny>) -> PyResult<Forwarded> {
    let mut client = None;
    if let Some(xff) = &head.forwarded_for {
        let text = String::from_utf8_lossy(xff);
        let hosts: Vec<&str> = text.split(',').map(str::trim).filter(|h| !h.is_empty()).collect();
        let mut pick = hosts.first().copied();
        for host in hosts.iter().rev() {
            if !trusted.call1((*host,))?.is_truthy()? {
                pick = Some(host);
                break;
            }
        }
        // Every hop trusted (`--forwarded-allow-ips '*'`): the original client is the first.
        if let Some(host) = pick {
            client = Some((host, 0u16).into_py_any(py)?);
        }
    }
    let scheme = head.forwarded_proto.as_deref().and_then(|p| {
        let p = String::from_utf8_lossy(p).trim().to_ascii_lowercase();
        matches!(p.as_str(), "http" | "https" | "ws" | "wss").then(|| PyString::new(py, &p).unbind())
    });
    Ok((client, scheme))
}

#[cfg(test)]
mod tests {
    #[test]
    fn percent_decoding_is_unquote() {
        pyo3::Python::initialize();
        pyo3::Python::attach(|py| {
            let d = |s: &str| super::decode_path(py, s.as_bytes()).to_string();
            assert_eq!(d("/a%20b"), "/a b");
            assert_eq!(d("/%E2%9C%93"), "/\u{2713}");
            assert_eq!(d("/%zz%4"), "/%zz%4", "invalid escapes stay");
            assert_eq!(d("/%ff"), "/\u{fffd}", "invalid UTF-8 is replaced");
            assert_eq!(d("/plain"), "/plain");
        });
    }
}
