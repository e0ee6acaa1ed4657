//! The bounded pool of chunk buffers, shared by the worker's responses in
//! the order they asked.

use super::{ChunkBuf, Phase, Worker, HEAD_RESERVE};

impl Worker {
    /// Returns the response's chunk buffers to the pool: the main one (its
    /// operation has completed whenever this is called) and a read-ahead
    /// buffer whose READ has completed; one still being read stays with the
    /// response until on_read_ahead.
    pub(super) fn release_tx(&mut self, slot: u32) {
        let c = self.conns[slot as usize].as_mut().expect("live slot");
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
        if let Some(b) = self.pool_free.pop() {
            return Some(b);
        }
        if self.pool.len() < self.pool_limit {
            self.pool
                .push(ChunkBuf::new(HEAD_RESERVE + self.chunk_size));
            return Some((self.pool.len() - 1) as u32);
        }
        None
    }

    pub(super) fn give_pool_buf(&mut self, b: u32) {
        self.pool_free.push(b);
        // Wake the first waiter that is still sending.
        while let Some(s) = self.pool_waiters.pop_front() {
            let Some(c) = self.conns[s as usize].as_mut() else {
                continue;
            };
            if c.phase != Phase::Sending {
                continue;
            }
            let Some(tx) = c.tx.as_mut() else { continue };
            if tx.waiting {
                tx.waiting = false;
                self.pump(s);
                break;
            }
        }
    }
}
