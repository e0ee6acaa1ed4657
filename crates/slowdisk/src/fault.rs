//! Fault injection: a disk that misbehaves on purpose, for the server's fault tests.
//!
//! All faults are off by default. Each is chosen per file (a path relative to the mount
//! root, matched by the backing file's device and inode number, so hard links share
//! faults) except `--fail-rate`, which applies to every read:
//!
//! * `--fail-file PATH`: every read of the file gets EIO.
//! * `--fail-rate P` (with `--fault-seed N`): each read gets EIO with probability `P`,
//!   drawn from a seeded PRNG (SplitMix64), so a run with the same reads in the same
//!   order fails the same ones.
//! * `--hang-file PATH` (with `--hang-secs S`): the reply to each read of the file leaves
//!   no earlier than `S` seconds after the read arrived. Replies are held by a timer
//!   thread, so neither the FUSE session threads nor the spindles wait for it.
//! * `--short-file PATH`: each read of the file returns half the bytes it could (at
//!   least one), although the file goes on.
//! * `--shrink-file PATH` (with `--shrink-after BYTES`): the first read that asks for a
//!   byte at or past `BYTES` gets the data up to `BYTES` only, and from then on the file
//!   is `BYTES` long (getattr says so, reads at or past it get EOF).
//!
//! The page cache would hide most of these (a cached page is never read again, a read
//! that fails in readahead is retried by the kernel, a short readahead reply makes the
//! kernel shrink its idea of the file size), so the open replies of fault files carry
//! `FOPEN_DIRECT_IO` (and, with `--fail-rate` above zero, those of every file): each
//! `read()` of the reader then becomes FUSE reads of exactly its range (split at 1 MiB),
//! none is served from the cache, and the daemon's reply length is what `read()` returns.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::disk::Finish;

/// Most files each of `--fail-file`, `--hang-file`, `--short-file` and `--shrink-file`
/// may name.
pub const MAX_FAULT_FILES: usize = 64;
/// Longest `--hang-secs`.
pub const MAX_HANG_SECS: f64 = 600.0;
/// `--hang-secs` when not given.
pub const DEFAULT_HANG_SECS: f64 = 10.0;

/// The fault flags of `spindle-bench slowdisk` (all off by default).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct FaultArgs {
    /// Every read of this file (a path relative to the mount root) fails with EIO.
    /// Repeatable.
    #[arg(long = "fail-file", value_name = "PATH")]
    pub fail_files: Vec<PathBuf>,
    /// Each read of any file fails with EIO with this probability (0 to 1).
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    pub fail_rate: f64,
    /// Seed of the PRNG behind --fail-rate (same seed and read order: same failures).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub fault_seed: u64,
    /// Reads of this file are answered only after --hang-secs. Repeatable.
    #[arg(long = "hang-file", value_name = "PATH")]
    pub hang_files: Vec<PathBuf>,
    /// How long reads of a --hang-file are held, in seconds (at most 600).
    #[arg(long, default_value_t = DEFAULT_HANG_SECS, value_name = "S")]
    pub hang_secs: f64,
    /// Reads of this file return half the bytes asked for (at least one). Repeatable.
    #[arg(long = "short-file", value_name = "PATH")]
    pub short_files: Vec<PathBuf>,
    /// This file shrinks to --shrink-after bytes once a read reaches that offset.
    /// Repeatable.
    #[arg(long = "shrink-file", value_name = "PATH")]
    pub shrink_files: Vec<PathBuf>,
    /// Size a --shrink-file shrinks to (needed with --shrink-file).
    #[arg(long, value_name = "BYTES")]
    pub shrink_after: Option<u64>,
}

impl Default for FaultArgs {
    fn default() -> Self {
        FaultArgs {
            fail_files: Vec::new(),
            fail_rate: 0.0,
            fault_seed: 0,
            hang_files: Vec::new(),
            hang_secs: DEFAULT_HANG_SECS,
            short_files: Vec::new(),
            shrink_files: Vec::new(),
            shrink_after: None,
        }
    }
}

impl FaultArgs {
    fn lists(&self) -> [(&'static str, &Vec<PathBuf>); 4] {
        [
            ("fail-file", &self.fail_files),
            ("hang-file", &self.hang_files),
            ("short-file", &self.short_files),
            ("shrink-file", &self.shrink_files),
        ]
    }

    /// Whether any fault is asked for.
    pub fn any(&self) -> bool {
        self.fail_rate > 0.0 || self.lists().iter().any(|(_, l)| !l.is_empty())
    }

    /// Checks the flags; the error is one line that names the bad flag.
    pub fn validate(&self) -> Result<()> {
        if !(0.0..=1.0).contains(&self.fail_rate) {
            bail!(
                "--fail-rate must be between 0 and 1, got {}",
                self.fail_rate
            );
        }
        if !self.hang_secs.is_finite() || self.hang_secs <= 0.0 || self.hang_secs > MAX_HANG_SECS {
            bail!(
                "--hang-secs must be more than 0 and at most {MAX_HANG_SECS}, got {}",
                self.hang_secs
            );
        }
        for (flag, list) in self.lists() {
            if list.len() > MAX_FAULT_FILES {
                bail!(
                    "--{flag} may be given at most {MAX_FAULT_FILES} times, got {}",
                    list.len()
                );
            }
            for p in list {
                let plain = p.components().all(|c| matches!(c, Component::Normal(_)));
                if p.as_os_str().is_empty() || !plain {
                    bail!(
                        "--{flag} {}: must be a path relative to the mount root, without '..' or '.'",
                        p.display()
                    );
                }
            }
        }
        match (self.shrink_files.is_empty(), self.shrink_after) {
            (false, None) => bail!("--shrink-file needs --shrink-after BYTES"),
            (true, Some(_)) => bail!("--shrink-after has no effect without --shrink-file"),
            _ => {}
        }
        Ok(())
    }

    /// The flags that differ from the defaults, as command-line arguments (for starting
    /// a daemon; none when no fault is asked for).
    pub fn to_flags(&self) -> Vec<String> {
        let mut v = Vec::new();
        for (flag, list) in self.lists() {
            for p in list {
                v.push(format!("--{flag}={}", p.display()));
            }
        }
        if self.fail_rate != 0.0 {
            v.push(format!("--fail-rate={}", self.fail_rate));
        }
        if self.fault_seed != 0 {
            v.push(format!("--fault-seed={}", self.fault_seed));
        }
        if self.hang_secs != DEFAULT_HANG_SECS {
            v.push(format!("--hang-secs={}", self.hang_secs));
        }
        if let Some(b) = self.shrink_after {
            v.push(format!("--shrink-after={b}"));
        }
        v
    }
}

/// The faults of one backing file.
#[derive(Debug, Default)]
struct FileFaults {
    fail: bool,
    hang: bool,
    short: bool,
    /// Set for a --shrink-file; true once it has shrunk.
    shrunk: Option<AtomicBool>,
}

/// What to do with one read.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadPlan {
    /// Reply EIO at once (no disk time).
    Fail,
    /// Serve `len` bytes (0: reply EOF at once), holding the reply for `hold` if set.
    Serve { len: u64, hold: Option<Duration> },
}

/// The faults of a running mount, resolved to backing (device, inode) keys.
pub struct Faults {
    files: HashMap<(u64, u64), FileFaults>,
    fail_rate: f64,
    rng: Mutex<u64>,
    hang: Duration,
    shrink_after: u64,
    timer: Option<Timer>,
}

impl Faults {
    /// No faults at all.
    pub fn none() -> Faults {
        Faults {
            files: HashMap::new(),
            fail_rate: 0.0,
            rng: Mutex::new(0),
            hang: Duration::ZERO,
            shrink_after: 0,
            timer: None,
        }
    }

    /// Resolves the files named in `args` under `backing` (each must be a regular file
    /// there). Validates `args` first. Starts no thread (see [`Faults::start`]).
    pub fn resolve(args: &FaultArgs, backing: &Path) -> Result<Faults> {
        args.validate()?;
        let mut files: HashMap<(u64, u64), FileFaults> = HashMap::new();
        for (flag, list) in args.lists() {
            for rel in list {
                let md = match std::fs::symlink_metadata(backing.join(rel)) {
                    Ok(md) if md.is_file() => md,
                    Ok(_) => bail!(
                        "--{flag} {}: not a regular file in --backing {}",
                        rel.display(),
                        backing.display()
                    ),
                    Err(e) => bail!(
                        "--{flag} {}: {e} (in --backing {})",
                        rel.display(),
                        backing.display()
                    ),
                };
                let f = files.entry((md.dev(), md.ino())).or_default();
                match flag {
                    "fail-file" => f.fail = true,
                    "hang-file" => f.hang = true,
                    "short-file" => f.short = true,
                    _ => f.shrunk = Some(AtomicBool::new(false)),
                }
            }
        }
        Ok(Faults {
            files,
            fail_rate: args.fail_rate,
            rng: Mutex::new(args.fault_seed),
            hang: Duration::from_secs_f64(args.hang_secs),
            shrink_after: args.shrink_after.unwrap_or(0),
            timer: None,
        })
    }

    /// Starts the timer thread that holds the replies of hung reads, if any file hangs.
    /// Call it after blocking signals (the thread inherits the mask).
    pub fn start(&mut self) -> std::io::Result<()> {
        if self.timer.is_none() && self.files.values().any(|f| f.hang) {
            self.timer = Some(Timer::start()?);
        }
        Ok(())
    }

    /// Whether opens of the file with this key must bypass the page cache
    /// (`FOPEN_DIRECT_IO`): it has a fault, or any read may fail.
    pub fn direct_io(&self, key: (u64, u64)) -> bool {
        self.fail_rate > 0.0 || self.files.contains_key(&key)
    }

    /// Whether the attributes of this file may change (a --shrink-file): they must then
    /// be given to the kernel with a zero TTL, or it would not ask again for an hour.
    pub fn volatile_attr(&self, key: (u64, u64)) -> bool {
        self.files.get(&key).is_some_and(|f| f.shrunk.is_some())
    }

    /// The size the file with this key has now, given its real size.
    pub fn size(&self, key: (u64, u64), real: u64) -> u64 {
        match self.files.get(&key).and_then(|f| f.shrunk.as_ref()) {
            Some(s) if s.load(AtomicOrdering::Acquire) => real.min(self.shrink_after),
            _ => real,
        }
    }

    /// Decides the fate of a read of `len` bytes at `offset` (`len` already cut at the
    /// real end of the file) of the file with this key.
    pub fn plan(&self, key: (u64, u64), offset: u64, len: u64) -> ReadPlan {
        let f = self.files.get(&key);
        if f.is_some_and(|f| f.fail) || self.draw_failure() {
            return ReadPlan::Fail;
        }
        let Some(f) = f else {
            return ReadPlan::Serve { len, hold: None };
        };
        let mut len = len;
        if let Some(shrunk) = &f.shrunk {
            // The first read that asks for a byte at or past the threshold shrinks the
            // file; it gets the data before the threshold (maybe none).
            if offset + len > self.shrink_after {
                shrunk.store(true, AtomicOrdering::Release);
            }
            if shrunk.load(AtomicOrdering::Acquire) {
                len = len.min(self.shrink_after.saturating_sub(offset));
            }
        }
        if f.short && len > 1 {
            len /= 2;
        }
        let hold = (f.hang && len > 0).then_some(self.hang);
        ReadPlan::Serve { len, hold }
    }

    /// A handle to the timer thread (None before [`Faults::start`], or if no file hangs),
    /// to move into a spindle's closure.
    pub fn timer(&self) -> Option<TimerHandle> {
        self.timer.as_ref().map(|t| TimerHandle(t.shared.clone()))
    }

    fn draw_failure(&self) -> bool {
        if self.fail_rate <= 0.0 {
            return false;
        }
        let mut s = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        // SplitMix64.
        *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // 53 random bits as a number in [0, 1): always below a rate of 1.0.
        ((z >> 11) as f64 / (1u64 << 53) as f64) < self.fail_rate
    }
}

struct Held {
    due: Instant,
    seq: u64,
    finish: Finish,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    // Reversed: the max-heap then gives the earliest due first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

#[derive(Default)]
struct TimerState {
    heap: BinaryHeap<Held>,
    next_seq: u64,
    shutdown: bool,
}

#[derive(Default)]
struct TimerShared {
    state: Mutex<TimerState>,
    wake: Condvar,
}

impl TimerShared {
    fn at(&self, due: Instant, finish: Finish) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.shutdown {
            // Dropping the reply answers EIO; the mount is going away anyway.
            return;
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        st.heap.push(Held { due, seq, finish });
        drop(st);
        self.wake.notify_one();
    }
}

/// A handle to the timer thread, to hold a reply until it is due.
#[derive(Clone)]
pub struct TimerHandle(Arc<TimerShared>);

impl TimerHandle {
    /// Sends `finish` no earlier than `due`.
    pub fn at(&self, due: Instant, finish: Finish) {
        self.0.at(due, finish)
    }
}

/// The thread that sends held replies when they are due. The number of held replies is
/// bounded by the kernel, not here: each is an outstanding FUSE request (background
/// ones at most `max_background`, the others one per blocked reader thread).
struct Timer {
    shared: Arc<TimerShared>,
}

impl Timer {
    fn start() -> std::io::Result<Timer> {
        let shared = Arc::new(TimerShared::default());
        let s = shared.clone();
        std::thread::Builder::new()
            .name("slowdisk-hang".into())
            .spawn(move || Timer::run(&s))?;
        Ok(Timer { shared })
    }

    fn run(s: &TimerShared) {
        let mut st = s.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if st.shutdown {
                return;
            }
            let now = Instant::now();
            match st.heap.peek().map(|h| h.due) {
                Some(due) if due <= now => {
                    let held = st.heap.pop().expect("peeked");
                    drop(st);
                    (held.finish)();
                    st = s.state.lock().unwrap_or_else(|p| p.into_inner());
                }
                Some(due) => {
                    st = s
                        .wake
                        .wait_timeout(st, due - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                None => st = s.wake.wait(st).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        let held = {
            let mut st = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.shutdown = true;
            std::mem::take(&mut st.heap)
        };
        self.shared.wake.notify_all();
        // Dropped replies answer EIO.
        drop(held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> FaultArgs {
        FaultArgs::default()
    }

    #[test]
    fn defaults_are_no_faults_and_no_flags() {
        let a = args();
        assert!(!a.any());
        a.validate().unwrap();
        assert!(a.to_flags().is_empty());
        let f = Faults::none();
        assert!(!f.direct_io((1, 2)));
        assert_eq!(
            f.plan((1, 2), 0, 100),
            ReadPlan::Serve {
                len: 100,
                hold: None
            }
        );
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        let cases: Vec<(FaultArgs, &str)> = vec![
            (
                FaultArgs {
                    fail_rate: 1.5,
                    ..args()
                },
                "--fail-rate",
            ),
            (
                FaultArgs {
                    fail_rate: f64::NAN,
                    ..args()
                },
                "--fail-rate",
            ),
            (
                FaultArgs {
                    hang_secs: 0.0,
                    ..args()
                },
                "--hang-secs",
            ),
            (
                FaultArgs {
                    hang_secs: MAX_HANG_SECS + 1.0,
                    ..args()
                },
                "--hang-secs",
            ),
            (
                FaultArgs {
                    fail_files: vec!["../etc/passwd".into()],
                    ..args()
                },
                "--fail-file",
            ),
            (
                FaultArgs {
                    short_files: vec!["/abs".into()],
                    ..args()
                },
                "--short-file",
            ),
            (
                FaultArgs {
                    hang_files: vec!["x".into(); MAX_FAULT_FILES + 1],
                    ..args()
                },
                "--hang-file",
            ),
            (
                FaultArgs {
                    shrink_files: vec!["x".into()],
                    ..args()
                },
                "--shrink-file",
            ),
            (
                FaultArgs {
                    shrink_after: Some(3),
                    ..args()
                },
                "--shrink-after",
            ),
        ];
        for (a, flag) in cases {
            let e = a.validate().unwrap_err().to_string();
            assert!(e.contains(flag), "{a:?}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }

    #[test]
    fn flags_round_trip_through_clap() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            f: FaultArgs,
        }
        let a = FaultArgs {
            fail_files: vec!["a/b".into(), "c".into()],
            fail_rate: 0.25,
            fault_seed: 7,
            hang_files: vec!["h".into()],
            hang_secs: 2.5,
            short_files: vec!["s".into()],
            shrink_files: vec!["t".into()],
            shrink_after: Some(1000),
        };
        let flags = a.to_flags();
        let cli = Cli::try_parse_from(std::iter::once("x".to_string()).chain(flags)).unwrap();
        assert_eq!(cli.f, a);
    }

    #[test]
    fn the_rate_is_seeded_and_roughly_right() {
        let mk = |rate: f64, seed: u64| Faults {
            fail_rate: rate,
            rng: Mutex::new(seed),
            ..Faults::none()
        };
        let run = |f: &Faults| (0..10_000).map(|_| f.draw_failure()).collect::<Vec<_>>();
        let a = run(&mk(0.3, 42));
        assert_eq!(a, run(&mk(0.3, 42)));
        assert_ne!(a, run(&mk(0.3, 43)));
        let n = a.iter().filter(|&&x| x).count();
        assert!((2_700..3_300).contains(&n), "{n}");
        assert!(run(&mk(1.0, 1)).iter().all(|&x| x));
        assert!(!run(&mk(0.0, 1)).iter().any(|&x| x));
    }

    #[test]
    fn shrink_and_short_plans() {
        let mut f = Faults {
            shrink_after: 1000,
            ..Faults::none()
        };
        f.files.insert(
            (1, 1),
            FileFaults {
                shrunk: Some(AtomicBool::new(false)),
                ..FileFaults::default()
            },
        );
        f.files.insert(
            (1, 2),
            FileFaults {
                short: true,
                ..FileFaults::default()
            },
        );
        let serve = |len| ReadPlan::Serve { len, hold: None };
        assert_eq!(f.plan((1, 1), 0, 600), serve(600));
        assert_eq!(f.size((1, 1), 5000), 5000);
        assert_eq!(f.plan((1, 1), 600, 600), serve(400));
        assert_eq!(f.size((1, 1), 5000), 1000);
        assert_eq!(f.plan((1, 1), 1000, 600), serve(0));
        assert_eq!(f.plan((1, 1), 0, 600), serve(600));
        assert_eq!(f.plan((1, 2), 0, 600), serve(300));
        assert_eq!(f.plan((1, 2), 0, 1), serve(1));
    }

    #[test]
    fn the_timer_sends_in_due_order_and_not_before() {
        let t = Timer::start().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let t0 = Instant::now();
        for (i, ms) in [(0u32, 300u64), (1, 100), (2, 200)] {
            let tx = tx.clone();
            t.shared.at(
                t0 + Duration::from_millis(ms),
                Box::new(move || {
                    let _ = tx.send((i, t0.elapsed()));
                }),
            );
        }
        let got: Vec<(u32, Duration)> = (0..3)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            vec![1, 2, 0],
            "{got:?}"
        );
        assert!(got[0].1 >= Duration::from_millis(100), "{got:?}");
        assert!(got[2].1 >= Duration::from_millis(300), "{got:?}");
    }
}
