//! `LoopCore.call_soon` as a raw `METH_FASTCALL | METH_KEYWORDS` method.
//!
//! CPython's C Task and Future call `loop.call_soon(cb, [arg,] context=ctx)` on every task step
//! and every future callback: it is the hottest entry point of the project. The generic PyO3
//! wrapper costs a type check of `self`, a `*args` tuple built even when empty, keyword
//! matching by string comparison, and thread-local bookkeeping. Here the method descriptor has
//! already checked `self`'s type, zero or one argument is stored inline (no tuple), and
//! `context` is recognised by pointer identity with the interned name (falling back to a string
//! comparison for non-interned names).

use std::ffi::c_int;
use std::ptr;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::core::LoopCore;
use super::handle::Args;

/// # Safety
/// `slf`, `args`, `nargs` and `kwnames` must be what CPython passed to a `METH_FASTCALL |
/// METH_KEYWORDS` method of LoopCore: `nargs` positional arguments followed by one value per
/// name in `kwnames`, all borrowed for the duration of the call.
unsafe fn call_soon_impl(
    py: Python<'_>,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    if nargs < 1 {
        return Err(PyTypeError::new_err("call_soon() missing 1 required positional argument: 'callback'"));
    }
    // SAFETY: the method descriptor already checked that `slf` is a LoopCore (or subclass).
    let slf = unsafe { Bound::from_borrowed_ptr(py, slf).cast_into_unchecked::<LoopCore>() };
    // SAFETY: nargs >= 1, so args[0] is a borrowed positional argument.
    let callback = unsafe { Bound::from_borrowed_ptr(py, *args) };
    let mut context = None;
    if !kwnames.is_null() {
        let interned = pyo3::intern!(py, "context");
        // SAFETY: a non-null kwnames is a tuple of str.
        let nkw = unsafe { ffi::PyTuple_GET_SIZE(kwnames) };
        for i in 0..nkw {
            // SAFETY: i < len(kwnames); its value follows the positionals in `args`.
            let (name, value) = unsafe { (ffi::PyTuple_GET_ITEM(kwnames, i), *args.offset(nargs + i)) };
            // SAFETY: both are str objects; PyUnicode_Compare cannot fail on two strs.
            if name == interned.as_ptr() || unsafe { ffi::PyUnicode_Compare(name, interned.as_ptr()) } == 0 {
                // SAFETY: `value` is borrowed for the call.
                context = Some(unsafe { Bound::from_borrowed_ptr(py, value) });
            } else {
                // SAFETY: `name` is borrowed for the call.
                let name = unsafe { Bound::from_borrowed_ptr(py, name) };
                return Err(PyTypeError::new_err(format!("call_soon() got an unexpected keyword argument '{name}'")));
            }
        }
    }
    let rest = match nargs {
        1 => Args::None,
        // SAFETY: args[1] is the borrowed second positional argument.
        2 => Args::One(unsafe { Bound::from_borrowed_ptr(py, *args.offset(1)) }.unbind()),
        _ => {
            // SAFETY: args[1..nargs] are the borrowed positional arguments after the callback.
            let items = unsafe { std::slice::from_raw_parts(args.offset(1), (nargs - 1) as usize) };
            // SAFETY: each item is a borrowed object pointer from that slice.
            Args::Many(PyTuple::new(py, items.iter().map(|&p| unsafe { Bound::from_borrowed_ptr(py, p) }))?.unbind())
        }
    };
    let h = LoopCore::call_soon_impl(&slf, &callback, rest, context)?;
    Ok(h.into_ptr())
}

unsafe extern "C" fn call_soon_fast(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: called by CPython with the GIL held.
    let py = unsafe { Python::assume_attached() };
    // SAFETY: PyVectorcall_NARGS only masks the offset flag off the count CPython passed.
    let nargs = unsafe { ffi::PyVectorcall_NARGS(nargsf as usize) };
    // A panic must not unwind into CPython; none is expected (borrows are checked, not
    // unwrapped), but one would become a Python exception here rather than an abort.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the arguments are exactly what CPython passed to this fastcall method.
        unsafe { call_soon_impl(py, slf, args, nargs, kwnames) }
    }));
    match r {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            e.restore(py);
            ptr::null_mut()
        }
        Err(_) => {
            pyo3::exceptions::PySystemError::new_err("ringloop: panic in call_soon").restore(py);
            ptr::null_mut()
        }
    }
}

/// Install the fast `call_soon` on the LoopCore type (replacing nothing: PyO3 defines none).
pub fn install(py: Python<'_>) -> PyResult<()> {
    let def = Box::leak(Box::new(ffi::PyMethodDef {
        ml_name: c"call_soon".as_ptr(),
        ml_meth: ffi::PyMethodDefPointer { PyCFunctionFastWithKeywords: call_soon_fast },
        ml_flags: (ffi::METH_FASTCALL | ffi::METH_KEYWORDS) as c_int,
        ml_doc: c"call_soon($self, callback, *args, context=None)\n--\n\nSchedule callback(*args) for the next loop iteration; returns a Handle.".as_ptr(),
    }));
    let ty = py.get_type::<LoopCore>();
    // SAFETY: `def` is leaked, so it outlives the type; the type pointer is live.
    let descr = unsafe { ffi::PyDescr_NewMethod(ty.as_type_ptr(), def) };
    if descr.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `descr` is a new reference we own.
    let descr = unsafe { Bound::from_owned_ptr(py, descr) };
    ty.setattr("call_soon", descr)
}
