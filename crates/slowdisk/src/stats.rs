//! Statistics of the emulated disk: what iostat would have said of the real one.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::model::ModelArgs;

/// Counters of one spindle.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpindleStats {
    /// Reads served.
    pub reads: u64,
    /// Reads that needed a seek (not sequential, not on the same track just ahead).
    pub seeks: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Model time spent serving reads (positioning + transfer), in seconds.
    pub busy_s: f64,
    /// Part of `busy_s` spent seeking and waiting for the platter to turn.
    pub positioning_s: f64,
    /// `busy_s` as a percentage of `elapsed_s` of the enclosing [`Stats`].
    pub busy_pct: f64,
    /// How late replies went out, summed over reads, in seconds: the daemon's lag behind
    /// the model (scheduling delays of a loaded machine). Should stay near zero.
    #[serde(default)]
    pub late_s: f64,
}

/// A snapshot of the disk's statistics, as written to `--stats FILE`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Snapshot number: 0 for the first file written at mount time, +1 per snapshot.
    pub seq: u64,
    /// True for the last snapshot, written when the daemon exits.
    #[serde(rename = "final")]
    pub final_: bool,
    /// Seconds since the disk started.
    pub elapsed_s: f64,
    /// The model's parameters.
    pub model: ModelArgs,
    /// Size of the imaginary platter (the laid-out data set), in bytes.
    pub platter_bytes: u64,
    /// Reads served by all spindles.
    pub requests: u64,
    /// Bytes served by all spindles.
    pub bytes: u64,
    /// Reads waiting in the queue at the time of the snapshot.
    pub queued: usize,
    /// Deepest the queue has been.
    pub max_queue: usize,
    /// Total time reads spent queued before a spindle started them, in seconds.
    pub wait_s: f64,
    /// Per-spindle counters.
    pub spindles: Vec<SpindleStats>,
}

impl Stats {
    /// Reads a stats file written by the daemon.
    pub fn read(path: &Path) -> Result<Stats> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading stats file {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("parsing stats file {}", path.display()))
    }

    /// Writes the snapshot atomically (temporary file, then rename).
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(&tmp, text + "\n")
            .with_context(|| format!("writing stats file {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("renaming stats file to {}", path.display()))?;
        Ok(())
    }

    /// The activity between `earlier` and `self` (two snapshots of the same daemon),
    /// with busy percentages over that interval. Queue depths are those of `self`.
    pub fn since(&self, earlier: &Stats) -> Stats {
        let elapsed_s = (self.elapsed_s - earlier.elapsed_s).max(0.0);
        let spindles = self
            .spindles
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let e = earlier.spindles.get(i).cloned().unwrap_or_default();
                let busy_s = (s.busy_s - e.busy_s).max(0.0);
                SpindleStats {
                    reads: s.reads.saturating_sub(e.reads),
                    seeks: s.seeks.saturating_sub(e.seeks),
                    bytes: s.bytes.saturating_sub(e.bytes),
                    busy_s,
                    positioning_s: (s.positioning_s - e.positioning_s).max(0.0),
                    late_s: (s.late_s - e.late_s).max(0.0),
                    busy_pct: if elapsed_s > 0.0 {
                        (100.0 * busy_s / elapsed_s).min(100.0)
                    } else {
                        0.0
                    },
                }
            })
            .collect();
        Stats {
            elapsed_s,
            requests: self.requests.saturating_sub(earlier.requests),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            wait_s: (self.wait_s - earlier.wait_s).max(0.0),
            spindles,
            ..self.clone()
        }
    }

    /// Reads per second over `elapsed_s`, all spindles together.
    pub fn reads_per_s(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            self.requests as f64 / self.elapsed_s
        } else {
            0.0
        }
    }

    /// A human-readable table, in the spirit of `iostat`.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let secs = self.elapsed_s.max(1e-9);
        let _ = writeln!(
            out,
            "slowdisk: {:.1} s, {} reads ({:.1}/s), {:.1} MB ({:.2} MB/s), mean queue wait {:.1} ms, max queue {}",
            self.elapsed_s,
            self.requests,
            self.requests as f64 / secs,
            self.bytes as f64 / 1e6,
            self.bytes as f64 / 1e6 / secs,
            if self.requests > 0 { 1e3 * self.wait_s / self.requests as f64 } else { 0.0 },
            self.max_queue,
        );
        let _ = writeln!(
            out,
            "{:>8} {:>10} {:>10} {:>9} {:>10} {:>8} {:>11} {:>9}",
            "spindle", "reads", "seeks", "reads/s", "MB/s", "busy%", "ms/read", "late ms"
        );
        for (i, s) in self.spindles.iter().enumerate() {
            let _ = writeln!(
                out,
                "{:>8} {:>10} {:>10} {:>9.1} {:>10.2} {:>8.1} {:>11.2} {:>9.3}",
                i,
                s.reads,
                s.seeks,
                s.reads as f64 / secs,
                s.bytes as f64 / 1e6 / secs,
                s.busy_pct,
                if s.reads > 0 {
                    1e3 * s.busy_s / s.reads as f64
                } else {
                    0.0
                },
                if s.reads > 0 {
                    1e3 * s.late_s / s.reads as f64
                } else {
                    0.0
                },
            );
        }
        out
    }
}
