//! The ring: its setup, submission helpers, the completion loop and the
//! dispatch of each completion to the connection it names.

use std::collections::VecDeque;
use std::time::Instant;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::{Phase, Worker, BGID, NO_SLOT, RECV_BUF_COUNT, RECV_BUF_SIZE, RING_ENTRIES};
use crate::backend::{WorkerContext, TICK};
use crate::filecache::OpenFileCache;
use crate::fs;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Op {
    Accept = 1,
    Recv,
    Open,
    Read,
    Send,
    Shutdown,
    Close,
    Cancel,
    Tick,
    Wake,
    PollOut,
    /// A READ into a response's second buffer (`Tx::ahead`).
    ReadAhead,
    /// The open-file cache's inotify fd became readable (multishot poll).
    Notify,
    /// A one-page READ that waits for readahead (`Tx::map`).
    PageWait,
    /// A SEND of TLS records (`tls.rs`).
    TlsSend,
    /// The listing helpers' eventfd became readable (`crate::lister`).
    Listed,
}

impl Op {
    fn from_u8(v: u8) -> Op {
        match v {
            1 => Op::Accept,
            2 => Op::Recv,
            3 => Op::Open,
            4 => Op::Read,
            5 => Op::Send,
            6 => Op::Shutdown,
            7 => Op::Close,
            8 => Op::Cancel,
            9 => Op::Tick,
            10 => Op::Wake,
            11 => Op::PollOut,
            12 => Op::ReadAhead,
            13 => Op::Notify,
            14 => Op::PageWait,
            15 => Op::TlsSend,
            16 => Op::Listed,
            _ => panic!("unknown op {v} in user_data"),
        }
    }
}

/// user_data: op in bits 0..8, slot in 8..32, generation in 32..64.
pub(super) fn ud(op: Op, slot: u32, gen: u32) -> u64 {
    debug_assert!(slot <= NO_SLOT);
    op as u64 | (slot as u64) << 8 | (gen as u64) << 32
}

pub(super) fn ud_parts(v: u64) -> (Op, u32, u32) {
    (
        Op::from_u8(v as u8),
        (v >> 8) as u32 & NO_SLOT,
        (v >> 32) as u32,
    )
}

impl Worker {
    pub(super) fn new(ctx: WorkerContext) -> Result<Worker, String> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_submit_all()
            .setup_cqsize(RING_ENTRIES * 4)
            .build(RING_ENTRIES)
            .map_err(|e| format!("io_uring setup failed: {e}"))?;
        // Disk reads that cannot complete inline go to io-wq's bounded
        // workers; cap them at the configured number of reads in flight.
        let inflight = ctx.cfg.max_inflight;
        let mut max = [inflight, inflight];
        let _ = ring.submitter().register_iowq_max_workers(&mut max);

        let count = RECV_BUF_COUNT as usize;
        let recv_bufs = vec![0u8; count * RECV_BUF_SIZE].into_boxed_slice();
        let br_layout = std::alloc::Layout::from_size_align(
            count * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .expect("buffer ring layout");
        // SAFETY: the layout has a non-zero size.
        let br_entries =
            unsafe { std::alloc::alloc_zeroed(br_layout) }.cast::<types::BufRingEntry>();
        if br_entries.is_null() {
            return Err("out of memory for the receive buffer ring".into());
        }
        // SAFETY: `br_entries` points at `count` zeroed, page-aligned entries
        // that stay allocated until Worker::drop, which runs only after the
        // ring (and with it the registration) is gone.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(br_entries as u64, RECV_BUF_COUNT, BGID, 0)
                .map_err(|e| format!("io_uring provided buffers unavailable: {e}"))?;
        }
        let max_conns = ctx.cfg.max_connections_per_worker();
        let mut ctx = ctx;
        let listeners = std::mem::take(&mut ctx.listeners);
        let mut w = Worker {
            ring,
            conns: Vec::new(),
            free: Vec::new(),
            live: 0,
            max_conns,
            next_gen: 1,
            ring_inflight: 0,
            recv_bufs,
            br_entries,
            br_layout,
            br_tail: 0,
            pool: Vec::new(),
            pool_free: Vec::new(),
            pool_limit: ctx.cfg.max_inflight as usize,
            pool_waiters: VecDeque::new(),
            chunk_size: ctx.cfg.chunk_size as usize,
            devices: Vec::new(),
            accept_armed: vec![false; listeners.len()],
            accept_backoff: Default::default(),
            listeners,
            tls_from: ctx.tls_from,
            tls_shared: ctx.tls.clone(),
            tls_cfg: ctx.tls.as_ref().map(|t| t.current()),
            now: Instant::now(),
            rate: crate::backend::RateLimit::from_config(&ctx.cfg),
            throttled: Vec::new(),
            tick_ts: Box::new(
                types::Timespec::new()
                    .sec(TICK.as_secs())
                    .nsec(TICK.subsec_nanos()),
            ),
            tick_armed: false,
            notify_armed: false,
            wake_buf: Box::new(0),
            page_sink: vec![0u8; fs::page_size()].into_boxed_slice(),
            leaders: std::rc::Rc::default(),
            draining: false,
            accept_paused: false,
            gate_acked: false,
            drain_deadline: None,
            next_scan: Instant::now(),
            rearm: Vec::new(),
            lists: match &ctx.lister {
                Some(pool) => Some(crate::lister::Lists::new(
                    pool.clone(),
                    ctx.root.clone(),
                    ctx.cfg.dotfiles,
                    ctx.cfg.open_file_cache_valid,
                )?),
                None => None,
            },
            listed_armed: false,
            list_buf: Box::new(0),
            files: OpenFileCache::new(
                ctx.cfg.open_file_cache,
                ctx.cfg.open_file_cache_valid,
                ctx.cfg.small_file_cache as usize,
            ),
            ctx,
        };
        // The root's device is entry 0, where a connection's `dev` points
        // until its first file.
        let root_dev = std::os::unix::fs::MetadataExt::dev(
            &std::fs::metadata(&w.ctx.cfg.root)
                .map_err(|e| format!("{}: {e}", w.ctx.cfg.root.display()))?,
        );
        w.device(root_dev);
        for bid in 0..RECV_BUF_COUNT {
            w.provide_recv_buf(bid);
        }
        for i in 0..w.listeners.len() {
            w.arm_accept(i);
        }
        w.arm_tick();
        w.arm_notify();
        w.arm_listed();
        w.arm_wake();
        Ok(w)
    }

    /// A `READ` of the shutdown eventfd, written at shutdown and when the
    /// accept gate moves; armed again after each until the drain.
    pub(super) fn arm_wake(&mut self) {
        let efd = self.ctx.shutdown.eventfd;
        let ptr = (&mut *self.wake_buf as *mut u64).cast::<u8>();
        // wake_buf is a Box the worker owns for
        // its whole life, and at most one READ into it is in flight (armed
        // here only from its own completion, or once at start).
        self.push(
            opcode::Read::new(types::Fd(efd), ptr, 8).build(),
            ud(Op::Wake, NO_SLOT, 0),
        );
    }

    // ----- submission helpers -------------------------------------------

    pub(super) fn push(&mut self, sqe: squeue::Entry, user_data: u64) {
        let sqe = sqe.user_data(user_data);
        loop {
            // SAFETY: every buffer an entry names is owned by the worker (or
            // by a connection slot that is not reused while the entry is in
            // flight) and outlives the operation; see the module invariants.
            let pushed = unsafe { self.ring.submission().push(&sqe) };
            if pushed.is_ok() {
                break;
            }
            // Submission queue full: hand what is queued to the kernel.
            if let Err(e) = self.ring.submit() {
                if e.raw_os_error() != Some(libc::EBUSY) && e.raw_os_error() != Some(libc::EINTR) {
                    panic!("io_uring_enter failed: {e}");
                }
            }
        }
        self.ring_inflight += 1;
    }

    pub(super) fn push_conn(&mut self, slot: u32, op: Op, sqe: squeue::Entry) {
        let c = self.conns[slot as usize].as_mut().expect("live slot");
        c.inflight += 1;
        let gen = c.gen;
        self.push(sqe, ud(op, slot, gen));
    }

    pub(super) fn provide_recv_buf(&mut self, bid: u16) {
        let mask = RECV_BUF_COUNT - 1;
        // SAFETY: `br_entries` holds RECV_BUF_COUNT entries; the index is
        // masked into range. The kernel only consumes entries below the
        // tail, and this one is published by the tail store that follows.
        unsafe {
            let e = &mut *self.br_entries.add((self.br_tail & mask) as usize);
            e.set_addr(self.recv_bufs.as_ptr().add(bid as usize * RECV_BUF_SIZE) as u64);
            e.set_len(RECV_BUF_SIZE as u32);
            e.set_bid(bid);
        }
        self.br_tail = self.br_tail.wrapping_add(1);
        // SAFETY: the tail lives inside the entries allocation; the kernel
        // reads it with acquire semantics, so it is stored with release.
        unsafe {
            let tail =
                types::BufRingEntry::tail(self.br_entries) as *const std::sync::atomic::AtomicU16;
            (*tail).store(self.br_tail, std::sync::atomic::Ordering::Release);
        }
    }

    pub(super) fn arm_tick(&mut self) {
        if self.tick_armed {
            return;
        }
        self.tick_armed = true;
        let ts: *const types::Timespec = &*self.tick_ts;
        self.push(opcode::Timeout::new(ts).build(), ud(Op::Tick, NO_SLOT, 0));
    }

    pub(super) fn arm_notify(&mut self) {
        if self.notify_armed || self.draining {
            return;
        }
        let Some(fd) = self.files.notify_fd() else {
            return;
        };
        self.notify_armed = true;
        self.push(
            opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
                .multi(true)
                .build(),
            ud(Op::Notify, NO_SLOT, 0),
        );
    }

    /// Keeps a `READ` on the listing helpers' eventfd in the ring.
    pub(super) fn arm_listed(&mut self) {
        let Some(l) = &self.lists else {
            return;
        };
        if self.listed_armed {
            return;
        }
        let fd = l.eventfd();
        self.listed_armed = true;
        let ptr = (&mut *self.list_buf as *mut u64).cast::<u8>();
        self.push(
            opcode::Read::new(types::Fd(fd), ptr, 8).build(),
            ud(Op::Listed, NO_SLOT, 0),
        );
    }

    // ----- the loop -----------------------------------------------------

    pub(super) fn event_loop(&mut self) -> Result<(), String> {
        let mut cqes: Vec<(u64, i32, u32)> = Vec::with_capacity(RING_ENTRIES as usize);
        loop {
            if self.draining && self.live == 0 {
                self.stop_timers_and_listeners();
                if self.ring_inflight == 0 {
                    return Ok(());
                }
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
                Err(e) => return Err(format!("io_uring_enter failed: {e}")),
            }
            self.now = Instant::now();
            cqes.clear();
            cqes.extend(
                self.ring
                    .completion()
                    .map(|c| (c.user_data(), c.result(), c.flags())),
            );
            // A change to a cached file must be seen by every request that
            // arrives after it. inotify queues its event, and wakes the
            // poll, inside the syscall that changed the file, so the
            // poll's completion is queued before that of any request sent
            // afterwards: it is in this batch or an earlier one. Checking
            // the whole batch before serving any of it covers both.
            if !self.notify_armed
                || cqes
                    .iter()
                    .any(|&(u, _, _)| matches!(ud_parts(u).0, Op::Notify))
            {
                self.files.batch();
            }
            for &(user_data, res, flags) in &cqes {
                self.complete(user_data, res, flags);
            }
            for slot in std::mem::take(&mut self.rearm) {
                if let Some(c) = &self.conns[slot as usize] {
                    if matches!(
                        c.phase,
                        Phase::Reading | Phase::Opening | Phase::Sending | Phase::Lingering
                    ) {
                        self.arm_recv(slot);
                    }
                }
            }
        }
    }

    pub(super) fn stop_timers_and_listeners(&mut self) {
        if self.listed_armed {
            self.listed_armed = false;
            self.push(
                opcode::AsyncCancel::new(ud(Op::Listed, NO_SLOT, 0)).build(),
                ud(Op::Cancel, NO_SLOT, 0),
            );
        }
        if self.notify_armed {
            self.notify_armed = false;
            self.push(
                opcode::PollRemove::new(ud(Op::Notify, NO_SLOT, 0)).build(),
                ud(Op::Cancel, NO_SLOT, 0),
            );
        }
        if self.tick_armed {
            self.tick_armed = false;
            self.push(
                opcode::TimeoutRemove::new(ud(Op::Tick, NO_SLOT, 0)).build(),
                ud(Op::Cancel, NO_SLOT, 0),
            );
        }
    }

    pub(super) fn complete(&mut self, user_data: u64, res: i32, flags: u32) {
        let (op, slot, gen) = ud_parts(user_data);
        let more = cqueue::more(flags);
        if !more {
            self.ring_inflight -= 1;
        }
        match op {
            Op::Accept => self.on_accept(slot as usize, res, more),
            Op::Tick => {
                if self.tick_armed {
                    self.tick_armed = false;
                    self.on_tick();
                }
            }
            Op::Wake => self.on_wake(),
            Op::Listed => {
                // Armed again unless cancelled at shutdown (or failing).
                let again = self.listed_armed && res >= 0;
                self.listed_armed = false;
                if again {
                    self.arm_listed();
                }
                self.on_listed();
            }
            Op::Notify => {
                if !more {
                    // The multishot poll ended: the inotify queue is drained
                    // after every wait from now on. A poll the kernel ended
                    // without an error (it may, e.g. when the completion
                    // queue overflowed) is armed again; after an error, or
                    // the cancel at shutdown, it is not, so that a poll
                    // that keeps failing cannot spin the loop.
                    self.notify_armed = false;
                    if res >= 0 {
                        self.arm_notify();
                    }
                }
            }
            Op::Cancel => {}
            Op::Close if slot == NO_SLOT => {}
            _ => {
                let Some(c) = self.conns[slot as usize].as_mut() else {
                    panic!("completion {op:?} for empty slot {slot}");
                };
                assert_eq!(c.gen, gen, "completion for a reused slot");
                if !more {
                    // Only the final completion of a multishot ends it.
                    c.inflight -= 1;
                }
                if matches!(op, Op::Read | Op::ReadAhead | Op::PageWait) {
                    // The loop's time: when this batch of completions came.
                    let took = self.now.saturating_duration_since(c.disk_at);
                    self.ctx.metrics.disk_read_done(took);
                }
                if matches!(op, Op::Read | Op::ReadAhead) {
                    self.disk_read_done(slot, res);
                }
                match op {
                    Op::Recv => self.on_recv(slot, res, flags),
                    Op::Open => self.on_open(slot, res),
                    Op::Read => self.on_read(slot, res),
                    Op::ReadAhead => self.on_read_ahead(slot, res),
                    Op::PageWait => self.on_page_wait(slot, res),
                    Op::Send => self.on_send(slot, res),
                    Op::TlsSend => self.on_tls_send(slot, res),
                    Op::Shutdown => self.maybe_release(slot),
                    Op::PollOut => {
                        if self.conn(slot).phase == Phase::Sending && res >= 0 {
                            self.pump(slot);
                        } else if self.conn(slot).phase == Phase::Sending {
                            self.abort(slot);
                        } else {
                            self.maybe_release(slot);
                        }
                    }
                    Op::Close => unreachable!("connection closes carry NO_SLOT"),
                    _ => unreachable!(),
                }
            }
        }
    }
}
