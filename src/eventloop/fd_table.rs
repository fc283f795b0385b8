//! The fd table: the reader and writer handle of every watched fd, and the file object each
//! was registered through (see `fd_registry`, which keeps it). Data only: the loop's methods
//! that change it live in `fd_registry`.

use std::collections::HashMap;
use std::os::fd::RawFd;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyInt;
use pyo3::{PyTraverseError, PyVisit};

use super::handle::Handle;

/// `(reader, writer)` handles of one fd.
pub(crate) type FdHandles = (Option<Py<Handle>>, Option<Py<Handle>>);

#[derive(Default)]
pub(crate) struct FdCallbacks {
    pub(crate) reader: Option<Py<Handle>>,
    pub(crate) writer: Option<Py<Handle>>,
    /// The file object the last `add_reader`/`add_writer` named (`None` for a plain int).
    pub(crate) fileobj: Option<Py<PyAny>>,
}

/// Every fd with a reader or a writer.
#[derive(Default)]
pub(crate) struct FdRegistry(pub(crate) HashMap<RawFd, FdCallbacks>);

impl FdRegistry {
    pub(crate) fn get(&self, fd: &RawFd) -> Option<&FdCallbacks> {
        self.0.get(fd)
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        for e in self.0.values() {
            visit.call(&e.reader)?;
            visit.call(&e.writer)?;
            visit.call(&e.fileobj)?;
        }
        Ok(())
    }
}

/// asyncio's `selectors._fileobj_to_fd`: an int, or an object with `fileno()`.
pub(crate) fn fileobj_to_fd(obj: &Bound<'_, PyAny>) -> PyResult<RawFd> {
    let invalid = || PyValueError::new_err(format!("Invalid file object: {}", obj.repr().map(|r| r.to_string()).unwrap_or_default()));
    let fd: i64 = if obj.is_instance_of::<PyInt>() {
        obj.extract()?
    } else {
        obj.call_method0("fileno").map_err(|_| invalid())?.extract().map_err(|_| invalid())?
    };
    if fd < 0 || fd > i32::MAX as i64 {
        return Err(PyValueError::new_err(format!("Invalid file descriptor: {fd}")));
    }
    Ok(fd as RawFd)
}
