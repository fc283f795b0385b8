//! `Handle` and `TimerHandle`: what `call_soon`/`call_later` return, with asyncio's API
//! (`cancel`, `cancelled`, `get_context`, `when`, `_run`, `_callback`, `_args`).
//!
//! A handle is created on every `call_soon` — the C Task calls it on every step, the C Future
//! for every done-callback (`call_soon(cb, fut, context=ctx)`) — so both classes are small
//! frozen objects: the callback, its arguments stored inline when there are none or one (the
//! common cases: no tuple is built, and the call is a direct vectorcall), the context, and an
//! atomic flag. They are two classes sharing one `HandleCore` rather than a subclass pair, so
//! that neither pays for the other's fields and the queues can tell them apart cheaply. (No
//! free-list: PyO3's takes a mutex per allocation and measured no faster than pymalloc.)
//! Cancelling drops the callback and its arguments at once, like asyncio, so a cancelled timer
//! does not keep large objects alive until it reaches the top of the heap.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::types::{PyBool, PyDict, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use super::gil_cell::GilCell;
use super::timers::CancelCount;

pub struct TimerInfo {
    pub when_ns: u64,
    pub when: f64,
    /// In the loop's heap (asyncio's `_scheduled`): cancelling counts towards a sweep only then.
    pub scheduled: AtomicBool,
    /// The heap's count of cancelled timers, bumped by a cancel while `scheduled`.
    pub heap_cancels: Arc<CancelCount>,
}

/// A callback's positional arguments.
pub enum Args {
    None,
    One(Py<PyAny>),
    Many(Py<PyTuple>),
}

impl Args {
    pub fn from_tuple(t: &Bound<'_, PyTuple>) -> Args {
        match t.len() {
            0 => Args::None,
            // SAFETY-free: index 0 exists.
            1 => Args::One(t.get_item(0).expect("len is 1").unbind()),
            _ => Args::Many(t.clone().unbind()),
        }
    }

    fn clone_ref(&self, py: Python<'_>) -> Args {
        match self {
            Args::None => Args::None,
            Args::One(a) => Args::One(a.clone_ref(py)),
            Args::Many(t) => Args::Many(t.clone_ref(py)),
        }
    }

    fn to_tuple(&self, py: Python<'_>) -> PyResult<Py<PyTuple>> {
        Ok(match self {
            Args::None => PyTuple::empty(py).unbind(),
            Args::One(a) => PyTuple::new(py, [a.bind(py)])?.unbind(),
            Args::Many(t) => t.clone_ref(py),
        })
    }

    fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        match self {
            Args::None => Ok(()),
            Args::One(a) => visit.call(a),
            Args::Many(t) => visit.call(t),
        }
    }
}

pub struct HandleCore {
    pub(crate) cb: GilCell<Option<(Py<PyAny>, Args)>>,
    pub(crate) context: Option<Py<PyAny>>,
    pub(crate) loop_: Py<PyAny>,
    pub(crate) cancelled: AtomicBool,
    pub(crate) timer: Option<TimerInfo>,
    /// Debug mode only: where the handle was created.
    pub(crate) source_tb: Option<Py<PyAny>>,
}

#[pyclass(module = "ringloop._core", frozen, weakref)]
pub struct Handle {
    pub(crate) core: HandleCore,
}

/// asyncio's `TimerHandle`: a handle with a deadline, ordered by it.
#[pyclass(module = "ringloop._core", frozen, weakref)]
pub struct TimerHandle {
    pub(crate) core: HandleCore,
}

/// Either kind, as the loop's queues hold them.
pub enum AnyHandle {
    Plain(Py<Handle>),
    Timer(Py<TimerHandle>),
}

impl AnyHandle {
    #[inline]
    pub fn core(&self) -> &HandleCore {
        match self {
            AnyHandle::Plain(h) => &h.get().core,
            AnyHandle::Timer(h) => &h.get().core,
        }
    }

    #[inline]
    pub fn as_any(&self) -> &Py<PyAny> {
        match self {
            AnyHandle::Plain(h) => h.as_any(),
            AnyHandle::Timer(h) => h.as_any(),
        }
    }

    pub fn clone_ref(&self, py: Python<'_>) -> AnyHandle {
        match self {
            AnyHandle::Plain(h) => AnyHandle::Plain(h.clone_ref(py)),
            AnyHandle::Timer(h) => AnyHandle::Timer(h.clone_ref(py)),
        }
    }

    /// Run the callback (see [`HandleCore::run`]).
    #[inline]
    pub fn run(&self, py: Python<'_>) -> PyResult<()> {
        self.core().run(py, self.as_any().bind(py))
    }
}

impl HandleCore {
    pub fn new(
        callback: Py<PyAny>,
        args: Args,
        context: Option<Py<PyAny>>,
        loop_: Py<PyAny>,
        timer: Option<TimerInfo>,
    ) -> Self {
        HandleCore {
            cb: GilCell::new(Some((callback, args))),
            context,
            loop_,
            cancelled: AtomicBool::new(false),
            timer,
            source_tb: None,
        }
    }

    #[inline]
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Mark cancelled and hand back the callback and arguments for the caller to drop outside
    /// any borrow of loop state.
    pub(crate) fn take_cancel(&self, py: Python<'_>) -> PyResult<Option<(Py<PyAny>, Args)>> {
        if self.cancelled.swap(true, Ordering::Relaxed) {
            return Ok(None);
        }
        if let Some(t) = &self.timer {
            if t.scheduled.load(Ordering::Relaxed) {
                t.heap_cancels.add();
            }
        }
        Ok(self.cb.borrow_mut(py)?.take())
    }

    /// Run the callback in its context. `Ok` unless it raised `SystemExit` or
    /// `KeyboardInterrupt`, which propagate out of the loop as in asyncio; every other
    /// exception goes to the loop's exception handler. `obj` is this handle's Python object.
    pub(crate) fn run(&self, py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<()> {
        // Own the callback for the duration of the call: it may cancel its own handle. (Bound,
        // not Py: dropping a Bound decrefs directly, a Py first checks a thread-local.)
        let Some((cb, args)) = self.cb.borrow(py)?.as_ref().map(|(c, a)| (c.bind(py).clone(), a.clone_ref(py))) else {
            return Ok(());
        };
        let result = match &self.context {
            None => call(py, &cb, &args),
            Some(ctx) => in_context(py, ctx.bind(py), || call(py, &cb, &args)),
        };
        drop((cb, args));
        match result {
            Ok(()) => Ok(()),
            Err(e) if e.is_instance_of::<PyKeyboardInterrupt>(py) || e.is_instance_of::<PySystemExit>(py) => Err(e),
            Err(e) => {
                let exc = e.into_value(py);
                self.loop_.call_method1(py, "_callback_error", (obj, exc))?;
                Ok(())
            }
        }
    }

    pub(crate) fn callback(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self.cb.borrow(py)?.as_ref().map(|(c, _)| c.clone_ref(py)))
    }

    fn args(&self, py: Python<'_>) -> PyResult<Option<Py<PyTuple>>> {
        let args = self.cb.borrow(py)?.as_ref().map(|(_, a)| a.clone_ref(py));
        args.map(|a| a.to_tuple(py)).transpose()
    }

    fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(cb) = self.cb.try_borrow_unattached() {
            if let Some((c, a)) = cb.as_ref() {
                visit.call(c)?;
                a.traverse(visit)?;
            }
        }
        visit.call(&self.context)?;
        visit.call(&self.source_tb)?;
        visit.call(&self.loop_)
    }

    fn clear(&self) {
        // The callback is what closes cycles (handle → bound method → object → handle); the
        // loop and context references can only go with the object itself.
        // SAFETY: tp_clear runs with the GIL held.
        let py = unsafe { Python::assume_attached() };
        let taken = self.cb.borrow_mut(py).ok().and_then(|mut c| c.take());
        drop(taken);
    }
}

#[inline]
fn call(py: Python<'_>, cb: &Bound<'_, PyAny>, args: &Args) -> PyResult<()> {
    let r = match args {
        // SAFETY: `cb` is a live owned reference; no arguments.
        Args::None => unsafe { ffi::PyObject_Vectorcall(cb.as_ptr(), std::ptr::null(), 0, std::ptr::null_mut()) },
        Args::One(a) => {
            let argv = [a.as_ptr()];
            // SAFETY: `argv` holds one live reference and outlives the call.
            unsafe { ffi::PyObject_Vectorcall(cb.as_ptr(), argv.as_ptr(), 1, std::ptr::null_mut()) }
        }
        // SAFETY: both are live owned references; PyObject_Call vectorcalls from the tuple's
        // item array for vectorcall-capable callables, so no copy is made.
        Args::Many(t) => unsafe { ffi::PyObject_Call(cb.as_ptr(), t.as_ptr(), std::ptr::null_mut()) },
    };
    if r.is_null() {
        Err(PyErr::fetch(py))
    } else {
        // SAFETY: a non-null result is a new reference that we own and release at once.
        unsafe { ffi::Py_DECREF(r) };
        Ok(())
    }
}

/// The Python methods both handle classes share, plus `$extra` items for one of them.
macro_rules! handle_pymethods {
    ($T:ident { $($extra:tt)* }) => {
        #[pymethods]
        impl $T {
            fn cancel(&self, py: Python<'_>) -> PyResult<()> {
                let dropped = self.core.take_cancel(py)?;
                drop(dropped);
                Ok(())
            }

            fn cancelled(&self) -> bool {
                self.core.is_cancelled()
            }

            fn get_context(&self, py: Python<'_>) -> Option<Py<PyAny>> {
                self.core.context.as_ref().map(|c| c.clone_ref(py))
            }

            /// asyncio's `Handle._run`: run now, routing errors to the exception handler.
            fn _run(slf: &Bound<'_, Self>) -> PyResult<()> {
                slf.get().core.run(slf.py(), slf.as_any())
            }

            #[getter]
            fn _callback(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
                self.core.callback(py)
            }

            #[getter]
            fn _args(&self, py: Python<'_>) -> PyResult<Option<Py<PyTuple>>> {
                self.core.args(py)
            }

            #[getter]
            fn _cancelled(&self) -> bool {
                self.core.is_cancelled()
            }

            #[getter]
            fn _loop(&self, py: Python<'_>) -> Py<PyAny> {
                self.core.loop_.clone_ref(py)
            }

            #[getter]
            fn _context(&self, py: Python<'_>) -> Option<Py<PyAny>> {
                self.get_context(py)
            }

            #[getter]
            fn _source_traceback(&self, py: Python<'_>) -> Option<Py<PyAny>> {
                self.core.source_tb.as_ref().map(|t| t.clone_ref(py))
            }

            fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
                crate::py::handle_repr(slf.py())?.call1((slf,))?.extract()
            }

            fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
                self.core.traverse(&visit)
            }

            fn __clear__(&self) {
                self.core.clear()
            }

            /// `{"callback", "args", "cancelled", "when"}`, for debugging and the watch.
            fn _info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                let d = PyDict::new(py);
                d.set_item("callback", self.core.callback(py)?)?;
                d.set_item("args", self.core.args(py)?)?;
                d.set_item("cancelled", self.core.is_cancelled())?;
                d.set_item("when", self.core.timer.as_ref().map(|t| t.when))?;
                Ok(d)
            }

            $($extra)*
        }
    };
}

handle_pymethods!(Handle {});

handle_pymethods!(TimerHandle {
    fn when(&self) -> f64 {
        self.core.timer.as_ref().map_or(f64::NAN, |t| t.when)
    }

    #[getter]
    fn _when(&self) -> f64 {
        self.when()
    }

    #[getter]
    fn _scheduled(&self) -> bool {
        self.core.timer.as_ref().is_some_and(|t| t.scheduled.load(Ordering::Relaxed))
    }

    fn __hash__(&self) -> u64 {
        self.when().to_bits()
    }

    fn __richcmp__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let Ok(other_t) = other.cast::<TimerHandle>() else {
            return Ok(py.NotImplemented());
        };
        let (a, b) = (slf.get().when(), other_t.get().when());
        let same = || -> PyResult<bool> {
            Ok(slf.as_any().is(other) || (a == b && same_callback(py, &slf.get().core, &other_t.get().core)?))
        };
        let r = match op {
            CompareOp::Lt => a < b,
            CompareOp::Le => a < b || same()?,
            CompareOp::Gt => a > b,
            CompareOp::Ge => a > b || same()?,
            CompareOp::Eq => same()?,
            CompareOp::Ne => !same()?,
        };
        Ok(PyBool::new(py, r).to_owned().into_any().unbind())
    }
});

/// asyncio compares timer handles equal when deadline, callback, arguments and cancelled state
/// all match.
fn same_callback(py: Python<'_>, a: &HandleCore, b: &HandleCore) -> PyResult<bool> {
    if a.is_cancelled() != b.is_cancelled() {
        return Ok(false);
    }
    // Compare owned references: __eq__ may run Python code that touches these handles.
    match (a.callback(py)?, a.args(py)?, b.callback(py)?, b.args(py)?) {
        (None, _, None, _) => Ok(true),
        (Some(fa), Some(aa), Some(fb), Some(ab)) => Ok(fa.bind(py).eq(fb.bind(py))? && aa.bind(py).eq(ab.bind(py))?),
        _ => Ok(false),
    }
}

/// `f()` with `ctx` (a `contextvars.Context`) entered, as `ctx.run(f)` but with no Python call.
pub(crate) fn in_context<R>(py: Python<'_>, ctx: &Bound<'_, PyAny>, f: impl FnOnce() -> PyResult<R>) -> PyResult<R> {
    // SAFETY: `ctx` is a live object; PyContext_Enter checks its type and sets an exception on
    // failure (e.g. already entered).
    if unsafe { ffi::PyContext_Enter(ctx.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let r = f();
    // SAFETY: paired with the successful Enter above, on the same thread.
    if unsafe { ffi::PyContext_Exit(ctx.as_ptr()) } != 0 {
        let e = PyErr::fetch(py);
        return r.and(Err(e));
    }
    r
}
