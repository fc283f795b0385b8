//! What asyncio's code expects of a loop beyond scheduling: the attributes `BaseEventLoop`
//! reads and writes (`_closed`, `_stopping`, `_debug`, `slow_callback_duration`,
//! `_timer_cancelled_count`), `time()`, and the methods CPython's C `Future`/`Task` call on
//! every creation (`get_debug`, `create_future`, `create_task`) — native, so none of them costs
//! a Python frame.

use std::sync::atomic::Ordering;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::core::LoopCore;
use super::schedule::seconds_to_ns;
use crate::reactor::sys::monotonic_ns;

#[pymethods]
impl LoopCore {
    /// `"io_uring"` or `"epoll"`.
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend
    }

    /// Why `auto` fell back to epoll, or `None`.
    #[getter]
    fn backend_fallback_reason(&self) -> Option<String> {
        self.fallback_reason.clone()
    }

    #[getter]
    fn _closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
    #[setter(_closed)]
    fn set_closed_attr(&self, v: bool) {
        self.closed.store(v, Ordering::Relaxed);
    }

    #[getter]
    fn _stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }
    #[setter(_stopping)]
    fn set_stopping_attr(&self, v: bool) {
        self.stopping.store(v, Ordering::Relaxed);
    }

    #[getter]
    fn _debug(&self) -> bool {
        self.debug.load(Ordering::Relaxed)
    }
    #[setter(_debug)]
    fn set_debug_attr(&self, v: &Bound<'_, PyAny>) -> PyResult<()> {
        self.debug.store(v.is_truthy()?, Ordering::Relaxed);
        self.update_timing();
        Ok(())
    }

    #[getter]
    fn slow_callback_duration(&self) -> f64 {
        self.slow_callback_ns.load(Ordering::Relaxed) as f64 / 1e9
    }
    #[setter]
    fn set_slow_callback_duration(&self, v: f64) {
        self.slow_callback_ns.store(seconds_to_ns(v), Ordering::Relaxed);
    }

    #[getter]
    fn _timer_cancelled_count(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.queues.borrow(py)?.timers.cancelled())
    }
    #[setter(_timer_cancelled_count)]
    fn set_timer_cancelled_count_attr(&self, _v: usize) {
        // Owned by the native heap; accepted (and ignored) so BaseEventLoop.__init__ can run.
    }

    fn time(&self) -> f64 {
        monotonic_ns() as f64 / 1e9
    }

    /// Nanosecond clock of the loop (CLOCK_MONOTONIC, same as `time.monotonic_ns()`).
    fn time_ns(&self) -> u64 {
        monotonic_ns()
    }

    /// CPython's C Future and Task call `loop.get_debug()` every time one is created: keep it
    /// native (BaseEventLoop's is a Python method).
    fn get_debug(&self) -> bool {
        self.debug.load(Ordering::Relaxed)
    }

    /// `asyncio.Future(loop=self)`, without a Python frame.
    fn create_future(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let kw = PyDict::new(py);
        kw.set_item(intern!(py, "loop"), slf)?;
        Ok(crate::py::asyncio_future(py)?.call((), Some(&kw))?.unbind())
    }

    /// `asyncio.Task(coro, loop=self, name=name, context=context)` when no task factory is set
    /// and debug mode is off (the common case, and a Python frame saved per task); otherwise
    /// asyncio's own `BaseEventLoop.create_task`, which handles factories, debug source
    /// tracebacks and the keywords newer Pythons add.
    #[pyo3(signature = (coro, *, name = None, context = None, **kwargs))]
    fn create_task(
        slf: &Bound<'_, Self>,
        coro: &Bound<'_, PyAny>,
        name: Option<&Bound<'_, PyAny>>,
        context: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let simple = kwargs.is_none_or(|k| k.is_empty()) && !this.debug.load(Ordering::Relaxed) && slf.getattr(intern!(py, "_task_factory"))?.is_none();
        let kw = PyDict::new(py);
        if let Some(n) = name {
            kw.set_item(intern!(py, "name"), n)?;
        }
        if let Some(c) = context {
            kw.set_item(intern!(py, "context"), c)?;
        }
        if !simple {
            if let Some(k) = kwargs {
                kw.update(k.as_mapping())?;
            }
            let create_task = crate::py::base_event_loop(py)?.getattr(intern!(py, "create_task"))?;
            return Ok(create_task.call((slf, coro), Some(&kw))?.unbind());
        }
        this.check_open()?;
        kw.set_item(intern!(py, "loop"), slf)?;
        Ok(crate::py::asyncio_task(py)?.call((coro,), Some(&kw))?.unbind())
    }
}
