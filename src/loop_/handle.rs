//! `Handle` and `TimerHandle`: what `call_soon`/`call_later` return, with asyncio's API
//! (`cancel`, `cancelled`, `get_context`, `when`, `_run`, `_callback`, `_args`).
//!
//! A handle is created on every `call_soon` — the C Task calls it on every step — so it is a
//! small frozen object: the callback and its argument tuple (the tuple CPython built for the
//! call, kept as is and handed straight to `PyObject_Call`, which vectorcalls from it), the
//! context, and an atomic flag. Cancelling drops the callback and its arguments at once, like
//! asyncio, so a cancelled timer does not keep large objects alive until it reaches the top of
//! the heap.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::types::{PyDict, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use super::core::LoopCore;
use super::gil_cell::GilCell;

pub struct TimerInfo {
    pub when_ns: u64,
    pub when: f64,
    /// In the loop's heap (asyncio's `_scheduled`): cancelling counts towards a sweep only then.
    pub scheduled: AtomicBool,
}

#[pyclass(module = "ringloop._core", frozen, subclass, weakref)]
pub struct Handle {
    pub(crate) cb: GilCell<Option<(Py<PyAny>, Py<PyTuple>)>>,
    pub(crate) context: Option<Py<PyAny>>,
    pub(crate) loop_: Py<PyAny>,
    pub(crate) cancelled: AtomicBool,
    pub(crate) timer: Option<TimerInfo>,
}

/// asyncio's `TimerHandle`: a `Handle` with a deadline, ordered by it.
#[pyclass(module = "ringloop._core", frozen, extends = Handle)]
pub struct TimerHandle;

impl Handle {
    pub fn new(
        callback: Py<PyAny>,
        args: Py<PyTuple>,
        context: Option<Py<PyAny>>,
        loop_: Py<PyAny>,
        timer: Option<TimerInfo>,
    ) -> Self {
        Handle { cb: GilCell::new(Some((callback, args))), context, loop_, cancelled: AtomicBool::new(false), timer }
    }

    #[inline]
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Mark cancelled and hand back the callback and arguments for the caller to drop outside
    /// any borrow of loop state.
    pub(crate) fn take_cancel(&self, py: Python<'_>) -> PyResult<Option<(Py<PyAny>, Py<PyTuple>)>> {
        if self.cancelled.swap(true, Ordering::Relaxed) {
            return Ok(None);
        }
        if let Some(t) = &self.timer {
            if t.scheduled.load(Ordering::Relaxed) {
                if let Ok(core) = self.loop_.bind(py).cast::<LoopCore>() {
                    core.get().timer_cancelled(py)?;
                }
            }
        }
        Ok(self.cb.borrow_mut(py)?.take())
    }
}

/// Run a handle's callback in its context. `Ok` unless the callback raised `SystemExit` or
/// `KeyboardInterrupt`, which propagate out of the loop as in asyncio; every other exception
/// goes to the loop's exception handler.
pub(crate) fn run_handle(py: Python<'_>, h: &Bound<'_, Handle>) -> PyResult<()> {
    let this = h.get();
    // Own the callback for the duration of the call: it may cancel its own handle.
    let Some((cb, args)) = this.cb.borrow(py)?.as_ref().map(|(c, a)| (c.clone_ref(py), a.clone_ref(py))) else {
        return Ok(());
    };
    let result = match &this.context {
        None => call(py, &cb, &args),
        Some(ctx) => {
            // SAFETY: `ctx` is a live object we own a reference to; PyContext_Enter checks its
            // type and sets an exception on failure (e.g. already entered).
            if unsafe { ffi::PyContext_Enter(ctx.as_ptr()) } != 0 {
                Err(PyErr::fetch(py))
            } else {
                let r = call(py, &cb, &args);
                // SAFETY: paired with the successful Enter above on the same thread.
                if unsafe { ffi::PyContext_Exit(ctx.as_ptr()) } != 0 {
                    let e = PyErr::fetch(py);
                    r.and(Err(e))
                } else {
                    r
                }
            }
        }
    };
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.is_instance_of::<PyKeyboardInterrupt>(py) || e.is_instance_of::<PySystemExit>(py) => Err(e),
        Err(e) => {
            let exc = e.into_value(py);
            this.loop_.call_method1(py, "_callback_error", (h, exc))?;
            Ok(())
        }
    }
}

#[inline]
fn call(py: Python<'_>, cb: &Py<PyAny>, args: &Py<PyTuple>) -> PyResult<()> {
    // SAFETY: both pointers are live owned references; PyObject_Call vectorcalls straight from
    // the tuple's item array for vectorcall-capable callables, so no copy is made.
    let r = unsafe { ffi::PyObject_Call(cb.as_ptr(), args.as_ptr(), std::ptr::null_mut()) };
    if r.is_null() {
        Err(PyErr::fetch(py))
    } else {
        // SAFETY: a non-null result is a new reference that we own and release at once.
        unsafe { ffi::Py_DECREF(r) };
        Ok(())
    }
}

#[pymethods]
impl Handle {
    fn cancel(&self, py: Python<'_>) -> PyResult<()> {
        let dropped = self.take_cancel(py)?;
        drop(dropped);
        Ok(())
    }

    fn cancelled(&self) -> bool {
        self.is_cancelled()
    }

    fn get_context(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.context.as_ref().map(|c| c.clone_ref(py))
    }

    /// asyncio's `Handle._run`: run now, routing errors to the exception handler.
    fn _run(slf: &Bound<'_, Self>) -> PyResult<()> {
        run_handle(slf.py(), slf)
    }

    #[getter]
    fn _callback(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self.cb.borrow(py)?.as_ref().map(|(c, _)| c.clone_ref(py)))
    }

    #[getter]
    fn _args(&self, py: Python<'_>) -> PyResult<Option<Py<PyTuple>>> {
        Ok(self.cb.borrow(py)?.as_ref().map(|(_, a)| a.clone_ref(py)))
    }

    #[getter]
    fn _cancelled(&self) -> bool {
        self.is_cancelled()
    }

    #[getter]
    fn _loop(&self, py: Python<'_>) -> Py<PyAny> {
        self.loop_.clone_ref(py)
    }

    #[getter]
    fn _context(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.get_context(py)
    }

    #[getter]
    fn _source_traceback(&self) -> Option<Py<PyAny>> {
        None
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let py = slf.py();
        let f = py.import("ringloop._handles")?.getattr("handle_repr")?;
        f.call1((slf,))?.extract()
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(cb) = self.cb.try_borrow_unattached() {
            if let Some((c, a)) = cb.as_ref() {
                visit.call(c)?;
                visit.call(a)?;
            }
        }
        visit.call(&self.context)?;
        visit.call(&self.loop_)?;
        Ok(())
    }

    fn __clear__(&self) {
        // Only the callback can be dropped through a shared reference; the loop and context
        // references are broken when the callback (which holds the cycle) goes.
        // SAFETY: tp_clear runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        let taken = self.cb.borrow_mut(py).ok().and_then(|mut c| c.take());
        drop(taken);
    }

    /// For debugging and the watch: `{"callback", "args", "cancelled", "when"}`.
    fn _info<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let py = slf.py();
        let this = slf.get();
        let d = PyDict::new(py);
        d.set_item("callback", this._callback(py)?)?;
        d.set_item("args", this._args(py)?)?;
        d.set_item("cancelled", this.is_cancelled())?;
        d.set_item("when", this.timer.as_ref().map(|t| t.when))?;
        Ok(d)
    }
}

fn when_of(h: &Bound<'_, PyAny>) -> Option<f64> {
    h.cast::<Handle>().ok().and_then(|h| h.get().timer.as_ref().map(|t| t.when))
}

#[pymethods]
impl TimerHandle {
    fn when(slf: &Bound<'_, Self>) -> f64 {
        slf.as_super().get().timer.as_ref().map_or(f64::NAN, |t| t.when)
    }

    #[getter]
    fn _when(slf: &Bound<'_, Self>) -> f64 {
        Self::when(slf)
    }

    #[getter]
    fn _scheduled(slf: &Bound<'_, Self>) -> bool {
        slf.as_super().get().timer.as_ref().is_some_and(|t| t.scheduled.load(Ordering::Relaxed))
    }

    fn __hash__(slf: &Bound<'_, Self>) -> u64 {
        Self::when(slf).to_bits()
    }

    fn __richcmp__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let Some(b) = when_of(other) else {
            return Ok(py.NotImplemented());
        };
        let a = Self::when(slf);
        let r = match op {
            CompareOp::Lt => a < b,
            CompareOp::Le => a < b || slf.as_any().eq(other)?,
            CompareOp::Gt => a > b,
            CompareOp::Ge => a > b || slf.as_any().eq(other)?,
            CompareOp::Eq => slf.as_any().is(other) || (a == b && same_callback(py, slf, other)?),
            CompareOp::Ne => !(slf.as_any().is(other) || (a == b && same_callback(py, slf, other)?)),
        };
        Ok(pyo3::types::PyBool::new(py, r).to_owned().into_any().unbind())
    }
}

/// asyncio compares timer handles equal when deadline, callback, arguments and cancelled state
/// all match.
fn same_callback(py: Python<'_>, a: &Bound<'_, TimerHandle>, b: &Bound<'_, PyAny>) -> PyResult<bool> {
    let a = a.as_super().get();
    let Ok(b) = b.cast::<Handle>() else { return Ok(false) };
    let b = b.get();
    if a.is_cancelled() != b.is_cancelled() {
        return Ok(false);
    }
    let (ca, cb) = (a.cb.borrow(py)?, b.cb.borrow(py)?);
    match (ca.as_ref(), cb.as_ref()) {
        (None, None) => Ok(true),
        (Some((fa, aa)), Some((fb, ab))) => Ok(fa.bind(py).eq(fb.bind(py))? && aa.bind(py).eq(ab.bind(py))?),
        _ => Ok(false),
    }
}
