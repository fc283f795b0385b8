//! The reactor: where the loop waits for file descriptors and time.
//!
//! A backend must provide exactly this (everything above it is backend-agnostic):
//! - `set_interest(fd, readable, writable)`: level-triggered interest, as asyncio's
//!   `add_reader`/`add_writer` promise — a callback that leaves data unread is called again on
//!   the next iteration. `(false, false)` forgets the fd. Errors for a bad fd are reported here,
//!   synchronously, with the errno epoll would give (`EBADF`, `EPERM` for regular files).
//! - `poll(timeout, events)`: wait at most `timeout` (`None` = forever, `Some(ZERO)` = don't
//!   block) and append ready fds to `events`. Returns early on a wake-up or a signal (`EINTR`
//!   is not an error: the caller runs Python's signal handlers).
//! - `waker()`: a handle any thread may use to end a `poll` early.
//!
//! And, where the backend has them (io_uring with provided buffers; `ops_available()` says),
//! **multishot operations** whose completions `poll` returns as `OpCompletion`s:
//! - `arm_op(kind, fd, token)`: a stream `recv`, a datagram `recvmsg` or an `accept` that keeps
//!   completing until it ends; `token` (from `op_token`) comes back with every completion;
//! - `cancel_op(token)`: processed before it returns, so the fd may be closed right after
//!   (the operation holds a reference to the file); its last completions still come back;
//! - `lease(read)` lends out the bytes completions left in provided buffers (`RingRead`,
//!   which returns them to the kernel as it is emptied) and `recycle(bids)` returns buffers
//!   nobody will read. Nothing else above this folder touches buffers or tokens' layout.
//!
//! A backend without them (epoll) answers `ops_available() == false`, and the loop reads on
//! readiness instead.
//!
//! The two backends are an enum, not a trait object: the loop calls `poll` once per iteration
//! and a direct match keeps that call inlinable.

pub mod bufring;
pub mod epoll;
pub mod event;
pub mod sys;
pub mod uring;

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

pub use bufring::RingRead;
pub use event::{Event, OpCompletion, OpKind, ReadBytes};
pub use sys::{timeout_ms_ceil, Waker};
pub use uring::recvmsg_parts;

/// The token of an operation on `fd` in generation `gen`: every completion carries it, and a
/// new generation per operation keeps completions of an older one on the same fd apart.
pub fn op_token(fd: RawFd, gen: u32) -> u64 {
    uring::op_token(fd, gen)
}

/// The fd an operation token names.
pub fn op_fd(token: u64) -> RawFd {
    uring::op_token_parts(token).0
}

/// Which backend the user asked for (`RINGLOOP_BACKEND` or `Loop(backend=...)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Auto,
    IoUring,
    Epoll,
}

impl Choice {
    pub fn parse(s: &str) -> Option<Choice> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Some(Choice::Auto),
            "io_uring" | "uring" | "io-uring" => Some(Choice::IoUring),
            "epoll" => Some(Choice::Epoll),
            _ => None,
        }
    }
}

// One reactor per loop, built once and never moved on a hot path: boxing the larger variant
// would only add an indirection to every poll.
#[allow(clippy::large_enum_variant)]
pub enum Reactor {
    Uring(uring::UringReactor),
    Epoll(epoll::EpollReactor),
}

impl Reactor {
    /// Build the requested backend. With `Auto`, io_uring is probed and any refusal (seccomp's
    /// ENOSYS, `kernel.io_uring_disabled`'s EPERM, memlock's ENOMEM, a missing opcode or
    /// feature) falls back to epoll; the reason is returned so `loop.backend_fallback_reason`
    /// can tell it. A forced `IoUring` reports the refusal as an error instead.
    /// `thread_bound`: the loop is run on one thread only, so io_uring may use a
    /// single-issuer ring (see `uring`'s module docs); epoll ignores it.
    pub fn new(choice: Choice, thread_bound: bool) -> io::Result<(Reactor, Option<String>)> {
        let waker = Arc::new(Waker::new()?);
        match choice {
            Choice::Epoll => Ok((Reactor::Epoll(epoll::EpollReactor::new(waker)?), None)),
            Choice::IoUring => Ok((Reactor::Uring(uring::UringReactor::new(waker, thread_bound)?), None)),
            Choice::Auto => match uring::UringReactor::new(waker.clone(), thread_bound) {
                Ok(r) => Ok((Reactor::Uring(r), None)),
                Err(e) => Ok((
                    Reactor::Epoll(epoll::EpollReactor::new(waker)?),
                    Some(format!("io_uring unavailable: {e}")),
                )),
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Reactor::Uring(_) => "io_uring",
            Reactor::Epoll(_) => "epoll",
        }
    }

    #[inline]
    pub fn set_interest(&mut self, fd: RawFd, readable: bool, writable: bool) -> io::Result<()> {
        match self {
            Reactor::Uring(r) => r.set_interest(fd, readable, writable),
            Reactor::Epoll(r) => r.set_interest(fd, readable, writable),
        }
    }

    /// Wait (see the module docs). Readiness goes to `events`; on io_uring, completions of
    /// operations (multishot recv) go to `ops`.
    #[inline]
    pub fn poll(&mut self, timeout: Option<Duration>, events: &mut Vec<Event>, ops: &mut Vec<OpCompletion>) -> io::Result<()> {
        match self {
            Reactor::Uring(r) => r.poll(timeout, events, ops),
            Reactor::Epoll(r) => r.poll(timeout, events),
        }
    }

    /// Whether multishot operations can be armed here (see the module docs).
    pub fn ops_available(&mut self) -> bool {
        match self {
            Reactor::Uring(r) => r.recv_multishot_available(),
            Reactor::Epoll(_) => false,
        }
    }

    /// Arm the multishot operation `kind` on `fd` under `token`.
    pub fn arm_op(&mut self, kind: OpKind, fd: RawFd, token: u64) -> io::Result<()> {
        match self {
            Reactor::Uring(r) => match kind {
                OpKind::Recv => r.recv_multishot(fd, token),
                OpKind::Accept => r.accept_multishot(fd, token),
                OpKind::RecvMsg => r.recvmsg_multishot(fd, token),
            },
            Reactor::Epoll(_) => Err(io::Error::new(io::ErrorKind::Unsupported, "epoll has no multishot operations")),
        }
    }

    /// Cancel operation `token`, processed before this returns (see the module docs).
    pub fn cancel_op(&mut self, token: u64) -> io::Result<()> {
        match self {
            Reactor::Uring(r) => r.cancel_op(token),
            Reactor::Epoll(_) => Ok(()),
        }
    }

    /// Lend out a read: the bytes completions left in provided buffers (`(bid, len)`s), or
    /// bytes already in memory of their own.
    pub fn lease(&self, read: ReadBytes) -> Option<RingRead> {
        match (self, read) {
            (_, ReadBytes::Owned(data)) => Some(RingRead::owned(data)),
            (Reactor::Uring(r), ReadBytes::Bufs(chunks)) => r.lease(chunks),
            (Reactor::Epoll(_), ReadBytes::Bufs(_)) => None,
        }
    }

    /// Give provided buffers nobody will read back to the kernel.
    pub fn recycle(&mut self, bids: &[u16]) {
        if let Reactor::Uring(r) = self {
            r.recycle(bids);
        }
    }

    pub fn waker(&self) -> &Arc<Waker> {
        match self {
            Reactor::Uring(r) => r.waker(),
            Reactor::Epoll(r) => r.waker(),
        }
    }

    /// Number of fds with interest registered (for `repr` and tests).
    pub fn watched_fds(&self) -> usize {
        match self {
            Reactor::Uring(r) => r.watched_fds(),
            Reactor::Epoll(r) => r.watched_fds(),
        }
    }
}

/// Probe io_uring without building a loop: `(true, "")` or `(false, why)`.
pub fn io_uring_available() -> (bool, String) {
    match Waker::new().and_then(|w| uring::UringReactor::new(Arc::new(w), false)) {
        Ok(_) => (true, String::new()),
        Err(e) => (false, e.to_string()),
    }
}

#[cfg(test)]
mod tests;
