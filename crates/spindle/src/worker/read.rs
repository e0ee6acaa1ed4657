//! Disk reads of a response's body: `READ` through the page cache or with
//! `O_DIRECT` on a file's first use, the `O_DIRECT` read-ahead, the
//! one-page wait for the kernel's readahead, and the readahead lead that
//! starts the kernel's next windows early.

use crate::io::Engine;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;

use crate::io::{DiskOp, Sub};

use super::ring::Op;
use super::{Ahead, Direct, HeadAt, Route, Tx, Wait, Worker, HEAD_RESERVE};
use crate::conn::policy::{read_failed, truncated};
use crate::conn::Phase;
use crate::fs;
use crate::metrics::ReadMode;
use crate::sys::{self, Stop};

/// The readahead lead (see [`lead`]) touches the file every this many
/// bytes: the largest folio the page cache makes here (a PMD, 2 MiB on
/// x86-64), so once readahead reads in folios that large, every folio,
/// the marked one among them, has a point that is touched.
pub const LEAD_STRIDE: u64 = 2 << 20;
/// How far ahead of its send position one response touches at most.
/// Cold 700 MB file, 1 client, by hand: 16 MiB gained about half of what
/// 32 MiB did, 64 MiB no more than 32.
pub const LEAD_MAX: u64 = 32 << 20;
/// A share of [`LEAD_BUDGET`] below this touches nothing, so only up to
/// four bodies per worker lead: more streams keep more windows in flight
/// by themselves. Measured by hand: the 10 MB set (20 at once) gained
/// nothing from touches; 5 clients of the cold 700 MB file were inside
/// the noise (medians 4,413 against 4,800 MB/s without, 14 runs each).
pub const LEAD_MIN: u64 = 16 << 20;
/// The bytes ahead of their send positions that a worker's leading
/// responses share (each gets `LEAD_BUDGET / leaders`, at most
/// [`LEAD_MAX`]): read ahead but not yet sent, they must stay far below
/// the memory that would evict them before they are sent.
pub const LEAD_BUDGET: u64 = 64 << 20;

/// A response that touches readahead markers ahead of its send position
/// (`Tx::lead`). Its clone of the worker's `leaders` counts it among the
/// leaders while it lives (the `Rc`'s strong count less the worker's own),
/// so that the others' shares of [`LEAD_BUDGET`] grow again when it ends.
pub(super) struct Lead {
    /// Stride points below this have been touched.
    next: u64,
    _leader: Rc<()>,
}

/// Starts the kernel's next readahead windows before the response's send
/// position reaches them. After a large body's first miss the kernel reads
/// ahead in windows (`read_ahead_kb`, 8 MiB here) and starts the next
/// window when the reader arrives at the marked first folio of the newest
/// one; a reader that arrives there only by sending keeps one or two
/// windows in flight, and the disk idles while it sends a finished window.
/// This touches ([`fs::touch_cached`]) every [`LEAD_STRIDE`] from the send
/// position up to the response's share of [`LEAD_BUDGET`] ahead, stopping
/// at the first page not in the cache (the frontier of what readahead has
/// started), so the windows up to there are started as soon as their
/// predecessors are, without waiting and without a copy. Cold 700 MB file,
/// 1 client: 4-5 windows in flight instead of 1-2 (block tracepoints).
pub(super) fn lead(file: RawFd, tx: &mut Tx, leaders: &Rc<()>) {
    if tx.lead.is_none() {
        if tx.file_left <= LEAD_STRIDE {
            return;
        }
        tx.lead = Some(Lead {
            next: 0,
            _leader: leaders.clone(),
        });
    }
    let count = (Rc::strong_count(leaders) - 1) as u64;
    let share = (LEAD_BUDGET / count.max(1)).min(LEAD_MAX);
    if share < LEAD_MIN {
        return;
    }
    let target = tx.file_off + share.min(tx.file_left);
    let lead = tx.lead.as_mut().expect("set above");
    let mut at = lead.next.max((tx.file_off / LEAD_STRIDE + 1) * LEAD_STRIDE);
    while at < target {
        if !fs::touch_cached(file, at) {
            break;
        }
        at += LEAD_STRIDE;
        lead.next = at;
    }
}

/// Sets `O_DIRECT` on a response's own descriptor; if the file system has
/// no direct I/O, the response reads through the page cache instead.
pub(super) fn go_direct(file: RawFd, tx: &mut Tx) {
    debug_assert_eq!(tx.direct, Direct::FirstUse);
    match fs::set_direct(file, true) {
        Ok(()) => tx.direct = Direct::On,
        Err(e) => {
            warn_direct(&e);
            tx.direct = Direct::Never;
        }
    }
}

/// Says once per process that `O_DIRECT` reads fell back to the page cache.
pub(super) fn warn_direct(e: &std::io::Error) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::warn!(
            "O_DIRECT refused by the file system ({e}); files used once are read through the page cache"
        );
    }
}
impl<E: Engine> Worker<E> {
    /// O_DIRECT reads get no readahead from the kernel, so a response that
    /// reads with O_DIRECT keeps the next chunk's READ in flight while it
    /// sends the current one, in a second buffer, if the pool has one that
    /// no other response is waiting for.
    pub(super) fn read_ahead(&mut self, slot: u32) {
        let chunk = self.pool.chunk_size;
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_ref().expect("response in progress");
        if tx.direct != Direct::On
            || tx.route == Route::Shm
            || tx.ahead.is_some()
            || tx.file_left == 0
            || !self.pool.waiters.is_empty()
        {
            return;
        }
        if !self.disk_slot(slot, false) {
            return;
        }
        let Some(b) = self.take_pool_buf() else {
            return;
        };
        let c = self.conns.live_at(slot);
        let file = c.file.as_ref().expect("file for body").as_raw_fd();
        let tx = c.tx.as_mut().expect("response in progress");
        let skip = (tx.file_off % fs::DIRECT_ALIGN as u64) as usize;
        let want = ((chunk - skip) as u64).min(tx.file_left) as usize;
        let len = (skip + want).next_multiple_of(fs::DIRECT_ALIGN);
        let offset = tx.file_off - skip as u64;
        tx.file_off += want as u64;
        tx.file_left -= want as u64;
        tx.ahead = Some(Ahead {
            buf: b,
            skip,
            want,
            res: None,
        });
        self.read_into(slot, Op::ReadAhead, file, b, offset, len);
    }

    /// A `READ` of `len` bytes of `file` at `offset` into chunk buffer `b`,
    /// behind its head reserve (the head is copied in front once they are
    /// in); the buffer is the kernel's until the completion.
    pub(super) fn read_into(
        &mut self,
        slot: u32,
        op: Op,
        file: RawFd,
        b: u32,
        offset: u64,
        len: usize,
    ) {
        let dst =
            self.pool.bufs[b as usize].get_mut()[HEAD_RESERVE..HEAD_RESERVE + len].as_mut_ptr();
        let sub = Sub::Disk(DiskOp::Read {
            fd: file,
            buf: dst,
            len: len as u32,
            off: offset,
        });
        self.push_disk_read(slot, op, sub);
    }

    pub(super) fn on_read_ahead(&mut self, slot: u32, res: i32) {
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("read-ahead without a response");
        let a = tx
            .ahead
            .as_mut()
            .expect("read-ahead completion without one");
        a.res = Some(res);
        if c.life.phase == Phase::Closing {
            // Only this buffer: the main one may still be under a SEND
            // being cancelled.
            let b = tx.ahead.take().expect("read-ahead").buf;
            self.give_pool_buf(b);
            self.maybe_release(slot);
            return;
        }
        if tx.wake(Wait::ReadAhead) {
            self.pump(slot);
        }
    }

    /// Makes the completed read-ahead the response's buffer, and sends it.
    pub(super) fn take_ahead(&mut self, slot: u32) {
        let c = self.conns.live_at(slot);
        let file = c.file.as_ref().expect("file for body").as_raw_fd();
        let tx = c.tx.as_mut().expect("response in progress");
        debug_assert!(tx.buf_pos == tx.buf_end, "buffer not yet sent");
        let a = tx.ahead.take().expect("read-ahead");
        let res = a.res.expect("read-ahead completed");
        let old = tx.buf.replace(a.buf);
        if res == -libc::EINVAL {
            // As in on_read: the file system wants a stricter alignment.
            // The chunk is read again through the page cache.
            warn_direct(&std::io::Error::from_raw_os_error(libc::EINVAL));
            tx.file_off -= a.want as u64;
            tx.file_left += a.want as u64;
            tx.buf = old;
            if fs::set_direct(file, false).is_err() {
                self.give_pool_buf(a.buf);
                self.abort(slot);
                return;
            }
            tx.direct = Direct::Never;
            self.give_pool_buf(a.buf);
            self.pump(slot);
            return;
        }
        if let Some(old) = old {
            self.give_pool_buf(old);
        }
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("response in progress");
        if res < 0 || (res as usize) < a.skip + a.want {
            // A short read: the file shrank (see on_read). A read-ahead
            // follows bytes already sent: either way the connection goes.
            if res >= 0 {
                truncated();
            } else {
                read_failed(-res, false);
            }
            self.abort(slot);
            return;
        }
        tx.buf_pos = HEAD_RESERVE + a.skip;
        tx.buf_end = tx.buf_pos + a.want;
        self.pump(slot);
    }

    pub(super) fn on_read(&mut self, slot: u32, res: i32) {
        let c = self.conns.live_at(slot);
        if c.life.phase == Phase::Closing {
            self.release_tx(slot);
            self.maybe_release(slot);
            return;
        }
        let file = c.file.as_ref().expect("file for body").as_raw_fd();
        let tx = c.tx.as_mut().expect("tx");
        if res == -libc::EINVAL && tx.direct == Direct::On {
            // The file system wants a stricter alignment than DIRECT_ALIGN:
            // read this file through the page cache after all.
            warn_direct(&std::io::Error::from_raw_os_error(libc::EINVAL));
            if tx.route == Route::Shm {
                tx.reopen = super::Reopen::Refused;
            } else if fs::set_direct(file, false).is_err() {
                self.abort(slot);
                return;
            }
            tx.direct = Direct::Never;
            self.pump(slot);
            return;
        }
        let Some(got) = self.read_got(slot, res) else {
            return;
        };
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("tx");
        let start = tx.file_off;
        tx.file_off += got as u64;
        tx.file_left -= got as u64;
        if tx.held.is_some() {
            // In record layout: sealed (or framed) where it lies, once the
            // head is out (send_buffer).
            tx.buf_pos = 0;
            tx.buf_end = got;
        } else {
            tx.buf_pos = HEAD_RESERVE + tx.read_skip;
            tx.buf_end = tx.buf_pos + got;
        }
        if tx.file_left == 0 && tx.ahead.is_none() && !self.last_bytes_ok(slot) {
            return;
        }
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("tx");
        if tx.held.is_some() {
            return self.pump(slot);
        }
        // A buffered READ leaves what it read in the page cache. Unless the
        // body is small, or this chunk is all that is left of it (it then
        // goes with the head in one send), send the chunk from there with
        // sendfile (no second copy; the socket is non-blocking and the
        // range is cached, so it cannot wait), and keep the buffer's copy
        // only for what the socket would not take now, or for pages
        // reclaimed in between.
        let cached = !matches!(tx.route, Route::Buffer | Route::Shm)
            && tx.direct != Direct::On
            && tx.file_left > 0
            && fs::range_cached(file, start, got as u64) == Some(true);
        if cached && !self.sendfile_read(slot, file, start, got as u64) {
            return;
        }
        self.head_in_front(slot);
        self.pump(slot);
    }

    /// How many of a completed READ's bytes the response takes (`res` is
    /// its result); None when the response went another way: the read
    /// failed, or came short of what the file promised (then the 503 the
    /// changed-file check gives, if nothing is out yet, else the
    /// connection is dropped).
    fn read_got(&mut self, slot: u32, res: i32) -> Option<usize> {
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("tx");
        let (skip, want) = (tx.read_skip, tx.read_want);
        // EOF before the promised length: the file shrank while being
        // sent. Nothing correct can follow the bytes already sent under
        // this Content-Length, so the connection is dropped. An O_DIRECT
        // read starts `skip` bytes early, in whole blocks, so it must
        // reach past `skip + want`.
        let short = if tx.direct == Direct::On {
            res >= 0 && (res as usize) < skip + want
        } else {
            res == 0
        };
        if short {
            truncated();
        }
        if res < 0 && !short {
            self.body_read_failed(slot, -res);
            return None;
        }
        if res == 0 || short {
            // Nothing of the response out yet (a first read, the head goes
            // with its bytes): the 503 the changed-file check gives
            // (`last_bytes_ok`), and the connection goes on. Else the head
            // promised bytes that cannot follow: drop it.
            if tx.nothing_out() && tx.ahead.is_none() {
                self.answer_instead(slot, libc::EAGAIN);
            } else {
                self.abort(slot);
            }
            return None;
        }
        let got = if tx.direct == Direct::On {
            want
        } else {
            res as usize
        };
        debug_assert!(got <= want);
        Some(got)
    }

    /// The chunk just READ is in the page cache: the head (by a direct
    /// send) and then the chunk go by `sendfile` as far as the socket
    /// takes them now; the buffer keeps the rest. `false` when the
    /// response was aborted.
    fn sendfile_read(&mut self, slot: u32, file: RawFd, start: u64, got: u64) -> bool {
        let progress_deadline = self.now + self.serve.ctx.cfg.send_timeout;
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("tx");
        if tx.head_sent < tx.resp.front.len() {
            match sys::send_two(c.fd, &tx.resp.front[tx.head_sent..], &[], true) {
                Ok(k) => tx.head_sent += k,
                Err(Stop::Full) => {}
                Err(Stop::Fail) => {
                    self.abort(slot);
                    return false;
                }
            }
        }
        if tx.head_sent < tx.resp.front.len() {
            return true;
        }
        let mut sent = 0u64;
        while sent < got {
            let mut off = start + sent;
            match sys::sendfile(c.fd, file, &mut off, got - sent) {
                Ok(0) => {
                    // The file shrank since the READ.
                    truncated();
                    self.abort(slot);
                    return false;
                }
                Ok(r) => sent += r as u64,
                Err(libc::EAGAIN) => break,
                Err(_) => {
                    self.abort(slot);
                    return false;
                }
            }
        }
        tx.buf_pos += sent as usize;
        tx.body_sent += sent;
        if sent > 0 {
            c.life.deadline = progress_deadline;
        }
        true
    }

    /// The rest of the head, if any, goes right in front of the file
    /// bytes (over the block-alignment bytes an O_DIRECT read brought),
    /// so one SEND carries both. Nothing of the file has been sent yet:
    /// `sendfile_read` runs only after the whole head. A buffer all sent
    /// by `sendfile` goes back to the pool.
    fn head_in_front(&mut self, slot: u32) {
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("tx");
        let head_left = tx.resp.front.len() - tx.head_sent;
        let b = tx.buf.expect("READ without a buffer") as usize;
        if head_left > 0 && head_left <= tx.buf_pos {
            debug_assert_eq!(tx.buf_pos, HEAD_RESERVE + tx.read_skip);
            let at = tx.buf_pos - head_left;
            self.pool.bufs[b].get_mut()[at..tx.buf_pos]
                .copy_from_slice(&tx.resp.front[tx.head_sent..]);
            tx.buf_pos = at;
            tx.head_at = HeadAt::Buffer;
        }
        if tx.buf_pos == tx.buf_end {
            // All sent by sendfile: the buffer can serve someone else.
            tx.buf = None;
            self.give_pool_buf(b as u32);
        }
    }

    /// A `READ` of the body failed with `errno` (EIO from a bad sector,
    /// say). If no byte of the response is out (the head goes with the
    /// first chunk's bytes), the session's 500 (or 503) goes in its place
    /// and the connection stays usable; otherwise it is dropped, since the
    /// head promised bytes that cannot follow.
    pub(super) fn body_read_failed(&mut self, slot: u32, errno: i32) {
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_ref().expect("response in progress");
        let answered = tx.nothing_out();
        read_failed(errno, answered);
        if !answered {
            self.abort(slot);
            return;
        }
        self.answer_instead(slot, errno);
    }

    /// Replaces the response in progress, of which no byte is out and no
    /// operation is in flight, with the session's 500 (or, for a passing
    /// `errno`, 503 with `Retry-After`); the connection stays usable.
    pub(super) fn answer_instead(&mut self, slot: u32, errno: i32) {
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_ref().expect("response in progress");
        debug_assert!(tx.head_sent == 0 && tx.body_sent == 0 && !tx.resp.continued);
        debug_assert!(tx.ahead.is_none(), "read-ahead before anything was sent");
        self.release_tx(slot);
        let cfg = self.serve.ctx.session_cfg.clone();
        let c = self.conns.live_at(slot);
        c.tx = None;
        c.file = None;
        let resp = c.life.session.body_failed(&cfg, errno);
        self.start_tx(slot, resp);
    }

    /// Waits in the ring for the page at the response's next byte: a
    /// one-page buffered `READ`, which completes when that page is uptodate
    /// (by task work, no io-wq thread, when readahead is already reading it;
    /// otherwise it starts a read there and the kernel's readahead picks up
    /// the stream). Its bytes land in `page_sink` and are never used: the
    /// page then goes by `sendfile` (see `Tx::map`).
    pub(super) fn wait_page(&mut self, slot: u32) {
        let page = fs::page_size() as u64;
        let c = self.conns.live_at(slot);
        let file = c.file.as_ref().expect("file for body").as_raw_fd();
        let tx = c.tx.as_ref().expect("response in progress");
        let offset = tx.file_off / page * page;
        let dst = self.fixed.page_sink.as_mut_ptr();
        let sub = Sub::Disk(DiskOp::Read {
            fd: file,
            buf: dst,
            len: page as u32,
            off: offset,
        });
        self.conn(slot).disk_at = self.now;
        self.serve.ctx.metrics.disk_read(ReadMode::PageCache);
        self.push_conn(slot, Op::PageWait, sub);
    }

    pub(super) fn on_page_wait(&mut self, slot: u32, res: i32) {
        let c = self.conn(slot);
        if c.life.phase == Phase::Closing {
            self.maybe_release(slot);
            return;
        }
        if res <= 0 {
            // EOF where the response still promised bytes: the file shrank.
            // A page wait follows the first chunk's bytes: either way the
            // connection goes.
            if res == 0 {
                truncated();
            } else {
                read_failed(-res, false);
            }
            self.abort(slot);
            return;
        }
        self.pump(slot);
    }
}
