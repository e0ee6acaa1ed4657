//! The emulated RAID1: a bounded queue of reads and one thread per spindle.
//!
//! A read that starts exactly where the last read given to a spindle ends is assigned to
//! that spindle when it is queued (as md's raid1 read balancing keeps a sequential
//! stream on one disk); other reads are free. A free spindle takes, among the reads
//! assigned to it and the free ones, the one its elevator prefers (relative to its own
//! head). It then does the real read from the backing file, sleeps until the model says
//! the read is done, and replies. Spindles keep virtual time: a read queued while the
//! spindle was busy starts exactly when the previous one ended, so wake-up latency does
//! not accumulate.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::model::{Elevator, Model};
use crate::stats::{SpindleStats, Stats};

/// How far (in wall time) a spindle may fall behind its virtual clock before it stops
/// trying to catch up (e.g. after the machine stalled).
pub const MAX_CATCH_UP: Duration = Duration::from_millis(50);

/// The second half of a read: sends the reply. Runs after the model's delay.
pub type Finish = Box<dyn FnOnce() + Send>;
/// The first half of a read: does the real I/O and returns the reply to send later.
pub type Start = Box<dyn FnOnce() -> Finish + Send>;

struct Pending {
    seq: u64,
    arrival: Instant,
    pos: u64,
    len: u64,
    assigned: Option<usize>,
    start: Start,
}

struct SpindleState {
    /// Where the head will be when the read in service (if any) ends.
    head: u64,
    /// Virtual time at which the spindle becomes free.
    free_at: Instant,
    /// End position of the last read assigned to or taken by this spindle.
    tail: u64,
    /// Bytes just past `head` that the drive has read ahead into its cache.
    ahead: u64,
    stats: SpindleStats,
}

struct State {
    queue: Vec<Pending>,
    spindles: Vec<SpindleState>,
    next_seq: u64,
    shutdown: bool,
    requests: u64,
    bytes: u64,
    wait_s: f64,
    max_queue: usize,
}

struct Inner {
    model: Model,
    deadline: Duration,
    created: Instant,
    state: Mutex<State>,
    work: Condvar,
    space: Condvar,
}

/// The emulated disk. Cloning gives another handle to the same disk.
#[derive(Clone)]
pub struct Disk {
    inner: Arc<Inner>,
}

/// Owns the spindle threads; dropping it (or calling `shutdown`) stops them.
pub struct DiskThreads {
    disk: Disk,
    threads: Vec<JoinHandle<()>>,
}

impl Disk {
    /// Starts the spindle threads of a disk with this model.
    pub fn start(model: Model) -> std::io::Result<(Disk, DiskThreads)> {
        let n = model.args.spindles;
        let now = Instant::now();
        let inner = Arc::new(Inner {
            deadline: Duration::from_secs_f64(model.args.deadline_ms / 1e3),
            created: now,
            state: Mutex::new(State {
                queue: Vec::with_capacity(model.args.queue_limit),
                spindles: (0..n)
                    .map(|_| SpindleState {
                        head: 0,
                        free_at: now,
                        tail: 0,
                        ahead: 0,
                        stats: SpindleStats::default(),
                    })
                    .collect(),
                next_seq: 0,
                shutdown: false,
                requests: 0,
                bytes: 0,
                wait_s: 0.0,
                max_queue: 0,
            }),
            work: Condvar::new(),
            space: Condvar::new(),
            model,
        });
        let disk = Disk { inner };
        let mut threads = Vec::with_capacity(n);
        for s in 0..n {
            let d = disk.clone();
            let t = std::thread::Builder::new()
                .name(format!("spindle-{s}"))
                .spawn(move || d.spindle_loop(s));
            match t {
                Ok(t) => threads.push(t),
                Err(e) => {
                    let _ = DiskThreads {
                        disk: disk.clone(),
                        threads,
                    };
                    return Err(e);
                }
            }
        }
        Ok((
            disk.clone(),
            DiskThreads {
                disk: disk.clone(),
                threads,
            },
        ))
    }

    /// The model this disk runs.
    pub fn model(&self) -> &Model {
        &self.inner.model
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in a spindle thread must not wedge the file system: keep going.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a read of `len` bytes at platter position `pos`. Waits while the queue is
    /// full. If the disk is shut down, `start` is dropped (its reply reports EIO).
    pub fn submit(&self, pos: u64, len: u64, start: Start) {
        let limit = self.inner.model.args.queue_limit;
        let mut st = self.lock();
        while st.queue.len() >= limit && !st.shutdown {
            st = self.inner.space.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.shutdown {
            return;
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        let assigned = st.spindles.iter().position(|sp| sp.tail == pos);
        if let Some(s) = assigned {
            st.spindles[s].tail = pos + len;
        }
        st.queue.push(Pending {
            seq,
            arrival: Instant::now(),
            pos,
            len,
            assigned,
            start,
        });
        st.max_queue = st.max_queue.max(st.queue.len());
        drop(st);
        self.inner.work.notify_all();
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> Stats {
        let st = self.lock();
        let elapsed_s = self.inner.created.elapsed().as_secs_f64();
        let spindles = st
            .spindles
            .iter()
            .map(|s| {
                let mut x = s.stats.clone();
                x.busy_pct = if elapsed_s > 0.0 {
                    (100.0 * x.busy_s / elapsed_s).min(100.0)
                } else {
                    0.0
                };
                x
            })
            .collect();
        Stats {
            seq: 0,
            final_: false,
            elapsed_s,
            model: self.inner.model.args.clone(),
            platter_bytes: self.inner.model.platter_bytes(),
            requests: st.requests,
            bytes: st.bytes,
            queued: st.queue.len(),
            max_queue: st.max_queue,
            wait_s: st.wait_s,
            spindles,
        }
    }

    /// Picks the index of the queued read spindle `s` should serve next, if any.
    fn pick(&self, st: &State, s: usize, now: Instant) -> Option<usize> {
        if st.queue.is_empty() {
            return None;
        }
        // Starvation guard: the oldest read, if it is past its deadline.
        let (oldest, o) = st
            .queue
            .iter()
            .enumerate()
            .min_by_key(|(_, p)| p.seq)
            .expect("queue is not empty");
        if now.saturating_duration_since(o.arrival) >= self.inner.deadline {
            return Some(oldest);
        }
        let head = st.spindles[s].head;
        let candidates = st
            .queue
            .iter()
            .enumerate()
            .filter(|(_, p)| p.assigned.is_none() || p.assigned == Some(s));
        let model = &self.inner.model;
        match model.args.elevator {
            Elevator::Fifo => candidates.min_by_key(|(_, p)| p.seq).map(|(i, _)| i),
            Elevator::Sstf => candidates
                .min_by(|(_, a), (_, b)| {
                    let ca = model.positioning(head, a.pos).0;
                    let cb = model.positioning(head, b.pos).0;
                    ca.total_cmp(&cb).then(a.seq.cmp(&b.seq))
                })
                .map(|(i, _)| i),
            Elevator::Cscan => {
                // Nearest at or beyond the head; else wrap around to the lowest position.
                let key = |p: &Pending| (p.pos < head, p.pos, p.seq);
                candidates.min_by_key(|(_, p)| key(p)).map(|(i, _)| i)
            }
        }
    }

    fn spindle_loop(&self, s: usize) {
        loop {
            let mut st = self.lock();
            let (req, deadline) = loop {
                if st.shutdown {
                    return;
                }
                let now = Instant::now();
                if let Some(i) = self.pick(&st, s, now) {
                    let req = st.queue.swap_remove(i);
                    let sp = &st.spindles[s];
                    let idle_s = req
                        .arrival
                        .saturating_duration_since(sp.free_at)
                        .as_secs_f64();
                    let model = &self.inner.model;
                    // Only a drive that has read something reads ahead after it.
                    let cached = if req.pos == sp.head && sp.stats.reads > 0 {
                        model.cached_after_idle(sp.ahead, idle_s)
                    } else {
                        0
                    };
                    let cost = model.cost(sp.head, req.pos, req.len, cached);
                    let mut begin = sp.free_at.max(req.arrival);
                    if begin + MAX_CATCH_UP < now {
                        begin = now;
                    }
                    let service = Duration::from_secs_f64(cost.total_s());
                    let deadline = begin + service;
                    let wait = begin.saturating_duration_since(req.arrival).as_secs_f64();
                    st.requests += 1;
                    st.bytes += req.len;
                    st.wait_s += wait;
                    let sp = &mut st.spindles[s];
                    sp.head = req.pos + req.len;
                    sp.ahead = cached.saturating_sub(req.len);
                    // A free read becomes the tail of this spindle unless reads assigned
                    // to it are still queued (their stream keeps the tail).
                    if req.assigned != Some(s) && !st.queue.iter().any(|p| p.assigned == Some(s)) {
                        st.spindles[s].tail = req.pos + req.len;
                    }
                    let sp = &mut st.spindles[s];
                    sp.free_at = deadline;
                    sp.stats.reads += 1;
                    sp.stats.bytes += req.len;
                    sp.stats.busy_s += cost.busy_s();
                    sp.stats.positioning_s += cost.positioning_s;
                    if cost.seek {
                        sp.stats.seeks += 1;
                    }
                    break (req, deadline);
                }
                st = self.inner.work.wait(st).unwrap_or_else(|p| p.into_inner());
            };
            drop(st);
            self.inner.space.notify_one();
            let finish = (req.start)();
            let now = Instant::now();
            if deadline > now {
                std::thread::sleep(deadline - now);
            }
            finish();
            let late = Instant::now().saturating_duration_since(deadline);
            self.lock().spindles[s].stats.late_s += late.as_secs_f64();
        }
    }
}

impl DiskThreads {
    /// Stops the spindles after their current reads; queued reads are dropped (EIO).
    pub fn shutdown(&mut self) {
        let dropped: Vec<Pending> = {
            let mut st = self.disk.lock();
            st.shutdown = true;
            std::mem::take(&mut st.queue)
        };
        self.disk.inner.work.notify_all();
        self.disk.inner.space.notify_all();
        drop(dropped);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for DiskThreads {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelArgs;
    use std::sync::mpsc;

    /// Submits reads at `positions`, keeping at most `window` in flight, in order.
    fn run_window(
        args: ModelArgs,
        positions: &[u64],
        len: u64,
        window: usize,
    ) -> (Duration, Stats) {
        let model = Model::new(args, 1 << 30);
        let (disk, mut threads) = Disk::start(model).unwrap();
        let (tx, rx) = mpsc::channel();
        let t0 = Instant::now();
        let submit = |p: u64| {
            let tx = tx.clone();
            disk.submit(
                p,
                len,
                Box::new(move || {
                    Box::new(move || {
                        let _ = tx.send(());
                    }) as Finish
                }),
            );
        };
        let mut next = 0;
        while next < positions.len().min(window) {
            submit(positions[next]);
            next += 1;
        }
        for _ in positions {
            rx.recv_timeout(Duration::from_secs(20)).unwrap();
            if next < positions.len() {
                submit(positions[next]);
                next += 1;
            }
        }
        let took = t0.elapsed();
        let stats = disk.stats();
        threads.shutdown();
        (took, stats)
    }

    fn run_batch(args: ModelArgs, positions: &[u64], len: u64) -> (Duration, Stats) {
        run_window(args, positions, len, positions.len())
    }

    fn spread(n: u64) -> Vec<u64> {
        // Positions scattered over the platter in a fixed pseudo-random order.
        (0..n)
            .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 46) << 12)
            .collect()
    }

    #[test]
    fn elevator_beats_fifo_on_a_deep_queue() {
        let pos = spread(40);
        let one = ModelArgs {
            spindles: 1,
            ..ModelArgs::default()
        };
        let (fifo, fs) = run_batch(
            ModelArgs {
                elevator: Elevator::Fifo,
                ..one.clone()
            },
            &pos,
            4096,
        );
        let (sstf, ss) = run_batch(one.clone(), &pos, 4096);
        let (cscan, _) = run_batch(
            ModelArgs {
                elevator: Elevator::Cscan,
                ..one
            },
            &pos,
            4096,
        );
        assert_eq!(fs.requests, 40);
        assert_eq!(ss.spindles[0].reads, 40);
        // FIFO pays ~12.8 ms per read; sorting the queue saves a good part of the seek.
        assert!(fifo > Duration::from_millis(400), "fifo {fifo:?}");
        assert!(
            sstf.as_secs_f64() < 0.85 * fifo.as_secs_f64(),
            "sstf {sstf:?} fifo {fifo:?}"
        );
        assert!(
            cscan.as_secs_f64() < 0.85 * fifo.as_secs_f64(),
            "cscan {cscan:?} fifo {fifo:?}"
        );
    }

    #[test]
    fn two_spindles_share_the_work() {
        let pos = spread(30);
        let (two, st) = run_batch(ModelArgs::default(), &pos, 4096);
        let (one, _) = run_batch(
            ModelArgs {
                spindles: 1,
                ..ModelArgs::default()
            },
            &pos,
            4096,
        );
        assert!(
            st.spindles[0].reads > 5 && st.spindles[1].reads > 5,
            "{st:?}"
        );
        assert!(
            two.as_secs_f64() < 0.75 * one.as_secs_f64(),
            "two {two:?} one {one:?}"
        );
    }

    #[test]
    fn a_sequential_stream_stays_on_one_spindle_at_full_rate() {
        // 64 reads of 128 KiB, two in flight as kernel readahead keeps them:
        // 8 MiB at 30 MB/s is about 0.28 s.
        let pos: Vec<u64> = (0..64).map(|i| i * 131072).collect();
        let (took, st) = run_window(ModelArgs::default(), &pos, 131072, 2);
        let busy: Vec<u64> = st.spindles.iter().map(|s| s.reads).collect();
        assert!(busy.contains(&64), "{busy:?}");
        let seeks: u64 = st.spindles.iter().map(|s| s.seeks).sum();
        assert_eq!(seeks, 0);
        assert!(
            took.as_secs_f64() > 0.25 && took.as_secs_f64() < 0.6,
            "{took:?}"
        );
    }
}
