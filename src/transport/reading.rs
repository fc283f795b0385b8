//! Whether a transport reads, and through what: the state the stream and datagram transports
//! share, and stopping it.
//!
//! A transport reads either through a multishot operation of the loop (io_uring: `token` names
//! it) or through its `_on_readable` as the fd's reader (epoll, or a stream gone bulk); see
//! `LoopCore::read_start`. Stopping cancels the operation before it returns, because the
//! operation holds a reference to the socket's file: the socket may be closed right after.

use std::os::fd::RawFd;

use pyo3::prelude::*;

use crate::eventloop::core::LoopCore;
use crate::eventloop::gil_cell::GilCell;

#[derive(Default)]
pub(crate) struct ReadState {
    /// Reading is on (asyncio: the reader is registered).
    pub(crate) on: bool,
    /// The multishot operation reading for us; `None` while reading on readiness.
    pub(crate) token: Option<u64>,
}

/// `stop_reading()` and the `reading` property for a transport class `$T` whose `st` holds a
/// `read: ReadState` (the stream and the datagram transport): one definition for both.
macro_rules! reading_pymethods {
    ($T:ty) => {
        #[pymethods]
        impl $T {
            /// Stop reading (pause, close, EOF kept open). A multishot operation is cancelled
            /// before this returns: it holds a reference to the socket's file, so the socket
            /// may be closed right after.
            fn stop_reading(slf: &Bound<'_, Self>) -> PyResult<()> {
                let this = slf.get();
                $crate::transport::reading::stop_reading(this.loop_.bind(slf.py()), this.fd, &this.st, |st| &mut st.read)
            }

            #[getter]
            fn reading(&self, py: Python<'_>) -> PyResult<bool> {
                Ok(self.st.borrow(py)?.read.on)
            }
        }
    };
}
pub(crate) use reading_pymethods;

/// Turn reading off, if on: cancel the operation or remove the fd's reader. `read` picks the
/// `ReadState` out of the transport's state.
pub(crate) fn stop_reading<T>(loop_: &Bound<'_, LoopCore>, fd: RawFd, state: &GilCell<T>, read: fn(&mut T) -> &mut ReadState) -> PyResult<()> {
    let token = {
        let mut st = state.borrow_mut(loop_.py())?;
        let r = read(&mut st);
        if !r.on {
            return Ok(());
        }
        r.on = false;
        r.token.take()
    };
    LoopCore::read_stop(loop_, fd, token)
}
