//! The bounded pool of chunk buffers, shared by the worker's responses in
//! the order they asked: heap blocks, or (`linux-aio-sendfile`) slots of
//! one shared-memory file per worker (`crate::io::shm`), sent from with
//! `sendfile` and hole-punched before each reuse.

use crate::io::Engine;
use std::collections::VecDeque;

use std::os::fd::{AsRawFd, RawFd};

use super::{ChunkBuf, Worker, HEAD_RESERVE};
use crate::conn::Phase;
use crate::io::shm::{Shm, MAX_SHM_BYTES};

/// At most `limit` chunk buffers of `HEAD_RESERVE + chunk_size` bytes,
/// made as they are first needed, and the responses waiting for one.
pub(super) struct Pool {
    pub(super) bufs: Vec<ChunkBuf>,
    pub(super) free: Vec<u32>,
    pub(super) limit: usize,
    /// Slots of responses waiting for a buffer, in the order they asked.
    pub(super) waiters: VecDeque<u32>,
    pub(super) chunk_size: usize,
    /// Where the buffers live, if not on the heap.
    shm: Option<Shm>,
}

/// One buffer's place in the pool's shared memory.
pub(super) struct ShmSlot {
    ptr: *mut u8,
    len: usize,
}

impl ShmSlot {
    pub(super) fn get(&self) -> &[u8] {
        // SAFETY: `len` bytes of the pool's mapping, which lives as long
        // as the pool (the worker drops its engine, and with it every read
        // into the mapping, first); this slot is this buffer's alone.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(super) fn get_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `get`, and `&mut self` is the one handle.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Pool {
    pub(super) fn new(limit: usize, chunk_size: usize) -> Pool {
        Pool {
            bufs: Vec::new(),
            free: Vec::new(),
            limit,
            waiters: VecDeque::new(),
            chunk_size,
            shm: None,
        }
    }

    /// A pool whose buffers are slots of one shared-memory file of at most
    /// [`MAX_SHM_BYTES`] (which may lower `limit`).
    pub(super) fn in_shm(limit: usize, chunk_size: usize, worker: usize) -> Result<Pool, String> {
        let slot = HEAD_RESERVE + chunk_size;
        let limit = limit.min(MAX_SHM_BYTES as usize / slot).max(1);
        let mut p = Pool::new(limit, chunk_size);
        p.shm = Some(Shm::new(limit * slot, worker)?);
        Ok(p)
    }

    fn slot_size(&self) -> usize {
        HEAD_RESERVE + self.chunk_size
    }

    /// The buffers are slots of a shared-memory file (`Route::Shm`).
    pub(super) fn is_shm(&self) -> bool {
        self.shm.is_some()
    }

    /// Where byte `pos` of buffer `b` is in the shared-memory file, if the
    /// buffers live in one: `(file, offset)`.
    pub(super) fn file_at(&self, b: u32, pos: usize) -> Option<(RawFd, u64)> {
        let shm = self.shm.as_ref()?;
        Some((
            shm.fd.as_raw_fd(),
            (b as usize * self.slot_size() + pos) as u64,
        ))
    }

    /// Readies buffer `b` to be written again: in shared memory, a socket
    /// may still hold the pages last sent from it (`sendfile` passes them
    /// by reference until the peer acknowledges them), so they are
    /// detached from the file (hole-punched), and the next write faults in
    /// fresh ones.
    pub(super) fn rewrite(&self, b: u32) {
        if let Some(shm) = &self.shm {
            let slot = self.slot_size() as u64;
            shm.punch(b as u64 * slot, slot);
        }
    }

    fn make(&mut self) -> ChunkBuf {
        let slot = self.slot_size();
        match &self.shm {
            None => ChunkBuf::new(slot),
            Some(shm) => {
                let at = self.bufs.len() * slot;
                assert!(at + slot <= shm.len, "shm slot past the mapping");
                ChunkBuf::Shm(ShmSlot {
                    // Within the mapping (asserted above).
                    ptr: shm.base.wrapping_add(at),
                    len: slot,
                })
            }
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
            let buf = self.pool.make();
            self.pool.bufs.push(buf);
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
