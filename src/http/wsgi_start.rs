//! PEP 3333's `start_response`, natively: one `StartResponse` per request, which validates the
//! status line, keeps the status and headers until the head is written, and gives the
//! application its `write()` callable.
//!
//! What PEP 3333 asks, and how it is kept here:
//! - `start_response(status, headers)` a second time without `exc_info` is an error;
//! - with `exc_info` before the head was sent, the new status and headers replace the old;
//!   after it, `exc_info`'s exception is raised again (the response cannot be taken back);
//! - the head is sent with the first non-empty body chunk or when the body ends; `write(data)`
//!   sends at once (the worker waits until the loop took it, in `ringloop.server.wsgi`).
//!
//! The headers are kept as the application gave them (`str` pairs) and made latin-1 `bytes`
//! when the head is written (`wsgi::latin1_headers`): an invalid one then fails the response
//! with a 500, as an exception of the application's own would.

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use pyo3::{intern, PyTraverseError, PyVisit};

use super::asgi::Send;
use crate::eventloop::gil_cell::GilCell;

/// What `start_response` recorded.
#[derive(Default)]
struct Head {
    status: Option<u16>,
    headers: Option<Py<PyAny>>,
    /// The head left for the loop (with a body chunk, or with the whole response).
    sent: bool,
}

/// A response known whole (`StartResponse::whole`).
pub(crate) struct Whole<'py> {
    pub(crate) status: u16,
    pub(crate) headers: Py<PyAny>,
    pub(crate) body: Bound<'py, PyBytes>,
}

/// `start_response` for one request (callable), with `write` and the head it recorded.
#[pyclass(module = "ringloop._core", frozen)]
pub struct StartResponse {
    /// The Python bridge (`ringloop.server.wsgi.WSGIBridge`): `write()` goes through it.
    bridge: Py<PyAny>,
    send: Py<Send>,
    head: GilCell<Head>,
}

/// A WSGI status line's code: `"200 OK"` → 200 (three digits, then the end or a space).
fn status_code(status: &Bound<'_, PyAny>) -> PyResult<u16> {
    let text = status.cast::<PyString>().map_err(|_| {
        let kind = status.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        PyTypeError::new_err(format!("a WSGI status must be a str such as '200 OK', got {kind}"))
    })?;
    let s = text.to_str()?.as_bytes();
    match s {
        [a, b, c, rest @ ..] if a.is_ascii_digit() && b.is_ascii_digit() && c.is_ascii_digit() && (rest.is_empty() || rest[0] == b' ') => {
            Ok(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
        }
        _ => Err(PyValueError::new_err(format!("invalid WSGI status {}", status.repr()?))),
    }
}

impl StartResponse {
    pub(crate) fn new(bridge: Py<PyAny>, send: Py<Send>) -> StartResponse {
        StartResponse { bridge, send, head: GilCell::new(Head::default()) }
    }

    /// The whole response, when the application's result holds it: an exact `list` or `tuple`
    /// of `bytes` (what most frameworks return) and no head sent yet. Marks the head sent and
    /// returns them; `None`: the result is for the streaming path.
    /// A list of several pieces is joined, up to `JOIN_MAX`, so it leaves as one write with its
    /// length known.
    pub(crate) fn whole<'py>(&self, py: Python<'py>, result: &Bound<'py, PyAny>) -> PyResult<Option<Whole<'py>>> {
        /// Above this many bytes a list is streamed piece by piece instead of copied into one.
        const JOIN_MAX: usize = 256 * 1024;
        let items = if let Ok(l) = result.cast_exact::<PyList>() {
            l.as_sequence().clone()
        } else if let Ok(t) = result.cast_exact::<PyTuple>() {
            t.as_sequence().clone()
        } else {
            return Ok(None);
        };
        let body = match items.len()? {
            0 => PyBytes::new(py, b""),
            1 => match items.get_item(0)?.cast_into_exact::<PyBytes>() {
                Ok(b) => b,
                Err(_) => return Ok(None),
            },
            n => {
                let mut parts = Vec::with_capacity(n);
                let mut total = 0;
                for i in 0..n {
                    let Ok(b) = items.get_item(i)?.cast_into_exact::<PyBytes>() else { return Ok(None) };
                    total += b.as_bytes().len();
                    parts.push(b);
                }
                if total > JOIN_MAX {
                    return Ok(None);
                }
                let mut joined = Vec::with_capacity(total);
                for b in &parts {
                    joined.extend_from_slice(b.as_bytes());
                }
                PyBytes::new(py, &joined)
            }
        };
        let mut head = self.head.borrow_mut(py)?;
        if head.sent {
            return Ok(None);
        }
        let Some(status) = head.status else {
            return Err(PyRuntimeError::new_err("the WSGI application did not call start_response()"));
        };
        head.sent = true;
        let headers = head.headers.take().unwrap_or_else(|| PyList::empty(py).into_any().unbind());
        Ok(Some(Whole { status, headers, body }))
    }
}

#[pymethods]
impl StartResponse {
    #[pyo3(signature = (status, headers, exc_info = None))]
    fn __call__<'py>(slf: &Bound<'py, Self>, status: &Bound<'py, PyAny>, headers: &Bound<'py, PyAny>, exc_info: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let (sent, started) = {
            let head = this.head.borrow(py)?;
            (head.sent, head.status.is_some())
        };
        match exc_info {
            Some(info) if !info.is_none() && sent => {
                // Too late to change the response: the application's error goes on.
                let exc = info.get_item(1)?.call_method1(intern!(py, "with_traceback"), (info.get_item(2)?,))?;
                return Err(PyErr::from_value(exc));
            }
            // With `exc_info` before the head was sent: the new status and headers replace.
            Some(info) if !info.is_none() => {}
            _ if started => return Err(PyRuntimeError::new_err("start_response() called twice without exc_info")),
            _ => {}
        }
        let code = status_code(status)?;
        let old = {
            let mut head = this.head.borrow_mut(py)?;
            head.status = Some(code);
            head.headers.replace(headers.clone().unbind())
        };
        drop(old); // outside the borrow: the last reference may run a finalizer
        slf.getattr(intern!(py, "write"))
    }

    /// PEP 3333's `write(data)`: the head (first time) and `data`, sent before it returns.
    fn write(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        if !data.is_truthy()? {
            return Ok(());
        }
        let this = slf.get();
        this.bridge.bind(slf.py()).call_method1(intern!(slf.py(), "_write"), (slf, this.send.bind(slf.py()), data))?;
        Ok(())
    }

    /// The status given, or `None` before `start_response` was called.
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<Option<u16>> {
        Ok(self.head.borrow(py)?.status)
    }

    #[getter]
    fn head_sent(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.head.borrow(py)?.sent)
    }

    /// `(status, headers)` for the head about to be sent, marked sent; a `RuntimeError` if
    /// the application never called `start_response`.
    fn _take_head(&self, py: Python<'_>) -> PyResult<(u16, Py<PyAny>)> {
        let mut head = self.head.borrow_mut(py)?;
        let Some(status) = head.status else {
            return Err(PyRuntimeError::new_err("the WSGI application did not call start_response()"));
        };
        head.sent = true;
        let headers = head.headers.take().unwrap_or_else(|| PyList::empty(py).into_any().unbind());
        Ok((status, headers))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.bridge)?;
        visit.call(&self.send)?;
        if let Some(head) = self.head.try_borrow_unattached() {
            visit.call(&head.headers)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines() {
        Python::initialize();
        Python::attach(|py| {
            let code = |s: &str| status_code(PyString::new(py, s).as_any()).ok();
            assert_eq!(code("200 OK"), Some(200));
            assert_eq!(code("404"), Some(404));
            assert_eq!(code("599 Whatever it says"), Some(599));
            assert_eq!(code("20 OK"), None);
            assert_eq!(code("200OK"), None);
            assert_eq!(code("２００ OK"), None);
            assert!(status_code(PyBytes::new(py, b"200 OK").as_any()).is_err());
        });
    }
}
