//! Small pieces of the kernel interface: signals to process groups, /proc readers,
//! the page-cache drop and memory cgroups.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Sends `sig` to every process of the process group `pgid`.
pub fn kill_group(pgid: u32, sig: i32) -> bool {
    let Ok(pgid) = i32::try_from(pgid) else {
        return false;
    };
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) takes no pointers; a negative pid addresses the process group we
    // created for the server (process_group(0) at spawn), never our own group.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// Whether we run as root (needed for cgroups, dropping caches and FUSE mounts).
pub fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Clock ticks per second for /proc/PID/stat times.
pub fn clk_tck() -> f64 {
    // SAFETY: sysconf takes no pointers.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Number of CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Pids of every process in process group `pgid`.
pub fn group_pids(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(f) = stat_fields(pid) {
            // After the command name: state(0) ppid(1) pgrp(2).
            if f.get(2).and_then(|s| s.parse::<u32>().ok()) == Some(pgid) {
                out.push(pid);
            }
        }
    }
    out
}

fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// CPU seconds (user + system, all threads, io-wq workers included) of the processes
/// in process group `pgid`.
pub fn group_cpu_seconds(pgid: u32) -> f64 {
    let tck = clk_tck();
    group_pids(pgid)
        .into_iter()
        .filter_map(stat_fields)
        .map(|f| {
            let u: f64 = f.get(11).and_then(|s| s.parse().ok()).unwrap_or(0.0);
            let s: f64 = f.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
            (u + s) / tck
        })
        .sum()
}

/// Resident set size (KiB) of the processes in process group `pgid`, summed.
pub fn group_rss_kib(pgid: u32) -> u64 {
    group_pids(pgid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum()
}

/// Aggregate CPU jiffies from /proc/stat: user nice system idle iowait irq softirq steal.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTimes {
    pub user: f64,
    pub nice: f64,
    pub system: f64,
    pub idle: f64,
    pub iowait: f64,
    pub irq: f64,
    pub softirq: f64,
    pub steal: f64,
}

impl CpuTimes {
    pub fn read() -> CpuTimes {
        let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let line = s.lines().find(|l| l.starts_with("cpu ")).unwrap_or("cpu");
        let v: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap_or(0.0))
            .collect();
        let g = |i: usize| v.get(i).copied().unwrap_or(0.0);
        CpuTimes {
            user: g(0),
            nice: g(1),
            system: g(2),
            idle: g(3),
            iowait: g(4),
            irq: g(5),
            softirq: g(6),
            steal: g(7),
        }
    }

    /// iostat's avg-cpu percentages over the interval since `earlier`:
    /// (%user, %system, %iowait, %idle); %system includes irq and softirq, as iostat.
    pub fn percent_since(&self, e: &CpuTimes) -> [f64; 4] {
        let user = (self.user - e.user) + (self.nice - e.nice);
        let system = (self.system - e.system) + (self.irq - e.irq) + (self.softirq - e.softirq);
        let iowait = self.iowait - e.iowait;
        let idle = self.idle - e.idle;
        let steal = self.steal - e.steal;
        let total = user + system + iowait + idle + steal;
        if total <= 0.0 {
            return [0.0; 4];
        }
        [user, system, iowait, idle].map(|x| 100.0 * x / total)
    }
}

/// /proc/diskstats counters of one device.
#[derive(Debug, Clone, Copy, Default)]
pub struct DiskCounters {
    pub reads: f64,
    pub sectors_read: f64,
    pub writes: f64,
}

/// The block device (whole disk, not partition) that holds `path`, if any.
pub fn block_device_of(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let link = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    let dir = if link.join("partition").exists() {
        link.parent()?.to_path_buf()
    } else {
        link
    };
    dir.file_name()?.to_str().map(str::to_string)
}

pub fn disk_counters(name: &str) -> Option<DiskCounters> {
    let s = std::fs::read_to_string("/proc/diskstats").ok()?;
    for l in s.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() > 7 && f[2] == name {
            let n = |i: usize| f[i].parse::<f64>().unwrap_or(0.0);
            return Some(DiskCounters {
                reads: n(3),
                sectors_read: n(5),
                writes: n(7),
            });
        }
    }
    None
}

/// `sync; echo 3 > /proc/sys/vm/drop_caches`.
/// Reads a file once through the page cache (to make it hot).
pub fn read_whole(path: &Path) -> Result<u64> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    std::io::copy(&mut f, &mut std::io::sink())
        .with_context(|| format!("reading {}", path.display()))
}

pub fn drop_caches() -> Result<()> {
    // SAFETY: sync(2) takes no arguments.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
        .context("dropping caches (echo 3 > /proc/sys/vm/drop_caches; needs root)")
}

/// Reads every file of `files` (relative to `dir`) once with `O_DIRECT`, on
/// `threads` threads, and returns the bytes read and the seconds it took.
///
/// The page cache stays as it was (dropping it is the experiments' business), but
/// whatever caches sit below it do not: a virtual disk's host cache above all, which
/// made the same random reads of this machine's disk run at 0.4 or 1.3 GB/s depending
/// on what the host had read last. One pass over the set before the first round gives
/// every server and fio the same disk, instead of the first run of a round a colder one.
pub fn read_through(dir: &Path, files: &[String], threads: usize) -> Result<(u64, f64)> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    const BUF: usize = 1 << 20;
    const ALIGN: usize = 4096;
    let start = std::time::Instant::now();
    let threads = threads.clamp(1, files.len().max(1));
    let total: Result<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<u64> {
                    let mut mem = vec![0u8; BUF + ALIGN];
                    let at = mem.as_ptr().align_offset(ALIGN);
                    let buf = &mut mem[at..at + BUF];
                    let mut bytes = 0u64;
                    for f in files.iter().skip(t).step_by(threads) {
                        let path = dir.join(f);
                        let file = std::fs::OpenOptions::new()
                            .read(true)
                            .custom_flags(libc::O_DIRECT)
                            .open(&path)
                            .with_context(|| format!("opening {} with O_DIRECT", path.display()))?;
                        let mut off = 0u64;
                        loop {
                            let n = file
                                .read_at(buf, off)
                                .with_context(|| format!("reading {}", path.display()))?;
                            off += n as u64;
                            if n < BUF {
                                break;
                            }
                        }
                        bytes += off;
                    }
                    Ok(bytes)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("read_through thread panicked"))
            .sum()
    });
    Ok((total?, start.elapsed().as_secs_f64()))
}

/// A memory cgroup made for the server under test; removed on drop.
#[derive(Debug)]
pub struct MemCgroup {
    dir: PathBuf,
    /// The file a pid is written to, to move that process in.
    pub procs: PathBuf,
    pub limit_bytes: u64,
    pub version: u8,
}

impl MemCgroup {
    /// Creates a child memory cgroup with the given limit (v2 if the unified hierarchy
    /// is mounted at /sys/fs/cgroup, else v1 at /sys/fs/cgroup/memory).
    pub fn create(name: &str, limit_bytes: u64) -> Result<MemCgroup> {
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let (dir, limit_file, version) = if v2 {
            let root = Path::new("/sys/fs/cgroup");
            let ctl =
                std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
            if !ctl.split_whitespace().any(|c| c == "memory") {
                std::fs::write(root.join("cgroup.subtree_control"), "+memory")
                    .context("enabling the memory controller for child cgroups")?;
            }
            (root.join(name), "memory.max", 2)
        } else {
            let root = Path::new("/sys/fs/cgroup/memory");
            if !root.is_dir() {
                bail!("no memory cgroup controller (neither v2 nor /sys/fs/cgroup/memory)");
            }
            (root.join(name), "memory.limit_in_bytes", 1)
        };
        remove_stale(dir.parent().unwrap_or(Path::new("/")));
        if !dir.exists() {
            std::fs::create_dir(&dir)
                .with_context(|| format!("creating cgroup {}", dir.display()))?;
        }
        std::fs::write(dir.join(limit_file), limit_bytes.to_string())
            .with_context(|| format!("setting {}/{limit_file}", dir.display()))?;
        if v2 {
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        }
        Ok(MemCgroup {
            procs: dir.join("cgroup.procs"),
            dir,
            limit_bytes,
            version,
        })
    }

    /// Pids still in the cgroup.
    pub fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(&self.procs)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if self.pids().is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Removes empty cgroups left by a harness that was killed (named `spindle-bench-*`,
/// no process inside, and the pid in the name is not alive).
fn remove_stale(parent: &Path) {
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("spindle-bench-") else {
            continue;
        };
        let pid = rest.rsplit('-').next().and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        let empty = std::fs::read_to_string(e.path().join("cgroup.procs"))
            .map(|s| s.trim().is_empty())
            .unwrap_or(false);
        if !alive && empty {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// `/proc/meminfo` as key -> KiB.
pub fn meminfo() -> BTreeMap<String, u64> {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.to_string(), v.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Lets this process hold as many sockets as its hard limit allows.
pub fn raise_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write a live local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Pins the calling thread to one CPU (the load generator's), as
/// `taskset` pins a process.
pub fn pin_this_thread(cpu: usize) -> Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is an empty set, CPU_SET
    // writes inside it, and sched_setaffinity reads it for its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            anyhow::bail!("pinning to CPU {cpu}: {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}
