//! A provided-buffer ring (`IORING_REGISTER_PBUF_RING`, Linux 5.19+): the buffers multishot
//! `recv` completions are written into.
//!
//! OS facts this depends on:
//! - The ring is an array of `io_uring_buf {addr, len, bid}` entries in memory we own, shared
//!   with the kernel; the kernel consumes entries from its head, we add entries at our tail and
//!   publish the tail with a release store (the tail lives in the first entry's `resv` field).
//! - A completion names the buffer it used (`IORING_CQE_F_BUFFER`, bid in the upper 16 bits of
//!   the flags). The buffer stays ours until we put it back on the ring.
//! - When the ring is empty, a multishot `recv` ends with `-ENOBUFS`. The loop copies every
//!   completion's bytes out and recycles the buffer in the same reap, so the ring refills before
//!   the next wait; a multishot that still met `ENOBUFS` (more completions in one batch than
//!   buffers) has its socket read directly and is re-armed by the loop, never reported to the
//!   user.
//!
//! Memory: `entries * buf_size` bytes of anonymous mapping. Pages become resident only when
//! the kernel writes into them, so small messages touch one page per buffer.
//!
//! Sharing: the reactor and the reads it lends out (`RingRead`) share the ring as a `BufPool`
//! (an `Arc` around a mutex that is never contended: everything runs on the loop's thread).
//! A read keeps the pool alive, so it never points into unmapped memory, even when the loop
//! closes first; its buffers go back to the ring as soon as they are emptied, or when the read
//! is dropped, so no path can leak them.

use std::io;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

pub struct BufRing {
    ring: *mut BufRingEntry,
    ring_bytes: usize,
    bufs: *mut u8,
    bufs_bytes: usize,
    entries: u16,
    buf_size: usize,
    tail: u16,
    pub bgid: u16,
    bid_base: u16,
}

// SAFETY: the two pointers are owned mappings with no thread affinity; the loop that owns the
// ring uses it from one thread at a time (under the GIL), and the kernel synchronises through
// the tail's atomic store.
unsafe impl Send for BufRing {}

fn map(len: usize) -> io::Result<*mut u8> {
    // SAFETY: an anonymous private mapping with no address hint; the result is checked.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

impl BufRing {
    /// Map `entries` (a power of two) buffers of `buf_size` bytes, register them as group
    /// `bgid` and hand them all to the kernel. Their ids are `bid_base..bid_base + entries`,
    /// so the id in a completion tells which ring's buffer it is.
    pub fn new(ring: &IoUring, entries: u16, buf_size: usize, bgid: u16, bid_base: u16) -> io::Result<BufRing> {
        assert!(entries.is_power_of_two() && bid_base.checked_add(entries).is_some());
        let ring_bytes = entries as usize * std::mem::size_of::<BufRingEntry>();
        let bufs_bytes = entries as usize * buf_size;
        let ring_mem = map(ring_bytes)?;
        let bufs = match map(bufs_bytes) {
            Ok(b) => b,
            Err(e) => {
                // SAFETY: unmapping exactly what `map` returned above.
                unsafe { libc::munmap(ring_mem.cast(), ring_bytes) };
                return Err(e);
            }
        };
        let mut br = BufRing { ring: ring_mem.cast(), ring_bytes, bufs, bufs_bytes, entries, buf_size, tail: 0, bgid, bid_base };
        // SAFETY: the ring memory is page-aligned (mmap), `entries` long, and stays mapped until
        // Drop, which runs only after the IoUring that registered it is gone or it is
        // unregistered (see `UringReactor`'s field order).
        unsafe { ring.submitter().register_buf_ring_with_flags(br.ring as u64, entries, bgid, 0)? };
        for i in 0..entries {
            br.push(i);
        }
        br.publish();
        Ok(br)
    }

    /// Queue buffer `i` (an index, not a bid).
    fn push(&mut self, i: u16) {
        let idx = (self.tail & (self.entries - 1)) as usize;
        // SAFETY: idx < entries, inside the mapped ring; the kernel never reads entries past
        // the published tail, so writing this one races with nothing.
        let e = unsafe { &mut *self.ring.add(idx) };
        // SAFETY: i < entries, so the buffer lies inside the mapping.
        e.set_addr(unsafe { self.bufs.add(i as usize * self.buf_size) } as u64);
        e.set_len(self.buf_size as u32);
        e.set_bid(self.bid_base + i);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Make buffers pushed since the last publish visible to the kernel.
    pub fn publish(&mut self) {
        // SAFETY: the tail field is the `resv` of entry 0, a naturally aligned u16 inside the
        // mapping; the kernel reads it with acquire semantics, hence the release store.
        let tail = unsafe { &*(BufRingEntry::tail(self.ring) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }

    /// The `len` bytes the kernel wrote into buffer `bid`.
    pub fn data(&self, bid: u16, len: usize) -> &[u8] {
        let i = self.index(bid);
        assert!(len <= self.buf_size);
        // SAFETY: in bounds (checked); the kernel finished writing before posting the CQE that
        // named this buffer, and it will not write again until we recycle it.
        unsafe { std::slice::from_raw_parts(self.bufs.add(i as usize * self.buf_size), len) }
    }

    /// Give buffer `bid` back to the kernel (visible after the next `publish`).
    pub fn recycle(&mut self, bid: u16) {
        let i = self.index(bid);
        self.push(i);
    }

    /// Whether `bid` names one of this ring's buffers.
    pub fn owns(&self, bid: u16) -> bool {
        bid.wrapping_sub(self.bid_base) < self.entries
    }

    fn index(&self, bid: u16) -> u16 {
        assert!(self.owns(bid), "buffer {bid} is not in this ring");
        bid - self.bid_base
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: both regions were mapped in `new` with these lengths and are unmapped once.
        unsafe {
            libc::munmap(self.ring.cast(), self.ring_bytes);
            libc::munmap(self.bufs.cast(), self.bufs_bytes);
        }
    }
}

/// A `BufRing` shared by the reactor and the reads in its buffers (see the module docs).
pub struct BufPool(Mutex<BufRing>);

impl BufPool {
    pub fn new(ring: BufRing) -> Arc<BufPool> {
        Arc::new(BufPool(Mutex::new(ring)))
    }

    /// The ring itself. A poisoned lock (a panic while it was held, which would be a bug)
    /// still hands the ring out: its state is a tail counter that no panic leaves half-done.
    pub fn lock(&self) -> MutexGuard<'_, BufRing> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Give buffers back to the kernel, in one publish.
    pub fn recycle(&self, bids: impl IntoIterator<Item = u16>) {
        let mut ring = self.lock();
        for bid in bids {
            ring.recycle(bid);
        }
        ring.publish();
    }
}

/// One read's bytes: still in their provided buffers (`(bid, len)`s in order), or read
/// straight from the socket into memory of its own (`owned`: the router's rule for a recv the
/// ring starved, see `eventloop::router`). Copied out front to back; each buffer goes back to
/// the kernel as soon as it is emptied, and whatever is left when this is dropped goes back too.
pub struct RingRead {
    pool: Option<Arc<BufPool>>,
    chunks: Vec<(u16, usize)>,
    owned: Vec<u8>,
    /// The first chunk not yet emptied, and how much of it (or of `owned`) was copied out.
    next: usize,
    off: usize,
    left: usize,
}

impl RingRead {
    pub fn new(pool: Arc<BufPool>, chunks: Vec<(u16, usize)>) -> RingRead {
        let left = chunks.iter().map(|c| c.1).sum();
        RingRead { pool: Some(pool), chunks, owned: Vec::new(), next: 0, off: 0, left }
    }

    /// A read whose bytes are already in memory of their own.
    pub fn owned(data: Vec<u8>) -> RingRead {
        RingRead { pool: None, chunks: Vec::new(), left: data.len(), owned: data, next: 0, off: 0 }
    }

    /// Bytes not yet copied out.
    pub fn len(&self) -> usize {
        self.left
    }

    pub fn is_empty(&self) -> bool {
        self.left == 0
    }

    /// Copy the next `min(dst.len(), len())` bytes into `dst`; returns how many.
    pub fn copy_to(&mut self, dst: &mut [u8]) -> usize {
        let Some(pool) = &self.pool else {
            let n = self.left.min(dst.len());
            dst[..n].copy_from_slice(&self.owned[self.off..self.off + n]);
            self.off += n;
            self.left -= n;
            return n;
        };
        let mut ring = pool.lock();
        let mut at = 0;
        while at < dst.len() && self.next < self.chunks.len() {
            let (bid, len) = self.chunks[self.next];
            let src = &ring.data(bid, len)[self.off..];
            let n = src.len().min(dst.len() - at);
            dst[at..at + n].copy_from_slice(&src[..n]);
            at += n;
            self.off += n;
            if self.off == len {
                ring.recycle(bid);
                self.next += 1;
                self.off = 0;
            }
        }
        ring.publish();
        self.left -= at;
        at
    }

    /// Hand the rest to `f` one buffer at a time, in order, each given back to the kernel as
    /// soon as `f` returns (for a consumer that copies into a buffer of its own).
    pub fn drain_chunks(mut self, mut f: impl FnMut(&[u8])) {
        let Some(pool) = self.pool.take() else {
            if self.left > 0 {
                f(&self.owned[self.off..]);
            }
            self.left = 0;
            return;
        };
        let mut ring = pool.lock();
        while self.next < self.chunks.len() {
            let (bid, len) = self.chunks[self.next];
            f(&ring.data(bid, len)[self.off..]);
            ring.recycle(bid);
            self.next += 1;
            self.off = 0;
        }
        ring.publish();
        self.left = 0;
    }

    /// Run `f` on the bytes of a read that is exactly one buffer (a datagram), then give the
    /// buffer back.
    pub fn with_single<R>(self, f: impl FnOnce(&[u8]) -> R) -> R {
        let (Some(pool), &[(bid, len)]) = (&self.pool, self.chunks.as_slice()) else { panic!("a datagram is one buffer") };
        let r = f(pool.lock().data(bid, len));
        drop(self); // Drop recycles it
        r
    }
}

impl Drop for RingRead {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            if self.next < self.chunks.len() {
                pool.recycle(self.chunks[self.next..].iter().map(|&(bid, _)| bid));
            }
        }
    }
}
