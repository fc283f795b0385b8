//! The per-request stream: what an interface (ASGI, WSGI, native, WebSocket) holds of one
//! request while it runs, and the only way it reaches the connection. A `Stream` is the
//! connection (as a plain object), the stream's id on it and the `Sink` the driver implements:
//! body in, response out, disconnect, end. `message` holds what the interfaces and the driver
//! say to each other in Python's terms.
//!
//! `InFlight`: the worker's count of requests in their application (`--limit-concurrency`
//! answers 503 at the limit, a graceful shutdown waits for it to reach zero) goes up when a
//! request's cycle is made and down when the cycle is dropped — however it ends: response
//! complete, WebSocket session over or handed to the connection, connection lost, or the
//! connection collected with a request still open. One place, where there were four decrements
//! (each a path to forget) and one increment before a fallible step that could leak a count.

pub(crate) mod dispatch;
pub(crate) mod message;
pub(crate) mod records;
pub(crate) mod sink;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

pub(crate) use dispatch::{Dispatch, Opening, Spare};
pub(crate) use sink::{Peer, Progress, Sink};

/// One request on a connection, as an interface holds it. The id is atomic because an
/// interface's callables are handed on to the connection's next stream when nothing else
/// holds them (`asgi::Callables`).
pub(crate) struct Stream {
    conn: Py<PyAny>,
    id: AtomicU64,
    sink: &'static dyn Sink,
}

impl Stream {
    pub(crate) fn new(conn: Py<PyAny>, id: u64, sink: &'static dyn Sink) -> Stream {
        Stream { conn, id: AtomicU64::new(id), sink }
    }

    pub(crate) fn id(&self) -> u64 {
        self.id.load(Ordering::Relaxed)
    }

    /// Be the connection's stream `id` from now on (see the type's docs).
    pub(crate) fn renumber(&self, id: u64) {
        self.id.store(id, Ordering::Relaxed);
    }

    /// The connection and the sink, for a call: `s.sink.f(&conn, s.id(), …)`.
    pub(crate) fn conn<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        self.conn.bind(py)
    }

    pub(crate) fn sink(&self) -> &'static dyn Sink {
        self.sink
    }

    /// Another handle on the same stream (a native request's `send` beside its `receive`).
    pub(crate) fn clone_ref(&self, py: Python<'_>) -> Stream {
        Stream { conn: self.conn.clone_ref(py), id: AtomicU64::new(self.id()), sink: self.sink }
    }

    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.conn)
    }
}

/// One request counted in flight until this is dropped.
pub(crate) struct InFlight(Arc<AtomicU64>);

impl InFlight {
    pub(crate) fn enter(count: &Arc<AtomicU64>) -> InFlight {
        count.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(count))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_while_held() {
        let count = Arc::new(AtomicU64::new(0));
        let a = InFlight::enter(&count);
        let b = InFlight::enter(&count);
        assert_eq!(count.load(Ordering::Relaxed), 2);
        drop(a);
        assert_eq!(count.load(Ordering::Relaxed), 1);
        drop(b);
        assert_eq!(count.load(Ordering::Relaxed), 0);
    }
}
