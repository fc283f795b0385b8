//! Which thread is inside a watched slice right now (read by the audit hook).

use std::cell::Cell;

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
