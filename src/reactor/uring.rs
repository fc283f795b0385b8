//! The io_uring backend.
//!
//! OS facts this code depends on:
//! - `IORING_OP_POLL_ADD` is a *oneshot* poll unless `IORING_POLL_ADD_MULTI` is set, and a
//!   multishot poll is edge-triggered: it posts a completion when the file's wait-queue is
//!   woken, not while data sits unread. asyncio's `add_reader` is level-triggered (a callback
//!   that reads half the data is called again), so user fds get a oneshot poll that is re-armed
//!   after their callbacks ran: if the fd is still ready, the kernel completes the new poll
//!   inline at the next submit, which is exactly level-triggered behaviour and costs no extra
//!   syscall (re-arms ride on the submit the loop makes anyway). The waker, which we always
//!   drain, uses a multishot poll.
//! - A poll holds a reference to the *file*, not the fd number: after `close(fd)` an armed poll
//!   stays armed on the old file and a new file may get the same number. Every poll therefore
//!   carries a generation in its `user_data` (`gen << 32 | fd`); a completion whose generation
//!   is not the fd's current one is stale and dropped, so a reused fd never receives it.
//! - The rings are `MAP_SHARED`: after `fork()` parent and child see the same queues. A child
//!   must never submit, so every entry point checks the fork generation first.
//! - `IORING_SETUP_COOP_TASKRUN | TASKRUN_FLAG` avoids interrupting the loop thread to post
//!   completions; the kernel raises `IORING_SQ_TASKRUN` instead, and the non-blocking poll path
//!   enters the kernel only when that flag, an overflow, or queued submissions ask for it.
//!   Everything else is read straight from the completion ring, with no syscall.
//! - Waiting with a timeout uses `IORING_ENTER_EXT_ARG` (5.11+): no timeout SQE to cancel.
//! - No SQPOLL: a kernel thread spinning per loop would burn a core on a 2-core machine.

use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};

use super::sys::{check_pollable, fork_generation, Waker};
use super::Event;

const WAKER_TOKEN: u64 = u64::MAX;
/// Completions of `POLL_REMOVE` requests themselves: nothing to do with them.
const REMOVE_TOKEN: u64 = u64::MAX - 1;
const RING_ENTRIES: u32 = 1024;

fn ud(fd: RawFd, gen: u32) -> u64 {
    ((gen as u64) << 32) | (fd as u32 as u64)
}

pub(crate) fn forked_error() -> io::Error {
    io::Error::other(
        "this event loop was created in another process: it cannot be used after fork(); \
         create a new event loop in the child",
    )
}

#[derive(Debug, Default)]
struct FdState {
    /// The poll mask the user wants (POLLIN/POLLOUT).
    want: u32,
    /// Generation and mask of the poll currently armed in the kernel, if any.
    armed: Option<(u32, u32)>,
    /// Queued for arming at the next submit.
    queued: bool,
}

pub struct UringReactor {
    ring: IoUring,
    fds: HashMap<RawFd, FdState>,
    to_arm: Vec<RawFd>,
    next_gen: u32,
    waker: Arc<Waker>,
    waker_armed: bool,
    fork_gen: u64,
}

fn build_ring() -> io::Result<IoUring> {
    let mut b = IoUring::builder();
    b.setup_coop_taskrun().setup_taskrun_flag().setup_submit_all();
    match b.build(RING_ENTRIES) {
        Ok(r) => Ok(r),
        // Kernels before 5.19 reject the flags with EINVAL: a plain ring still works.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::new(RING_ENTRIES),
        Err(e) => Err(e),
    }
}

impl UringReactor {
    /// Set up a ring and check that it can do what the loop needs. Any refusal comes back as
    /// an error naming the cause, and `Reactor::new` falls back to epoll.
    pub fn new(waker: Arc<Waker>) -> io::Result<Self> {
        let ring = build_ring().map_err(|e| {
            let why = match e.raw_os_error() {
                Some(libc::ENOSYS) => "io_uring_setup is not available (ENOSYS: kernel or seccomp)",
                Some(libc::EPERM) => "io_uring is disabled (EPERM: kernel.io_uring_disabled or policy)",
                Some(libc::ENOMEM) => "io_uring ring could not be allocated (ENOMEM: RLIMIT_MEMLOCK)",
                _ => "io_uring_setup failed",
            };
            io::Error::new(e.kind(), format!("{why}: {e}"))
        })?;
        if !ring.params().is_feature_ext_arg() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring lacks IORING_FEAT_EXT_ARG (kernel < 5.11)",
            ));
        }
        let mut probe = Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        for (code, name) in [(opcode::PollAdd::CODE, "POLL_ADD"), (opcode::PollRemove::CODE, "POLL_REMOVE")] {
            if !probe.is_supported(code) {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("io_uring lacks opcode IORING_OP_{name}"),
                ));
            }
        }
        let mut r = UringReactor {
            ring,
            fds: HashMap::new(),
            to_arm: Vec::new(),
            next_gen: 0,
            waker,
            waker_armed: false,
            fork_gen: fork_generation(),
        };
        r.arm_waker()?;
        // One round-trip proves the ring really processes requests (seccomp may allow setup
        // but not enter).
        r.ring.submit()?;
        Ok(r)
    }

    pub fn waker(&self) -> &Arc<Waker> {
        &self.waker
    }

    pub fn watched_fds(&self) -> usize {
        self.fds.len()
    }

    fn push(&mut self, sqe: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: poll SQEs reference no user memory; the fd is only a number to the kernel.
            if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
                return Ok(());
            }
            // Queue full: hand what we have to the kernel to make room.
            self.ring.submit()?;
        }
    }

    fn arm_waker(&mut self) -> io::Result<()> {
        let sqe = opcode::PollAdd::new(types::Fd(self.waker.fd()), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(WAKER_TOKEN);
        self.push(sqe)?;
        self.waker_armed = true;
        Ok(())
    }

    fn check_fork(&self) -> io::Result<()> {
        if self.fork_gen != fork_generation() {
            return Err(forked_error());
        }
        Ok(())
    }

    pub fn set_interest(&mut self, fd: RawFd, readable: bool, writable: bool) -> io::Result<()> {
        self.check_fork()?;
        let want = (if readable { libc::POLLIN as u32 } else { 0 })
            | (if writable { libc::POLLOUT as u32 } else { 0 });
        if let std::collections::hash_map::Entry::Vacant(v) = self.fds.entry(fd) {
            if want == 0 {
                return Ok(());
            }
            check_pollable(fd)?;
            v.insert(FdState::default());
        }
        let st = self.fds.get_mut(&fd).expect("inserted above");
        st.want = want;
        let cancel = match st.armed {
            Some((gen, mask)) if mask != want => {
                st.armed = None;
                Some(ud(fd, gen))
            }
            _ => None,
        };
        let queue = want != 0 && st.armed.is_none() && !st.queued;
        if queue {
            st.queued = true;
        }
        if want == 0 {
            self.fds.remove(&fd);
        }
        if let Some(old) = cancel {
            self.push(opcode::PollRemove::new(old).build().user_data(REMOVE_TOKEN))?;
            if want == 0 {
                // The fd is forgotten, most likely because it is about to be closed. The armed
                // poll holds a reference to the *file*, so until the removal is processed a
                // closed listening socket would keep accepting (clients get ECONNRESET instead
                // of ECONNREFUSED) and a closed connection would not send its FIN. Process it
                // now rather than at the next iteration's submit.
                self.flush_removal()?;
            }
        }
        if queue {
            self.to_arm.push(fd);
        }
        Ok(())
    }

    /// Submit queued SQEs now and, if the kernel deferred the cancelled request's completion
    /// as task work (COOP_TASKRUN), enter once more so it runs and drops its file reference.
    fn flush_removal(&mut self) -> io::Result<()> {
        self.ring.submit()?;
        let mut sq = self.ring.submission();
        sq.sync();
        let pending = sq.taskrun();
        drop(sq);
        if pending {
            // With the TASKRUN flag set, submit() enters with GETEVENTS, which runs task work.
            self.ring.submit()?;
        }
        Ok(())
    }

    fn arm_queued(&mut self) -> io::Result<()> {
        let mut i = 0;
        while i < self.to_arm.len() {
            let fd = self.to_arm[i];
            i += 1;
            let Some(st) = self.fds.get_mut(&fd) else { continue };
            st.queued = false;
            if st.want == 0 || st.armed.is_some() {
                continue;
            }
            self.next_gen = self.next_gen.wrapping_add(1);
            let gen = self.next_gen;
            st.armed = Some((gen, st.want));
            let sqe = opcode::PollAdd::new(types::Fd(fd), st.want).build().user_data(ud(fd, gen));
            self.push(sqe)?;
        }
        self.to_arm.clear();
        Ok(())
    }

    pub fn poll(&mut self, timeout: Option<Duration>, events: &mut Vec<Event>) -> io::Result<()> {
        self.check_fork()?;
        self.arm_queued()?;
        if !self.waker_armed {
            self.arm_waker()?;
        }
        let res = match timeout {
            Some(d) if d.is_zero() => {
                let mut sq = self.ring.submission();
                sq.sync();
                let enter = !sq.is_empty() || sq.taskrun() || sq.cq_overflow();
                drop(sq);
                if enter {
                    self.ring.submit().map(|_| ())
                } else {
                    Ok(())
                }
            }
            Some(d) => {
                let ts = types::Timespec::from(d);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args).map(|_| ())
            }
            None => self.ring.submit_and_wait(1).map(|_| ()),
        };
        match res {
            Ok(()) => {}
            Err(e) => match e.raw_os_error() {
                // ETIME: the timeout expired; EINTR: a signal (the caller runs Python's
                // handlers); EBUSY: completions are backed up, which draining below fixes.
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY) => {}
                _ => return Err(e),
            },
        }
        self.reap(events);
        Ok(())
    }

    fn reap(&mut self, events: &mut Vec<Event>) {
        let mut woke = false;
        for cqe in self.ring.completion() {
            let token = cqe.user_data();
            let res = cqe.result();
            if token == WAKER_TOKEN {
                woke = true;
                if !cqueue::more(cqe.flags()) {
                    self.waker_armed = false;
                }
                continue;
            }
            if token == REMOVE_TOKEN {
                continue;
            }
            let fd = token as u32 as RawFd;
            let gen = (token >> 32) as u32;
            let Some(st) = self.fds.get_mut(&fd) else { continue };
            match st.armed {
                Some((g, _)) if g == gen => st.armed = None,
                // Stale: an older poll on this number, possibly on a file since closed.
                _ => continue,
            }
            if res < 0 {
                // The poll itself failed (e.g. EBADF: closed without remove_reader). Report
                // the fd as ready so its callback meets the error on its own read/write, and
                // do not re-arm: the callback decides whether to keep it.
                events.push(Event { fd, readable: st.want & libc::POLLIN as u32 != 0, writable: st.want & libc::POLLOUT as u32 != 0 });
                continue;
            }
            let bits = res as u32;
            let err = bits & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) as u32 != 0;
            let readable = bits & libc::POLLIN as u32 != 0 || err;
            let writable = bits & libc::POLLOUT as u32 != 0 || err;
            // Level-triggered: re-arm at the next submit, after the callbacks have run.
            if st.want != 0 && !st.queued {
                st.queued = true;
                self.to_arm.push(fd);
            }
            events.push(Event { fd, readable, writable });
        }
        if woke {
            self.waker.drain();
        }
    }
}
