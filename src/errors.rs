//! The one place where Rust errors become Python exceptions.
//!
//! `std::io::Error` maps to the matching `OSError` subclass (`ConnectionRefusedError`,
//! `BlockingIOError`, …) with errno and message, exactly as Python's own socket calls raise
//! them; errors without an errno (e.g. "used after fork") become `RuntimeError`.

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyErr;

pub fn os_error(e: std::io::Error) -> PyErr {
    if e.raw_os_error().is_some() {
        PyErr::from(e)
    } else {
        PyRuntimeError::new_err(format!("ringloop: {e}"))
    }
}
