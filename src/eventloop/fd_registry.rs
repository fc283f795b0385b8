//! The fd registry: `add_reader`/`add_writer`/`remove_reader`/`remove_writer`, and the raw
//! variants native transports use for their own sockets.
//!
//! Each fd has at most one reader and one writer handle, as asyncio's selector keeps one key
//! per fd; the reactor is told the fd's interest after every change (level-triggered: a
//! callback that leaves data unread runs again next iteration). Like the selector, the registry
//! remembers the file object a callback was registered through, so a socket closed before its
//! reader is removed is still found (its `fileno()` is -1 by then), and a registration left
//! behind by a closed object never fires for a new file that got the same fd number.

use std::os::fd::RawFd;

use pyo3::prelude::*;
use pyo3::types::{PyInt, PyTuple};

use super::core::LoopCore;
use super::fd_table::{fileobj_to_fd, FdHandles};
use super::handle::{Args, Handle};
use crate::errors::os_error;

impl LoopCore {
    /// Tell the reactor what `fd` is now watched for (nothing to do once the loop is closed).
    fn set_interest(&self, py: Python<'_>, fd: RawFd, readable: bool, writable: bool) -> PyResult<std::io::Result<()>> {
        let mut io = self.io.borrow_mut(py)?;
        Ok(match io.reactor.as_mut() {
            Some(r) => r.set_interest(fd, readable, writable),
            None => Ok(()),
        })
    }

    fn set_fd_callback(slf: &Bound<'_, Self>, fileobj: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>, args: &Bound<'_, PyTuple>, writer: bool) -> PyResult<()> {
        slf.get().check_open()?;
        let fd = fileobj_to_fd(fileobj)?;
        Self::check_callback(slf, callback, if writer { "add_writer" } else { "add_reader" })?;
        let handle = Self::new_handle(slf, callback, Args::from_tuple(args), None)?;
        let fileobj = (!fileobj.is_instance_of::<PyInt>()).then(|| fileobj.clone().unbind());
        Self::forget_stale(slf, fd, fileobj.as_ref())?;
        Self::install_fd_handle(slf, fd, handle, writer, fileobj)
    }

    /// `add_writer`/`add_reader` for native transports: no argument checks (the callback is a
    /// bound method of ours).
    pub(crate) fn set_fd_callback_raw(slf: &Bound<'_, Self>, fd: RawFd, callback: &Bound<'_, PyAny>, writer: bool, context: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        slf.get().check_open()?;
        let handle = Self::new_handle(slf, callback, Args::None, context)?;
        Self::install_fd_handle(slf, fd, handle, writer, None)
    }

    pub(crate) fn remove_fd_callback_raw(slf: &Bound<'_, Self>, fd: RawFd, writer: bool) -> PyResult<bool> {
        Self::remove_fd_handle(slf, fd, writer)
    }

    /// A registration of `fd` made through a file object that is now closed (its `fileno()`
    /// is -1) belongs to a file that is gone: the fd number was closed and reused without
    /// `remove_reader`/`remove_writer`. Its callbacks are dropped before `fileobj` registers
    /// the same number, so a callback of the closed file can never run for the new one.
    fn forget_stale(slf: &Bound<'_, Self>, fd: RawFd, fileobj: Option<&Py<PyAny>>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let old = {
            let fds = this.fds.borrow(py)?;
            match fds.0.get(&fd).and_then(|e| e.fileobj.as_ref()) {
                Some(old) if fileobj.is_none_or(|f| !f.is(old)) => old.clone_ref(py),
                _ => return Ok(()),
            }
        };
        if fileobj_to_fd(old.bind(py)).is_ok_and(|n| n == fd) {
            return Ok(()); // the same file, open, named through another object
        }
        let dropped = this.fds.borrow_mut(py)?.0.remove(&fd);
        if let Some(e) = dropped {
            for h in [e.reader, e.writer].into_iter().flatten() {
                let cancelled = h.get().core.take_cancel(py)?;
                drop(cancelled);
            }
        }
        // The closed file may still be watched (io_uring's poll holds a reference to it).
        drop(this.set_interest(py, fd, false, false)?);
        Ok(())
    }

    fn install_fd_handle(slf: &Bound<'_, Self>, fd: RawFd, handle: Py<Handle>, writer: bool, fileobj: Option<Py<PyAny>>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let (old, old_fileobj, want_r, want_w) = {
            let mut fds = this.fds.borrow_mut(py)?;
            let e = fds.0.entry(fd).or_default();
            let slot = if writer { &mut e.writer } else { &mut e.reader };
            let old = slot.replace(handle);
            // A registration through a plain int keeps the object named before (same fd).
            let old_fileobj = fileobj.map(|f| e.fileobj.replace(f));
            (old, old_fileobj, e.reader.is_some(), e.writer.is_some())
        };
        let res = this.set_interest(py, fd, want_r, want_w)?;
        if let Err(e) = res {
            // Undo: the fd keeps whatever it had before.
            let undone = {
                let mut fds = this.fds.borrow_mut(py)?;
                let e = fds.0.entry(fd).or_default();
                let slot = if writer { &mut e.writer } else { &mut e.reader };
                let new = slot.take();
                *slot = old.as_ref().map(|h| h.clone_ref(py));
                let new_fileobj = old_fileobj.map(|f| std::mem::replace(&mut e.fileobj, f));
                if e.reader.is_none() && e.writer.is_none() {
                    fds.0.remove(&fd);
                }
                (new, new_fileobj)
            };
            drop(undone);
            return Err(os_error(e));
        }
        drop(old_fileobj);
        if let Some(old) = old {
            // asyncio cancels the handle a new callback replaces.
            let dropped = old.get().core.take_cancel(py)?;
            drop(dropped);
        }
        Ok(())
    }

    /// `remove_reader`/`remove_writer(fileobj)`. Like asyncio's selector, a file object that
    /// was closed since it was registered (`fileno()` is -1) is still found, by identity.
    fn remove_fd_callback(slf: &Bound<'_, Self>, fileobj: &Bound<'_, PyAny>, writer: bool) -> PyResult<bool> {
        match fileobj_to_fd(fileobj) {
            Ok(fd) => Self::remove_fd_handle(slf, fd, writer),
            Err(e) => {
                let found = {
                    let fds = slf.get().fds.borrow(slf.py())?;
                    fds.0.iter().find(|(_, c)| c.fileobj.as_ref().is_some_and(|f| f.is(fileobj))).map(|(fd, _)| *fd)
                };
                let Some(fd) = found else { return Err(e) };
                Self::remove_closed_fd_handle(slf, fd, writer)
            }
        }
    }

    /// Remove a callback of `fd` whose file is closed: the reactor forgets the fd (there is
    /// nothing left to watch, and epoll would refuse a change with EBADF); the other callback,
    /// if any, stays registered so its own remove call still finds it.
    fn remove_closed_fd_handle(slf: &Bound<'_, Self>, fd: RawFd, writer: bool) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        if this.closed.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(false);
        }
        let old = {
            let mut fds = this.fds.borrow_mut(py)?;
            let Some(e) = fds.0.get_mut(&fd) else { return Ok(false) };
            let old = if writer { e.writer.take() } else { e.reader.take() };
            if e.reader.is_none() && e.writer.is_none() {
                fds.0.remove(&fd);
            }
            old
        };
        let Some(old) = old else { return Ok(false) };
        drop(this.set_interest(py, fd, false, false)?);
        let dropped = old.get().core.take_cancel(py)?;
        drop(dropped);
        drop(old);
        Ok(true)
    }

    fn remove_fd_handle(slf: &Bound<'_, Self>, fd: RawFd, writer: bool) -> PyResult<bool> {
        let py = slf.py();
        let this = slf.get();
        if this.closed.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(false);
        }
        let (old, want_r, want_w) = {
            let mut fds = this.fds.borrow_mut(py)?;
            let Some(e) = fds.0.get_mut(&fd) else { return Ok(false) };
            let old = if writer { e.writer.take() } else { e.reader.take() };
            let (r, w) = (e.reader.is_some(), e.writer.is_some());
            if !r && !w {
                fds.0.remove(&fd);
            }
            (old, r, w)
        };
        let Some(old) = old else { return Ok(false) };
        let res = this.set_interest(py, fd, want_r, want_w)?;
        let dropped = old.get().core.take_cancel(py)?;
        drop(dropped);
        drop(old);
        res.map_err(os_error)?;
        Ok(true)
    }
}

#[pymethods]
impl LoopCore {
    #[pyo3(signature = (fd, callback, *args))]
    fn add_reader(slf: &Bound<'_, Self>, fd: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
        Self::set_fd_callback(slf, fd, callback, args, false)
    }

    #[pyo3(signature = (fd, callback, *args))]
    fn add_writer(slf: &Bound<'_, Self>, fd: &Bound<'_, PyAny>, callback: &Bound<'_, PyAny>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
        Self::set_fd_callback(slf, fd, callback, args, true)
    }

    fn remove_reader(slf: &Bound<'_, Self>, fd: &Bound<'_, PyAny>) -> PyResult<bool> {
        Self::remove_fd_callback(slf, fd, false)
    }

    fn remove_writer(slf: &Bound<'_, Self>, fd: &Bound<'_, PyAny>) -> PyResult<bool> {
        Self::remove_fd_callback(slf, fd, true)
    }

    /// `(reader_handle, writer_handle)` registered for `fd` (either may be None).
    fn _fd_callbacks(slf: &Bound<'_, Self>, fd: &Bound<'_, PyAny>) -> PyResult<FdHandles> {
        let py = slf.py();
        let fd = fileobj_to_fd(fd)?;
        let fds = slf.get().fds.borrow(py)?;
        Ok(match fds.0.get(&fd) {
            Some(e) => (e.reader.as_ref().map(|h| h.clone_ref(py)), e.writer.as_ref().map(|h| h.clone_ref(py))),
            None => (None, None),
        })
    }
}
