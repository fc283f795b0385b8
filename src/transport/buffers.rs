//! Buffers both transports use: the per-thread receive scratch buffer, and exports of Python
//! bytes-like objects.
//!
//! Reads go into the scratch buffer and are then copied into an exact-size `bytes`: one
//! allocation of the right size per read, and no buffer lent to Python. One buffer per thread
//! serves every transport of the loop running there (stream and datagram alike).

use std::cell::RefCell;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};

use crate::reactor::RingRead;

/// asyncio's `max_size` for stream and datagram transports: the most one `recv` asks for.
pub const MAX_READ: usize = 256 * 1024;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0u8; MAX_READ]);
}

/// Run `f` with this thread's `MAX_READ`-byte scratch buffer.
pub fn with_scratch<R>(f: impl FnOnce(&mut [u8]) -> R) -> R {
    SCRATCH.with(|s| f(&mut s.borrow_mut()))
}

/// What asyncio's `write`/`sendto` accept: `bytes`, `bytearray` or `memoryview`.
pub fn is_bytes_like(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyBytes>() || obj.is_instance_of::<PyByteArray>() || obj.is_instance_of::<PyMemoryView>()
}

/// A contiguous export of a bytes-like object (read-only or writable, per `flags`), released
/// on drop. It holds a reference to the object while it lives.
pub struct View {
    buf: ffi::Py_buffer,
}

impl View {
    pub fn new(obj: &Bound<'_, PyAny>, flags: i32) -> PyResult<View> {
        // SAFETY: Py_buffer is plain data; PyObject_GetBuffer fills it or fails.
        let mut buf: ffi::Py_buffer = unsafe { std::mem::zeroed() };
        // SAFETY: `obj` is a live object and `buf` a writable Py_buffer; on success we own a
        // buffer export released in Drop.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut buf, flags) } != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(View { buf })
    }

    pub fn len(&self) -> usize {
        self.buf.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn ptr(&self) -> *mut u8 {
        self.buf.buf.cast()
    }

    pub fn bytes(&self) -> &[u8] {
        if self.is_empty() {
            return &[];
        }
        // SAFETY: the exporter guarantees `len` readable bytes at `buf` while the view is held.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len()) }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: releases the export taken in `new`, exactly once. Drop runs with the GIL held:
        // views never outlive the method that made them.
        unsafe { ffi::PyBuffer_Release(&mut self.buf) };
    }
}

/// A read still in the loop's ring buffers, copied into one exact-size `bytes` (the buffers go
/// back to the kernel as they are emptied).
pub fn ring_read_bytes<'py>(py: Python<'py>, mut read: RingRead) -> PyResult<Bound<'py, PyBytes>> {
    let total = read.len();
    // Not PyBytes::new_with, which zero-fills the buffer before we overwrite all of it.
    // SAFETY: a NULL source asks CPython for an uninitialised bytes of `total` bytes; the
    // result is checked, and every byte is written below before Python can see it.
    let raw = unsafe { ffi::PyBytes_FromStringAndSize(std::ptr::null(), total as ffi::Py_ssize_t) };
    if raw.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `raw` is a new reference to a bytes object we own.
    let bytes = unsafe { Bound::from_owned_ptr(py, raw) }.cast_into::<PyBytes>()?;
    // SAFETY: the object's buffer holds `total` bytes and nothing else references it yet.
    let dst = unsafe { std::slice::from_raw_parts_mut(ffi::PyBytes_AsString(raw) as *mut u8, total) };
    let copied = read.copy_to(dst);
    assert_eq!(copied, total, "a ring read copies out whole");
    Ok(bytes)
}
