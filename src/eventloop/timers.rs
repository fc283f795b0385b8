//! The timer heap: a min-heap on `(deadline_ns, sequence)`.
//!
//! The sequence number makes timers with equal deadlines fire in the order they were
//! scheduled (asyncio's `heapq` of `TimerHandle`s gives no such promise; FIFO is strictly
//! better and what users assume). Cancelled timers are removed lazily, like asyncio: popped when
//! they reach the top, or swept in one pass when they outnumber live ones.
//!
//! How many scheduled timers are cancelled is a `CancelCount` the heap shares with its timer
//! handles: a handle counts its own cancel, so handles never need the loop (no import circle).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

/// Cancelled timers still in the heap; shared by the heap and its timer handles.
#[derive(Default)]
pub struct CancelCount(AtomicUsize);

impl CancelCount {
    pub fn add(&self) {
        self.0.fetch_add(1, AtomicOrdering::Relaxed);
    }

    fn get(&self) -> usize {
        self.0.load(AtomicOrdering::Relaxed)
    }

    fn set(&self, n: usize) {
        self.0.store(n, AtomicOrdering::Relaxed);
    }
}

struct Entry<T> {
    when: u64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, o: &Self) -> bool {
        (self.when, self.seq) == (o.when, o.seq)
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.when, self.seq).cmp(&(o.when, o.seq))
    }
}

/// asyncio's thresholds: sweep when more than half of at least 100 timers are cancelled.
const SWEEP_MIN: usize = 100;

pub struct TimerHeap<T> {
    heap: BinaryHeap<Reverse<Entry<T>>>,
    seq: u64,
    cancelled: Arc<CancelCount>,
}

impl<T> Default for TimerHeap<T> {
    fn default() -> Self {
        TimerHeap { heap: BinaryHeap::new(), seq: 0, cancelled: Arc::default() }
    }
}

impl<T> TimerHeap<T> {
    pub fn push(&mut self, when: u64, item: T) {
        self.seq += 1;
        self.heap.push(Reverse(Entry { when, seq: self.seq, item }));
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    pub fn peek_when(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.0.when)
    }

    pub fn peek(&self) -> Option<&T> {
        self.heap.peek().map(|e| &e.0.item)
    }

    /// Pop the earliest timer if its deadline is `<= now`.
    pub fn pop_expired(&mut self, now: u64) -> Option<T> {
        if self.heap.peek()?.0.when <= now {
            self.heap.pop().map(|e| e.0.item)
        } else {
            None
        }
    }

    /// Pop the earliest timer whatever its deadline (to discard a cancelled head).
    pub fn pop(&mut self) -> Option<T> {
        self.heap.pop().map(|e| e.0.item)
    }

    /// The counter a timer handle bumps when it is cancelled while in this heap.
    pub fn cancel_count(&self) -> Arc<CancelCount> {
        self.cancelled.clone()
    }

    pub fn note_removed_cancelled(&mut self) {
        self.cancelled.set(self.cancelled.get().saturating_sub(1));
    }

    pub fn cancelled(&self) -> usize {
        self.cancelled.get()
    }

    /// If cancelled timers dominate, remove every item for which `is_cancelled` holds and
    /// return them (the caller drops them outside its borrows: dropping may run Python code).
    pub fn sweep(&mut self, is_cancelled: impl Fn(&T) -> bool) -> Vec<T> {
        if self.heap.len() <= SWEEP_MIN || self.cancelled.get() * 2 <= self.heap.len() {
            return Vec::new();
        }
        let (dead, live): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.heap).into_vec().into_iter().partition(|e| is_cancelled(&e.0.item));
        self.heap = BinaryHeap::from(live);
        self.cancelled.set(0);
        dead.into_iter().map(|e| e.0.item).collect()
    }

    pub fn drain(&mut self) -> Vec<T> {
        self.cancelled.set(0);
        std::mem::take(&mut self.heap).into_vec().into_iter().map(|e| e.0.item).collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.heap.iter().map(|e| &e.0.item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_deadline_then_fifo_order() {
        let mut h = TimerHeap::default();
        h.push(30, "c");
        h.push(10, "a1");
        h.push(20, "b");
        h.push(10, "a2");
        h.push(10, "a3");
        assert_eq!(h.peek_when(), Some(10));
        let mut out = vec![];
        while let Some(x) = h.pop_expired(25) {
            out.push(x);
        }
        assert_eq!(out, ["a1", "a2", "a3", "b"]);
        assert_eq!(h.pop_expired(29), None, "never early");
        assert_eq!(h.pop_expired(30), Some("c"));
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn sweeps_only_when_cancelled_dominate() {
        let mut h = TimerHeap::default();
        for i in 0..200u64 {
            h.push(i, i);
        }
        let count = h.cancel_count();
        for _ in 0..100 {
            count.add();
        }
        assert!(h.sweep(|x| x % 2 == 0).is_empty(), "exactly half: no sweep");
        count.add();
        let dead = h.sweep(|x| x % 2 == 0);
        assert_eq!(dead.len(), 100);
        assert_eq!(h.len(), 100);
        assert_eq!(h.cancelled(), 0);
        assert_eq!(h.pop_expired(u64::MAX), Some(1));
    }
}
