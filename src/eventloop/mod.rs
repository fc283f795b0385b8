//! The event loop's native half. `core` says which room holds what; `router` is the one room
//! with no PyO3 (what each io_uring completion means), `handle`/`timers`/`fastcall`/`gil_cell`
//! are the building blocks the others share.

pub mod compat;
pub mod completions;
pub mod core;
pub mod fastcall;
pub mod fd_registry;
pub mod fd_table;
pub mod flush;
pub mod gil_cell;
pub mod handle;
pub mod iteration;
pub mod router;
pub mod schedule;
pub mod timers;
pub mod watch_hooks;
