//! The ring: its setup, submission helpers, the completion loop and the
//! dispatch of each completion to the connection it names.

use std::time::Instant;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::{Worker, BGID, NO_SLOT, RECV_BUF_COUNT, RECV_BUF_SIZE, RING_ENTRIES};
use crate::conn::policy::TICK;
use crate::conn::Steps;
use crate::conn::{Phase, Serving, Slots, WorkerContext};
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
    /// The helpers' eventfd became readable: listings (`crate::lister`)
    /// or password checks (`crate::passwords`) are done.
    Helpers,
    /// A SEND of an HTTP/2 connection's frames (`h2.rs`).
    H2Send,
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
            16 => Op::Helpers,
            17 => Op::H2Send,
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

/// The receive buffers and the buffer ring through which the kernel
/// picks one for each `RECV` completion.
pub(super) struct RecvRing {
    pub(super) bufs: Box<[u8]>,
    pub(super) entries: *mut types::BufRingEntry,
    pub(super) layout: std::alloc::Layout,
    pub(super) tail: u16,
}

impl RecvRing {
    fn new(ring: &IoUring) -> Result<RecvRing, String> {
        let count = RECV_BUF_COUNT as usize;
        let bufs = vec![0u8; count * RECV_BUF_SIZE].into_boxed_slice();
        let layout = std::alloc::Layout::from_size_align(
            count * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .expect("buffer ring layout");
        // SAFETY: the layout has a non-zero size.
        let entries = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<types::BufRingEntry>();
        if entries.is_null() {
            return Err("out of memory for the receive buffer ring".into());
        }
        // SAFETY: `entries` points at `count` zeroed, page-aligned entries
        // that stay allocated until Worker::drop, which runs only after the
        // ring (and with it the registration) is gone.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(entries as u64, RECV_BUF_COUNT, BGID, 0)
                .map_err(|e| format!("io_uring provided buffers unavailable: {e}"))?;
        }
        Ok(RecvRing {
            bufs,
            entries,
            layout,
            tail: 0,
        })
    }

    /// Frees the entries; only once the ring no longer refers to them
    /// (`Worker::drop`, after `unregister_buf_ring`).
    pub(super) fn free(&mut self) {
        // SAFETY: allocated in `new` with this layout; the caller has
        // unregistered the buffer ring, so the kernel no longer refers to
        // it; the pointer is nulled so that it is freed once.
        unsafe { std::alloc::dealloc(self.entries.cast(), self.layout) };
        self.entries = std::ptr::null_mut();
    }
}

/// Which of the worker's own operations are in the ring (each is armed
/// again from its completion, and cancelled at the drain).
#[derive(Default)]
pub(super) struct Armed {
    pub(super) tick: bool,
    /// A multishot poll on the open-file cache's inotify fd: the cache
    /// then drains inotify only in batches where it fired, instead of with
    /// one `read` after every wait.
    pub(super) notify: bool,
    /// A `READ` on the helpers' eventfd (`Op::Helpers`).
    pub(super) helpers: bool,
}

/// Memory that the worker's own operations hand to the kernel.
pub(super) struct Fixed {
    pub(super) tick_ts: Box<types::Timespec>,
    /// The shutdown eventfd's counter (`Op::Wake`).
    pub(super) wake: Box<u64>,
    /// The helpers' eventfd's counter (`Op::Helpers`).
    pub(super) helpers: Box<u64>,
    /// Where the one-page `READ`s that wait for readahead land (see
    /// `Tx::map`). Nothing ever reads it; the kernel may write it from
    /// several such `READ`s at once.
    pub(super) page_sink: Box<[u8]>,
}

impl Worker {
    pub(super) fn new(mut ctx: WorkerContext) -> Result<Worker, String> {
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
        let recv = RecvRing::new(&ring)?;
        let max_conns = ctx.cfg.max_connections_per_worker();
        let listeners = std::mem::take(&mut ctx.listeners);
        let pool =
            super::pool::Pool::new(ctx.cfg.max_inflight as usize, ctx.cfg.chunk_size as usize);
        let root = ctx.cfg.root.clone();
        let mut w = Worker {
            ring,
            serve: Serving::new(ctx)?,
            conns: Slots::new(max_conns),
            ring_inflight: 0,
            recv,
            pool,
            devices: Vec::new(),
            accept: super::accept::Accepting::new(listeners),
            armed: Armed::default(),
            fixed: Fixed {
                tick_ts: Box::new(
                    types::Timespec::new()
                        .sec(TICK.as_secs())
                        .nsec(TICK.subsec_nanos()),
                ),
                wake: Box::new(0),
                helpers: Box::new(0),
                page_sink: vec![0u8; fs::page_size()].into_boxed_slice(),
            },
            leaders: std::rc::Rc::default(),
            streams: 0,
            rearm: Vec::new(),
            now: Instant::now(),
        };
        // The root's device is entry 0, where a connection's `dev` points
        // until its first file.
        let root_dev = std::os::unix::fs::MetadataExt::dev(
            &std::fs::metadata(&root).map_err(|e| format!("{}: {e}", root.display()))?,
        );
        w.device(root_dev);
        for bid in 0..RECV_BUF_COUNT {
            w.provide_recv_buf(bid);
        }
        for i in 0..w.accept.listeners.len() {
            w.arm_accept(i);
        }
        w.arm_tick();
        w.arm_notify();
        w.arm_helpers();
        w.arm_wake();
        Ok(w)
    }

    /// A `READ` of the shutdown eventfd, written at shutdown and when the
    /// accept gate moves; armed again after each until the drain.
    pub(super) fn arm_wake(&mut self) {
        let efd = self.serve.ctx.shutdown.eventfd;
        let ptr = (&mut *self.fixed.wake as *mut u64).cast::<u8>();
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
        self.conns.live_at(slot).inflight += 1;
        let gen = self.conns.ticket(slot).expect("live slot").gen;
        self.push(sqe, ud(op, slot, gen));
    }

    pub(super) fn provide_recv_buf(&mut self, bid: u16) {
        let mask = RECV_BUF_COUNT - 1;
        // SAFETY: `br_entries` holds RECV_BUF_COUNT entries; the index is
        // masked into range. The kernel only consumes entries below the
        // tail, and this one is published by the tail store that follows.
        unsafe {
            let e = &mut *self.recv.entries.add((self.recv.tail & mask) as usize);
            e.set_addr(self.recv.bufs.as_ptr().add(bid as usize * RECV_BUF_SIZE) as u64);
            e.set_len(RECV_BUF_SIZE as u32);
            e.set_bid(bid);
        }
        self.recv.tail = self.recv.tail.wrapping_add(1);
        // SAFETY: the tail lives inside the entries allocation; the kernel
        // reads it with acquire semantics, so it is stored with release.
        unsafe {
            let tail =
                types::BufRingEntry::tail(self.recv.entries) as *const std::sync::atomic::AtomicU16;
            (*tail).store(self.recv.tail, std::sync::atomic::Ordering::Release);
        }
    }

    pub(super) fn arm_tick(&mut self) {
        if self.armed.tick {
            return;
        }
        self.armed.tick = true;
        let ts: *const types::Timespec = &*self.fixed.tick_ts;
        self.push(opcode::Timeout::new(ts).build(), ud(Op::Tick, NO_SLOT, 0));
    }

    pub(super) fn arm_notify(&mut self) {
        if self.armed.notify || self.serve.draining {
            return;
        }
        let Some(fd) = self.serve.files.notify_fd() else {
            return;
        };
        self.armed.notify = true;
        self.push(
            opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
                .multi(true)
                .build(),
            ud(Op::Notify, NO_SLOT, 0),
        );
    }

    /// Keeps a `READ` on the helpers' eventfd in the ring.
    pub(super) fn arm_helpers(&mut self) {
        if self.armed.helpers {
            return;
        }
        let fd = self.serve.helpers_eventfd();
        self.armed.helpers = true;
        let ptr = (&mut *self.fixed.helpers as *mut u64).cast::<u8>();
        self.push(
            opcode::Read::new(types::Fd(fd), ptr, 8).build(),
            ud(Op::Helpers, NO_SLOT, 0),
        );
    }

    // ----- the loop -----------------------------------------------------

    pub(super) fn event_loop(&mut self) -> Result<(), String> {
        let mut cqes: Vec<(u64, i32, u32)> = Vec::with_capacity(RING_ENTRIES as usize);
        loop {
            if self.serve.draining && self.conns.live() == 0 {
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
            if !self.armed.notify
                || cqes
                    .iter()
                    .any(|&(u, _, _)| matches!(ud_parts(u).0, Op::Notify))
            {
                self.serve.files.batch();
            }
            for &(user_data, res, flags) in &cqes {
                self.complete(user_data, res, flags);
            }
            for slot in std::mem::take(&mut self.rearm) {
                if self
                    .conns
                    .at(slot)
                    .is_some_and(|c| c.life.phase != Phase::Closing)
                {
                    self.arm_recv(slot);
                }
            }
        }
    }

    pub(super) fn stop_timers_and_listeners(&mut self) {
        if self.armed.helpers {
            self.armed.helpers = false;
            self.push(
                opcode::AsyncCancel::new(ud(Op::Helpers, NO_SLOT, 0)).build(),
                ud(Op::Cancel, NO_SLOT, 0),
            );
        }
        if self.armed.notify {
            self.armed.notify = false;
            self.push(
                opcode::PollRemove::new(ud(Op::Notify, NO_SLOT, 0)).build(),
                ud(Op::Cancel, NO_SLOT, 0),
            );
        }
        if self.armed.tick {
            self.armed.tick = false;
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
                if self.armed.tick {
                    self.armed.tick = false;
                    self.on_tick();
                }
            }
            Op::Wake => self.on_wake(),
            Op::Helpers => {
                // Armed again unless cancelled at shutdown (or failing).
                let again = self.armed.helpers && res >= 0;
                self.armed.helpers = false;
                if again {
                    self.arm_helpers();
                }
                self.on_helpers();
            }
            Op::Notify => {
                if !more {
                    // The multishot poll ended: the inotify queue is drained
                    // after every wait from now on. A poll the kernel ended
                    // without an error (it may, e.g. when the completion
                    // queue overflowed) is armed again; after an error, or
                    // the cancel at shutdown, it is not, so that a poll
                    // that keeps failing cannot spin the loop.
                    self.armed.notify = false;
                    if res >= 0 {
                        self.arm_notify();
                    }
                }
            }
            Op::Cancel => {}
            Op::Close if slot == NO_SLOT => {}
            _ => {
                // Invariant: a slot is reused only once no operation names
                // it (`maybe_release`), so the ticket always finds it.
                let Some(c) = self.conns.get(crate::conn::Ticket { slot, gen }) else {
                    panic!("completion {op:?} for slot {slot}, which is empty or reused");
                };
                if !more {
                    // Only the final completion of a multishot ends it.
                    c.inflight -= 1;
                }
                if matches!(op, Op::Read | Op::ReadAhead | Op::PageWait) {
                    // The loop's time: when this batch of completions came.
                    let took = self.now.saturating_duration_since(c.disk_at);
                    self.serve.ctx.metrics.disk_read_done(took);
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
                    Op::H2Send => self.on_h2_send(slot, res),
                    Op::Shutdown => self.maybe_release(slot),
                    Op::PollOut => {
                        if self.conn(slot).life.phase == Phase::Sending && res >= 0 {
                            self.pump(slot);
                        } else if self.conn(slot).life.phase == Phase::Sending {
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
