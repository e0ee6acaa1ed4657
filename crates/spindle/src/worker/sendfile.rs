//! Pump step 4: a body's bytes straight from the page cache by
//! `sendfile`, only where they are known to be there (`cachestat` or
//! `mincore`), so the loop never waits for the disk in it.

use crate::io::Engine;
use std::os::fd::{AsRawFd, RawFd};

use super::ring::Op;
use super::{Direct, Mapping, Route, Tx, Wait, Worker};
use crate::conn::policy::truncated;
use crate::conn::Steps;
use crate::fs;
use crate::io::Sub;
use crate::net;
use crate::sys::{self, Stop};

/// Most bytes one `sendfile(2)` call is asked for, whatever the chunk size
/// (lighttpd also sends 256 KiB at a time). With [`SENDFILE_TURN`] it bounds
/// the work one response does between two looks at the other completions.
pub const SENDFILE_CALL: u64 = 256 * 1024;

/// Most bytes one response sends by `sendfile` in one turn of the loop
/// before it lets the others go first (a socket that keeps draining would
/// otherwise hold the worker for a whole large file).
pub const SENDFILE_TURN: u64 = 1024 * 1024;

/// What [`Worker::ready_now`] found at the response's next byte.
enum Probe {
    /// This many bytes are in the page cache: `sendfile` them.
    Ready(u64),
    /// Nothing there yet: the caller reads or waits.
    Nothing,
    /// The response went on another way (throttled, aborted, changed).
    WentOn,
}

/// Says once per process that a file could not be mapped for `mincore`,
/// so that large misses are read into buffers instead.
fn warn_unmappable(e: &std::io::Error) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::warn!(
            "mmap of a served file failed ({e}); large files that miss the page cache are read into buffers"
        );
    }
}

/// Gives the response its mapping for `mincore` (see `Tx::map`) if it has
/// none yet; `false` when the file cannot be mapped (then never again).
fn map_file(tx: &mut Tx, file: std::os::fd::RawFd) -> bool {
    if let Mapping::Untried = tx.map {
        tx.map = match fs::FileMap::new(file, tx.file_off + tx.file_left + tx.withheld) {
            Ok(m) => Mapping::Mapped(m),
            Err(e) => {
                warn_unmappable(&e);
                Mapping::Failed
            }
        };
    }
    tx.map.get().is_some()
}

impl<E: Engine> Worker<E> {
    /// Pump step 4: the next chunk straight from the page cache with
    /// sendfile, when all of it is there (so it never waits for the disk).
    /// Not for small bodies (one READ into the buffer behind the head and
    /// one SEND are cheaper), and not once a chunk has missed
    /// (`Tx::missed`). That also covers a descriptor gone O_DIRECT
    /// (sendfile would then read the disk synchronously) and a response
    /// holding a buffer: both come only from a READ. `true` when the
    /// response went on (sent, waits, or ended).
    pub(super) fn send_cached(&mut self, slot: u32) -> bool {
        let chunk = self.pool.chunk_size;
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("response in progress");
        debug_assert!(tx.route != Route::Sendfile || (tx.direct != Direct::On && tx.buf.is_none()));
        if matches!(tx.route, Route::Blocking | Route::Shm) {
            return self.send_ready(slot);
        }
        if tx.route == Route::Sendfile {
            // A body of several chunks is probed with mincore from the
            // start: cachestat would also pass pages that another response's
            // readahead has inserted and not yet filled (two clients on one
            // cold file). One chunk or less keeps the cheaper cachestat (no
            // mapping per response on the hot 100 KiB path).
            let file = c.file.as_ref().expect("file for body").as_raw_fd();
            if tx.resp.file.map_or(0, |(_, n)| n) > chunk as u64 {
                map_file(tx, file);
            }
            return self.send_ready(slot);
        }
        if tx.route == Route::Missed && tx.direct != Direct::On && tx.ahead.is_none() {
            // 4b. After a miss, a large body read through the page cache:
            //     the kernel's readahead is fetching the next pages. Send
            //     by sendfile what mincore finds uptodate, and wait in the
            //     ring for the rest with a one-page READ (no copy of the
            //     chunk; see Tx::map).
            let file = c.file.as_ref().expect("file for body").as_raw_fd();
            if map_file(tx, file) {
                // The buffer of the chunk that missed is drained (step 2).
                if let Some(b) = tx.buf.take() {
                    self.give_pool_buf(b);
                }
                if !self.send_ready(slot) {
                    self.wait_page(slot);
                }
                return true;
            }
        }
        false
    }

    /// Sends the body by `sendfile` from the page cache, chunk by chunk,
    /// for as long as a probe vouches that the bytes are there, so that it
    /// never waits for the disk: `mincore` on the response's mapping when it
    /// has one (the pages that are filled, see `Tx::map`), else `cachestat`
    /// (every page present, the whole chunk or nothing: enough for a body of
    /// one chunk that has not missed). Returns `false` when nothing at the
    /// next byte is ready (the caller reads or waits), `true` when the
    /// response went on otherwise: finished, waiting for socket space, or
    /// aborted.
    pub(super) fn send_ready(&mut self, slot: u32) -> bool {
        let c = self.conns.live_at(slot);
        let fd = c.fd;
        let file = c.file.as_ref().expect("file for body").as_raw_fd();
        let tx = c.tx.as_mut().expect("response in progress");
        if tx.route == Route::Missed && tx.map.get().is_some() && tx.rate.is_none() {
            // Once a turn (at most SENDFILE_TURN, half a LEAD_STRIDE). Not
            // under --limit-rate: a paced body does not wait for the disk,
            // and what it touched would wait in memory for minutes.
            super::read::lead(file, tx, &self.leaders);
        }
        // linux-sendfile blocks in each call on a miss: one call a turn,
        // so that the other connections get theirs between its waits.
        let most = if tx.route == Route::Blocking {
            1
        } else {
            SENDFILE_TURN
        };
        let mut turn = 0u64;
        loop {
            if turn >= most {
                // Fairness: this connection has had its share of the loop's
                // turn. A NOP completes in the next batch, after the other
                // completions of this one, and its completion is handled as
                // a POLLOUT's: the response goes on. (A POLL_ADD on the
                // writable socket instead doubled the CPU per byte with 10
                // clients: it came back only with the socket's next wake-up.)
                self.push_conn(slot, Op::PollOut, Sub::Nop);
                return true;
            }
            let ready = match self.ready_now(slot, file) {
                Probe::Ready(n) => n,
                Probe::Nothing => return false,
                Probe::WentOn => return true,
            };
            if !self.head_first(slot, fd) {
                return true;
            }
            match self.sendfile_once(slot, fd, file, ready) {
                Some(r) => turn += r,
                None => return true,
            }
        }
    }

    /// How many bytes at the response's next byte `sendfile` may send now
    /// without waiting for the disk (at most a call's, and under
    /// `--limit-rate` the allowance). `WentOn`: the response waits for a
    /// tick, or was aborted, or its file changed before its last bytes.
    fn ready_now(&mut self, slot: u32, file: RawFd) -> Probe {
        let chunk = self.pool.chunk_size as u64;
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("response in progress");
        let mut n = chunk.min(tx.file_left).min(SENDFILE_CALL);
        if let Some(limit) = tx.rate {
            match limit.allowance(self.now - tx.started, tx.body_sent) {
                0 => {
                    // Used up: wait for the next tick (see pump).
                    if std::mem::replace(&mut tx.wait, Wait::Tick) != Wait::Tick {
                        let who = self.conns.ticket(slot).expect("live slot");
                        self.serve.throttled.push(who);
                    }
                    return Probe::WentOn;
                }
                a => n = n.min(a),
            }
        }
        debug_assert!(n > 0, "send_ready with nothing left to send");
        let ready = match tx.map.get() {
            _ if tx.route == Route::Blocking => n,
            Some(map) => match map.uptodate(tx.file_off, n) {
                Ok(r) => r,
                Err(_) => {
                    self.abort(slot);
                    return Probe::WentOn;
                }
            },
            None if fs::range_cached(file, tx.file_off, n) == Some(true) => n,
            None => 0,
        };
        if ready == 0 {
            return Probe::Nothing;
        }
        // A call that would send the body's last bytes checks the file.
        if ready == tx.file_left && !self.last_bytes_ok(slot) {
            return Probe::WentOn;
        }
        Probe::Ready(ready)
    }

    /// The head goes before the first `sendfile`, by a direct send
    /// (MSG_MORE: it joins the file bytes in one segment), saving a ring
    /// round trip; if the socket is full, by the ring, which waits for
    /// space (and then the response's pump comes back here). `false` when
    /// the response went on that way (or was aborted).
    fn head_first(&mut self, slot: u32, fd: RawFd) -> bool {
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("response in progress");
        if tx.head_sent == tx.resp.front.len() {
            return true;
        }
        match sys::send_two(fd, &tx.resp.front[tx.head_sent..], &[], true) {
            Ok(k) => tx.head_sent += k,
            Err(Stop::Full) => {}
            Err(Stop::Fail) => {
                self.abort(slot);
                return false;
            }
        }
        if tx.head_sent == tx.resp.front.len() {
            return true;
        }
        let h = &tx.resp.front[tx.head_sent..];
        let sub = Sub::Send {
            fd,
            buf: h.as_ptr(),
            len: h.len() as u32,
            flags: libc::MSG_NOSIGNAL | libc::MSG_MORE,
        };
        self.push_conn(slot, Op::Send, sub);
        false
    }

    /// One `sendfile` of `ready` bytes: how many went, to go on; None when
    /// the response went on otherwise (finished, waiting for the socket to
    /// drain, or aborted).
    fn sendfile_once(&mut self, slot: u32, fd: RawFd, file: RawFd, ready: u64) -> Option<u64> {
        let progress = self.now + self.serve.ctx.cfg.send_timeout;
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("response in progress");
        if c.bulk == net::Bulk::Off && tx.file_left > SENDFILE_TURN {
            // A body of more than one turn: bulk sending until
            // finish_tx (net::set_bulk).
            c.bulk = net::set_bulk(fd);
        }
        let mut off = tx.file_off;
        let r = match sys::sendfile(fd, file, &mut off, ready) {
            Ok(0) => {
                // The file shrank under us (see on_read).
                truncated();
                self.abort(slot);
                return None;
            }
            Ok(r) => r as u64,
            Err(libc::EAGAIN) => 0,
            Err(_) => {
                self.abort(slot);
                return None;
            }
        };
        tx.file_off += r;
        tx.file_left -= r;
        tx.body_sent += r;
        if r > 0 {
            c.life.deadline = progress;
        }
        if tx.file_left == 0 {
            if tx.withheld > 0 {
                self.release_withheld(slot);
            } else {
                self.finish(self.who(slot));
            }
            return None;
        }
        if r < ready {
            // The socket buffer is full: wait until it drains.
            let sub = Sub::Poll {
                fd,
                mask: libc::POLLOUT as u32,
                multishot: false,
            };
            self.push_conn(slot, Op::PollOut, sub);
            return None;
        }
        Some(r)
    }
}
