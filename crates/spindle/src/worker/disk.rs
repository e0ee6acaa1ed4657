//! Disk reads per device: each device's reads in flight stay within its
//! depth, which `depth.rs` finds while serving (`--depth adaptive`, the
//! default) or which is `--max-inflight` (`--depth fixed`).
//!
//! What counts: the `READ`s of response bodies (`Op::Read`, `Op::ReadAhead`),
//! through the page cache or with `O_DIRECT`. Not the one-page waits for
//! the kernel's readahead (`Op::PageWait`: the kernel sizes that stream),
//! nor opens. A response whose device is at its depth waits in the
//! device's queue, in arrival order, holding no new chunk buffer.

use crate::conn::Transport;
use crate::io::Engine;
use std::collections::VecDeque;

use crate::io::Sub;

use super::ring::Op;
use super::{Device, Worker, MAX_DEVICES};
use crate::config::Depth as DepthMode;
use crate::conn::Phase;
use crate::depth::Depth;
use crate::metrics::ReadMode;

impl<E: Engine> Worker<E> {
    /// The index of `dev` in the device table, added if new (the last
    /// entry is shared once the table is full).
    pub(super) fn device(&mut self, dev: u64) -> usize {
        if let Some(i) = self.devices.iter().position(|d| d.dev == dev) {
            return i;
        }
        if self.devices.len() == MAX_DEVICES {
            return MAX_DEVICES - 1;
        }
        self.devices.push(Device {
            dev,
            depth: Depth::new(self.serve.ctx.cfg.max_inflight),
            inflight: 0,
            waiters: VecDeque::new(),
        });
        self.devices.len() - 1
    }

    fn disk_limit(&self, d: usize) -> u32 {
        match self.serve.ctx.cfg.depth {
            DepthMode::Adaptive if self.direct_reads() => self.devices[d].depth.limit(),
            DepthMode::Adaptive => u32::MAX,
            // The chunk pool and io-wq's cap bound it.
            DepthMode::Fixed => u32::MAX,
        }
    }

    /// Whether the response may issue a disk read now. If not and `queue`,
    /// it waits in its device's queue, and `pump` runs again when a read
    /// of that device ends.
    pub(super) fn disk_slot(&mut self, slot: u32, queue: bool) -> bool {
        let d = self.conn(slot).dev;
        if self.devices[d].inflight < self.disk_limit(d) {
            return true;
        }
        if queue {
            let c = self.conn(slot);
            debug_assert!(!c.disk_waiting);
            c.disk_waiting = true;
            self.devices[d].waiters.push_back(slot);
        }
        false
    }

    /// Pushes a disk read of the response's file, counted against its
    /// device's depth until its completion.
    pub(super) fn push_disk_read(&mut self, slot: u32, op: Op, sub: Sub) {
        debug_assert!(matches!(op, Op::Read | Op::ReadAhead));
        let now = self.now;
        let c = self.conns.live_at(slot);
        let d = c.dev;
        c.disk_at = now;
        let direct =
            op == Op::ReadAhead || c.tx.as_ref().is_some_and(|t| t.direct == super::Direct::On);
        self.serve.ctx.metrics.disk_read(if direct {
            ReadMode::Direct
        } else {
            ReadMode::PageCache
        });
        self.devices[d].inflight += 1;
        self.push_conn(slot, op, sub);
    }

    /// A disk read ended (whatever the connection's state): the device
    /// has a slot free, the depth controller a sample, and the first
    /// responses in the device's queue go on.
    pub(super) fn disk_read_done(&mut self, slot: u32, res: i32) {
        let d = self.conn(slot).dev;
        let now = self.now;
        let bound = !self.pool.waiters.is_empty() || !self.devices[d].waiters.is_empty();
        let dv = &mut self.devices[d];
        assert!(dv.inflight > 0, "disk read completion with none in flight");
        dv.inflight -= 1;
        if self.serve.ctx.cfg.depth == DepthMode::Adaptive {
            dv.depth.complete(now, res.max(0) as u64, bound);
        }
        while self.devices[d].inflight < self.disk_limit(d) {
            let Some(s) = self.devices[d].waiters.pop_front() else {
                break;
            };
            let Some(c) = self.conns.at(s) else {
                continue;
            };
            if !std::mem::take(&mut c.disk_waiting) || c.life.phase != Phase::Sending {
                continue;
            }
            self.pump(s);
        }
    }
}
