//! How much memory the page cache can have, and whether it is full.
//!
//! The io-uring backend reads a file's first use with `O_DIRECT` only once
//! caching it would mean evicting something else (see `recent.rs`). While
//! memory has room, a page-cache read costs little more than a direct one
//! and later requests may hit it, so it is cached. "Room" is measured
//! where the kernel will reclaim: the process's memory cgroup with the
//! lowest limit (itself or an ancestor, cgroup v1 or v2), or, without a
//! limit below the machine's RAM, the machine's free memory (once the page
//! cache has filled RAM, `MemFree` stays near the kernel's watermarks).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Below this much free memory (of the budget) the page cache counts as
/// full: a sixteenth of the budget, at least [`MIN_HEADROOM`].
pub const HEADROOM_DIVISOR: u64 = 16;
pub const MIN_HEADROOM: u64 = 32 << 20;

/// Where the memory that limits the server is counted.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// A cgroup's usage file (`memory.current` or `memory.usage_in_bytes`).
    Cgroup(PathBuf),
    /// `MemTotal - MemFree` of `/proc/meminfo`.
    Machine,
}

/// The server's memory budget and whether it has room, refreshed by
/// [`MemoryWatch::refresh`] (a file read; a worker calls it on its tick).
#[derive(Debug)]
pub struct MemoryWatch {
    budget: u64,
    headroom: u64,
    source: Source,
    room: AtomicBool,
    used: AtomicU64,
}

impl MemoryWatch {
    /// Finds the limiting cgroup (or the machine) from `/proc`.
    pub fn probe() -> MemoryWatch {
        let total = meminfo("MemTotal:").unwrap_or(u64::MAX);
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let (limit, usage) = limiting_cgroup(&cgroups, |p| std::fs::read_to_string(p).ok())
            .unwrap_or((u64::MAX, PathBuf::new()));
        let (budget, source) = if limit < total {
            (limit, Source::Cgroup(usage))
        } else {
            (total, Source::Machine)
        };
        let w = MemoryWatch::new(budget, source);
        w.refresh();
        w
    }

    fn new(budget: u64, source: Source) -> MemoryWatch {
        MemoryWatch {
            budget,
            headroom: (budget / HEADROOM_DIVISOR).max(MIN_HEADROOM),
            source,
            room: AtomicBool::new(true),
            used: AtomicU64::new(0),
        }
    }

    /// The memory the page cache can hope for, in bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Whether the budget had room at the last refresh (more than the
    /// headroom free).
    pub fn has_room(&self) -> bool {
        self.room.load(Ordering::Relaxed)
    }

    /// Reads the memory in use again. If it cannot be read, the last
    /// answer stands.
    pub fn refresh(&self) {
        let used = match &self.source {
            Source::Cgroup(p) => std::fs::read_to_string(p)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok()),
            Source::Machine => match (meminfo("MemTotal:"), meminfo("MemFree:")) {
                (Some(t), Some(f)) => Some(t.saturating_sub(f)),
                _ => None,
            },
        };
        if let Some(used) = used {
            self.used.store(used, Ordering::Relaxed);
            self.room.store(
                used.saturating_add(self.headroom) < self.budget,
                Ordering::Relaxed,
            );
        }
    }

    /// A one-line description for the startup log.
    pub fn describe(&self) -> String {
        let src = match &self.source {
            Source::Cgroup(p) => format!("memory cgroup ({})", p.display()),
            Source::Machine => "the machine's memory".into(),
        };
        format!("{} MiB, from {src}", self.budget >> 20)
    }
}

/// A value of `/proc/meminfo`, in bytes.
fn meminfo(key: &str) -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    m.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// The lowest memory limit over the process's cgroups and their ancestors,
/// with the usage file of the cgroup that sets it; from the text of
/// `/proc/self/cgroup`, reading control files through `read`.
fn limiting_cgroup(cgroups: &str, read: impl Fn(&str) -> Option<String>) -> Option<(u64, PathBuf)> {
    let mut best: Option<(u64, PathBuf)> = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (base, limit_file, usage_file) = if controllers.is_empty() {
            ("/sys/fs/cgroup", "memory.max", "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                "/sys/fs/cgroup/memory",
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        } else {
            continue;
        };
        let mut p = path.trim_end_matches('/');
        loop {
            let dir = format!("{base}{p}");
            if let Some(limit) =
                read(&format!("{dir}/{limit_file}")).and_then(|v| v.trim().parse::<u64>().ok())
            {
                if best.as_ref().is_none_or(|(b, _)| limit < *b) {
                    best = Some((limit, PathBuf::from(format!("{dir}/{usage_file}"))));
                }
            }
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => break,
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(p: &str) -> Option<String> {
        match p {
            "/sys/fs/cgroup/memory/bench/memory.limit_in_bytes" => Some("1073741824\n".into()),
            "/sys/fs/cgroup/memory/memory.limit_in_bytes" => Some("9223372036854771712\n".into()),
            "/sys/fs/cgroup/a/b/memory.max" => Some("max\n".into()),
            "/sys/fs/cgroup/a/memory.max" => Some("2147483648\n".into()),
            _ => None,
        }
    }

    #[test]
    fn finds_the_limiting_cgroup_v1_and_v2() {
        assert_eq!(
            limiting_cgroup("4:memory:/bench\n0::/\n", files),
            Some((
                1 << 30,
                PathBuf::from("/sys/fs/cgroup/memory/bench/memory.usage_in_bytes")
            ))
        );
        // v2: an ancestor's limit applies.
        assert_eq!(
            limiting_cgroup("0::/a/b\n", files),
            Some((2 << 30, PathBuf::from("/sys/fs/cgroup/a/memory.current")))
        );
        assert_eq!(limiting_cgroup("0::/\n1:cpu:/x\n", files), None);
    }

    #[test]
    fn room_follows_usage() {
        let usage = std::env::temp_dir().join(format!("spindle-memory-{}", std::process::id()));
        let w = MemoryWatch::new(1 << 30, Source::Cgroup(usage.clone()));
        std::fs::write(&usage, format!("{}\n", 100u64 << 20)).unwrap();
        w.refresh();
        assert!(w.has_room());
        // Within the headroom (64 MiB of 1 GiB) of the limit: full.
        std::fs::write(&usage, format!("{}\n", 1000u64 << 20)).unwrap();
        w.refresh();
        assert!(!w.has_room());
        // Unreadable: the last answer stands.
        std::fs::remove_file(&usage).unwrap();
        w.refresh();
        assert!(!w.has_room());
    }

    #[test]
    fn probes_this_machine() {
        let w = MemoryWatch::probe();
        assert!(w.budget() > 0);
        assert!(!w.describe().is_empty());
    }
}
