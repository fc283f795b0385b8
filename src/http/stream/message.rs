//! What an interface says to and hears from a stream, in Python's terms: the messages ASGI's
//! `receive` returns, the finished awaitable `send` returns, the response fields and body an
//! application gives, and `ClientDisconnected` (a write to a stream whose client is gone).
//! Nothing here knows the connection: the interfaces (`asgi`, `native`, `wsgi*`,
//! `websocket`) and the driver's side of a stream share it.

use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use pyo3::intern;

pyo3::create_exception!(
    _core,
    ClientDisconnected,
    PyOSError,
    "Writing to a connection the client has closed (ASGI spec 2.4: an OSError subclass)."
);

/// The shared finished future `send` returns (see the module docs).
pub(crate) fn done_future(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    static DONE: PyOnceLock<Py<Done>> = PyOnceLock::new();
    Ok(DONE.get_or_try_init(py, || Py::new(py, Done))?.bind(py).clone().into_any())
}

/// An awaitable that is already finished with `None`: what `send` returns while the transport
/// takes more. One object serves every call, and awaiting it allocates nothing (its iterator
/// ends without raising), where a finished `Future` makes an iterator per `await`. `done()` and
/// `result()` answer like a finished future's, for code that inspects what `send` returned.
#[pyclass(module = "ringloop._core", frozen)]
pub struct Done;

#[pymethods]
impl Done {
    fn __await__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self) -> Option<Py<PyAny>> {
        None
    }

    fn done(&self) -> bool {
        true
    }

    fn result(&self) {}
}

/// An awaitable already holding `value` (a `receive` message): a coroutine of
/// `ringloop.server.asgi.ready`, which returns it at its first step.
///
/// Why a coroutine: an awaitable of our own returns its value by raising `StopIteration`
/// from `__next__` (the await machinery of 3.11 and 3.12 asks a non-generator iterator for
/// its next item), and making, normalizing and freeing that exception cost ~1,000
/// instructions a `receive()`; a coroutine hands its return value back with no exception.
/// uvicorn's `receive` is an `async def` too: awaiting it is what applications expect.
pub(crate) fn ready<'py>(py: Python<'py>, _loop: &Bound<'py, PyAny>, value: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    static READY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    READY.import(py, "ringloop.server.asgi", "ready")?.call1((value,))
}

/// Set `fut`'s result unless it is already done (cancelled by the application).
pub(crate) fn resolve(fut: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = fut.py();
    if !fut.call_method0(intern!(py, "done"))?.is_truthy()? {
        fut.call_method1(intern!(py, "set_result"), (value,))?;
    }
    Ok(())
}

pub(crate) fn disconnect(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "type"), intern!(py, "http.disconnect"))?;
    Ok(d.into_any())
}

/// What `receive` found without waiting.
pub(crate) enum Got {
    Body(Py<PyBytes>, bool),
    Disconnect,
    Wait,
}

/// An `http.request` message: a copy of a template holding an empty last body, with `body`
/// and `more_body` set only when they differ (a copy clones the key table at once: an empty
/// body's message costs a third of three insertions).
pub(crate) fn body_message(py: Python<'_>, body: Py<PyBytes>, more: bool) -> PyResult<Bound<'_, PyAny>> {
    static TEMPLATE: PyOnceLock<Py<PyDict>> = PyOnceLock::new();
    let template = TEMPLATE.get_or_try_init(py, || -> PyResult<_> {
        let d = PyDict::new(py);
        d.set_item(intern!(py, "type"), intern!(py, "http.request"))?;
        d.set_item(intern!(py, "body"), PyBytes::new(py, b""))?;
        d.set_item(intern!(py, "more_body"), false)?;
        Ok(d.unbind())
    })?;
    let d = template.bind(py).copy()?;
    if !body.bind(py).as_bytes().is_empty() {
        d.set_item(intern!(py, "body"), body)?;
    }
    if more {
        d.set_item(intern!(py, "more_body"), true)?;
    }
    Ok(d.into_any())
}

/// Response headers as `(name, value)` bytes pairs: a list or tuple of 2-tuples (what every
/// framework sends) is read by index, anything else iterated.
pub(crate) fn header_fields<'py>(headers: &Bound<'py, PyAny>) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
    let pair = |item: &Bound<'py, PyAny>| -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let (n, v) = if let Ok(t) = item.cast::<PyTuple>() {
            if t.len() != 2 {
                return Err(PyValueError::new_err(format!("a response header must be a (name, value) pair, got {}", item.repr()?)));
            }
            (t.get_item(0)?, t.get_item(1)?)
        } else {
            let mut it = item.try_iter()?;
            match (it.next().transpose()?, it.next().transpose()?, it.next().transpose()?) {
                (Some(n), Some(v), None) => (n, v),
                _ => return Err(PyValueError::new_err(format!("a response header must be a (name, value) pair, got {}", item.repr()?))),
            }
        };
        let n = n.cast_into::<PyBytes>().map_err(|_| PyTypeError::new_err("response header names must be bytes"))?;
        let v = v.cast_into::<PyBytes>().map_err(|_| PyTypeError::new_err("response header values must be bytes"))?;
        Ok((n, v))
    };
    if let Ok(list) = headers.cast::<PyList>() {
        return list.iter().map(|i| pair(&i)).collect();
    }
    if let Ok(t) = headers.cast::<PyTuple>() {
        return t.iter().map(|i| pair(&i)).collect();
    }
    headers.try_iter()?.map(|i| pair(&i?)).collect()
}

/// A response body as `bytes` (`bytearray` and `memoryview` copied once).
pub(crate) fn body_bytes<'py>(obj: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    match obj.cast_into::<PyBytes>() {
        Ok(b) => Ok(b),
        Err(e) => {
            let obj = e.into_inner();
            let py = obj.py();
            let v = pyo3::buffer::PyBuffer::<u8>::get(&obj).map_err(|_| PyTypeError::new_err("the response body must be bytes"))?;
            Ok(PyBytes::new(py, &v.to_vec(py)?))
        }
    }
}
