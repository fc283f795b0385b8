//! The loop's native half: handles, the timer heap and the dispatcher (`core`).

pub mod core;
pub mod fastcall;
pub mod gil_cell;
pub mod handle;
pub mod timers;
