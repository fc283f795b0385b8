//! `ringloop._core`: the native module. This file only wires the modules together.

pub mod errors;
pub mod loop_;
pub mod reactor;

use pyo3::prelude::*;

/// `(available, reason)`: whether io_uring can be used here, and if not, why.
#[pyfunction]
fn io_uring_available() -> (bool, String) {
    reactor::io_uring_available()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<loop_::core::LoopCore>()?;
    m.add_class::<loop_::handle::Handle>()?;
    m.add_class::<loop_::handle::TimerHandle>()?;
    m.add_function(wrap_pyfunction!(io_uring_available, m)?)?;
    loop_::fastcall::install(m.py())?;
    Ok(())
}
