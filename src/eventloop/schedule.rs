//! Scheduling callbacks: `call_soon` (its Python entry point is the raw fastcall wrapper in
//! `fastcall.rs`), `call_soon_threadsafe`, `call_later`, `call_at`, and the handles they make.
//!
//! Time is nanoseconds on CLOCK_MONOTONIC: a deadline is rounded up, never towards "earlier",
//! so a timer never fires early; `call_later(0)` lands in the heap like any timer, so it runs
//! after the callbacks already queued, as in asyncio.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::core::LoopCore;
use super::handle::{AnyHandle, Args, Handle, HandleCore, TimerHandle, TimerInfo};
use crate::reactor::sys::monotonic_ns;

pub(crate) fn seconds_to_ns(s: f64) -> u64 {
    // NaN and negative deadlines are due at once, as in asyncio; +inf (and anything past the
    // u64 range) is never due. ceil(): a deadline is never rounded towards "earlier".
    if s.is_nan() || s <= 0.0 {
        0
    } else if s >= u64::MAX as f64 / 1e9 {
        u64::MAX
    } else {
        (s * 1e9).ceil() as u64
    }
}

/// The deadline of `call_later(delay)`: `now + delay` in ns, never rounded earlier. Negative
/// delays stay ordered by their `when` (asyncio fires `call_later(-2)` before `call_later(-1)`);
/// NaN is due at once.
fn deadline_after(now: u64, delay: f64) -> u64 {
    if delay.is_nan() {
        0
    } else if delay >= 0.0 {
        now.saturating_add(seconds_to_ns(delay))
    } else {
        now.saturating_sub(seconds_to_ns(-delay))
    }
}

/// asyncio's Handle runs a callback scheduled without `context=` in a *copy* of the context
/// current when it was scheduled, so later changes by the scheduler do not leak into it.
/// (CPython's Task and Future always pass their context, so this copy is off the hot path.)
pub(crate) fn context_or_copy(py: Python<'_>, context: Option<Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
    match context {
        Some(c) if !c.is_none() => Ok(c.unbind()),
        _ => {
            // SAFETY: called with the GIL held; returns a new reference or NULL with an error.
            let p = unsafe { pyo3::ffi::PyContext_CopyCurrent() };
            if p.is_null() {
                return Err(PyErr::fetch(py));
            }
            // SAFETY: `p` is a new, owned reference.
            Ok(unsafe { Bound::from_owned_ptr(py, p) }.unbind())
        }
    }
}

/// Debug mode: where the handle was created, as asyncio records it (`Handle._source_traceback`,
/// shown by the exception handler). Called from Rust, `sys._getframe(0)` is already the Python
/// frame that called `call_soon`/`call_later`, so no frame needs trimming.
fn source_traceback(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let frame = crate::py::getframe(py)?.call1((0,))?;
    Ok(crate::py::extract_stack(py)?.call1((frame,))?.unbind())
}

impl LoopCore {
    /// `call_soon`; the Python-visible entry point is the raw fastcall wrapper in `fastcall.rs`.
    pub(crate) fn call_soon_impl(slf: &Bound<'_, Self>, callback: &Bound<'_, PyAny>, args: Args, context: Option<Bound<'_, PyAny>>) -> PyResult<Py<Handle>> {
        let this = slf.get();
        this.check_open()?;
        if this.debug.load(Ordering::Relaxed) {
            slf.call_method0("_check_thread")?;
        }
        Self::check_callback(slf, callback, "call_soon")?;
        let h = Self::new_handle(slf, callback, args, context)?;
        let py = slf.py();
        this.queues.borrow_mut(py)?.ready.push_back(AnyHandle::Plain(h.clone_ref(py)));
        Ok(h)
    }

    pub(crate) fn check_callback(slf: &Bound<'_, Self>, callback: &Bound<'_, PyAny>, method: &str) -> PyResult<()> {
        if slf.get().debug.load(Ordering::Relaxed) {
            // asyncio's exact messages for coroutines and non-callables.
            slf.call_method1("_check_callback", (callback, method))?;
        } else if !callback.is_callable() {
            return Err(PyTypeError::new_err(format!("a callable object was expected by {method}(), got {}", callback.repr()?)));
        }
        Ok(())
    }

    /// Run now the step a task just scheduled (its constructor calls `call_soon(task.__step)`),
    /// as 3.12's eager task start does: a coroutine that finishes without waiting runs to its
    /// end here. `task` must have been made just before, with no Python code in between (its
    /// step is then the last handle queued); otherwise its step stays queued. Must not run
    /// inside another task's step (asyncio refuses to enter a task there).
    pub(crate) fn run_task_step_now(slf: &Bound<'_, Self>, task: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = slf.py();
        let Some(h) = slf.get().queues.borrow_mut(py)?.ready.pop_back() else { return Ok(false) };
        let owner = match h.core().callback(py)? {
            Some(cb) => cb.bind(py).getattr(pyo3::intern!(py, "__self__")).ok(),
            None => None,
        };
        if !owner.is_some_and(|o| o.is(task)) {
            slf.get().queues.borrow_mut(py)?.ready.push_back(h);
            return Ok(false);
        }
        h.run(py)?;
        Ok(true)
    }

    /// A handle for `callback(*args)` in `context` (a copy of the current one if `None`).
    pub(crate) fn new_handle(slf: &Bound<'_, Self>, callback: &Bound<'_, PyAny>, args: Args, context: Option<Bound<'_, PyAny>>) -> PyResult<Py<Handle>> {
        let py = slf.py();
        let context = context_or_copy(py, context)?;
        let mut core = HandleCore::new(callback.clone().unbind(), args, Some(context), slf.clone().into_any().unbind(), None);
        if slf.get().debug.load(Ordering::Relaxed) {
            core.source_tb = Some(source_traceback(py)?);
        }
        Py::new(py, Handle { core })
    }

    /// What `call_later` and `call_at` share: asyncio's checks, in its order, then the timer.
    /// `deadline` turns the converted time argument into `(when, when_ns)`.
    #[allow(clippy::too_many_arguments)]
    fn schedule_timer(
        slf: &Bound<'_, Self>,
        time: &Bound<'_, PyAny>,
        if_none: &'static str,
        method: &str,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
        deadline: impl FnOnce(f64) -> (f64, u64),
    ) -> PyResult<Py<TimerHandle>> {
        if time.is_none() {
            return Err(PyTypeError::new_err(if_none));
        }
        slf.get().check_open()?;
        let time: f64 = time.extract()?;
        if slf.get().debug.load(Ordering::Relaxed) {
            slf.call_method0("_check_thread")?;
        }
        Self::check_callback(slf, callback, method)?;
        let (when, when_ns) = deadline(time);
        Self::schedule_at(slf, when, when_ns, callback, args, context)
    }

    fn schedule_at(
        slf: &Bound<'_, Self>,
        when: f64,
        when_ns: u64,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<TimerHandle>> {
        let py = slf.py();
        let context = context_or_copy(py, context)?;
        let heap_cancels = slf.get().queues.borrow(py)?.timers.cancel_count();
        let timer = TimerInfo { when_ns, when, scheduled: AtomicBool::new(true), heap_cancels };
        let mut core = HandleCore::new(callback.clone().unbind(), Args::from_tuple(args), Some(context), slf.clone().into_any().unbind(), Some(timer));
        if slf.get().debug.load(Ordering::Relaxed) {
            core.source_tb = Some(source_traceback(py)?);
        }
        let th = Py::new(py, TimerHandle { core })?;
        slf.get().queues.borrow_mut(py)?.timers.push(when_ns, th.clone_ref(py));
        Ok(th)
    }
}

#[pymethods]
impl LoopCore {
    #[pyo3(signature = (callback, *args, context = None))]
    fn call_soon_threadsafe(slf: &Bound<'_, Self>, callback: &Bound<'_, PyAny>, args: &Bound<'_, PyTuple>, context: Option<Bound<'_, PyAny>>) -> PyResult<Py<Handle>> {
        let this = slf.get();
        this.check_open()?;
        Self::check_callback(slf, callback, "call_soon_threadsafe")?;
        let h = Self::new_handle(slf, callback, Args::from_tuple(args), context)?;
        let py = slf.py();
        this.queues.borrow_mut(py)?.ready.push_back(AnyHandle::Plain(h.clone_ref(py)));
        if this.needs_wake.load(Ordering::SeqCst) {
            this.waker.wake();
        }
        Ok(h)
    }

    #[pyo3(signature = (delay, callback, *args, context = None))]
    fn call_later(
        slf: &Bound<'_, Self>,
        delay: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<TimerHandle>> {
        Self::schedule_timer(slf, delay, "delay must not be None", "call_later", callback, args, context, |delay| {
            let now = monotonic_ns();
            (now as f64 / 1e9 + delay, deadline_after(now, delay))
        })
    }

    #[pyo3(signature = (when, callback, *args, context = None))]
    fn call_at(
        slf: &Bound<'_, Self>,
        when: &Bound<'_, PyAny>,
        callback: &Bound<'_, PyAny>,
        args: &Bound<'_, PyTuple>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Py<TimerHandle>> {
        Self::schedule_timer(slf, when, "when cannot be None", "call_at", callback, args, context, |when| (when, seconds_to_ns(when)))
    }
}

#[cfg(test)]
mod tests {
    use super::{deadline_after, seconds_to_ns};

    #[test]
    fn negative_delays_keep_their_order() {
        let now = 10_000_000_000;
        assert!(deadline_after(now, -2.0) < deadline_after(now, -1.0));
        assert!(deadline_after(now, -1.0) < deadline_after(now, 0.0));
        assert_eq!(deadline_after(now, 0.0), now);
        assert_eq!(deadline_after(now, f64::NAN), 0);
        assert_eq!(deadline_after(now, -1e300), 0);
        assert_eq!(deadline_after(now, f64::INFINITY), u64::MAX);
    }

    #[test]
    fn deadlines_round_up_and_saturate() {
        assert_eq!(seconds_to_ns(f64::NAN), 0);
        assert_eq!(seconds_to_ns(-1.0), 0);
        assert_eq!(seconds_to_ns(0.0), 0);
        assert_eq!(seconds_to_ns(1e-10), 1);
        assert_eq!(seconds_to_ns(1.5), 1_500_000_000);
        assert_eq!(seconds_to_ns(f64::INFINITY), u64::MAX);
        assert_eq!(seconds_to_ns(1e300), u64::MAX);
    }
}
