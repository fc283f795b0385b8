//! The stock-asyncio wrapper's two per-slice calls, `audit_slice_begin(eager)` and
//! `audit_slice_end(start_ns, slow_ns)`, as raw `METH_O` / `METH_FASTCALL` functions.
//!
//! They replace the two `time.monotonic_ns()` calls of the watch's `Handle._run` wrapper, so
//! they run for every callback of a watched asyncio loop. Made with `#[pyfunction]` they cost
//! ~300 instructions more per call than `time.monotonic_ns` (argument descriptions, a
//! thread-local pool, the trampoline: callgrind, 3 slices per task, +1.9 k per task); raw,
//! they cost about what the clock reading did.

use std::ffi::c_int;
use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;

use super::audit::{end_slice, set_eager};
use super::slice::set_in_slice;
use crate::reactor::sys::monotonic_ns;

unsafe extern "C" fn slice_begin(_module: *mut ffi::PyObject, eager: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: a METH_O function is called with the GIL held and a borrowed argument; True is
    // a singleton, so identity is truthiness for the bool the wrapper passes.
    let eager = unsafe { eager == ffi::Py_True() };
    // SAFETY: the GIL is held; returns a new reference or NULL with an exception set.
    unsafe { ffi::PyLong_FromUnsignedLongLong(slice_begins(eager)) }
}

/// A watched slice begins on this thread: the C hook keeps its I/O (handed to the sink at once
/// if `eager`). Returns its start (CLOCK_MONOTONIC ns). Shared by `audit_slice_begin` and
/// `AsyncioSlices.run`.
#[inline]
pub fn slice_begins(eager: bool) -> u64 {
    set_eager(eager);
    // A slice that raised out of its wrapper without ending cannot leave events behind.
    end_slice(false);
    set_in_slice(true);
    monotonic_ns()
}

/// The slice begun at `start` ends: returns its end and whether it lasted `slow_ns` or more;
/// a shorter one's buffered events are dropped here, with the frames they hold.
#[inline]
pub fn slice_ends(start: u64, slow_ns: u64) -> (u64, bool) {
    let end = monotonic_ns();
    set_in_slice(false);
    let slow = end.saturating_sub(start) >= slow_ns;
    if !slow {
        end_slice(false);
    }
    (end, slow)
}

unsafe extern "C" fn slice_end(
    _module: *mut ffi::PyObject,
    args: *mut *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
) -> *mut ffi::PyObject {
    if nargs != 2 {
        set_in_slice(false);
        // SAFETY: the GIL is held (METH_FASTCALL functions are called with it).
        let py = unsafe { Python::assume_attached() };
        pyo3::exceptions::PyTypeError::new_err("audit_slice_end(start_ns, slow_ns) takes 2 arguments").restore(py);
        return ptr::null_mut();
    }
    // SAFETY: nargs == 2: args[0] and args[1] are borrowed objects. PyLong_AsUnsignedLongLong
    // sets an exception for a non-int or a negative one, returning (unsigned)-1.
    let (start, slow) = unsafe { (ffi::PyLong_AsUnsignedLongLong(*args), ffi::PyLong_AsUnsignedLongLong(*args.offset(1))) };
    // SAFETY: the GIL is held.
    if (start == u64::MAX || slow == u64::MAX) && unsafe { !ffi::PyErr_Occurred().is_null() } {
        set_in_slice(false);
        return ptr::null_mut();
    }
    let (end, _) = slice_ends(start, slow);
    // SAFETY: the GIL is held; returns a new reference or NULL with an exception set.
    unsafe { ffi::PyLong_FromUnsignedLongLong(end) }
}

/// Add both functions to `module` (the native `_core`).
pub fn install(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let defs: [(&'static std::ffi::CStr, ffi::PyMethodDefPointer, c_int, &'static std::ffi::CStr); 2] = [
        (
            c"audit_slice_begin",
            ffi::PyMethodDefPointer { PyCFunction: slice_begin },
            ffi::METH_O,
            c"audit_slice_begin(eager)\n--\n\nA slice of a stock asyncio loop begins on this thread: the C audit hook keeps its I/O (eagerly handed to the sink if eager). Returns the start, CLOCK_MONOTONIC ns.",
        ),
        (
            c"audit_slice_end",
            ffi::PyMethodDefPointer { PyCFunctionFast: slice_end },
            ffi::METH_FASTCALL,
            c"audit_slice_end(start_ns, slow_ns)\n--\n\nThe slice begun at start_ns ends: its buffered I/O is dropped unless it lasted slow_ns or more (then audit_slice_events takes it). Returns the end, CLOCK_MONOTONIC ns.",
        ),
    ];
    for (name, meth, flags, doc) in defs {
        let def = Box::leak(Box::new(ffi::PyMethodDef { ml_name: name.as_ptr(), ml_meth: meth, ml_flags: flags, ml_doc: doc.as_ptr() }));
        // SAFETY: `def` is leaked, so it outlives the function object; the module is live.
        let f = unsafe { ffi::PyCMethod_New(def, module.as_ptr(), ptr::null_mut(), ptr::null_mut()) };
        if f.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: `f` is a new reference we own.
        let f = unsafe { Bound::from_owned_ptr(py, f) };
        module.add(name.to_str().expect("ASCII name"), f)?;
    }
    Ok(())
}
