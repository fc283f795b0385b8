//! What `ringloop.watch` asks of the loop: slice timing on or off with a hook for slow slices,
//! the I/O audit mode, the GIL-free stack sampler, and the slice totals for metrics. The
//! timing itself happens in `iteration::run_timed`; the clock and totals live with the watch
//! (`watch::slice`).

use std::sync::atomic::Ordering;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::core::LoopCore;
use crate::watch::sampler::{Sample, Sampler};
use crate::watch::slice::SliceStats;

/// `(event, args, frame, t_ns)` of one buffered audit event, as Python receives it.
use crate::watch::audit::AuditTuple;

#[pymethods]
impl LoopCore {
    /// Turn the watch's slice timing on (`threshold_ns > 0` and a hook) or off. Slices of at
    /// least `block_ns` (0: none) have the loop thread's clocks read as they end, for
    /// `_slice_end_readings`.
    #[pyo3(signature = (threshold_ns, on_slow = None, block_ns = 0))]
    fn _watch_set(&self, py: Python<'_>, threshold_ns: u64, on_slow: Option<Py<PyAny>>, block_ns: u64) -> PyResult<()> {
        let on = threshold_ns > 0 && on_slow.is_some();
        let old = std::mem::replace(&mut *self.watch.hook.borrow_mut(py)?, if on { on_slow } else { None });
        self.watch.threshold_ns.store(if on { threshold_ns } else { 0 }, Ordering::Relaxed);
        self.watch.block_ns.store(if on { block_ns } else { 0 }, Ordering::Relaxed);
        self.update_timing();
        drop(old);
        Ok(())
    }

    /// Forward I/O audit events raised inside timed slices to the sink given to
    /// `_core.audit_hook_install` (the watch's C-level audit source).
    ///
    /// `mode`: 0 off, 1 buffered (events reach Python only for slow slices, through
    /// `_slice_audit_events`), 2 eager (every event straight to the sink: strict mode).
    fn _watch_audit(&self, mode: u8) -> PyResult<()> {
        if mode > 2 {
            return Err(PyValueError::new_err("audit mode must be 0 (off), 1 (buffered) or 2 (eager)"));
        }
        self.watch.audit.store(mode, Ordering::Relaxed);
        Ok(())
    }

    /// `(monotonic ns, CPU-clock ns, run-delay ns)` of the loop thread as the slow slice just
    /// reported ended, if it was at least `block_ns` long (taken: a second call returns None).
    fn _slice_end_readings(&self, py: Python<'_>) -> PyResult<Option<(u64, u64, u64)>> {
        Ok(self.watch.block_end.borrow_mut(py)?.take())
    }

    /// The audit events of the slow slice just reported: `[(event, args, frame, t_ns)]`
    /// (taken: a second call returns `[]`).
    fn _slice_audit_events(&self, py: Python<'_>) -> PyResult<Vec<AuditTuple>> {
        let events = std::mem::take(&mut *self.watch.slow_audit.borrow_mut(py)?);
        Ok(events.into_iter().map(|r| (r.event(), r.args, r.frame, r.t_ns)).collect())
    }

    /// Start the GIL-free stack sampler: slices older than `arm_ns` are sampled every
    /// `interval_ns`. Returns False where this Python cannot be sampled natively.
    fn _watch_sampler_start(&self, py: Python<'_>, arm_ns: u64, interval_ns: u64) -> PyResult<bool> {
        let new = Sampler::start(self.watch.slice.clone(), self.watch.tstate.clone(), arm_ns, interval_ns);
        let ok = new.is_some();
        let old = std::mem::replace(&mut *self.watch.sampler.borrow_mut(py)?, new);
        drop(old);
        Ok(ok)
    }

    fn _watch_sampler_stop(&self, py: Python<'_>) -> PyResult<()> {
        let old = self.watch.sampler.borrow_mut(py)?.take();
        drop(old);
        Ok(())
    }

    /// Stack samples the native sampler took during slice `seq`:
    /// `[(t_ns, [(filename, lineno, function), ...outermost first]), ...]`.
    fn _native_samples(&self, py: Python<'_>, seq: u64) -> PyResult<Vec<Sample>> {
        Ok(self.watch.sampler.borrow(py)?.as_ref().map(|s| s.samples(seq)).unwrap_or_default())
    }

    /// Run delay (ns) the native sampler's signals caused the loop thread in slice `seq`
    /// (a sleeping thread woken to run the handler): not starvation.
    fn _native_signal_delay(&self, py: Python<'_>, seq: u64) -> PyResult<u64> {
        Ok(self.watch.sampler.borrow(py)?.as_ref().map_or(0, |s| s.signal_delay(seq)))
    }

    /// Set the histogram bounds (ns, ascending) and reset the slice totals.
    fn _slice_stats_reset(&self, py: Python<'_>, bounds_ns: Vec<u64>) -> PyResult<()> {
        *self.watch.stats.borrow_mut(py)? = SliceStats::with_bounds(bounds_ns);
        Ok(())
    }

    /// Forget the longest slice seen (the loop-lag gauge is "longest since the last scrape").
    fn _slice_max_reset(&self, py: Python<'_>) -> PyResult<()> {
        self.watch.stats.borrow_mut(py)?.max_ns = 0;
        Ok(())
    }

    /// `(count, total_ns, max_ns, hist)` over every slice timed since the last reset;
    /// `hist[i]` counts slices longer than bound `i`.
    fn _slice_stats(&self, py: Python<'_>) -> PyResult<(u64, u64, u64, Vec<u64>)> {
        let st = self.watch.stats.borrow(py)?;
        Ok((st.count, st.total_ns, st.max_ns, st.hist.clone()))
    }

    #[getter]
    fn _slice_seq(&self) -> u64 {
        self.watch.slice.seq.load(Ordering::Relaxed)
    }

    #[getter]
    fn _slice_start_ns(&self) -> u64 {
        self.watch.slice.start_ns.load(Ordering::Acquire)
    }
}
