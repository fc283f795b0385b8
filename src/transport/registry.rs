//! `loop._transports`: fd -> transport, each held weakly, as asyncio's `WeakValueDictionary`.
//!
//! asyncio's selector loop keeps its transports in a `weakref.WeakValueDictionary` so that the
//! fd watchers and the `sock_*` methods refuse an fd a transport owns
//! (`_ensure_fd_no_transport`). Setting an item there runs Python: a `KeyedRef` subclass made
//! and initialised, and its callback run when the transport dies (~6 k instructions per
//! connection under callgrind, for a native accept path whose own set-up is ~25 k). This map
//! keeps plain weak references, with no callback, in a Rust table: a dead entry is dropped when
//! its fd is looked up or registered again. fds are reused lowest-first, so the table never
//! outgrows the process's peak number of open fds, as a `WeakValueDictionary`'s does not.
//!
//! It answers the mapping methods asyncio's code and ours use (`[]`, `get`, `pop`, `in`,
//! `del`, `len`, iteration, `keys`/`values`/`items`, `clear`); keys are fds (ints).

use std::collections::HashMap;

use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple, PyWeakrefReference};

use crate::eventloop::gil_cell::GilCell;

#[pyclass(module = "ringloop._core", frozen, mapping)]
pub struct TransportMap {
    refs: GilCell<HashMap<i64, Py<PyWeakrefReference>>>,
}

impl TransportMap {
    /// Registers `transport` under `fd` (the native accept path's call, with no Python between).
    pub fn insert(&self, py: Python<'_>, fd: i64, transport: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = PyWeakrefReference::new(transport)?.unbind();
        self.refs.borrow_mut(py)?.insert(fd, r);
        Ok(())
    }

    /// The live transport under `fd`; a dead entry found here is dropped.
    fn live<'py>(&self, py: Python<'py>, fd: i64) -> PyResult<Option<Bound<'py, PyAny>>> {
        let mut refs = self.refs.borrow_mut(py)?;
        let Some(r) = refs.get(&fd) else { return Ok(None) };
        match r.bind(py).upgrade() {
            Some(t) => Ok(Some(t)),
            None => {
                refs.remove(&fd);
                Ok(None)
            }
        }
    }

    /// The live transport under `fd`, taken out of the map (`pop`, `del`).
    fn take<'py>(&self, py: Python<'py>, fd: i64) -> PyResult<Option<Bound<'py, PyAny>>> {
        let r = self.refs.borrow_mut(py)?.remove(&fd);
        Ok(r.and_then(|r| r.bind(py).upgrade()))
    }

    /// `(fd, transport)` of every live entry, in fd order (a snapshot: the caller may mutate);
    /// the dead ones are dropped on the way.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Vec<(i64, Bound<'py, PyAny>)>> {
        let mut out = Vec::new();
        self.refs.borrow_mut(py)?.retain(|fd, r| match r.bind(py).upgrade() {
            Some(t) => {
                out.push((*fd, t));
                true
            }
            None => false,
        });
        out.sort_unstable_by_key(|(fd, _)| *fd);
        Ok(out)
    }
}

/// A key that is not an int is never in the map (asyncio's keys are fds).
fn key_of(key: &Bound<'_, PyAny>) -> Option<i64> {
    key.extract::<i64>().ok()
}

fn key_error(key: &Bound<'_, PyAny>) -> PyErr {
    PyKeyError::new_err(key.clone().unbind())
}

#[pymethods]
impl TransportMap {
    #[new]
    fn py_new() -> Self {
        TransportMap { refs: GilCell::new(HashMap::new()) }
    }

    fn __getitem__<'py>(&self, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = key.py();
        match key_of(key) {
            Some(fd) => self.live(py, fd)?.ok_or_else(|| key_error(key)),
            None => Err(key_error(key)),
        }
    }

    fn __setitem__(&self, key: &Bound<'_, PyAny>, transport: &Bound<'_, PyAny>) -> PyResult<()> {
        let fd = key_of(key).ok_or_else(|| {
            PyTypeError::new_err(format!("loop._transports: keys are file descriptors (int), not {}", key.get_type()))
        })?;
        self.insert(key.py(), fd, transport)
    }

    fn __delitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = key.py();
        let fd = key_of(key).ok_or_else(|| key_error(key))?;
        match self.take(py, fd)? {
            Some(_) => Ok(()),
            None => Err(key_error(key)),
        }
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        match key_of(key) {
            Some(fd) => Ok(self.live(key.py(), fd)?.is_some()),
            None => Ok(false),
        }
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.snapshot(py)?.len())
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.keys(py)?.as_any().try_iter().map(|it| it.into_any())
    }

    #[pyo3(signature = (key, default = None))]
    fn get<'py>(&self, key: &Bound<'py, PyAny>, default: Option<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let py = key.py();
        let found = match key_of(key) {
            Some(fd) => self.live(py, fd)?,
            None => None,
        };
        Ok(found.or(default).unwrap_or_else(|| py.None().into_bound(py)))
    }

    /// `pop(fd[, default])`: as a dict's, KeyError without a default.
    #[pyo3(signature = (key, *default))]
    fn pop<'py>(&self, key: &Bound<'py, PyAny>, default: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        let py = key.py();
        let found = match key_of(key) {
            Some(fd) => self.take(py, fd)?,
            None => None,
        };
        match (found, default.len()) {
            (Some(t), _) => Ok(t),
            (None, 0) => Err(key_error(key)),
            (None, 1) => default.get_item(0),
            (None, n) => Err(PyTypeError::new_err(format!("pop expected at most 2 arguments, got {}", n + 1))),
        }
    }

    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.snapshot(py)?.into_iter().map(|(fd, _)| fd))
    }

    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.snapshot(py)?.into_iter().map(|(_, t)| t))
    }

    fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.snapshot(py)?)
    }

    fn clear(&self, py: Python<'_>) -> PyResult<()> {
        // Dropped outside the borrow: a weakref's release runs no Python, but keep the rule.
        let old = std::mem::take(&mut *self.refs.borrow_mut(py)?);
        drop(old);
        Ok(())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("<TransportMap of {} live transports>", self.snapshot(py)?.len()))
    }
}
