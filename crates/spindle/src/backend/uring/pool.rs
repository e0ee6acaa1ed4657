//! The bounded pool of chunk buffers, shared by the worker's responses in
//! the order they asked.

use crate::io::Engine;
use std::collections::VecDeque;

use super::{ChunkBuf, Worker, HEAD_RESERVE};
use crate::conn::Phase;

/// At most `limit` chunk buffers of `HEAD_RESERVE + chunk_size` bytes,
/// made as they are first needed, and the responses waiting for one.
pub(super) struct Pool {
    pub(super) bufs: Vec<ChunkBuf>,
    pub(super) free: Vec<u32>,
    pub(super) limit: usize,
    /// Slots of responses waiting for a buffer, in the order they asked.
    pub(super) waiters: VecDeque<u32>,
    pub(super) chunk_size: usize,
}

impl Pool {
    pub(super) fn new(limit: usize, chunk_size: usize) -> Pool {
        Pool {
            bufs: Vec::new(),
            free: Vec::new(),
            limit,
            waiters: VecDeque::new(),
            chunk_size,
        }
    }
}

impl<E: Engine> Worker<E> {
    /// Returns the response's chunk buffers to the pool: the main one (its
    /// operation has completed whenever this is called) and a read-ahead
    /// buffer whose READ has completed; one still being read stays with the
    /// response until on_read_ahead.
    pub(super) fn release_tx(&mut self, slot: u32) {
        let c = self.conns.live_at(slot);
        if let Some(tx) = c.tx.as_mut() {
            let main = tx.buf.take();
            let ahead = match &tx.ahead {
                Some(a) if a.res.is_some() => tx.ahead.take().map(|a| a.buf),
                _ => None,
            };
            for b in [main, ahead].into_iter().flatten() {
                self.give_pool_buf(b);
            }
        }
    }

    pub(super) fn take_pool_buf(&mut self) -> Option<u32> {
        if let Some(b) = self.pool.free.pop() {
            return Some(b);
        }
        if self.pool.bufs.len() < self.pool.limit {
            self.pool
                .bufs
                .push(ChunkBuf::new(HEAD_RESERVE + self.pool.chunk_size));
            return Some((self.pool.bufs.len() - 1) as u32);
        }
        None
    }

    /// Gives back each of `ids` (chunk buffers a send queue or an HTTP/2
    /// link let go of).
    pub(super) fn give_bufs(&mut self, ids: Vec<u32>) {
        for b in ids {
            self.give_pool_buf(b);
        }
    }

    pub(super) fn give_pool_buf(&mut self, b: u32) {
        debug_assert!(!self.pool.free.contains(&b), "chunk buffer {b} freed twice");
        self.pool.free.push(b);
        // Wake the first waiter that is still sending.
        while let Some(s) = self.pool.waiters.pop_front() {
            let Some(c) = self.conns.at(s) else {
                continue;
            };
            if c.life.phase != Phase::Sending {
                continue;
            }
            let Some(tx) = c.tx.as_mut() else { continue };
            if tx.wake(super::Wait::PoolBuffer) {
                self.pump(s);
                break;
            }
        }
    }
}
