//! Thin, checked wrappers over the raw Linux syscalls the backends share.
//!
//! Every call goes through [`syscall!`], which turns the C convention (`-1` plus `errno`) into an
//! `io::Result`, so the backends never look at `errno` themselves (mio's `sys/` shape).

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// Call a libc function and map `-1` to `io::Error::last_os_error()`.
macro_rules! syscall {
    ($fn:ident ( $($arg:expr),* $(,)? )) => {{
        // SAFETY: each call site passes arguments that satisfy the syscall's contract
        // (valid fds, buffers that outlive the call); the macro only checks the return value.
        let res = unsafe { libc::$fn($($arg),*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}
pub(crate) use syscall;

/// Nanoseconds on CLOCK_MONOTONIC: the clock of `time.monotonic()`, so `loop.time()` and
/// `time.monotonic()` can be compared directly. Read through the vDSO: no syscall.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Bumped in the child after every `fork()`. A reactor remembers the value it was created
/// under: io_uring rings are `MAP_SHARED` and an epoll instance is shared by parent and child,
/// so a child that touched either would corrupt the parent's loop. Comparing a counter is far
/// cheaper than calling `getpid()` (no longer cached by glibc) on every iteration.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static ATFORK: Once = Once::new();

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

pub fn fork_generation() -> u64 {
    ATFORK.call_once(|| {
        // SAFETY: registering a handler that only touches an atomic is async-signal-safe and
        // valid for the life of the process (the function is a static item).
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
    FORK_GENERATION.load(Ordering::Relaxed)
}

/// Check an fd the way `epoll_ctl(EPOLL_CTL_ADD)` would, for backends (io_uring) that would
/// otherwise only report a bad fd later in a completion: `EBADF` for a closed fd, `EPERM` for a
/// regular file or directory (always "ready", and refused by epoll, so asyncio users expect the
/// error at registration time).
pub fn check_pollable(fd: RawFd) -> io::Result<()> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    syscall!(fstat(fd, &mut st))?;
    let kind = st.st_mode & libc::S_IFMT;
    if kind == libc::S_IFREG || kind == libc::S_IFDIR {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    Ok(())
}

/// Bytes in a socket's receive queue that no recv has taken yet (`FIONREAD`); 0 when the
/// ioctl fails (a closed fd: the read that follows reports the error).
pub fn bytes_waiting(fd: RawFd) -> usize {
    let mut n: libc::c_int = 0;
    syscall!(ioctl(fd, libc::FIONREAD, &mut n)).map_or(0, |_| n.max(0) as usize)
}

/// Read up to `max` bytes from a non-blocking socket now, into memory of their own (`MSG_DONTWAIT`:
/// never blocks). An empty result is the peer's EOF.
pub fn recv_now(fd: RawFd, max: usize) -> io::Result<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::with_capacity(max);
    let n = syscall!(recv(fd, buf.as_mut_ptr().cast(), max, libc::MSG_DONTWAIT))?;
    // SAFETY: recv wrote `n <= max` bytes at the start of the capacity.
    unsafe { buf.set_len(n as usize) };
    Ok(buf)
}

/// An eventfd used to wake a loop blocked in its reactor from another thread (or from the
/// same thread, for `_write_to_self`).
#[derive(Debug)]
pub struct Waker {
    /// -1 once closed (`loop.close()` releases it, as asyncio's close releases its self-pipe,
    /// rather than leaving it to the garbage collector).
    fd: std::sync::atomic::AtomicI32,
}

impl Waker {
    pub fn new() -> io::Result<Self> {
        let fd = syscall!(eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC))?;
        Ok(Waker { fd: std::sync::atomic::AtomicI32::new(fd) })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.load(Ordering::Acquire)
    }

    /// Add one to the counter. `EAGAIN` means the counter is saturated, i.e. a wake-up is
    /// already pending, which is all we want.
    pub fn wake(&self) {
        let fd = self.fd();
        if fd >= 0 {
            let one: u64 = 1;
            let _ = syscall!(write(fd, (&one as *const u64).cast(), 8));
        }
    }

    /// Reset the counter so that the next `wake` produces a new readiness edge.
    pub fn drain(&self) {
        let fd = self.fd();
        if fd >= 0 {
            let mut buf: u64 = 0;
            let _ = syscall!(read(fd, (&mut buf as *mut u64).cast(), 8));
        }
    }

    /// Close the eventfd now (the loop is closed: nothing waits on it any more).
    pub fn close(&self) {
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            let _ = syscall!(close(fd));
        }
    }
}

impl Drop for Waker {
    fn drop(&mut self) {
        self.close();
    }
}

/// `Err` in a process forked since `made_in` (a `fork_generation()`): a child must never use
/// the parent's ring or epoll set (see `forked_error`).
pub(crate) fn check_fork(made_in: u64) -> std::io::Result<()> {
    if made_in != fork_generation() {
        return Err(forked_error());
    }
    Ok(())
}

/// The error every entry point of a reactor returns in a forked child (see `fork_generation`).
pub(crate) fn forked_error() -> io::Error {
    io::Error::other(
        "this event loop was created in another process: it cannot be used after fork(); \
         create a new event loop in the child",
    )
}

/// Round a timeout up to whole milliseconds for epoll: rounding down would wake the loop
/// before its earliest timer and cost a spurious iteration; timers must never fire early.
pub fn timeout_ms_ceil(timeout: Option<std::time::Duration>) -> i32 {
    match timeout {
        None => -1,
        Some(d) => {
            let ns = d.as_nanos();
            let ms = ns.div_ceil(1_000_000);
            ms.min(i32::MAX as u128) as i32
        }
    }
}
