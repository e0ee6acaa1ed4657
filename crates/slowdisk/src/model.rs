//! The disk model: service time of one read on one spindle.
//!
//! A read at platter position `pos` (bytes) of `len` bytes, issued to a spindle whose
//! head rests at `head`, costs `positioning + len / rate`:
//!
//! * `pos == head`: a sequential read, no positioning at all;
//! * `pos` a little ahead of `head` (on the same track): the head waits for the gap to
//!   pass under it, `(pos - head) / rate`, if that is cheaper than a seek;
//! * otherwise a seek plus half a rotation. The seek grows with the square root of the
//!   distance, from `seek_min_ms` (track to track) to a full stroke chosen so that the
//!   mean over uniformly random pairs of positions is `seek_ms`.
//!
//! Like a real drive, a spindle keeps reading ahead into its cache while it waits for
//! the next command: a sequential read that arrives after the spindle sat idle finds
//! the idle time's worth of transfer (at most [`DRIVE_READAHEAD_BYTES`] in all) already
//! read. Without that, the short gaps between the kernel's readahead requests (the
//! reader copying data out) would cost a stream a fifth of its rate.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// Largest number of spindles accepted by `--spindles`.
pub const MAX_SPINDLES: usize = 64;
/// Largest `--queue-limit`.
pub const MAX_QUEUE_LIMIT: usize = 65_536;
/// Smallest platter the model uses, so that a tiny data set still has a geometry.
pub const MIN_PLATTER_BYTES: u64 = 1 << 20;
/// Most bytes a spindle holds read ahead in its cache (past its head) while idle.
pub const DRIVE_READAHEAD_BYTES: u64 = 1 << 20;
/// Mean of `sqrt(|U1 - U2|)` for two independent uniform variables on [0, 1]:
/// the density of the distance is `2 (1 - d)`, so the mean is 2 / (1.5 * 2.5) = 8/15.
pub const MEAN_SQRT_DISTANCE: f64 = 8.0 / 15.0;

/// Order in which a free spindle takes queued requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Elevator {
    /// Shortest positioning time first (from this spindle's head).
    Sstf,
    /// Circular scan: the nearest request at or beyond the head, else wrap to the lowest.
    Cscan,
    /// Arrival order: no reordering at all (a baseline).
    Fifo,
}

impl Elevator {
    /// The flag value of this elevator.
    pub fn as_str(self) -> &'static str {
        match self {
            Elevator::Sstf => "sstf",
            Elevator::Cscan => "cscan",
            Elevator::Fifo => "fifo",
        }
    }
}

/// The parameters of the emulated disk (flags of `spindle-bench slowdisk`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
pub struct ModelArgs {
    /// Spindles in the RAID1 mirror; any read may go to any spindle.
    #[arg(long, default_value_t = 2)]
    pub spindles: usize,
    /// Mean seek time of a random read, in milliseconds.
    #[arg(long, default_value_t = 8.5)]
    pub seek_ms: f64,
    /// Track-to-track seek time (the shortest non-zero seek), in milliseconds.
    #[arg(long, default_value_t = 0.8)]
    pub seek_min_ms: f64,
    /// Rotational speed; a random read waits half a turn on average.
    #[arg(long, default_value_t = 7200.0)]
    pub rpm: f64,
    /// Transfer rate of one spindle in MB/s (10^6 bytes per second).
    #[arg(long, default_value_t = 30.0)]
    pub mbps: f64,
    /// Order in which queued reads are served.
    #[arg(long, value_enum, default_value_t = Elevator::Sstf)]
    pub elevator: Elevator,
    /// A read queued longer than this is served next, whatever the elevator says
    /// (the starvation guard of a deadline scheduler), in milliseconds.
    #[arg(long, default_value_t = 500.0)]
    pub deadline_ms: f64,
    /// Most reads queued in the daemon; the FUSE session threads wait when it is full.
    #[arg(long, default_value_t = 1024)]
    pub queue_limit: usize,
    /// FUSE max_background: most asynchronous (readahead, async direct I/O) reads the
    /// kernel keeps outstanding to the daemon; the congestion threshold is 3/4 of it.
    #[arg(long, default_value_t = 64)]
    pub max_background: u16,
}

impl Default for ModelArgs {
    fn default() -> Self {
        ModelArgs {
            spindles: 2,
            seek_ms: 8.5,
            seek_min_ms: 0.8,
            rpm: 7200.0,
            mbps: 30.0,
            elevator: Elevator::Sstf,
            deadline_ms: 500.0,
            queue_limit: 1024,
            max_background: 64,
        }
    }
}

impl ModelArgs {
    /// Checks the flags; the error is one line that names the bad flag.
    pub fn validate(&self) -> Result<()> {
        fn finite_pos(name: &str, v: f64) -> Result<()> {
            if !v.is_finite() || v <= 0.0 {
                bail!("--{name} must be a positive number, got {v}");
            }
            Ok(())
        }
        if self.spindles == 0 || self.spindles > MAX_SPINDLES {
            bail!(
                "--spindles must be between 1 and {MAX_SPINDLES}, got {}",
                self.spindles
            );
        }
        finite_pos("seek-ms", self.seek_ms)?;
        if !self.seek_min_ms.is_finite() || self.seek_min_ms < 0.0 {
            bail!(
                "--seek-min-ms must be zero or more, got {}",
                self.seek_min_ms
            );
        }
        if self.seek_min_ms > self.seek_ms {
            bail!(
                "--seek-min-ms ({}) must not exceed --seek-ms ({})",
                self.seek_min_ms,
                self.seek_ms
            );
        }
        finite_pos("rpm", self.rpm)?;
        finite_pos("mbps", self.mbps)?;
        finite_pos("deadline-ms", self.deadline_ms)?;
        if self.queue_limit == 0 || self.queue_limit > MAX_QUEUE_LIMIT {
            bail!(
                "--queue-limit must be between 1 and {MAX_QUEUE_LIMIT}, got {}",
                self.queue_limit
            );
        }
        if self.max_background == 0 {
            bail!("--max-background must be at least 1");
        }
        Ok(())
    }

    /// The same parameters as command-line flags (for starting a daemon).
    pub fn to_flags(&self) -> Vec<String> {
        vec![
            format!("--spindles={}", self.spindles),
            format!("--seek-ms={}", self.seek_ms),
            format!("--seek-min-ms={}", self.seek_min_ms),
            format!("--rpm={}", self.rpm),
            format!("--mbps={}", self.mbps),
            format!("--elevator={}", self.elevator.as_str()),
            format!("--deadline-ms={}", self.deadline_ms),
            format!("--queue-limit={}", self.queue_limit),
            format!("--max-background={}", self.max_background),
        ]
    }

    /// Expected service time of a random read of `len` bytes (mean seek, half a turn,
    /// transfer), in seconds: the model's figure for one reader.
    pub fn random_read_s(&self, len: u64) -> f64 {
        self.seek_ms / 1e3 + 30.0 / self.rpm + len as f64 / (self.mbps * 1e6)
    }
}

/// The cost of one read, as decided by the model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Seek plus rotational wait, in seconds.
    pub positioning_s: f64,
    /// Transfer time, in seconds.
    pub transfer_s: f64,
    /// Part of the transfer already done by the drive's readahead (found in its cache).
    pub prefetched_s: f64,
    /// Whether the head had to seek (not a sequential or same-track read).
    pub seek: bool,
}

impl Cost {
    /// Time from the start of service to the end, in seconds.
    pub fn total_s(&self) -> f64 {
        self.positioning_s + self.transfer_s - self.prefetched_s
    }

    /// Time the spindle was busy with this read (including readahead while idle).
    pub fn busy_s(&self) -> f64 {
        self.positioning_s + self.transfer_s
    }
}

/// The geometry and timing of the emulated disk.
#[derive(Debug, Clone)]
pub struct Model {
    /// The flags it was built from.
    pub args: ModelArgs,
    platter: u64,
    rate: f64,
    half_rotation_s: f64,
    seek_min_s: f64,
    seek_span_s: f64,
}

impl Model {
    /// A model whose platter holds `platter_bytes` (the laid-out data set).
    pub fn new(args: ModelArgs, platter_bytes: u64) -> Model {
        let seek_min_s = args.seek_min_ms / 1e3;
        let seek_span_s = (args.seek_ms / 1e3 - seek_min_s) / MEAN_SQRT_DISTANCE;
        Model {
            platter: platter_bytes.max(MIN_PLATTER_BYTES),
            rate: args.mbps * 1e6,
            half_rotation_s: 30.0 / args.rpm,
            seek_min_s,
            seek_span_s,
            args,
        }
    }

    /// Size of the platter in bytes.
    pub fn platter_bytes(&self) -> u64 {
        self.platter
    }

    /// Seek time for a head movement of `dist` bytes.
    pub fn seek_s(&self, dist: u64) -> f64 {
        if dist == 0 {
            return 0.0;
        }
        let d = (dist as f64 / self.platter as f64).min(1.0);
        self.seek_min_s + self.seek_span_s * d.sqrt()
    }

    /// Positioning cost (seconds) and whether it is a seek, from `head` to `pos`.
    pub fn positioning(&self, head: u64, pos: u64) -> (f64, bool) {
        if pos == head {
            return (0.0, false);
        }
        let random = self.seek_s(pos.abs_diff(head)) + self.half_rotation_s;
        if pos > head {
            let wait = (pos - head) as f64 / self.rate;
            if wait < random {
                return (wait, false);
            }
        }
        (random, true)
    }

    /// Bytes past the head in the drive's cache after it sat idle for `idle_s` seconds
    /// with `ahead` bytes already there.
    pub fn cached_after_idle(&self, ahead: u64, idle_s: f64) -> u64 {
        let more = (idle_s.max(0.0) * self.rate).min(DRIVE_READAHEAD_BYTES as f64) as u64;
        ahead.saturating_add(more).min(DRIVE_READAHEAD_BYTES)
    }

    /// Full cost of reading `len` bytes at `pos` with the head at `head` and `cached`
    /// bytes starting at `pos` already in the drive's cache (0 unless `pos == head`).
    pub fn cost(&self, head: u64, pos: u64, len: u64, cached: u64) -> Cost {
        let (positioning_s, seek) = self.positioning(head, pos);
        let transfer_s = len as f64 / self.rate;
        let prefetched_s = if pos == head {
            cached.min(len) as f64 / self.rate
        } else {
            0.0
        };
        Cost {
            positioning_s,
            transfer_s,
            prefetched_s,
            seek,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(state: &mut u64) -> u64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *state >> 11
    }

    #[test]
    fn defaults_give_the_seed_numbers() {
        let a = ModelArgs::default();
        a.validate().unwrap();
        // 8.5 ms seek + 4.17 ms half turn + 3.41 ms transfer of 100 KiB.
        let t = a.random_read_s(100 * 1024);
        assert!((t - 0.01608).abs() < 0.0002, "{t}");
    }

    #[test]
    fn mean_random_seek_matches_flag() {
        let m = Model::new(ModelArgs::default(), 10 << 30);
        let mut s = 42u64;
        let n = 200_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let a = lcg(&mut s) % m.platter_bytes();
            let b = lcg(&mut s) % m.platter_bytes();
            sum += m.seek_s(a.abs_diff(b));
        }
        let mean_ms = sum / n as f64 * 1e3;
        assert!((mean_ms - 8.5).abs() < 0.1, "mean seek {mean_ms} ms");
    }

    #[test]
    fn sequential_and_near_reads_are_cheap() {
        let m = Model::new(ModelArgs::default(), 1 << 30);
        let c = m.cost(4096, 4096, 128 * 1024, 0);
        assert!(!c.seek);
        assert_eq!(c.positioning_s, 0.0);
        assert!((c.transfer_s - 131072.0 / 30e6).abs() < 1e-9);
        assert_eq!(c.total_s(), c.transfer_s);
        // After 1 ms idle, 30 kB of the transfer was read ahead by the drive.
        let cached = m.cached_after_idle(0, 0.001);
        assert_eq!(cached, 30_000);
        let c = m.cost(4096, 4096, 128 * 1024, cached);
        assert!((c.total_s() - (131072.0 / 30e6 - 0.001)).abs() < 1e-9);
        // Idle for long: the cache is full, the whole read is in it.
        let cached = m.cached_after_idle(0, 10.0);
        assert_eq!(cached, DRIVE_READAHEAD_BYTES);
        let c = m.cost(4096, 4096, 128 * 1024, cached);
        assert!(c.total_s().abs() < 1e-9 && c.busy_s() > 0.004);
        // No readahead credit for a read elsewhere.
        let c = m.cost(0, 1 << 20, 4096, cached);
        assert_eq!(c.prefetched_s, 0.0);
        // A 4 KiB gap ahead on the same track: wait for it to pass, no seek.
        let c = m.cost(0, 4096, 4096, 0);
        assert!(!c.seek);
        assert!(c.positioning_s < 0.0002);
        // Backwards by one block: a seek plus half a turn.
        let c = m.cost(8192, 4096, 4096, 0);
        assert!(c.seek);
        assert!(c.positioning_s > 0.0008 + 0.0041);
        // A full stroke is the longest seek.
        let full = m.seek_s(1 << 30);
        assert!(full > 0.014 && full < 0.016, "{full}");
    }

    #[test]
    fn bad_flags_are_rejected() {
        let mut a = ModelArgs {
            spindles: 0,
            ..ModelArgs::default()
        };
        assert!(a.validate().unwrap_err().to_string().contains("--spindles"));
        a.spindles = 2;
        a.mbps = f64::NAN;
        assert!(a.validate().unwrap_err().to_string().contains("--mbps"));
        a.mbps = 30.0;
        a.seek_min_ms = 9.0;
        assert!(a.validate().is_err());
    }
}
