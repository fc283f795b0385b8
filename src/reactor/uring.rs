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
//! - By default the ring is `IORING_SETUP_COOP_TASKRUN | TASKRUN_FLAG`: the kernel does not
//!   interrupt the loop thread to post completions; the work that turns socket readiness into
//!   completions (a multishot recv's recv, a poll's result) runs on the way out of the loop's
//!   next syscall, and the kernel raises `IORING_SQ_TASKRUN` while some waits. The non-blocking
//!   poll path enters the kernel only when that flag, an overflow, or queued submissions ask
//!   for it. Any thread may enter such a ring, as asyncio lets any thread run a loop.
//! - A *thread-bound* loop (`Loop(thread_bound=True)`, what `ringloop.run` makes) gets
//!   `SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG` (6.1+) instead: that work waits until the
//!   loop enters the kernel to collect completions and runs there as one batch, which measured
//!   cheaper (1 KiB echo: 6.6-7.2 -> 5.9 µs of server CPU per message). Only one thread may
//!   enter such a ring: it is created disabled (`R_DISABLED`) and enabled by the first thread
//!   that enters, the one that runs the loop, wherever the loop was made (see `may_enter`).
//!   Older kernels get the default ring.
//! - Waiting with a timeout uses `IORING_ENTER_EXT_ARG` (5.11+): no timeout SQE to cancel.
//! - No SQPOLL: a kernel thread spinning per loop would burn a core on a 2-core machine.

use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};

use super::bufring::{BufPool, BufRing, RingRead};
use super::sys::{check_fork, check_pollable, fork_generation, Waker};
use super::event::{Event, OpCompletion};

const WAKER_TOKEN: u64 = u64::MAX;
/// Completions of `POLL_REMOVE`/`ASYNC_CANCEL` requests themselves: nothing to do with them.
const REMOVE_TOKEN: u64 = u64::MAX - 1;
const RING_ENTRIES: u32 = 1024;
/// `user_data` layout: bit 63 marks the two tokens above; bit 62 marks an operation
/// (multishot recv) whose completions go to the caller as `OpCompletion`s; the rest is a
/// 30-bit generation and the fd. Poll tokens have both bits clear.
pub const OP_TAG: u64 = 1 << 62;
const GEN_MASK: u32 = (1 << 30) - 1;
/// Provided buffers for multishot recv: 64 x 64 KiB (pages become resident only when written).
/// The kernel takes buffers in ring order, so every buffer is cycled through: 4 MiB stays in
/// cache where 512 x 32 KiB (16 MiB) did not, which made every copy in and out slower (100 KiB
/// echo: 33 µs per message instead of 37-49). 64 KiB holds a loopback TCP segment whole. When
/// all are in use the recv ends with ENOBUFS; the loop reads that socket directly and re-arms
/// the recv (see `eventloop::router`); users never see it.
const BUF_ENTRIES: u16 = 64;
const BUF_SIZE: usize = 64 * 1024;
const BUF_GROUP: u16 = 0;
/// Datagram buffers: the kernel puts one datagram in each, behind a 16-byte header and the
/// address (see `recvmsg_parts`), so a buffer holds the largest UDP payload (65,507 bytes)
/// whole; ids from 0x8000 tell them from stream buffers. Pages are touched only as far as
/// each datagram reaches.
const DGRAM_BUF_ENTRIES: u16 = 256;
const DGRAM_BUF_SIZE: usize = 68 * 1024;
const DGRAM_BUF_GROUP: u16 = 1;
const DGRAM_BID_BASE: u16 = 0x8000;
/// Address room in each recvmsg buffer: a `sockaddr_in6`, the largest a UDP socket reports.
const RECVMSG_NAMELEN: u32 = std::mem::size_of::<libc::sockaddr_in6>() as u32;

/// Bytes one multishot recv may receive before it ends by itself (and the loop re-arms it).
///
/// Why a limit: `ASYNC_CANCEL` finds a multishot recv only while it waits for data. Against a
/// peer that keeps the socket full, the kernel re-queues the recv as task work after every 32
/// receives, and a cancel submitted then fails with ENOENT (seen on 6.18: a closed transport's
/// recv kept receiving, holding the socket open, for 30 s). With a total limit the recv ends
/// on its own after this many bytes, so a stopped transport receives at most this much more
/// (stashed while paused, dropped once closed) and its socket is released soon after close.
/// One extra SQE per 256 KiB received is the price. Kernels before the limit existed ignore
/// the field; there the cancel alone applies.
pub(crate) const RECV_ARM_LIMIT: u32 = 256 * 1024;

/// Set `sqe->optlen` (bytes 44..48 of the 64-byte SQE): for a multishot `IORING_OP_RECV` it is
/// the total byte limit (`IORING_RECV_MSHOT_LIM`, Linux 6.16+). The io-uring crate has no
/// setter for it on `RecvMulti`.
fn with_recv_total_limit(sqe: squeue::Entry, limit: u32) -> squeue::Entry {
    // SAFETY: `squeue::Entry` is `#[repr(C)]` around the kernel's 64-byte `io_uring_sqe`, so it
    // has the same size and layout as `[u8; 64]`; offset 44 is the u32 union of
    // `splice_fd_in`/`file_index`/`optlen`, unused by RECV otherwise.
    let mut raw: [u8; 64] = unsafe { std::mem::transmute(sqe) };
    raw[44..48].copy_from_slice(&limit.to_ne_bytes());
    // SAFETY: the same layout argument, back again; every bit pattern of the union is valid.
    unsafe { std::mem::transmute(raw) }
}

fn ud(fd: RawFd, gen: u32) -> u64 {
    (((gen & GEN_MASK) as u64) << 32) | (fd as u32 as u64)
}

/// The `user_data` of an operation on `fd` in generation `gen` (see `OP_TAG`).
pub fn op_token(fd: RawFd, gen: u32) -> u64 {
    OP_TAG | ud(fd, gen)
}

/// Split an operation token back into `(fd, gen)`.
pub fn op_token_parts(token: u64) -> (RawFd, u32) {
    (token as u32 as RawFd, ((token >> 32) as u32) & GEN_MASK)
}

/// A multishot recvmsg buffer's parts: the sender's address bytes (as much as the kernel gave,
/// at most `RECVMSG_NAMELEN`), the payload, and whether the datagram was larger than the buffer
/// (MSG_TRUNC). `None` if the buffer does not parse.
pub fn recvmsg_parts(buf: &[u8]) -> Option<(&[u8], &[u8], bool)> {
    // The kernel's `struct io_uring_recvmsg_out` (four u32: namelen, controllen, payloadlen,
    // flags), then `msg_namelen` bytes of name, then the payload.
    const HDR: usize = 16;
    let field = |i: usize| buf.get(i * 4..i * 4 + 4).map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")));
    let (namelen, payloadlen, flags) = (field(0)?, field(2)?, field(3)?);
    let room = RECVMSG_NAMELEN as usize;
    let name = buf.get(HDR..HDR + (namelen as usize).min(room))?;
    let payload = buf.get(HDR + room..)?;
    let payload = &payload[..(payloadlen as usize).min(payload.len())];
    Some((name, payload, flags & libc::MSG_TRUNC as u32 != 0))
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
    // Declared first so it drops first: the kernel lets go of the buffer ring before `bufs`
    // unmaps it.
    ring: IoUring,
    /// Made on the first multishot recv; `Err` remembers why it could not be (then stream
    /// transports read on readiness instead).
    bufs: Option<Result<Arc<BufPool>, String>>,
    /// Made on the first multishot recvmsg (UDP): one datagram per buffer, so its own ring
    /// of buffers that fit the largest datagram (see `DGRAM_BUF_SIZE`).
    dgram_bufs: Option<Result<Arc<BufPool>, String>>,
    fds: HashMap<RawFd, FdState>,
    to_arm: Vec<RawFd>,
    next_gen: u32,
    waker: Arc<Waker>,
    waker_armed: bool,
    fork_gen: u64,
    /// Only `owner` may enter the ring (see the module docs); `None` until the first enter.
    single_issuer: bool,
    owner: Option<std::thread::ThreadId>,
    /// The header every multishot recvmsg points at: the kernel reads only its name and
    /// control lengths (room for any IPv4/IPv6 address, no control data).
    recvmsg_hdr: RecvMsgHdr,
}

/// A `msghdr` whose pointers are all null: only its two lengths mean anything.
struct RecvMsgHdr(Box<libc::msghdr>);

// SAFETY: the header's pointer fields are null and never dereferenced by us; the kernel only
// reads `msg_namelen`/`msg_controllen` from it, on the loop's thread, at submission.
unsafe impl Send for RecvMsgHdr {}
// SAFETY: as above; nothing writes it after construction.
unsafe impl Sync for RecvMsgHdr {}

/// The ring, and whether it is single-issuer (only if `thread_bound`; see the module docs).
/// Each older kernel rejects the flags it does not know with EINVAL, and gets the next set down.
fn build_ring(thread_bound: bool) -> io::Result<(IoUring, bool)> {
    if thread_bound {
        let mut b = IoUring::builder();
        b.setup_single_issuer().setup_defer_taskrun().setup_taskrun_flag().setup_submit_all().setup_r_disabled();
        match b.build(RING_ENTRIES) {
            Ok(r) => return Ok((r, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {} // before 6.1
            Err(e) => return Err(e),
        }
    }
    let mut b = IoUring::builder();
    b.setup_coop_taskrun().setup_taskrun_flag().setup_submit_all();
    match b.build(RING_ENTRIES) {
        Ok(r) => Ok((r, false)),
        // Before 5.19: a plain ring still works.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok((IoUring::new(RING_ENTRIES)?, false)),
        Err(e) => Err(e),
    }
}

/// Whether this process may enter an io_uring at all (seccomp can allow setup but refuse
/// enter). Asked once, with a throwaway ring: a loop's own ring may only be entered by the
/// thread that will run it, which need not be the one making the loop.
fn enter_allowed() -> io::Result<()> {
    static CHECKED: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();
    let refused = *CHECKED.get_or_init(|| match IoUring::new(2).and_then(|r| r.submit()) {
        Ok(_) => None,
        Err(e) => Some(e.raw_os_error().unwrap_or(libc::EIO)),
    });
    match refused {
        None => Ok(()),
        Some(errno) => Err(io::Error::from_raw_os_error(errno)),
    }
}

impl UringReactor {
    /// Set up a ring and check that it can do what the loop needs. Any refusal comes back as
    /// an error naming the cause, and `Reactor::new` falls back to epoll.
    pub fn new(waker: Arc<Waker>, thread_bound: bool) -> io::Result<Self> {
        let (ring, single_issuer) = build_ring(thread_bound).map_err(|e| {
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
            bufs: None,
            dgram_bufs: None,
            fds: HashMap::new(),
            to_arm: Vec::new(),
            next_gen: 0,
            waker,
            waker_armed: false,
            fork_gen: fork_generation(),
            single_issuer,
            owner: None,
            recvmsg_hdr: RecvMsgHdr(Box::new({
                // SAFETY: msghdr is plain data; all-zero is a valid (empty) header.
                let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                h.msg_namelen = RECVMSG_NAMELEN;
                h
            })),
        };
        enter_allowed()?;
        r.arm_waker()?;
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
            if !self.may_enter()? {
                return Err(io::Error::other("io_uring submission queue full, and only the loop's own thread may submit"));
            }
            self.ring.submit()?;
        }
    }

    /// Whether this thread may enter the ring. A single-issuer ring is enabled by the first
    /// thread that enters and belongs to it from then on; others may still queue requests,
    /// which that thread submits on its next enter.
    fn may_enter(&mut self) -> io::Result<bool> {
        if !self.single_issuer {
            return Ok(true);
        }
        let me = std::thread::current().id();
        match self.owner {
            Some(owner) => Ok(owner == me),
            None => {
                self.ring.submitter().register_enable_rings()?;
                self.owner = Some(me);
                Ok(true)
            }
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
        check_fork(self.fork_gen)
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
    /// as task work, enter once more so it runs and drops its file reference. On a thread that
    /// may not enter the ring (a loop closed or changed from outside its thread), the removal
    /// waits for the loop's next iteration, or for the ring to close, which ends every request.
    fn flush_removal(&mut self) -> io::Result<()> {
        if !self.may_enter()? {
            return Ok(());
        }
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
            self.next_gen = self.next_gen.wrapping_add(1) & GEN_MASK;
            let gen = self.next_gen;
            st.armed = Some((gen, st.want));
            let sqe = opcode::PollAdd::new(types::Fd(fd), st.want).build().user_data(ud(fd, gen));
            self.push(sqe)?;
        }
        self.to_arm.clear();
        Ok(())
    }

    /// Whether multishot recv on provided buffers works here (made on first use).
    pub fn recv_multishot_available(&mut self) -> bool {
        if self.bufs.is_none() {
            let mut probe = Probe::new();
            let ok = self.ring.submitter().register_probe(&mut probe).is_ok() && probe.is_supported(opcode::RecvMulti::CODE);
            self.bufs = Some(if ok {
                BufRing::new(&self.ring, BUF_ENTRIES, BUF_SIZE, BUF_GROUP, 0).map(BufPool::new).map_err(|e| e.to_string())
            } else {
                Err("IORING_OP_RECV unsupported".into())
            });
        }
        matches!(self.bufs, Some(Ok(_)))
    }

    /// Arm a multishot recv on `fd` into the provided buffers; its completions come back from
    /// `poll` as `OpCompletion`s carrying `token` (see `op_token`).
    pub fn recv_multishot(&mut self, fd: RawFd, token: u64) -> io::Result<()> {
        self.check_fork()?;
        if !self.recv_multishot_available() {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "multishot recv unavailable"));
        }
        let sqe = with_recv_total_limit(opcode::RecvMulti::new(types::Fd(fd), BUF_GROUP).build().user_data(token), RECV_ARM_LIMIT);
        self.push(sqe)
    }

    /// Arm a multishot recvmsg on the datagram socket `fd`: each completion is one datagram in
    /// a provided buffer, laid out as `io_uring_recvmsg_out`, the sender's address, then the
    /// payload (see `recvmsg_parts`).
    pub fn recvmsg_multishot(&mut self, fd: RawFd, token: u64) -> io::Result<()> {
        self.check_fork()?;
        if !self.recv_multishot_available() {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "multishot recv unavailable"));
        }
        if self.dgram_bufs.is_none() {
            self.dgram_bufs = Some(
                BufRing::new(&self.ring, DGRAM_BUF_ENTRIES, DGRAM_BUF_SIZE, DGRAM_BUF_GROUP, DGRAM_BID_BASE).map(BufPool::new).map_err(|e| e.to_string()),
            );
        }
        if let Some(Err(e)) = &self.dgram_bufs {
            return Err(io::Error::other(format!("datagram buffer ring: {e}")));
        }
        let hdr: *const libc::msghdr = &*self.recvmsg_hdr.0;
        let sqe = opcode::RecvMsgMulti::new(types::Fd(fd), hdr, DGRAM_BUF_GROUP).build().user_data(token);
        self.push(sqe)
    }

    /// Arm a multishot accept on the listening socket `fd`: each completion is a new
    /// connection's fd (non-blocking, close-on-exec) or `-errno`.
    pub fn accept_multishot(&mut self, fd: RawFd, token: u64) -> io::Result<()> {
        self.check_fork()?;
        let sqe = opcode::AcceptMulti::new(types::Fd(fd)).flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC).build().user_data(token);
        self.push(sqe)
    }

    /// Cancel the operation `token` and make the kernel process the cancellation now: the
    /// request holds a reference to the file, so until it is gone a socket about to be closed
    /// would not send its FIN (see `set_interest`).
    pub fn cancel_op(&mut self, token: u64) -> io::Result<()> {
        self.check_fork()?;
        self.push(opcode::AsyncCancel::new(token).build().user_data(REMOVE_TOKEN))?;
        self.flush_removal()
    }

    /// A read of the `(bid, len)`s completions named: its bytes stay in the buffers until copied
    /// out, and the buffers go back to the kernel as they are emptied (see `RingRead`).
    pub fn lease(&self, chunks: Vec<(u16, usize)>) -> Option<RingRead> {
        let pool = self.pool_of(chunks.first()?.0)?;
        Some(RingRead::new(pool.clone(), chunks))
    }

    /// Hand buffers back to the kernel (a buffer id names its ring).
    pub fn recycle(&self, bids: &[u16]) {
        for (pool, dgram) in [(&self.bufs, false), (&self.dgram_bufs, true)] {
            if let Some(Ok(p)) = pool {
                p.recycle(bids.iter().copied().filter(|&b| (b >= DGRAM_BID_BASE) == dgram));
            }
        }
    }

    fn pool_of(&self, bid: u16) -> Option<&Arc<BufPool>> {
        match if bid >= DGRAM_BID_BASE { &self.dgram_bufs } else { &self.bufs } {
            Some(Ok(b)) => Some(b),
            _ => None,
        }
    }

    pub fn buffer_size(&self) -> usize {
        BUF_SIZE
    }

    pub fn poll(&mut self, timeout: Option<Duration>, events: &mut Vec<Event>, ops: &mut Vec<OpCompletion>) -> io::Result<()> {
        self.check_fork()?;
        self.arm_queued()?;
        if !self.waker_armed {
            self.arm_waker()?;
        }
        if !self.may_enter()? {
            return Err(io::Error::other(
                "this loop is thread-bound (Loop(thread_bound=True), as ringloop.run makes it): it runs \
                 only on the thread that first ran it; make it with thread_bound=False to run it on others",
            ));
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
        self.reap(events, ops);
        Ok(())
    }

    fn reap(&mut self, events: &mut Vec<Event>, ops: &mut Vec<OpCompletion>) {
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
            if token & OP_TAG != 0 {
                let flags = cqe.flags();
                ops.push(OpCompletion { token, res, more: cqueue::more(flags), bid: cqueue::buffer_select(flags) });
                continue;
            }
            let fd = token as u32 as RawFd;
            let gen = ((token >> 32) as u32) & GEN_MASK;
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
