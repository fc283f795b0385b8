//! The epoll backend: the fallback where io_uring is refused, and the reference semantics.
//!
//! epoll is level-triggered by default, which is exactly asyncio's `add_reader` contract, so
//! this backend is a direct mapping: one `epoll_ctl` per interest change, one `epoll_wait` per
//! loop iteration.

use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use super::event::Event;
use super::sys::{check_fork, fork_generation, syscall, timeout_ms_ceil, Waker};

/// `epoll_event.u64` value reserved for the waker; user fds are stored as their number.
const WAKER_TOKEN: u64 = u64::MAX;
const MAX_EVENTS: usize = 1024;

pub struct EpollReactor {
    epfd: RawFd,
    /// fd → registered epoll mask.
    fds: HashMap<RawFd, u32>,
    waker: Arc<Waker>,
    buf: Vec<libc::epoll_event>,
    fork_gen: u64,
}

fn mask(readable: bool, writable: bool) -> u32 {
    (if readable { libc::EPOLLIN as u32 } else { 0 }) | (if writable { libc::EPOLLOUT as u32 } else { 0 })
}

impl EpollReactor {
    pub fn new(waker: Arc<Waker>) -> io::Result<Self> {
        let epfd = syscall!(epoll_create1(libc::EPOLL_CLOEXEC))?;
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: WAKER_TOKEN };
        if let Err(e) = syscall!(epoll_ctl(epfd, libc::EPOLL_CTL_ADD, waker.fd(), &mut ev)) {
            let _ = syscall!(close(epfd));
            return Err(e);
        }
        Ok(EpollReactor {
            epfd,
            fds: HashMap::new(),
            waker,
            buf: Vec::with_capacity(MAX_EVENTS),
            fork_gen: fork_generation(),
        })
    }

    pub fn waker(&self) -> &Arc<Waker> {
        &self.waker
    }

    pub fn watched_fds(&self) -> usize {
        self.fds.len()
    }

    fn check_fork(&self) -> io::Result<()> {
        check_fork(self.fork_gen)
    }

    pub fn set_interest(&mut self, fd: RawFd, readable: bool, writable: bool) -> io::Result<()> {
        self.check_fork()?;
        let new = mask(readable, writable);
        let old = self.fds.get(&fd).copied();
        match (old, new) {
            (None, 0) => Ok(()),
            (Some(_), 0) => {
                self.fds.remove(&fd);
                // EBADF/ENOENT: the fd was closed first, which already removed it from the
                // epoll set; forgetting it is all that is left to do.
                let _ = syscall!(epoll_ctl(self.epfd, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()));
                Ok(())
            }
            (Some(m), n) if m == n => Ok(()),
            (Some(_), n) => {
                let mut ev = libc::epoll_event { events: n, u64: fd as u64 };
                match syscall!(epoll_ctl(self.epfd, libc::EPOLL_CTL_MOD, fd, &mut ev)) {
                    // Closed and reused behind our back: the new file is not in the set yet.
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                        syscall!(epoll_ctl(self.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev))?;
                    }
                    r => {
                        r?;
                    }
                }
                self.fds.insert(fd, n);
                Ok(())
            }
            (None, n) => {
                let mut ev = libc::epoll_event { events: n, u64: fd as u64 };
                syscall!(epoll_ctl(self.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev))?;
                self.fds.insert(fd, n);
                Ok(())
            }
        }
    }

    pub fn poll(&mut self, timeout: Option<Duration>, events: &mut Vec<Event>) -> io::Result<()> {
        self.check_fork()?;
        self.buf.clear();
        let n = match syscall!(epoll_wait(
            self.epfd,
            self.buf.as_mut_ptr(),
            MAX_EVENTS as i32,
            timeout_ms_ceil(timeout)
        )) {
            Ok(n) => n as usize,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        // SAFETY: epoll_wait initialised the first `n` entries (n <= capacity).
        unsafe { self.buf.set_len(n) };
        for ev in &self.buf {
            let token = ev.u64;
            if token == WAKER_TOKEN {
                self.waker.drain();
                continue;
            }
            let bits = ev.events;
            let err = bits & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0;
            events.push(Event {
                fd: token as RawFd,
                readable: bits & libc::EPOLLIN as u32 != 0 || err,
                writable: bits & libc::EPOLLOUT as u32 != 0 || err,
            });
        }
        Ok(())
    }
}

impl Drop for EpollReactor {
    fn drop(&mut self) {
        // Closing our descriptor is safe even in a forked child: the parent keeps its own.
        let _ = syscall!(close(self.epfd));
    }
}
