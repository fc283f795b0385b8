//! `GilCell`: a `RefCell` whose every access is proven to hold the GIL.
//!
//! The loop's state is touched from the loop thread and, for `call_soon_threadsafe`, from other
//! threads — always while holding the GIL (it is Python code calling us). The GIL is the lock;
//! the `RefCell` flag turns accidental re-entrancy (a `__del__` that calls `call_soon` while we
//! hold a borrow) into a clean `RuntimeError` instead of undefined behaviour. Rule for callers:
//! never run Python code — including dropping the last reference to a Python object — while a
//! borrow is alive.

use std::cell::{Ref, RefCell, RefMut};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

pub struct GilCell<T>(RefCell<T>);

// SAFETY: all access to the RefCell (its flag and its contents) happens through methods that
// take a `Python<'_>` token, i.e. with the GIL held, so two threads never touch it at once. A
// `&mut T` obtained under the GIL may be used by the same thread after releasing the GIL
// (`py.detach`) because the RefCell stays marked as borrowed: any other thread that takes the
// GIL meanwhile sees the flag and gets an error. This build never runs without the GIL: the
// module declares `gil_used = true` (lib.rs), so a free-threaded interpreter re-enables the
// GIL when it imports it (docs/free-threading.md).
unsafe impl<T: Send> Sync for GilCell<T> {}

fn busy() -> PyErr {
    PyRuntimeError::new_err(
        "ringloop: the event loop's state is in use; is a non-thread-safe loop method being called \
         from another thread while the loop runs? (use call_soon_threadsafe)",
    )
}

impl<T> GilCell<T> {
    pub fn new(v: T) -> Self {
        GilCell(RefCell::new(v))
    }

    #[inline]
    pub fn borrow_mut<'a>(&'a self, _py: Python<'_>) -> PyResult<RefMut<'a, T>> {
        self.0.try_borrow_mut().map_err(|_| busy())
    }

    #[inline]
    pub fn borrow<'a>(&'a self, _py: Python<'_>) -> PyResult<Ref<'a, T>> {
        self.0.try_borrow().map_err(|_| busy())
    }

    /// For `__traverse__`, which may not touch Python but always runs with the GIL held.
    /// Returns `None` while a mutable borrow is alive: under-reporting references to the cycle
    /// collector only keeps objects alive longer, it never frees a live one.
    pub fn try_borrow_unattached(&self) -> Option<Ref<'_, T>> {
        self.0.try_borrow().ok()
    }

    /// For `__clear__`, which runs with the GIL held but without a `Python` token at hand.
    pub fn try_borrow_mut_unattached(&self) -> Option<RefMut<'_, T>> {
        self.0.try_borrow_mut().ok()
    }
}

impl<T: Default> Default for GilCell<T> {
    fn default() -> Self {
        GilCell::new(T::default())
    }
}
