//! `AsyncioSlices`: the per-slice state of a watched stock asyncio loop, and the one native call
//! the watch's `Handle._run` wrapper makes per callback.
//!
//! The wrapper used to keep this state on a Python `SliceState` and do the bookkeeping in its
//! own bytecode: a sequence bump, the handle, the start, the count and total, the slow test —
//! attribute loads and stores and int arithmetic, ~3,900 instructions a slice with its two
//! clock calls (callgrind), over 2 µs per task where a task has four slices. Here that state is
//! atomics and the whole slice is one raw `METH_O` call, `run(handle)`, bound to this object
//! (`runner()`), which marks the slice for the C audit hook as `audit_slice_begin`/`_end` do,
//! calls the original `Handle._run`, and tells Python whether it must report the slice.
//!
//! The watchdog thread reads `seq`, `start_ns` and `handle` while the loop thread runs (with
//! the GIL, from Python): the numbers are atomics so no lock is needed, as in `slice::SliceClock`.
//! The handle is a strong reference behind an `AtomicPtr`, only touched with the GIL held.

use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering::Relaxed};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::Borrowed;

use super::audit_fast::{slice_begins, slice_ends};

/// The slice state of one watched asyncio loop (`backends/asyncio_handles.py`'s `CoreSliceState`
/// shows it to the rest of the watch under `SliceState`'s attribute names).
#[pyclass(frozen, module = "ringloop._core")]
pub struct AsyncioSlices {
    seq: AtomicU64,
    /// CLOCK_MONOTONIC start of the running slice; 0 between slices.
    start_ns: AtomicU64,
    /// The running handle (a strong reference) or null; set and read with the GIL held.
    handle: AtomicPtr<ffi::PyObject>,
    count: AtomicU64,
    total_ns: AtomicU64,
    slow_ns: AtomicU64,
    strict: AtomicBool,
    /// The Python audit sink recorded I/O during the running slice (strict mode, or the
    /// Python hook's raw events): the wrapper must look at the slice even if it was short.
    io: AtomicBool,
    /// Start and end of the last slice `run` asked the wrapper to report.
    last_start: AtomicU64,
    last_end: AtomicU64,
    orig_run: Py<PyAny>,
}

impl AsyncioSlices {
    /// Replace the running handle (`h` an owned reference or null), dropping the previous one.
    fn set_handle(&self, h: *mut ffi::PyObject) {
        let old = self.handle.swap(h, Relaxed);
        if !old.is_null() {
            // SAFETY: `old` was an owned reference stored by this type; the GIL is held (every
            // caller is a Python call into this object, and the module declares gil_used).
            unsafe { ffi::Py_DECREF(old) };
        }
    }
}

impl Drop for AsyncioSlices {
    fn drop(&mut self) {
        let old = *self.handle.get_mut();
        if !old.is_null() {
            // SAFETY: objects of this class are deallocated with the GIL held; `old` is owned.
            unsafe { ffi::Py_DECREF(old) };
        }
    }
}

/// `run(handle)`: one slice of the loop. Returns None when nothing is left to do, True when the
/// wrapper must look at the slice (slow, or with I/O noted; the handle then stays set until it
/// clears it), False without running anything while the slice that was running when watching
/// began is still open (the wrapper closes it and calls again).
unsafe extern "C" fn run(slf: *mut ffi::PyObject, handle: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: a METH_O function is called with the GIL held.
    let py = unsafe { Python::assume_attached() };
    // SAFETY: `slf` is the `AsyncioSlices` this function was bound to by `runner`
    // (PyCMethod_New), alive while the function is.
    let me = unsafe { Borrowed::from_ptr(py, slf).cast_unchecked::<AsyncioSlices>() };
    let me = me.get();
    if me.start_ns.load(Relaxed) != 0 {
        // SAFETY: a new reference to the False singleton.
        return unsafe { ffi::Py_NewRef(ffi::Py_False()) };
    }
    me.seq.fetch_add(1, Relaxed);
    // SAFETY: `handle` is the borrowed argument; the stored reference is our own.
    me.set_handle(unsafe { ffi::Py_NewRef(handle) });
    me.io.store(false, Relaxed);
    let start = slice_begins(me.strict.load(Relaxed));
    me.start_ns.store(start, Relaxed);
    // SAFETY: the GIL is held; `orig_run` is the original `Handle._run`; the result is a new
    // reference or NULL with the exception set, which is passed on after the bookkeeping.
    let r = unsafe { ffi::PyObject_CallOneArg(me.orig_run.as_ptr(), handle) };
    let (end, slow) = slice_ends(start, me.slow_ns.load(Relaxed));
    let d = end.saturating_sub(start);
    me.start_ns.store(0, Relaxed);
    me.count.fetch_add(1, Relaxed);
    me.total_ns.fetch_add(d, Relaxed);
    let report = slow || me.io.load(Relaxed);
    if report {
        me.last_start.store(start, Relaxed);
        me.last_end.store(end, Relaxed);
    } else {
        me.set_handle(ptr::null_mut());
    }
    if r.is_null() {
        return r;
    }
    // SAFETY: `r` is a new reference we own; the GIL is held.
    unsafe {
        ffi::Py_DECREF(r);
        ffi::Py_NewRef(if report { ffi::Py_True() } else { ffi::Py_None() })
    }
}

struct MethodDef(ffi::PyMethodDef);
// SAFETY: the definition is immutable static data (pointers to static C strings and a function);
// CPython only reads it.
unsafe impl Sync for MethodDef {}

static RUN_DEF: MethodDef = MethodDef(ffi::PyMethodDef {
    ml_name: c"run".as_ptr(),
    ml_meth: ffi::PyMethodDefPointer { PyCFunction: run },
    ml_flags: ffi::METH_O,
    ml_doc: c"run(handle)\n--\n\nRun one callback of the watched loop through the original Handle._run, timing it. None: done; True: slow or with I/O, the wrapper reports it; False: the initial slice is still open, nothing ran.".as_ptr(),
});

#[pymethods]
impl AsyncioSlices {
    #[new]
    fn new(orig_run: Py<PyAny>) -> Self {
        AsyncioSlices {
            seq: AtomicU64::new(0),
            start_ns: AtomicU64::new(0),
            handle: AtomicPtr::new(ptr::null_mut()),
            count: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            slow_ns: AtomicU64::new(1 << 62),
            strict: AtomicBool::new(false),
            io: AtomicBool::new(false),
            last_start: AtomicU64::new(0),
            last_end: AtomicU64::new(0),
            orig_run,
        }
    }

    /// The raw `run(handle)` function bound to this object (what the wrapper calls per slice).
    fn runner<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        // SAFETY: RUN_DEF is static; `slf` is live and the function object keeps a reference
        // to it (its `self`). Returns a new reference or NULL with an exception set.
        let f = unsafe { ffi::PyCMethod_New(ptr::addr_of!(RUN_DEF.0).cast_mut(), slf.as_ptr(), ptr::null_mut(), ptr::null_mut()) };
        if f.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: `f` is a new reference we own.
        Ok(unsafe { Bound::from_owned_ptr(py, f) })
    }

    #[getter]
    fn seq(&self) -> u64 {
        self.seq.load(Relaxed)
    }
    #[setter]
    fn set_seq(&self, v: u64) {
        self.seq.store(v, Relaxed);
    }
    #[getter]
    fn start_ns(&self) -> u64 {
        self.start_ns.load(Relaxed)
    }
    #[setter]
    fn set_start_ns(&self, v: u64) {
        self.start_ns.store(v, Relaxed);
    }
    #[getter]
    fn handle(&self, py: Python<'_>) -> Py<PyAny> {
        let h = self.handle.load(Relaxed);
        if h.is_null() {
            py.None()
        } else {
            // SAFETY: `h` is the owned reference this object stores; with the GIL held it
            // cannot be released meanwhile, so a new reference to it is valid.
            unsafe { Bound::from_borrowed_ptr(py, h) }.unbind()
        }
    }
    #[setter(handle)]
    fn set_handle_py(&self, v: Option<Bound<'_, PyAny>>) {
        self.set_handle(v.map_or(ptr::null_mut(), Bound::into_ptr));
    }
    #[getter]
    fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }
    #[setter]
    fn set_count(&self, v: u64) {
        self.count.store(v, Relaxed);
    }
    #[getter]
    fn total_ns(&self) -> u64 {
        self.total_ns.load(Relaxed)
    }
    #[setter]
    fn set_total_ns(&self, v: u64) {
        self.total_ns.store(v, Relaxed);
    }
    #[getter]
    fn slow_ns(&self) -> u64 {
        self.slow_ns.load(Relaxed)
    }
    #[setter]
    fn set_slow_ns(&self, v: u64) {
        self.slow_ns.store(v, Relaxed);
    }
    #[getter]
    fn strict(&self) -> bool {
        self.strict.load(Relaxed)
    }
    #[setter]
    fn set_strict(&self, v: bool) {
        self.strict.store(v, Relaxed);
    }
    #[getter]
    fn io(&self) -> bool {
        self.io.load(Relaxed)
    }
    #[setter]
    fn set_io(&self, v: bool) {
        self.io.store(v, Relaxed);
    }
    /// `(start_ns, end_ns)` of the last slice `run` returned True for.
    #[getter]
    fn last(&self) -> (u64, u64) {
        (self.last_start.load(Relaxed), self.last_end.load(Relaxed))
    }
}
