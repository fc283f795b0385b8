//! What `ringloop serve --watch-threshold` keeps of a connection's requests, for both drivers:
//! the request the connection started last (`latest`), the one its host task runs (`hosted`),
//! and the latest task of a request's own with its request (`spawned`). Why they are kept and
//! how the watch reads them: `conn/watch.rs`; what HTTP/2 adds (a record per stream in
//! flight): `h2conn/watch.rs`. Each record is replaced by the next of its kind; the replaced
//! one is handed back, for the caller to drop once its borrow of the connection has ended
//! (dropping a scope may run finalizers).

use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

use crate::reactor::sys::monotonic_ns;

/// One request, as the watch needs it.
pub(crate) struct Recent {
    /// The ASGI scope (after the application has run: routers add `route`, `endpoint`), or
    /// the native `Request`.
    subject: Py<PyAny>,
    /// The request's number on its connection: HTTP/1.1's count (1 for the first), HTTP/2's
    /// stream id. With the connection's id, a request id unique in the worker.
    n: u64,
    /// When the request began (CLOCK_MONOTONIC ns).
    begun: u64,
}

impl Recent {
    fn clone_ref(&self, py: Python<'_>) -> Recent {
        Recent { subject: self.subject.clone_ref(py), n: self.n, begun: self.begun }
    }
}

/// One record: `(kind, task, subject, request number, begun ns)`, `kind` one of `"latest"`
/// (task `None`), `"hosted"` (task `None` here: the driver fills in its host task) and
/// `"spawned"`; HTTP/2 adds `"stream"` rows.
pub(crate) type Row = (&'static str, Option<Py<PyAny>>, Py<PyAny>, u64, u64);

/// A connection's records (see the module docs).
#[derive(Default)]
pub(crate) struct Records {
    latest: Option<Recent>,
    hosted: Option<Recent>,
    spawned: Option<(Py<PyAny>, Recent)>,
}

impl Records {
    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        for r in [&self.latest, &self.hosted].into_iter().flatten() {
            visit.call(&r.subject)?;
        }
        if let Some((task, r)) = &self.spawned {
            visit.call(task)?;
            visit.call(&r.subject)?;
        }
        Ok(())
    }

    /// Request `n` starts with `subject`; returns the record it replaces.
    pub(crate) fn started(&mut self, subject: &Bound<'_, PyAny>, n: u64) -> Option<Recent> {
        self.latest.replace(Recent { subject: subject.clone().unbind(), n, begun: monotonic_ns() })
    }

    /// The host task runs the latest request; returns the record it replaces.
    pub(crate) fn hosted(&mut self, py: Python<'_>) -> Option<Recent> {
        let latest = self.latest.as_ref().map(|r| r.clone_ref(py));
        std::mem::replace(&mut self.hosted, latest)
    }

    /// `task`, a task of its own, runs the latest request; returns the record it replaces.
    pub(crate) fn spawned(&mut self, py: Python<'_>, task: &Bound<'_, PyAny>) -> Option<(Py<PyAny>, Recent)> {
        let latest = self.latest.as_ref().map(|r| (task.clone().unbind(), r.clone_ref(py)));
        std::mem::replace(&mut self.spawned, latest)
    }

    /// The records as rows (see `Row`).
    pub(crate) fn rows(&self, py: Python<'_>) -> Vec<Row> {
        let mut rows = Vec::with_capacity(3);
        let mut push = |kind, task, r: &Recent| rows.push((kind, task, r.subject.clone_ref(py), r.n, r.begun));
        if let Some(r) = &self.latest {
            push("latest", None, r);
        }
        if let Some(r) = &self.hosted {
            push("hosted", None, r);
        }
        if let Some((t, r)) = &self.spawned {
            push("spawned", Some(t.clone_ref(py)), r);
        }
        rows
    }
}

/// Fill the `"hosted"` rows' task: the connection's host task's current one.
pub(crate) fn with_host_task(py: Python<'_>, rows: &mut [Row], host_task: Option<&Py<PyAny>>) {
    for row in rows.iter_mut().filter(|r| r.0 == "hosted") {
        row.1 = host_task.map(|t| t.clone_ref(py));
    }
}
