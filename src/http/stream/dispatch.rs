//! `Dispatch`: how the driver starts an application on a stream. Each interface (ASGI, the
//! native handler API, WSGI) implements it, and `http::dispatch` picks the one of the chosen
//! interface; the driver calls it for every request head, never naming an interface. The
//! interface builds its request object (an ASGI scope, a native `Request`, a WSGI environ's
//! source) and calls the application, reaching the connection only through the stream's
//! `Sink` (`open`, `scope`, `peer`, `run`, `collect`, the spare callables).
//!
//! A function table (`&'static dyn Dispatch`) as `Sink` is: one indirect call per request,
//! where the `match` it replaced was a compare and a jump (the difference is below
//! callgrind's noise on a ~11,000-instruction request, see the commit that made it).

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{PyTraverseError, PyVisit};

use super::Sink;
use crate::http::request::HeadCopy;

/// The stream a request is started on: the connection (as a plain object), its sink and the
/// stream's id.
pub(crate) struct Opening<'a, 'py> {
    pub(crate) conn: &'a Bound<'py, PyAny>,
    pub(crate) sink: &'static dyn Sink,
    pub(crate) id: u64,
}

/// What an interface keeps on a connection for its next request (ASGI: the previous
/// request's `receive`, `send` and bound `send`, reused when no one else holds them). Opaque
/// to the driver, which only keeps it, visits it for the collector and drops it.
pub(crate) struct Spare(pub(crate) [Py<PyAny>; 3]);

impl Spare {
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        self.0.iter().try_for_each(|o| visit.call(o))
    }
}

pub(crate) trait Dispatch: Sync {
    /// Start the application for the request `head` on the stream `at` (the driver has not
    /// opened it: `Sink::open` does, once the interface has what it needs). Errors the
    /// application raises are the interface's to answer; an `Err` here is the server's own.
    fn start(&self, at: Opening<'_, '_>, head: &HeadCopy) -> PyResult<()>;
    /// The body a request asked the driver to read whole (`Sink::collect`) is: call the
    /// application.
    fn collected(&self, at: Opening<'_, '_>, request: Py<PyAny>, body: Py<PyBytes>) -> PyResult<()>;
}
