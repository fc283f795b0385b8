//! The end-of-iteration flush: what coalesces writes during an iteration and sends them once
//! its callbacks ran. The loop owns the list (`LoopCore::queue_flush`, run by `iteration`);
//! it knows nothing else of what it flushes.

use pyo3::prelude::*;
use pyo3::PyClass;

/// Something that coalesces writes during an iteration and sends them once its callbacks ran:
/// a stream transport, and later an HTTP connection. The loop owns the list (see
/// `LoopCore::queue_flush`); it knows nothing else of what it flushes.
pub trait FlushAtEnd: PyClass {
    /// Send what was coalesced. An error goes to the loop's exception handler, as asyncio does
    /// with an exception from a writer callback (`KeyboardInterrupt`/`SystemExit` leave the
    /// loop).
    fn flush_at_end(slf: &Bound<'_, Self>) -> PyResult<()>;
}

/// One entry of the flush list: the object, and its type's `flush_at_end`.
pub(crate) struct FlushEntry {
    pub(crate) obj: Py<PyAny>,
    pub(crate) flush: fn(&Bound<'_, PyAny>) -> PyResult<()>,
}

impl FlushEntry {
    pub(crate) fn new<T: FlushAtEnd>(obj: Py<T>) -> FlushEntry {
        FlushEntry { obj: obj.into_any(), flush: flush_as::<T> }
    }

    pub(crate) fn object(&self) -> &Py<PyAny> {
        &self.obj
    }
}

pub(crate) fn flush_as<T: FlushAtEnd>(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    T::flush_at_end(obj.cast::<T>()?)
}
