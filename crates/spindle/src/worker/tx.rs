//! Transmitting a response: the head, then the body from the page cache
//! by `sendfile`, or from a chunk buffer by `SEND`.

use crate::io::Engine;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;

use spindle_core::Response;

use super::h2::Proto;
use super::read::go_direct;
use super::ring::Op;
use super::{Direct, HeadAt, Mapping, Reopen, Route, Tx, Wait, Worker, SENDFILE_MIN};
use crate::config::{Cap, FirstMiss};
use crate::conn::h2::DATA_PREFIX;
use crate::conn::policy::{changed, version_holds};
use crate::conn::Steps;
use crate::conn::StreamSteps;
use crate::conn::{More, Phase};
use crate::fs;
use crate::io::{DiskOp, Sub};
use crate::tlsrec::RecordLayout;

/// The least chunk read into record layout (see `Worker::held_layout`):
/// below one record's worth the copy is cheaper than a second record,
/// and small bodies give their buffer back at once.
pub const HELD_MIN: usize = 16 * 1024;

/// The first `READ` of a body of several chunks through the page cache
/// (where it missed). The kernel sizes its first readahead window from
/// this read's length (4× for 64 KiB: 256 KiB), reads that window in
/// order-0 folios, and raises the folio order by two at each later window.
/// A whole 512 KiB chunk made a first window of 1 MiB in 4 KiB folios:
/// on the 10 MB set the page cache then held 1.7× nginx's folios per byte
/// (readahead tracepoints), and allocating, charging and reclaiming them
/// cost 1.6× nginx's CPU per byte. 64 KiB is what `sendfile`'s own pipe
/// reads ask for, so the window starts as nginx's and lighttpd's do.
pub const FIRST_MISS_READ: u64 = 64 * 1024;

/// The descriptor `Route::Shm` reads `file` with: its `O_DIRECT` reopen,
/// made at the first read (then every read is in whole aligned blocks),
/// or `file` itself where the file system refuses `O_DIRECT`.
fn shm_read_fd(file: RawFd, tx: &mut Tx) -> RawFd {
    if let Reopen::Untried = tx.reopen {
        tx.reopen = match crate::io::shm::reopen_direct(file) {
            Some(d) => {
                tx.direct = Direct::On;
                Reopen::Direct(d)
            }
            None => Reopen::Refused,
        };
    }
    match &tx.reopen {
        Reopen::Direct(d) => d.as_raw_fd(),
        _ => file,
    }
}

impl<E: Engine> Worker<E> {
    // ----- transmitting -------------------------------------------------

    pub(super) fn start_tx(&mut self, slot: u32, mut resp: Response) {
        let who = self.who(slot);
        let proto = &self.conns.live_at(slot).proto;
        if proto.is_stream() && !resp.continued {
            // A stream's head goes to its link (HTTP/2) or its QUIC
            // stream (HTTP/3), as fields.
            let h3 = matches!(proto, Proto::H3Stream { .. });
            let fields = std::mem::take(&mut resp.fields);
            let sent = if h3 {
                self.h3_stream_respond(slot, resp.status, fields)
            } else {
                self.h2_stream_respond(self.who(slot), resp.status, fields)
            };
            if !sent {
                return self.abort(slot);
            }
        }
        let zero_copy = self.serve.ctx.cfg.sendfile;
        let buffers = self.serve.ctx.cfg.backend.has(Cap::Buffers);
        let shm = self.pool.is_shm();
        let now = self.now;
        let rate = self.serve.rate;
        let c = self.conns.live_at(slot);
        c.life.sending(&self.serve.ctx, now);
        let (file_off, body_left) = resp.file.unwrap_or((0, 0));
        // O_DIRECT belongs to the open file description: only a
        // descriptor that nothing else holds may have it.
        let first_use = c.first_use && c.file.as_ref().is_some_and(|f| Rc::strong_count(f) == 1);
        // HTTPS bodies must pass through memory to be encrypted: every one
        // takes the READ-into-a-buffer path, never sendfile.
        let tls = c.sends_plaintext();
        let unchecked = resp.version;
        // The edge's body: only what is on disk may be read now.
        let file_left = match self.serve.edge_more(&mut c.life, file_off, body_left, who) {
            More::Now(n) => n,
            More::Wait | More::Broken => 0,
        };
        c.tx = Some(Tx {
            resp,
            head_sent: 0,
            head_at: HeadAt::Front,
            file_off,
            file_left,
            withheld: body_left - file_left,
            body_sent: 0,
            route: if shm {
                Route::Shm
            } else if !buffers {
                Route::Blocking
            } else if body_left < SENDFILE_MIN || tls || !zero_copy {
                Route::Buffer
            } else {
                Route::Sendfile
            },
            direct: if first_use {
                Direct::FirstUse
            } else {
                Direct::Never
            },
            buf: None,
            buf_pos: 0,
            buf_end: 0,
            read_skip: 0,
            read_want: 0,
            ahead: None,
            wait: Wait::Nothing,
            map: Mapping::Untried,
            lead: None,
            unchecked,
            started: now,
            rate,
            held: None,
            iov: Vec::new(),
            reopen: Reopen::Untried,
        });
        self.pump(slot);
    }

    /// Issues the next operation of the response in progress.
    pub(super) fn pump(&mut self, slot: u32) {
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("response in progress");
        let buffered = tx.buf_pos < tx.buf_end;
        // 1. The head alone: when no file bytes follow, or when file bytes
        //    wait in the buffer without it (it did not fit in front).
        if tx.head_sent < tx.resp.front.len()
            && tx.head_at == HeadAt::Front
            && (tx.file_left == 0 || buffered)
        {
            return self.send_head_alone(slot, buffered);
        }
        // --limit-rate: a response that has used its allowance waits for
        // the next tick (on_tick pumps it again).
        if let Some(limit) = tx.rate {
            if (tx.file_left > 0 || buffered)
                && limit.allowance(self.now - tx.started, tx.body_sent) == 0
            {
                if std::mem::replace(&mut tx.wait, Wait::Tick) != Wait::Tick {
                    let who = self.conns.ticket(slot).expect("live slot");
                    self.serve.throttled.push(who);
                }
                return;
            }
        }
        // 2. Bytes in the chunk buffer, the rest of the head leading them.
        if buffered {
            return self.send_buffer(slot);
        }
        // 3. Done, once every TLS record of it is on the socket (or, for
        //    the edge, more of it stored).
        if tx.file_left == 0 && tx.ahead.is_none() {
            if tx.withheld > 0 {
                return self.release_withheld(slot);
            }
            if let Some(t) = c.tls.as_mut() {
                if t.busy() {
                    t.pump_on_drain = true;
                    return;
                }
            }
            return self.finish(self.who(slot));
        }
        // 4. From the page cache by sendfile, where that cannot wait.
        if self.send_cached(slot) {
            return;
        }
        // 5. The chunk read ahead, if there is one: its buffer becomes the
        //    response's (the drained one goes back to the pool) ...
        let tx = self.conns.live_at(slot).tx.as_mut().expect("tx");
        if let Some(a) = &tx.ahead {
            if a.res.is_none() {
                tx.wait = Wait::ReadAhead;
                return;
            }
            return self.take_ahead(slot);
        }
        // ... or a READ of the next chunk.
        self.read_chunk(slot);
    }

    /// Pump step 3 for the edge's body: the bytes stored since move from
    /// `withheld` to `file_left` and the response goes on; else it waits
    /// for a slice (resumed by `Serving::slice_wakes`), or ends short when
    /// one failed.
    pub(super) fn release_withheld(&mut self, slot: u32) {
        let who = self.who(slot);
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("response in progress");
        debug_assert!(tx.file_left == 0 && tx.withheld > 0);
        match self
            .serve
            .edge_more(&mut c.life, tx.file_off, tx.withheld, who)
        {
            More::Now(n) => {
                debug_assert!(n <= tx.withheld);
                tx.withheld -= n;
                tx.file_left = n;
                self.pump(slot);
            }
            More::Wait => tx.wait = Wait::Slices,
            More::Broken => self.abort(slot),
        }
    }

    /// Pump step 1: a `SEND` of the head alone (or its records over TLS).
    fn send_head_alone(&mut self, slot: u32, buffered: bool) {
        let c = self.conns.live_at(slot);
        let fd = c.fd;
        let tx = c.tx.as_ref().expect("response in progress");
        if c.sends_plaintext() {
            let from = tx.head_sent;
            self.send_plain(slot, super::tls::Plain::Head(from));
            return;
        }
        let h = &tx.resp.front[tx.head_sent..];
        let more = if tx.file_left + tx.withheld > 0 || buffered {
            libc::MSG_MORE
        } else {
            0
        };
        let sub = Sub::Send {
            fd,
            buf: h.as_ptr(),
            len: h.len() as u32,
            flags: libc::MSG_NOSIGNAL | more,
        };
        self.push_conn(slot, Op::Send, sub);
    }

    /// Pump step 2: a `SEND` of the bytes in the chunk buffer, the rest of
    /// the head leading them (the body's last ones once the file is
    /// checked), and the next chunk's read started meanwhile.
    fn send_buffer(&mut self, slot: u32) {
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_ref().expect("response in progress");
        if tx.file_left == 0 && tx.ahead.is_none() && !self.last_bytes_ok(slot) {
            return;
        }
        let c = self.conns.live_at(slot);
        let fd = c.fd;
        let plaintext = c.sends_plaintext();
        let tx = c.tx.as_mut().expect("response in progress");
        let b = tx.buf.expect("buffered bytes without a buffer");
        let p = &self.pool.bufs[b as usize].get()[tx.buf_pos..tx.buf_end];
        if plaintext {
            // The read-ahead first: send_plain may account the bytes at
            // once and go on with the response (see send_plain).
            let (from, to) = (tx.buf_pos, tx.buf_end);
            let what = match tx.held.take() {
                Some(layout) => {
                    debug_assert_eq!(from, 0, "a held chunk goes whole");
                    super::tls::Plain::Held(b, layout, to)
                }
                None => super::tls::Plain::Buf(b, from, to),
            };
            self.read_ahead(slot);
            self.send_plain(slot, what);
            return;
        }
        let more = if tx.file_left + tx.withheld > 0 {
            libc::MSG_MORE
        } else {
            0
        };
        // Under --limit-rate, no more than the allowance (the rest of
        // the buffer goes on a later turn).
        let len = match tx.rate {
            Some(limit) => {
                let body_in = p.len()
                    - tx.resp
                        .front
                        .len()
                        .saturating_sub(tx.head_sent)
                        .min(p.len());
                let allowed = limit.allowance(self.now - tx.started, tx.body_sent);
                p.len() - body_in + (body_in as u64).min(allowed.max(1)) as usize
            }
            None => p.len(),
        };
        let sub = match self.pool.file_at(b, tx.buf_pos) {
            // A slot of the shared-memory file: by page reference.
            Some((file, off)) => Sub::SendFile {
                fd,
                file,
                off,
                len: len as u32,
            },
            None => Sub::Send {
                fd,
                buf: p.as_ptr(),
                len: len as u32,
                flags: libc::MSG_NOSIGNAL | more,
            },
        };
        self.push_conn(slot, Op::Send, sub);
        self.read_ahead(slot);
    }

    /// Pump step 5: an asynchronous READ of the next chunk into a chunk
    /// buffer, at HEAD_RESERVE (the head goes in front once the bytes are
    /// in): through the page cache, or with O_DIRECT on a file's first use
    /// (recent.rs); once the device has a read slot free (disk.rs) and the
    /// pool a buffer.
    fn read_chunk(&mut self, slot: u32) {
        let chunk = self.pool.chunk_size;
        let auto = self.serve.ctx.cfg.first_miss == FirstMiss::Auto;
        if !self.disk_slot(slot, true) {
            return;
        }
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("response in progress");
        let b = match tx.buf {
            Some(b) => b,
            None => match self.take_pool_buf() {
                Some(b) => b,
                None => {
                    let c = self.conns.live_at(slot);
                    c.tx.as_mut().expect("tx").wait = Wait::PoolBuffer;
                    self.pool.waiters.push_back(slot);
                    return;
                }
            },
        };
        let c = self.conns.live_at(slot);
        let mut file = c.file.as_ref().expect("file for body").as_raw_fd();
        let tx = c.tx.as_mut().expect("tx");
        tx.buf = Some(b);
        if tx.route == Route::Shm {
            file = shm_read_fd(file, tx);
            self.pool.rewrite(b);
        }
        if tx.direct == Direct::FirstUse {
            if auto && tx.file_left > chunk as u64 {
                // Several chunks to go: through the page cache after all,
                // on this response's own descriptor (and so its own
                // readahead state). The kernel's readahead window beats
                // O_DIRECT's one chunk ahead (docs/decisions.md).
                tx.direct = Direct::Never;
            } else {
                // A first use whose chunk is not all in the page cache (a
                // large body's was probed in step 4). Not RWF_NOWAIT for the
                // probe: a buffered read that would wait still starts
                // readahead into the page cache before it fails with EAGAIN.
                let n = (chunk as u64).min(tx.file_left);
                if tx.route != Route::Buffer || fs::range_cached(file, tx.file_off, n) != Some(true)
                {
                    go_direct(file, tx);
                }
            }
        }
        let (skip, want, len) = if tx.direct == Direct::On {
            // Whole aligned blocks: from the block holding file_off, and
            // to the end of a block (past the end of the file, the read
            // stops there).
            let skip = (tx.file_off % fs::DIRECT_ALIGN as u64) as usize;
            let want = ((chunk - skip) as u64).min(tx.file_left) as usize;
            (skip, want, (skip + want).next_multiple_of(fs::DIRECT_ALIGN))
        } else if tx.map.get().is_some() {
            // A body of several chunks through the page cache: this READ
            // only starts the kernel's readahead, which then fetches the
            // rest (step 4b), so it asks for little (FIRST_MISS_READ).
            let want = FIRST_MISS_READ.min(chunk as u64).min(tx.file_left) as usize;
            (0, want, want)
        } else {
            let want = (chunk as u64).min(tx.file_left) as usize;
            (0, want, want)
        };
        tx.read_skip = skip;
        tx.read_want = want;
        if tx.route == Route::Sendfile {
            tx.route = Route::Missed;
        }
        let offset = tx.file_off - skip as u64;
        if let Some(layout) = self.held_layout(slot, want) {
            return self.read_held(slot, file, b, offset, layout);
        }
        self.read_into(slot, Op::Read, file, b, offset, len);
    }

    /// Where a chunk's READ puts its file bytes so that they go out with
    /// no copy: in record layout, when the response's body is sealed into
    /// TLS records or framed as HTTP/2 DATA, the chunk is at least
    /// [`HELD_MIN`], read through the page cache (an `O_DIRECT` read
    /// needs aligned payloads, which leave gaps between records: those
    /// still go by copy), not paced by `--limit-rate`, and, on an HTTP/2
    /// stream, its DATA can go at once (the client's windows are open
    /// for all of it: a buffer held for a shut window would be pinned).
    fn held_layout(&mut self, slot: u32, want: usize) -> Option<RecordLayout> {
        let c = self.conns.at(slot)?;
        let tx = c.tx.as_ref()?;
        if want < HELD_MIN || tx.direct == Direct::On || tx.rate.is_some() {
            return None;
        }
        match c.proto {
            Proto::Http1 => c.tls.as_ref()?.tls.layout(0),
            Proto::Stream { parent, id, .. } => {
                let p = self.conns.get(parent)?;
                let Proto::H2(io) = &p.proto else {
                    return None;
                };
                if io.link.window(id) < want {
                    return None;
                }
                match &p.tls {
                    Some(t) => t.tls.layout(DATA_PREFIX),
                    None => Some(RecordLayout {
                        prefix: DATA_PREFIX,
                        header_room: 0,
                        tail_room: 0,
                        align: 1,
                    }),
                }
            }
            Proto::H2(_) | Proto::H3Stream { .. } => None,
        }
    }

    /// A `READV` of the chunk into chunk buffer `b` in `layout`: one
    /// iovec per record's payload, as many records as the buffer holds
    /// of the `read_want` bytes (which it then counts). Unless the read
    /// ends the body, it ends at the last full record: an HTTP/2 chunk of
    /// 512 KiB is 32 records of 16,375 file bytes and 288 left over, and
    /// those 288 would go as a record of their own, in a send of their
    /// own (a tenth more SQEs and sends on a large download).
    fn read_held(&mut self, slot: u32, file: RawFd, b: u32, offset: u64, layout: RecordLayout) {
        let mem = self.pool.bufs[b as usize].get_mut();
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("response in progress");
        let body_goes_on = (tx.read_want as u64) < tx.file_left;
        tx.iov.clear();
        let mut want = 0;
        for s in layout.slots(mem.len(), tx.read_want) {
            let short = s.payload.len() < layout.max_payload();
            if short && body_goes_on && !tx.iov.is_empty() {
                break;
            }
            want += s.payload.len();
            tx.iov.push(libc::iovec {
                iov_base: mem[s.payload.clone()].as_mut_ptr().cast(),
                iov_len: s.payload.len(),
            });
        }
        debug_assert!(want > 0 && want <= tx.read_want);
        tx.read_want = want;
        tx.held = Some(layout);
        // The iovecs live in the response's `iov` (its heap block does not
        // move) and point into the pool's buffer, both untouched until the
        // READV completes.
        let sub = Sub::Disk(DiskOp::Readv {
            fd: file,
            iov: tx.iov.as_ptr(),
            n: tx.iov.len() as u32,
            off: offset,
        });
        self.push_disk_read(slot, Op::Read, sub);
    }

    /// Called before the body's last bytes go to the socket (by `SEND`
    /// from the buffer or by `sendfile`): whether the file still has the
    /// version the head described ([`fs::has_version`]). If it has not, the
    /// response ends here: the session's 503 in its place when none of it
    /// is out yet, else the connection is dropped, so that the client sees
    /// a short body rather than a mix of two versions under the promised
    /// length. Bytes `sendfile` queued earlier are the page cache's own
    /// pages until the peer has read them, so a change after this check
    /// can still reach them: `sendfile = false` in the config sends every
    /// body from a copy instead (docs/reliability.md).
    pub(super) fn last_bytes_ok(&mut self, slot: u32) -> bool {
        let c = self.conns.live_at(slot);
        let tx = c.tx.as_mut().expect("response in progress");
        let Some(file) = c.file.as_ref() else {
            return true;
        };
        if version_holds(file.as_raw_fd(), &mut tx.unchecked) {
            return true;
        }
        changed();
        if tx.head_sent == 0 && tx.body_sent == 0 && !tx.resp.continued {
            self.answer_instead(slot, libc::EAGAIN);
        } else {
            self.abort(slot);
        }
        false
    }

    /// The start of every `SEND` completion of a response (plain or TLS
    /// records): `false` when the response is over, because the connection
    /// is closing (then it is released once nothing is in flight) or the
    /// send failed (then it is dropped).
    pub(super) fn send_went(&mut self, slot: u32, res: i32) -> bool {
        if self.conn(slot).life.phase == Phase::Closing {
            self.release_tx(slot);
            self.maybe_release(slot);
            return false;
        }
        if res <= 0 {
            self.abort(slot);
            return false;
        }
        true
    }

    pub(super) fn on_send(&mut self, slot: u32, res: i32) {
        let send_timeout = self.serve.ctx.cfg.send_timeout;
        let now = self.now;
        let others_waiting = !self.pool.waiters.is_empty();
        if !self.send_went(slot, res) {
            return;
        }
        let c = self.conn(slot);
        c.life.deadline = now + send_timeout;
        let tx = c.tx.as_mut().expect("tx");
        let mut n = res as usize;
        if tx.head_at == HeadAt::Front && tx.head_sent < tx.resp.front.len() {
            // A SEND of the head alone (pump steps 1 and 4).
            tx.head_sent += n;
        } else {
            tx.buf_pos += n;
            debug_assert!(tx.buf_pos <= tx.buf_end);
            // Count file bytes (the head may lead the buffer).
            if tx.head_at == HeadAt::Buffer && tx.head_sent < tx.resp.front.len() {
                let h = (tx.resp.front.len() - tx.head_sent).min(n);
                tx.head_sent += h;
                n -= h;
            }
            tx.body_sent += n as u64;
            if tx.buf_pos == tx.buf_end && tx.file_left > 0 && others_waiting {
                // Fairness: hand the buffer to a waiting response and queue up
                // (a held chunk's buffer went with its records already).
                if let Some(b) = tx.buf.take() {
                    self.give_pool_buf(b);
                }
                // Takes the buffer back if nobody was waiting for it after
                // all, or queues for one.
                self.pump(slot);
                return;
            }
        }
        self.pump(slot);
    }
}
