//! Multishot operations (io_uring): arming and stopping them for the transports, and turning
//! the completion router's decisions (`router`) into callbacks.
//!
//! A transport starts reading with `read_start`: a multishot operation whose completions go to
//! its callback where the reactor has them, else its `_on_readable` as the fd's reader. Each
//! iteration the router routes the batch of completions, and `dispatch` makes one handle per
//! delivery — the callback receives the item: a positive read slot (`take_read`), `0` (EOF),
//! `-errno`, an accepted fd, or `None` behind a stopped operation's last completion. The
//! transport takes a read's bytes when its callback runs, not when the batch is reaped:
//! materialising a whole batch first (64 connections x 100 KiB) put megabytes of short-lived
//! `bytes` on the heap at once, and glibc returned them to the kernel and faulted them back in
//! every iteration (100 KiB echo spent more CPU in brk and page faults than in TCP).

use std::os::fd::RawFd;

use pyo3::prelude::*;
use pyo3::{intern, IntoPyObjectExt};

use super::core::{LoopCore, OpCallback};
use super::handle::{Args, Handle, HandleCore};
use super::router::{Item, OsSockets};
use super::schedule::context_or_copy;
use crate::errors::os_error;
use crate::reactor::{OpKind, RingRead};

impl LoopCore {
    /// Start a transport reading `fd`: with a multishot operation of `kind` (`Recv` for a
    /// stream, `RecvMsg` for UDP) whose completions go to `on_op`, or, where this loop has none
    /// (epoll, no provided-buffer rings), with `owner._on_readable` as the fd's reader. Returns
    /// the operation's token; `None` means reading on readiness. `read_stop` undoes it.
    /// The callbacks run in `context` (asyncio 3.15's transport context), else in a copy of
    /// the current one.
    pub(crate) fn read_start(
        slf: &Bound<'_, Self>,
        fd: RawFd,
        kind: OpKind,
        on_op: Py<PyAny>,
        owner: &Bound<'_, PyAny>,
        context: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Option<u64>> {
        let token = Self::op_start(slf, fd, kind, on_op, context.clone())?;
        if token.is_none() {
            let on_readable = owner.getattr(intern!(slf.py(), "_on_readable"))?;
            Self::set_fd_callback_raw(slf, fd, &on_readable, false, context)?;
        }
        Ok(token)
    }

    /// Stop what `read_start` started: cancel the operation `token` (processed before this
    /// returns, so the fd may be closed right after), or remove the fd's reader.
    pub(crate) fn read_stop(slf: &Bound<'_, Self>, fd: RawFd, token: Option<u64>) -> PyResult<()> {
        match token {
            Some(t) => Self::op_stop(slf, t),
            None => Self::remove_fd_callback_raw(slf, fd, false).map(|_| ()),
        }
    }

    /// Stop the operation `token` like `read_stop`, and queue `then(None)` behind its last
    /// completion, after every read it still delivers. `false`: no such operation running
    /// (nothing will be queued; the caller goes on at once).
    pub(crate) fn read_stop_then(slf: &Bound<'_, Self>, token: u64, then: Py<PyAny>) -> PyResult<bool> {
        let py = slf.py();
        let stopped = {
            let mut router = slf.get().router.borrow_mut(py)?;
            // `then` runs in the operation's context, like its other callbacks.
            let Some(context) = router.running(token).map(|w| w.context.clone_ref(py)) else { return Ok(false) };
            router.stop_then(token, OpCallback { callback: then, context }).is_ok()
        };
        if stopped {
            Self::cancel_in_reactor(slf, token)?;
        }
        Ok(stopped)
    }

    /// Read `n` (as the transport's callback received it: `slot + 1`), taken from the router:
    /// its bytes are the caller's to copy out; its buffers go back to the kernel as they are
    /// emptied, or when it is dropped. `None`: already taken, or the loop closed.
    pub(crate) fn take_read(slf: &Bound<'_, Self>, n: i64) -> PyResult<Option<RingRead>> {
        let py = slf.py();
        let this = slf.get();
        let Some(chunks) = this.router.borrow_mut(py)?.take_read((n - 1) as usize) else { return Ok(None) };
        let io = this.io.borrow(py)?;
        Ok(io.reactor.as_ref().and_then(|r| r.lease(chunks)))
    }

    /// Arm a multishot operation of `kind` on `fd` whose completions go to `callback` (in a
    /// `context`, else in a copy of the current one). `None` when this loop has none (epoll, or io_uring
    /// without provided buffers; multishot accept (5.19) predates multishot recv (6.0), so one
    /// probe answers for both).
    fn op_start(slf: &Bound<'_, Self>, fd: RawFd, kind: OpKind, callback: Py<PyAny>, context: Option<Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
        let py = slf.py();
        let this = slf.get();
        this.check_open()?;
        let context = context_or_copy(py, context)?;
        let token = this.router.borrow_mut(py)?.next_token(fd);
        let started = {
            let mut io = this.io.borrow_mut(py)?;
            let Some(r) = io.reactor.as_mut() else { return Err(super::core::closed_error()) };
            let available = r.ops_available();
            if available {
                r.arm_op(kind, fd, token).map_err(os_error)?;
            }
            available
        };
        if !started {
            drop((callback, context));
            return Ok(None);
        }
        this.router.borrow_mut(py)?.insert(token, kind, fd, OpCallback { callback, context });
        Ok(Some(token))
    }

    /// Stop a multishot operation; the cancellation is processed before this returns, so the
    /// fd may be closed right after. Its completions in flight are still delivered.
    fn op_stop(slf: &Bound<'_, Self>, token: u64) -> PyResult<()> {
        if slf.get().router.borrow_mut(slf.py())?.stop(token) {
            Self::cancel_in_reactor(slf, token)?;
        }
        Ok(())
    }

    fn cancel_in_reactor(slf: &Bound<'_, Self>, token: u64) -> PyResult<()> {
        let mut io = slf.get().io.borrow_mut(slf.py())?;
        if let Some(r) = io.reactor.as_mut() {
            r.cancel_op(token).map_err(os_error)?;
        }
        Ok(())
    }

    /// Route this iteration's completions and turn the deliveries into handles: the ones due
    /// now join the ready queue; the ones the router put `later` (an EOF or error right behind
    /// data) are returned, for the iteration to queue behind its callbacks.
    pub(crate) fn dispatch(slf: &Bound<'_, Self>) -> PyResult<Vec<Py<Handle>>> {
        let py = slf.py();
        let this = slf.get();
        // (callback, item, context, later) of each delivery, cloned out of the router's borrow.
        let calls: Vec<(Py<PyAny>, Item, Py<PyAny>, bool)> = {
            let mut io_ref = this.io.borrow_mut(py)?;
            let io = &mut *io_ref;
            let Some(reactor) = io.reactor.as_mut() else {
                io.completions.clear();
                return Ok(Vec::new());
            };
            let mut router = this.router.borrow_mut(py)?;
            let routed = router.route(&mut io.completions, &mut OsSockets);
            reactor.recycle(&routed.recycle);
            for &(kind, fd, token) in &routed.rearm {
                reactor.arm_op(kind, fd, token).map_err(os_error)?;
            }
            let calls = routed
                .deliveries
                .iter()
                .filter_map(|d| routed.who(&router, d).map(|w| (w.callback.clone_ref(py), d.item, w.context.clone_ref(py), d.later)))
                .collect();
            // The operations that went are dropped after the borrows (their callbacks may be
            // the last references to Python objects).
            drop(router);
            drop(io_ref);
            drop(routed);
            calls
        };
        let mut now = Vec::with_capacity(calls.len());
        let mut later = Vec::new();
        for (callback, item, context, is_later) in calls {
            let arg = match item {
                // Positive: a read (EOF is 0, errors are negative).
                Item::Read(slot) => (slot as i64 + 1).into_py_any(py)?,
                Item::Res(res) => res.into_py_any(py)?,
                Item::Then => py.None(),
            };
            let core = HandleCore::new(callback, Args::One(arg), Some(context), slf.clone().into_any().unbind(), None);
            let h = Py::new(py, Handle { core })?;
            if is_later {
                later.push(h);
            } else {
                now.push(h);
            }
        }
        if !now.is_empty() {
            this.queues.borrow_mut(py)?.ready.extend(now.into_iter().map(super::handle::AnyHandle::Plain));
        }
        Ok(later)
    }
}

#[pymethods]
impl LoopCore {
    /// io_uring: start a multishot accept on listening socket `fd`; `callback(res)` is called
    /// with each new connection's fd (or `-errno`). Returns the operation's token, or `None`
    /// on epoll (the caller then accepts on readiness).
    fn _accept_start(slf: &Bound<'_, Self>, fd: RawFd, callback: Py<PyAny>) -> PyResult<Option<u64>> {
        Self::op_start(slf, fd, OpKind::Accept, callback, None)
    }

    /// Stop a multishot accept; processed before this returns, so the socket may be closed.
    fn _accept_stop(slf: &Bound<'_, Self>, token: u64) -> PyResult<()> {
        if slf.get().closed.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(());
        }
        Self::op_stop(slf, token)
    }

    /// Stop a multishot accept like `_accept_stop`, but let the connections it accepted before
    /// the cancel reached the kernel still reach `callback`, and queue `then(None)` behind the
    /// last of them: how a server that hands its listener over knows no accepted connection
    /// is still on its way. `False`: no such accept running (nothing will be queued).
    fn _accept_stop_then(slf: &Bound<'_, Self>, token: u64, then: Py<PyAny>) -> PyResult<bool> {
        if slf.get().closed.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(false);
        }
        Self::read_stop_then(slf, token, then)
    }
}
