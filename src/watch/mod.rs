//! The native half of `ringloop.watch`: what must not cost Python time or wait for the GIL.
//!
//! - `slice`: the slice clock — the thread-local "inside a timed slice" flag the dispatcher
//!   sets, the running slice's sequence and start (read by the sampler), and the totals;
//! - `audit`: a C-level audit hook (`PySys_AddAuditHook`) that forwards I/O audit events raised
//!   inside a watched slice to the Python watch, and costs a thread-local read otherwise;
//! - `audit_fast`: the two raw calls that mark a stock asyncio loop's slices for that hook;
//! - `asyncio_slices`: a stock asyncio loop's slice state and its one native call per slice;
//! - `sampler`: a watchdog thread that never takes the GIL and reads the loop thread's Python
//!   stack while a slice is still running — the only way to see *where* a C call that holds
//!   the GIL (`sum(range(10**8))`, a regex, a C extension) is stuck.
//!
//! The slice timing itself lives in the dispatcher (`eventloop::iteration::run_timed`), and
//! the loop's watch methods in `eventloop::watch_hooks`.

pub mod audit;
pub mod asyncio_slices;
pub mod audit_fast;
pub mod sampler;
pub mod slice;
