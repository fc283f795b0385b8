//! The slice clock: what the watch and its watchdog read about the callback running now, and
//! the totals over every timed slice. A *slice* is one callback run by the loop's dispatcher
//! (`eventloop::iteration::run_timed` times it).
//!
//! - `IN_SLICE`: whether this thread is inside a watched slice (read by the audit hook);
//! - `SliceClock`: the running slice's sequence number and start, shared with the sampler's
//!   thread, which never takes the GIL — hence atomics;
//! - `SliceStats`: count, total, longest and a histogram, for the watch's metrics
//!   (`ringloop_watch_slice_duration_seconds`).

use std::cell::Cell;
use std::sync::atomic::AtomicU64;

thread_local! {
    static IN_SLICE: Cell<bool> = const { Cell::new(false) };
}

/// Set for the duration of one callback by the dispatcher when the loop's audit is on.
#[inline]
pub fn set_in_slice(v: bool) {
    IN_SLICE.with(|c| c.set(v));
}

#[inline]
pub fn in_slice() -> bool {
    IN_SLICE.with(|c| c.get())
}

/// The slice running now, as other threads see it.
#[derive(Default)]
pub struct SliceClock {
    pub seq: AtomicU64,
    /// Start of the running slice in CLOCK_MONOTONIC ns; 0 between slices.
    pub start_ns: AtomicU64,
}

/// Totals over every timed slice.
#[derive(Default)]
pub struct SliceStats {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Cumulative: `hist[i]` counts slices longer than `bounds[i]` (ascending bounds).
    pub bounds: Vec<u64>,
    pub hist: Vec<u64>,
}

impl SliceStats {
    /// Totals reset, with histogram `bounds_ns` (ascending).
    pub fn with_bounds(bounds_ns: Vec<u64>) -> SliceStats {
        SliceStats { hist: vec![0; bounds_ns.len()], bounds: bounds_ns, ..SliceStats::default() }
    }

    #[inline]
    pub fn record(&mut self, dt: u64) {
        self.count += 1;
        self.total_ns += dt;
        self.max_ns = self.max_ns.max(dt);
        for (b, h) in self.bounds.iter().zip(self.hist.iter_mut()) {
            if dt <= *b {
                break;
            }
            *h += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SliceStats;

    #[test]
    fn histogram_is_cumulative_over_ascending_bounds() {
        let mut s = SliceStats::with_bounds(vec![10, 100]);
        for dt in [5, 50, 500] {
            s.record(dt);
        }
        assert_eq!((s.count, s.total_ns, s.max_ns), (3, 555, 500));
        assert_eq!(s.hist, [2, 1], "longer than 10: two; longer than 100: one");
    }
}
