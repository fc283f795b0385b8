//! Python objects the native module looks up once: modules' classes and functions it calls.
//!
//! One place, so that a lookup is never repeated per call and a renamed attribute in a new
//! CPython shows up here only. (Method and attribute *names* stay `intern!` at their call
//! sites: pyo3 caches each one there, and the name next to the call reads better.)

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

macro_rules! cached {
    ($(#[$doc:meta])* $name:ident, $module:literal, $attr:literal) => {
        $(#[$doc])*
        pub fn $name(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
            static CELL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
            CELL.import(py, $module, $attr)
        }
    };
}

cached!(
    /// `asyncio.Future` (CPython's C type).
    asyncio_future, "asyncio", "Future"
);
cached!(
    /// `asyncio.Task` (CPython's C type).
    asyncio_task, "asyncio", "Task"
);
cached!(
    /// `asyncio.BufferedProtocol`, to pick how a stream transport delivers reads.
    buffered_protocol, "asyncio", "BufferedProtocol"
);
cached!(
    /// asyncio's logger, for the warnings asyncio's transports log.
    asyncio_logger, "asyncio.log", "logger"
);
cached!(
    /// `asyncio.BaseEventLoop`, whose `create_task` handles task factories and debug mode.
    base_event_loop, "asyncio.base_events", "BaseEventLoop"
);
cached!(
    /// `asyncio.format_helpers.extract_stack`, for debug mode's handle source tracebacks.
    extract_stack, "asyncio.format_helpers", "extract_stack"
);
cached!(
    /// `sys._getframe`.
    getframe, "sys", "_getframe"
);
cached!(
    /// `ringloop._handles.handle_repr`: asyncio's repr of a handle.
    handle_repr, "ringloop._handles", "handle_repr"
);
