//! The ring: its setup, submission helpers, the completion loop and the
//! dispatch of each completion to the connection it names.

use std::time::Instant;

use super::{Worker, NO_SLOT, RING_ENTRIES};
use crate::conn::policy::TICK;
use crate::conn::Steps;
use crate::conn::{Phase, Serving, Slots, WorkerContext};
use crate::fs;
use crate::io::{Engine, Sub, Timespec};

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
    /// The UDP socket of HTTP/3 has datagrams (a multishot poll; `h3.rs`).
    QuicIn,
    /// The UDP socket has room again.
    QuicOut,
    /// The QUIC driver's deadline (its sequence number in the slot field).
    QuicTimer,
    /// A `NOP`: the datagrams one turn left unread (`RECVS_PER_TURN`).
    QuicMore,
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
            18 => Op::QuicIn,
            19 => Op::QuicOut,
            20 => Op::QuicTimer,
            21 => Op::QuicMore,
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
    pub(super) tick_ts: Box<Timespec>,
    /// The shutdown eventfd's counter (`Op::Wake`).
    pub(super) wake: Box<u64>,
    /// The helpers' eventfd's counter (`Op::Helpers`).
    pub(super) helpers: Box<u64>,
    /// Where the one-page `READ`s that wait for readahead land (see
    /// `Tx::map`). Nothing ever reads it; the kernel may write it from
    /// several such `READ`s at once.
    pub(super) page_sink: Box<[u8]>,
}

impl<E: Engine> Worker<E> {
    pub(super) fn new(
        mut ctx: WorkerContext,
        io: E,
        pool: super::pool::Pool,
    ) -> Result<Worker<E>, String> {
        let max_conns = ctx.cfg.max_connections_per_worker();
        let listeners = std::mem::take(&mut ctx.listeners);
        let root = ctx.cfg.root.clone();
        let mut w = Worker {
            io,
            serve: Serving::new(ctx)?,
            conns: Slots::new(max_conns),
            ring_inflight: 0,
            pool,
            devices: Vec::new(),
            accept: super::accept::Accepting::new(listeners),
            armed: Armed::default(),
            fixed: Fixed {
                tick_ts: Box::new(Timespec::of(TICK)),
                wake: Box::new(0),
                helpers: Box::new(0),
                page_sink: vec![0u8; fs::page_size()].into_boxed_slice(),
            },
            leaders: std::rc::Rc::default(),
            streams: 0,
            rearm: Vec::new(),
            now: Instant::now(),
            quic: None,
        };
        w.quic = w.quic_setup()?;
        // The root's device is entry 0, where a connection's `dev` points
        // until its first file.
        let root_dev = std::os::unix::fs::MetadataExt::dev(
            &std::fs::metadata(&root).map_err(|e| format!("{}: {e}", root.display()))?,
        );
        w.device(root_dev);
        for i in 0..w.accept.listeners.len() {
            w.arm_accept(i);
        }
        w.arm_tick();
        w.arm_notify();
        w.arm_helpers();
        w.arm_wake();
        w.arm_quic();
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
            Sub::ReadEvent { fd: efd, buf: ptr },
            ud(Op::Wake, NO_SLOT, 0),
        );
    }

    // ----- submission helpers -------------------------------------------

    pub(super) fn push(&mut self, sub: Sub, user_data: u64) {
        // SAFETY: every buffer an operation names is owned by the worker
        // (or by a connection slot that is not reused while the operation
        // is in flight) and outlives it; see the module invariants.
        unsafe { self.io.push(sub, user_data) };
        self.ring_inflight += 1;
    }

    pub(super) fn push_conn(&mut self, slot: u32, op: Op, sub: Sub) {
        self.conns.live_at(slot).inflight += 1;
        let gen = self.conns.ticket(slot).expect("live slot").gen;
        self.push(sub, ud(op, slot, gen));
    }

    /// As `push_conn`, and the operation pushed next starts only once
    /// this one has completed.
    pub(super) fn push_conn_linked(&mut self, slot: u32, op: Op, sub: Sub) {
        self.conns.live_at(slot).inflight += 1;
        let gen = self.conns.ticket(slot).expect("live slot").gen;
        // SAFETY: as in `push`.
        unsafe { self.io.push_linked(sub, ud(op, slot, gen)) };
        self.ring_inflight += 1;
    }

    pub(super) fn provide_recv_buf(&mut self, bid: u16) {
        self.io.provide(bid);
    }

    pub(super) fn arm_tick(&mut self) {
        if self.armed.tick {
            return;
        }
        self.armed.tick = true;
        let ts: *const Timespec = &*self.fixed.tick_ts;
        self.push(Sub::Timeout { ts }, ud(Op::Tick, NO_SLOT, 0));
    }

    pub(super) fn arm_notify(&mut self) {
        if self.armed.notify || self.serve.draining {
            return;
        }
        let Some(fd) = self.serve.files.notify_fd() else {
            return;
        };
        self.armed.notify = true;
        let sub = Sub::Poll {
            fd,
            mask: libc::POLLIN as u32,
            multishot: true,
        };
        self.push(sub, ud(Op::Notify, NO_SLOT, 0));
    }

    /// Keeps a `READ` on the helpers' eventfd in the ring.
    pub(super) fn arm_helpers(&mut self) {
        if self.armed.helpers {
            return;
        }
        let fd = self.serve.helpers_eventfd();
        self.armed.helpers = true;
        let ptr = (&mut *self.fixed.helpers as *mut u64).cast::<u8>();
        self.push(Sub::ReadEvent { fd, buf: ptr }, ud(Op::Helpers, NO_SLOT, 0));
    }

    // ----- the loop -----------------------------------------------------

    pub(super) fn event_loop(&mut self) -> Result<(), String> {
        let mut cqes: Vec<(u64, i32, u32)> = Vec::with_capacity(RING_ENTRIES as usize);
        loop {
            if self.serve.draining && self.conns.live() == 0 && self.quic_idle() {
                self.stop_timers_and_listeners();
                if self.ring_inflight == 0 {
                    return Ok(());
                }
            }
            cqes.clear();
            self.io.wait(&mut cqes)?;
            self.now = Instant::now();
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
        self.stop_quic();
        if self.armed.helpers {
            self.armed.helpers = false;
            let target = ud(Op::Helpers, NO_SLOT, 0);
            self.push(Sub::Cancel { target }, ud(Op::Cancel, NO_SLOT, 0));
        }
        if self.armed.notify {
            self.armed.notify = false;
            let target = ud(Op::Notify, NO_SLOT, 0);
            self.push(Sub::PollRemove { target }, ud(Op::Cancel, NO_SLOT, 0));
        }
        if self.armed.tick {
            self.armed.tick = false;
            let target = ud(Op::Tick, NO_SLOT, 0);
            self.push(Sub::TimeoutRemove { target }, ud(Op::Cancel, NO_SLOT, 0));
        }
    }

    pub(super) fn complete(&mut self, user_data: u64, res: i32, flags: u32) {
        let (op, slot, gen) = ud_parts(user_data);
        let more = crate::io::more(flags);
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
            Op::QuicIn => self.on_quic_in(res, more),
            Op::QuicOut => self.on_quic_out(),
            Op::QuicTimer => self.on_quic_timer(slot),
            Op::QuicMore => self.on_quic_more(),
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
