//! The completion router: what each completion of a multishot operation means. No PyO3 here.
//!
//! The reactor hands the loop a batch of `OpCompletion`s (token, result, "more to come", the
//! provided buffer filled). The router owns the table of running operations and turns the batch
//! into `Delivery`s — "data in buffers N.. of length L", "EOF", "error E", "accepted fd F",
//! "the stopped operation delivered its last completion" — plus the side effects the reactor
//! must carry out: operations to re-arm, buffers nobody will read. `LoopCore` only turns
//! deliveries into callbacks (`completions.rs`); nothing here calls Python, so every rule below
//! is unit-tested under `cargo test`.
//!
//! Rules, in the order they are applied to each completion:
//! - A completion of an operation no longer in the table (a stale token) is dropped; its buffer
//!   goes back to the kernel.
//! - **Stream data** is gathered per operation into one pending read (what one large `recv`
//!   would have returned), up to `MAX_GATHER` bytes: like asyncio's one `recv` per ready fd per
//!   iteration, a stream gets one read per batch. The read stays in its provided buffers until
//!   the transport takes it (`take_read`), so a batch never materialises megabytes at once.
//! - An **EOF or error** behind data of the same operation is delivered `later` (behind this
//!   iteration's callbacks, which the loop runs first): programs observe that order —
//!   `run_until_complete` of a TLS connect returns before the peer's EOF is processed.
//! - **Datagrams** are one delivery each, never gathered; an error goes to the transport and
//!   reading goes on (asyncio keeps its reader), so the operation is re-armed.
//! - **Accepts** deliver each new fd (or error); an error ends the multishot, which is re-armed
//!   only after a success.
//! - A multishot that ended for any reason but EOF, an error or a cancel — above all
//!   `ENOBUFS`, when the buffer ring ran dry — is **re-armed**: users never see `ENOBUFS`.
//! - A stream recv that ran the ring dry is **read now**, straight from its socket into memory
//!   of its own (`ReadBytes::Owned`), before it is re-armed. The kernel hands every freed
//!   buffer to whichever armed recv sees data first, so a recv re-armed after `ENOBUFS` could
//!   meet an empty ring batch after batch while busier connections took every buffer: with 100
//!   uploads of 300 KB behind a handler that blocked 20 ms, the slowest waited 2.5x the median.
//!   Reading now is what epoll's readiness read does: every starved stream moves each batch.
//! - A **stopped** operation (`stop`) still delivers the completions in flight (a paused
//!   transport keeps them, in order); its entry goes with its last completion, and a `then`
//!   given to `stop_then` is delivered right behind that last completion.
//! - A gathered read of at least `HOLD_MIN` bytes whose socket already holds more is **held**
//!   one batch (see `HOLD_MIN`), unless anything of the same operation follows it.
//!
//! Order: deliveries of one operation keep the order of its completions, across batches too
//! (held reads come first in the next batch). The transports rely on it (see
//! `transport::stream`'s read-order invariant).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::os::fd::RawFd;

use crate::reactor::{op_token, OpCompletion, OpKind, ReadBytes};

/// The largest read one gathering builds: asyncio's `max_size`, the most one `recv` asks for.
/// Past this size a batch's data goes out in several deliveries.
pub const MAX_GATHER: usize = 256 * 1024;

/// A gathered read at least this large is held back one batch when its socket already holds
/// more bytes: a large send arrives as several segments, and the multishot recv fires on the
/// first, so without the hold one message became two `data_received` calls (and two replies)
/// about a third of the time at 100 KiB. Smaller reads skip the check (an ioctl).
pub const HOLD_MIN: usize = 32 * 1024;

/// Hashes an operation token with one multiplication (Fibonacci hashing). Tokens are unique
/// integers, so SipHash's protection against chosen keys buys nothing here, and it cost about
/// a hundred instructions per lookup on the path of every read.
#[derive(Default)]
pub struct TokenHasher(u64);

impl Hasher for TokenHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type TokenMap<V> = HashMap<u64, V, BuildHasherDefault<TokenHasher>>;

/// What the router asks of the sockets behind its operations: the loop gives it the real ones
/// (`OsSockets`), the tests a fake.
pub trait Sockets {
    /// Bytes in `fd`'s receive queue that no recv has taken yet (`FIONREAD`).
    fn waiting(&self, fd: RawFd) -> usize;
    /// Read up to `max` bytes from `fd` now, without blocking; empty: the peer's EOF.
    fn recv_now(&mut self, fd: RawFd, max: usize) -> io::Result<Vec<u8>>;
}

/// The sockets themselves.
pub struct OsSockets;

impl Sockets for OsSockets {
    fn waiting(&self, fd: RawFd) -> usize {
        crate::reactor::sys::bytes_waiting(fd)
    }

    fn recv_now(&mut self, fd: RawFd, max: usize) -> io::Result<Vec<u8>> {
        crate::reactor::sys::recv_now(fd, max)
    }
}

/// A running operation and who gets its completions.
pub struct Op<C> {
    pub kind: OpKind,
    pub fd: RawFd,
    /// Who receives the deliveries (the loop's callback and its context).
    pub who: C,
    /// Stopped: completions still in flight are delivered; the entry goes with the last one.
    stopping: bool,
    /// Delivered (as `Item::Then`) right behind the operation's last completion.
    then: Option<C>,
}

impl<C> Op<C> {
    pub fn then(&self) -> Option<&C> {
        self.then.as_ref()
    }
}

/// What a delivery carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// A stream read in provided buffers, or one datagram: its slot (see `take_read`).
    Read(usize),
    /// A stream's end or error (`0` is EOF, `-errno`), a datagram socket's error, or an
    /// accepted fd (`>= 0`) or accept error.
    Res(i32),
    /// The stopped operation delivered its last completion (see `Router::stop_then`).
    Then,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub token: u64,
    pub item: Item,
    /// Queue it behind this iteration's callbacks (an EOF or error right behind data).
    pub later: bool,
    /// A stream read still gathering: its size so far.
    gathering: Option<usize>,
    /// Held back once already: delivered with the next batch, whatever comes.
    held: bool,
}

impl Delivery {
    fn new(token: u64, item: Item, later: bool) -> Delivery {
        Delivery { token, item, later, gathering: None, held: false }
    }
}

/// The outcome of routing one batch.
pub struct Routed<C> {
    /// In order; `later` ones go behind this iteration's callbacks.
    pub deliveries: Vec<Delivery>,
    /// Operations whose multishot ended and must be armed again: `(kind, fd, token)`.
    pub rearm: Vec<(OpKind, RawFd, u64)>,
    /// Provided buffers nobody will read: back to the kernel.
    pub recycle: Vec<u16>,
    /// Operations that delivered their last completion in this batch (their deliveries may
    /// still name them).
    pub gone: TokenMap<Op<C>>,
}

impl<C> Routed<C> {
    /// Who gets `d`: the operation still running, or the one that just went.
    pub fn who<'a>(&'a self, router: &'a Router<C>, d: &Delivery) -> Option<&'a C> {
        let op = router.ops.get(&d.token).or_else(|| self.gone.get(&d.token))?;
        match d.item {
            Item::Then => op.then.as_ref(),
            _ => Some(&op.who),
        }
    }
}

/// The table of running operations, the reads waiting in provided buffers, and the held ones.
pub struct Router<C> {
    ops: TokenMap<Op<C>>,
    next_gen: u32,
    /// Reads waiting for their transport: in their provided buffers, or owned (see the rules).
    reads: Vec<Option<ReadBytes>>,
    free_reads: Vec<usize>,
    /// Held back for one batch while more of their data arrives (see `HOLD_MIN`).
    held: Vec<Delivery>,
    /// Reads of starved recvs taken straight from their sockets, since the loop started (tests
    /// check that their scenarios reach this path).
    pub starved_reads: u64,
}

impl<C> Default for Router<C> {
    fn default() -> Self {
        Router { ops: TokenMap::default(), next_gen: 0, reads: Vec::new(), free_reads: Vec::new(), held: Vec::new(), starved_reads: 0 }
    }
}

impl<C> Router<C> {
    /// A fresh token for an operation of `kind` on `fd` (a new generation each time, so a
    /// completion of an older operation on the same fd number is never taken for this one).
    pub fn next_token(&mut self, fd: RawFd) -> u64 {
        self.next_gen = self.next_gen.wrapping_add(1);
        op_token(fd, self.next_gen)
    }

    /// Record a running operation (armed in the reactor under `token`).
    pub fn insert(&mut self, token: u64, kind: OpKind, fd: RawFd, who: C) {
        self.ops.insert(token, Op { kind, fd, who, stopping: false, then: None });
    }

    /// Who gets the completions of `token`, while it runs and was not stopped.
    pub fn running(&self, token: u64) -> Option<&C> {
        self.ops.get(&token).filter(|op| !op.stopping).map(|op| &op.who)
    }

    /// Mark `token` stopping (the caller cancels it in the reactor). `false`: no such running
    /// operation, or already stopping.
    pub fn stop(&mut self, token: u64) -> bool {
        match self.ops.get_mut(&token) {
            Some(op) if !op.stopping => {
                op.stopping = true;
                true
            }
            _ => false,
        }
    }

    /// `stop`, and deliver `then` right behind the operation's last completion. `Err(then)`:
    /// no such running operation (nothing will be delivered).
    pub fn stop_then(&mut self, token: u64, then: C) -> Result<(), C> {
        match self.ops.get_mut(&token) {
            Some(op) if !op.stopping => {
                op.stopping = true;
                op.then = Some(then);
                Ok(())
            }
            _ => Err(then),
        }
    }

    pub fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    pub fn ops(&self) -> impl Iterator<Item = &Op<C>> {
        self.ops.values()
    }

    /// Take read `slot` (as a delivery named it): its bytes (or its buffers, to copy out and
    /// hand back) are the caller's. `None`: already taken.
    pub fn take_read(&mut self, slot: usize) -> Option<ReadBytes> {
        let chunks = self.reads.get_mut(slot)?.take()?;
        self.free_reads.push(slot);
        Some(chunks)
    }

    fn new_read(&mut self, chunks: ReadBytes) -> usize {
        match self.free_reads.pop() {
            Some(i) => {
                self.reads[i] = Some(chunks);
                i
            }
            None => {
                self.reads.push(Some(chunks));
                self.reads.len() - 1
            }
        }
    }

    /// Everything this router still holds, for the loop's close: the operations (their
    /// callbacks go with them) and the buffers of reads nobody took.
    pub fn drain(&mut self) -> (Vec<Op<C>>, Vec<u16>) {
        let ops = self.ops.drain().map(|(_, op)| op).collect();
        let bids = self
            .reads
            .drain(..)
            .flat_map(|r| match r {
                Some(ReadBytes::Bufs(chunks)) => chunks,
                _ => Vec::new(),
            })
            .map(|(bid, _)| bid)
            .collect();
        self.free_reads.clear();
        self.held.clear();
        (ops, bids)
    }

    /// Route one batch (see the module docs); `sockets` answers for the hold and reads a
    /// starved recv.
    pub fn route(&mut self, completions: &mut Vec<OpCompletion>, sockets: &mut impl Sockets) -> Routed<C> {
        let mut out = Routed { deliveries: std::mem::take(&mut self.held), rearm: Vec::new(), recycle: Vec::new(), gone: TokenMap::default() };
        for c in completions.drain(..) {
            self.route_one(c, &mut out, sockets);
        }
        self.hold(&mut out, |fd| sockets.waiting(fd));
        out
    }

    fn route_one(&mut self, c: OpCompletion, out: &mut Routed<C>, sockets: &mut impl Sockets) {
        let earlier = out.deliveries.iter().rposition(|d| d.token == c.token);
        let Some(op) = self.ops.get(&c.token) else {
            out.recycle.extend(c.bid);
            return;
        };
        let (kind, fd, stopping) = (op.kind, op.fd, op.stopping);
        let d = &mut out.deliveries;
        let rearm = match (kind, c.res, c.bid) {
            (OpKind::Accept, res, _) => {
                if res != -libc::ECANCELED {
                    d.push(Delivery::new(c.token, Item::Res(res), false));
                }
                res >= 0
            }
            (OpKind::RecvMsg, n, Some(bid)) if n > 0 => {
                let slot = self.new_read(ReadBytes::Bufs(vec![(bid, n as usize)]));
                out.deliveries.push(Delivery::new(c.token, Item::Read(slot), false));
                true
            }
            (OpKind::RecvMsg, n, bid) => {
                out.recycle.extend(bid);
                // 0 means the socket was shut down: nothing more will come.
                if n < 0 && n != -libc::ENOBUFS && n != -libc::ECANCELED {
                    d.push(Delivery::new(c.token, Item::Res(n), false));
                }
                n < 0 && n != -libc::ECANCELED
            }
            (OpKind::Recv, n, Some(bid)) if n > 0 => {
                let n = n as usize;
                let open = earlier.filter(|&i| d[i].gathering.is_some_and(|size| size + n <= MAX_GATHER));
                match open {
                    Some(i) => {
                        let Item::Read(slot) = d[i].item else { unreachable!("only reads gather") };
                        let Some(ReadBytes::Bufs(chunks)) = self.reads[slot].as_mut() else { unreachable!("a gathering read is in buffers") };
                        chunks.push((bid, n));
                        d[i].gathering = d[i].gathering.map(|size| size + n);
                    }
                    None => {
                        let slot = self.new_read(ReadBytes::Bufs(vec![(bid, n)]));
                        let mut read = Delivery::new(c.token, Item::Read(slot), false);
                        read.gathering = Some(n);
                        out.deliveries.push(read);
                    }
                }
                true
            }
            (OpKind::Recv, n, bid) if n == -libc::ENOBUFS && !c.more && !stopping => {
                out.recycle.extend(bid);
                self.read_starved(c.token, fd, earlier.is_some(), out, sockets)
            }
            (OpKind::Recv, n, bid) => {
                out.recycle.extend(bid);
                if n == 0 || (n < 0 && n != -libc::ENOBUFS && n != -libc::ECANCELED) {
                    d.push(Delivery::new(c.token, Item::Res(n), earlier.is_some()));
                }
                n == -libc::ENOBUFS
            }
        };
        if c.more {
            return;
        }
        if rearm && !stopping {
            out.rearm.push((kind, fd, c.token));
            return;
        }
        let op = self.ops.remove(&c.token).expect("looked up above");
        if op.then.is_some() {
            // Behind an EOF or error of this operation queued for later, too.
            let later = out.deliveries.iter().any(|d| d.token == c.token && d.later);
            out.deliveries.push(Delivery::new(c.token, Item::Then, later));
        }
        out.gone.insert(c.token, op);
    }

    /// Read what a starved recv's socket holds now (see the rules); `true`: re-arm it.
    fn read_starved(&mut self, token: u64, fd: RawFd, behind_data: bool, out: &mut Routed<C>, sockets: &mut impl Sockets) -> bool {
        let waiting = sockets.waiting(fd);
        if waiting == 0 {
            return true;
        }
        match sockets.recv_now(fd, waiting.min(MAX_GATHER)) {
            Ok(data) if data.is_empty() => {
                out.deliveries.push(Delivery::new(token, Item::Res(0), behind_data));
                false
            }
            Ok(data) => {
                self.starved_reads += 1;
                let slot = self.new_read(ReadBytes::Owned(data));
                out.deliveries.push(Delivery::new(token, Item::Read(slot), false));
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                out.deliveries.push(Delivery::new(token, Item::Res(-errno), behind_data));
                false
            }
        }
    }

    /// Hold large reads whose socket already has more (see `HOLD_MIN`). Only a read with
    /// nothing of its operation behind it: an EOF or error after it keeps the order.
    fn hold(&mut self, out: &mut Routed<C>, waiting: impl Fn(RawFd) -> usize) {
        let mut i = 0;
        while i < out.deliveries.len() {
            let d = &out.deliveries[i];
            let hold = match d.gathering {
                Some(size) if !d.held && (HOLD_MIN..MAX_GATHER).contains(&size) => {
                    !out.deliveries[i + 1..].iter().any(|n| n.token == d.token)
                        && self.ops.get(&d.token).is_some_and(|op| !op.stopping && waiting(op.fd) > 0)
                }
                _ => false,
            };
            if hold {
                let mut d = out.deliveries.remove(i);
                d.held = true;
                self.held.push(d);
            } else {
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KB: i32 = 1024;

    fn data(token: u64, n: i32, bid: u16, more: bool) -> OpCompletion {
        OpCompletion { token, res: n, more, bid: Some(bid) }
    }

    fn res(token: u64, n: i32, more: bool) -> OpCompletion {
        OpCompletion { token, res: n, more, bid: None }
    }

    /// Sockets that hold what `waiting` says, and give that many bytes (0xAB) when read.
    struct Fake<F>(F);

    impl<F: Fn(RawFd) -> usize> Sockets for Fake<F> {
        fn waiting(&self, fd: RawFd) -> usize {
            (self.0)(fd)
        }

        fn recv_now(&mut self, fd: RawFd, max: usize) -> io::Result<Vec<u8>> {
            Ok(vec![0xAB; (self.0)(fd).min(max)])
        }
    }

    fn fake(waiting: impl Fn(RawFd) -> usize) -> Fake<impl Fn(RawFd) -> usize> {
        Fake(waiting)
    }

    fn router_with(kind: OpKind) -> (Router<&'static str>, u64) {
        let mut r = Router::default();
        let t = r.next_token(7);
        r.insert(t, kind, 7, "transport");
        (r, t)
    }

    fn items(out: &Routed<&str>) -> Vec<(Item, bool)> {
        out.deliveries.iter().map(|d| (d.item, d.later)).collect()
    }

    #[test]
    fn stream_data_of_one_batch_is_one_read() {
        let (mut r, t) = router_with(OpKind::Recv);
        let out = r.route(&mut vec![data(t, KB, 3, true), data(t, 2 * KB, 4, true)], &mut fake(|_| 0));
        assert_eq!(items(&out), [(Item::Read(0), false)]);
        assert_eq!(r.take_read(0), Some(ReadBytes::Bufs(vec![(3, 1024), (4, 2048)])));
        assert_eq!(r.take_read(0), None, "taken once");
        assert!(out.rearm.is_empty() && out.recycle.is_empty());
    }

    #[test]
    fn gathering_stops_at_max_gather() {
        let (mut r, t) = router_with(OpKind::Recv);
        let mut batch: Vec<_> = (0..5).map(|i| data(t, 64 * KB, i, true)).collect();
        let out = r.route(&mut batch, &mut fake(|_| 0));
        // 4 x 64 KiB fill one read; the fifth starts another.
        assert_eq!(items(&out), [(Item::Read(0), false), (Item::Read(1), false)]);
        let chunks = |read| match read {
            Some(ReadBytes::Bufs(chunks)) => chunks.len(),
            other => panic!("{other:?}"),
        };
        assert_eq!(chunks(r.take_read(0)), 4);
        assert_eq!(chunks(r.take_read(1)), 1);
    }

    #[test]
    fn eof_behind_data_goes_later_and_the_op_is_gone() {
        let (mut r, t) = router_with(OpKind::Recv);
        let out = r.route(&mut vec![data(t, 10, 1, true), res(t, 0, false)], &mut fake(|_| 0));
        assert_eq!(items(&out), [(Item::Read(0), false), (Item::Res(0), true)]);
        assert!(out.gone.contains_key(&t) && out.rearm.is_empty());
        assert_eq!(out.who(&r, &out.deliveries[1]), Some(&"transport"));
        // A lone EOF is not delayed.
        let (mut r, t) = router_with(OpKind::Recv);
        assert_eq!(items(&r.route(&mut vec![res(t, 0, false)], &mut fake(|_| 0))), [(Item::Res(0), false)]);
    }

    #[test]
    fn enobufs_rearms_silently() {
        let (mut r, t) = router_with(OpKind::Recv);
        let out = r.route(&mut vec![data(t, 10, 1, true), res(t, -libc::ENOBUFS, false)], &mut fake(|_| 0));
        assert_eq!(items(&out), [(Item::Read(0), false)], "ENOBUFS is never delivered");
        assert_eq!(out.rearm, [(OpKind::Recv, 7, t)]);
        assert!(r.ops().count() == 1);
    }

    #[test]
    fn a_starved_recv_reads_its_socket_now_then_rearms() {
        let (mut r, t) = router_with(OpKind::Recv);
        let out = r.route(&mut vec![data(t, 10, 1, true), res(t, -libc::ENOBUFS, false)], &mut fake(|_| 300 * 1024));
        assert_eq!(items(&out), [(Item::Read(0), false), (Item::Read(1), false)], "in buffers, then read now, in order");
        assert_eq!(out.rearm, [(OpKind::Recv, 7, t)]);
        assert_eq!(r.take_read(0), Some(ReadBytes::Bufs(vec![(1, 10)])));
        assert_eq!(r.take_read(1), Some(ReadBytes::Owned(vec![0xAB; MAX_GATHER])), "one read is at most MAX_GATHER");
        assert_eq!(r.starved_reads, 1);
        // A stopping recv is not read: its transport paused or closed it.
        let (mut r, t) = router_with(OpKind::Recv);
        r.stop(t);
        let out = r.route(&mut vec![res(t, -libc::ENOBUFS, false)], &mut fake(|_| 100));
        assert!(out.deliveries.is_empty() && out.rearm.is_empty());
    }

    #[test]
    fn a_starved_recv_that_finds_eof_or_an_error_ends() {
        struct Gone(io::Result<Vec<u8>>);
        impl Sockets for Gone {
            fn waiting(&self, _: RawFd) -> usize {
                1
            }
            fn recv_now(&mut self, _: RawFd, _: usize) -> io::Result<Vec<u8>> {
                std::mem::replace(&mut self.0, Ok(Vec::new()))
            }
        }
        let (mut r, t) = router_with(OpKind::Recv);
        let out = r.route(&mut vec![data(t, 10, 1, true), res(t, -libc::ENOBUFS, false)], &mut Gone(Ok(Vec::new())));
        assert_eq!(items(&out), [(Item::Read(0), false), (Item::Res(0), true)], "EOF behind data goes later");
        assert!(out.rearm.is_empty() && out.gone.contains_key(&t));
        let (mut r, t) = router_with(OpKind::Recv);
        let reset = Err(io::Error::from_raw_os_error(libc::ECONNRESET));
        let out = r.route(&mut vec![res(t, -libc::ENOBUFS, false)], &mut Gone(reset));
        assert_eq!(items(&out), [(Item::Res(-libc::ECONNRESET), false)]);
        assert!(out.rearm.is_empty());
        let (mut r, t) = router_with(OpKind::Recv);
        let would_block = Err(io::Error::from_raw_os_error(libc::EAGAIN));
        let out = r.route(&mut vec![res(t, -libc::ENOBUFS, false)], &mut Gone(would_block));
        assert!(out.deliveries.is_empty());
        assert_eq!(out.rearm, [(OpKind::Recv, 7, t)]);
    }

    #[test]
    fn a_multishot_that_ends_with_data_is_rearmed() {
        // The recv's byte limit ends it after a data completion.
        let (mut r, t) = router_with(OpKind::Recv);
        let out = r.route(&mut vec![data(t, 10, 1, false)], &mut fake(|_| 0));
        assert_eq!(out.rearm, [(OpKind::Recv, 7, t)]);
    }

    #[test]
    fn stopped_op_delivers_in_flight_data_then_its_then() {
        let (mut r, t) = router_with(OpKind::Recv);
        assert_eq!(r.stop_then(t, "switched"), Ok(()));
        assert!(!r.stop(t), "already stopping");
        let out = r.route(&mut vec![data(t, 10, 1, true), res(t, -libc::ECANCELED, false)], &mut fake(|_| 0));
        assert_eq!(items(&out), [(Item::Read(0), false), (Item::Then, false)]);
        assert!(out.rearm.is_empty(), "a stopped op is never re-armed");
        assert_eq!(out.who(&r, &out.deliveries[1]), Some(&"switched"));
        assert_eq!(out.who(&r, &out.deliveries[0]), Some(&"transport"));
        assert_eq!(r.stop_then(t, "x"), Err("x"), "gone");
    }

    #[test]
    fn then_goes_behind_a_later_eof() {
        let (mut r, t) = router_with(OpKind::Recv);
        r.stop_then(t, "then").unwrap();
        let out = r.route(&mut vec![data(t, 10, 1, true), res(t, 0, false)], &mut fake(|_| 0));
        assert_eq!(items(&out), [(Item::Read(0), false), (Item::Res(0), true), (Item::Then, true)]);
    }

    #[test]
    fn stale_completions_give_their_buffers_back() {
        let (mut r, _) = router_with(OpKind::Recv);
        let stale = r.next_token(7);
        let out = r.route(&mut vec![data(stale, 10, 9, true)], &mut fake(|_| 0));
        assert!(out.deliveries.is_empty());
        assert_eq!(out.recycle, [9]);
    }

    #[test]
    fn large_read_is_held_while_its_socket_has_more() {
        let (mut r, t) = router_with(OpKind::Recv);
        let out = r.route(&mut vec![data(t, 40 * KB, 1, true)], &mut fake(|fd| if fd == 7 { 100 } else { 0 }));
        assert!(out.deliveries.is_empty(), "held");
        assert!(r.has_held());
        // The next batch continues gathering into it, then delivers it whatever comes.
        let out = r.route(&mut vec![data(t, 20 * KB, 2, true)], &mut fake(|_| 100));
        assert_eq!(items(&out), [(Item::Read(0), false)]);
        assert_eq!(r.take_read(0), Some(ReadBytes::Bufs(vec![(1, 40 * 1024), (2, 20 * 1024)])));
        assert!(!r.has_held());
    }

    #[test]
    fn no_hold_when_something_follows_or_the_op_stops() {
        let (mut r, t) = router_with(OpKind::Recv);
        let out = r.route(&mut vec![data(t, 40 * KB, 1, true), res(t, 0, false)], &mut fake(|_| 100));
        assert_eq!(out.deliveries.len(), 2, "an EOF behind it keeps the order");
        let (mut r, t) = router_with(OpKind::Recv);
        r.stop(t);
        let out = r.route(&mut vec![data(t, 40 * KB, 1, true)], &mut fake(|_| 100));
        assert_eq!(out.deliveries.len(), 1, "a stopping op is not held");
        let (mut r, t) = router_with(OpKind::Recv);
        let out = r.route(&mut vec![data(t, 10 * KB, 1, true)], &mut fake(|_| 100));
        assert_eq!(out.deliveries.len(), 1, "small reads are not held");
    }

    #[test]
    fn datagrams_are_one_delivery_each_and_errors_rearm() {
        let (mut r, t) = router_with(OpKind::RecvMsg);
        let out = r.route(&mut vec![data(t, 5, 1, true), data(t, 6, 2, true), res(t, -libc::ECONNREFUSED, false)], &mut fake(|_| 0));
        assert_eq!(items(&out), [(Item::Read(0), false), (Item::Read(1), false), (Item::Res(-libc::ECONNREFUSED), false)]);
        assert_eq!(out.rearm, [(OpKind::RecvMsg, 7, t)], "reading goes on after an error");
        let out = r.route(&mut vec![res(t, -libc::ENOBUFS, false)], &mut fake(|_| 0));
        assert!(out.deliveries.is_empty());
        assert_eq!(out.rearm.len(), 1);
    }

    #[test]
    fn accept_delivers_fds_and_rearms_only_after_success() {
        let (mut r, t) = router_with(OpKind::Accept);
        let out = r.route(&mut vec![res(t, 11, true), res(t, 12, false)], &mut fake(|_| 0));
        assert_eq!(items(&out), [(Item::Res(11), false), (Item::Res(12), false)]);
        assert_eq!(out.rearm, [(OpKind::Accept, 7, t)]);
        let out = r.route(&mut vec![res(t, -libc::EMFILE, false)], &mut fake(|_| 0));
        assert_eq!(items(&out), [(Item::Res(-libc::EMFILE), false)]);
        assert!(out.rearm.is_empty() && out.gone.contains_key(&t));
        let (mut r, t) = router_with(OpKind::Accept);
        r.stop(t);
        let out = r.route(&mut vec![res(t, -libc::ECANCELED, false)], &mut fake(|_| 0));
        assert!(out.deliveries.is_empty(), "a cancel is not an error");
    }

    #[test]
    fn per_operation_order_holds_across_ops_and_batches() {
        let mut r: Router<&str> = Router::default();
        let a = r.next_token(7);
        r.insert(a, OpKind::Recv, 7, "a");
        let b = r.next_token(8);
        r.insert(b, OpKind::Recv, 8, "b");
        let out = r.route(&mut vec![data(a, 1, 1, true), data(b, 1, 2, true), data(a, 1, 3, true), res(b, 0, false)], &mut fake(|_| 0));
        let tokens: Vec<_> = out.deliveries.iter().map(|d| (d.token, d.item)).collect();
        assert_eq!(tokens, [(a, Item::Read(0)), (b, Item::Read(1)), (b, Item::Res(0))]);
        assert_eq!(r.take_read(0), Some(ReadBytes::Bufs(vec![(1, 1), (3, 1)])));
    }

    #[test]
    fn drain_returns_untaken_buffers() {
        let (mut r, t) = router_with(OpKind::Recv);
        r.route(&mut vec![data(t, 1, 5, true)], &mut fake(|_| 0));
        let (ops, bids) = r.drain();
        assert_eq!(ops.len(), 1);
        assert_eq!(bids, [5]);
    }
}
