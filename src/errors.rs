//! The one place where Rust errors become Python exceptions.
//!
//! An `std::io::Error` with an errno becomes `OSError(errno, strerror)`: CPython's `OSError`
//! constructor itself picks the subclass for the errno (`ConnectionRefusedError`,
//! `BlockingIOError`, …), so `.errno` and `.strerror` are set exactly as Python's own socket
//! and os calls set them. (PyO3's built-in conversion keeps only the message, losing `.errno`.)
//! Errors without an errno (e.g. "used after fork") become `RuntimeError`.

use std::ffi::CStr;

use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::PyErr;

fn strerror(code: i32) -> String {
    // SAFETY: strerror returns a pointer to a static or thread-local NUL-terminated string.
    let p = unsafe { libc::strerror(code) };
    if p.is_null() {
        return format!("errno {code}");
    }
    // SAFETY: non-null, NUL-terminated, valid until the next strerror call on this thread.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

pub fn os_error(e: std::io::Error) -> PyErr {
    match e.raw_os_error() {
        Some(code) => PyOSError::new_err((code, strerror(code))),
        None => PyRuntimeError::new_err(format!("ringloop: {e}")),
    }
}
