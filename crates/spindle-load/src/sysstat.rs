//! `--cpu`: iostat-style CPU and disk figures from `/proc/stat` and
//! `/proc/diskstats`.

use serde::Serialize;
use std::path::Path;

/// Bytes in iostat's "MB" (iostat -m divides sectors by 2048).
pub const MB: f64 = 1024.0 * 1024.0;
/// Most disks tracked.
pub const MAX_DISKS: usize = 256;

/// Aggregate CPU jiffies from the `cpu` line of /proc/stat.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
    pub guest: u64,
    pub guest_nice: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DiskCounters {
    pub name: String,
    pub reads: u64,
    pub sectors_read: u64,
    pub writes: u64,
    pub sectors_written: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub cpu: CpuTimes,
    pub disks: Vec<DiskCounters>,
}

/// One interval's figures, as iostat prints them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuSample {
    /// End of the interval, seconds since the run started.
    pub t_secs: f64,
    /// Length of the interval in seconds.
    pub interval_secs: f64,
    pub user: f64,
    pub nice: f64,
    pub system: f64,
    pub iowait: f64,
    pub steal: f64,
    pub idle: f64,
    pub devices: Vec<DeviceSample>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DeviceSample {
    pub name: String,
    /// Completed reads and writes per second.
    pub tps: f64,
    /// MiB (2^20 bytes, iostat's "MB") read per second.
    pub mb_read_per_sec: f64,
    pub mb_written_per_sec: f64,
    pub read_bytes_per_sec: f64,
    pub written_bytes_per_sec: f64,
    /// Totals over the interval, in MiB.
    pub mb_read: f64,
    pub mb_written: f64,
}

pub fn parse_stat(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    if v.len() < 4 {
        return None;
    }
    Some(CpuTimes {
        user: at(0),
        nice: at(1),
        system: at(2),
        idle: at(3),
        iowait: at(4),
        irq: at(5),
        softirq: at(6),
        steal: at(7),
        guest: at(8),
        guest_nice: at(9),
    })
}

/// Parse /proc/diskstats, keeping the devices `keep` says yes to.
pub fn parse_diskstats(text: &str, keep: impl Fn(&str) -> bool) -> Vec<DiskCounters> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || !keep(f[2]) {
            continue;
        }
        let n = |i: usize| f[i].parse::<u64>().unwrap_or(0);
        out.push(DiskCounters {
            name: f[2].to_string(),
            reads: n(3),
            sectors_read: n(5),
            writes: n(7),
            sectors_written: n(9),
        });
        if out.len() >= MAX_DISKS {
            break;
        }
    }
    out
}

/// Whole disks (entries of /sys/block), without loop and ram devices.
pub fn is_reported_disk(name: &str) -> bool {
    !name.starts_with("loop")
        && !name.starts_with("ram")
        && Path::new("/sys/block").join(name).exists()
}

pub fn snapshot() -> std::io::Result<Snapshot> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let cpu =
        parse_stat(&stat).ok_or_else(|| std::io::Error::other("no cpu line in /proc/stat"))?;
    let disks = std::fs::read_to_string("/proc/diskstats")
        .map(|t| parse_diskstats(&t, is_reported_disk))
        .unwrap_or_default();
    Ok(Snapshot { cpu, disks })
}

/// The figures between two snapshots taken `secs` apart.
pub fn delta(a: &Snapshot, b: &Snapshot, secs: f64, t_secs: f64) -> CpuSample {
    let d = |x: u64, y: u64| y.saturating_sub(x) as f64;
    let (ca, cb) = (&a.cpu, &b.cpu);
    // /proc/stat's user and nice include guest time; iostat takes it out.
    let user = d(ca.user, cb.user) - d(ca.guest, cb.guest);
    let nice = d(ca.nice, cb.nice) - d(ca.guest_nice, cb.guest_nice);
    let system = d(ca.system, cb.system) + d(ca.irq, cb.irq) + d(ca.softirq, cb.softirq);
    let iowait = d(ca.iowait, cb.iowait);
    let steal = d(ca.steal, cb.steal);
    let idle = d(ca.idle, cb.idle);
    let guest = d(ca.guest, cb.guest) + d(ca.guest_nice, cb.guest_nice);
    let total = user.max(0.0) + nice.max(0.0) + system + iowait + steal + idle + guest;
    let pct = |x: f64| {
        if total > 0.0 {
            100.0 * x.max(0.0) / total
        } else {
            0.0
        }
    };
    let secs = if secs > 0.0 { secs } else { 1.0 };
    let devices = b
        .disks
        .iter()
        .map(|db| {
            let da = a.disks.iter().find(|x| x.name == db.name);
            let z = DiskCounters {
                name: String::new(),
                reads: db.reads,
                sectors_read: db.sectors_read,
                writes: db.writes,
                sectors_written: db.sectors_written,
            };
            let da = da.unwrap_or(&z);
            let ios = d(da.reads, db.reads) + d(da.writes, db.writes);
            let rb = d(da.sectors_read, db.sectors_read) * 512.0;
            let wb = d(da.sectors_written, db.sectors_written) * 512.0;
            DeviceSample {
                name: db.name.clone(),
                tps: ios / secs,
                mb_read_per_sec: rb / MB / secs,
                mb_written_per_sec: wb / MB / secs,
                read_bytes_per_sec: rb / secs,
                written_bytes_per_sec: wb / secs,
                mb_read: rb / MB,
                mb_written: wb / MB,
            }
        })
        .collect();
    CpuSample {
        t_secs,
        interval_secs: secs,
        user: pct(user),
        nice: pct(nice),
        system: pct(system),
        iowait: pct(iowait),
        steal: pct(steal),
        idle: pct(idle),
        devices,
    }
}

/// iostat's two blocks (with `-m` units) for one sample.
pub fn render_iostat(s: &CpuSample) -> String {
    let mut out = String::new();
    out.push_str("avg-cpu:  %user   %nice %system %iowait  %steal   %idle\n");
    out.push_str(&format!(
        "{:>15.2}{:>8.2}{:>8.2}{:>8.2}{:>8.2}{:>8.2}\n\n",
        s.user, s.nice, s.system, s.iowait, s.steal, s.idle
    ));
    out.push_str("Device:            tps    MB_read/s    MB_wrtn/s    MB_read    MB_wrtn\n");
    for d in &s.devices {
        out.push_str(&format!(
            "{:<13} {:>8.2} {:>12.2} {:>12.2} {:>10.0} {:>10.0}\n",
            d.name, d.tps, d.mb_read_per_sec, d.mb_written_per_sec, d.mb_read, d.mb_written
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iostat_lines_line_up_with_the_seed() {
        let a = Snapshot {
            cpu: CpuTimes::default(),
            disks: vec![DiskCounters {
                name: "sda".into(),
                reads: 0,
                sectors_read: 0,
                writes: 0,
                sectors_written: 0,
            }],
        };
        let b = Snapshot {
            cpu: CpuTimes {
                user: 99,
                system: 477,
                iowait: 8668,
                steal: 20,
                idle: 736,
                ..CpuTimes::default()
            },
            disks: vec![DiskCounters {
                name: "sda".into(),
                reads: 100,
                sectors_read: 2048 * 50,
                writes: 76,
                sectors_written: 0,
            }],
        };
        let s = delta(&a, &b, 5.0, 5.0);
        let text = render_iostat(&s);
        let lines: Vec<&str> = text.lines().collect();
        // Column positions as in the seed's `iostat 5` output.
        assert_eq!(
            lines[0],
            "avg-cpu:  %user   %nice %system %iowait  %steal   %idle"
        );
        assert_eq!(
            lines[1],
            "           0.99    0.00    4.77   86.68    0.20    7.36"
        );
        assert_eq!(
            lines[3],
            "Device:            tps    MB_read/s    MB_wrtn/s    MB_read    MB_wrtn"
        );
        assert_eq!(
            lines[4],
            "sda              35.20        10.00         0.00         50          0"
        );
    }

    #[test]
    fn parses_proc_files() {
        let c = parse_stat("cpu  1 2 3 4 5 6 7 8 9 10\ncpu0 1 1 1 1\n").unwrap();
        assert_eq!((c.user, c.idle, c.guest_nice), (1, 4, 10));
        let d = parse_diskstats(
            "   8       0 sda 10 0 80 5 20 0 160 9 0 0 0\n   7 0 loop0 1 0 8 0 0 0 0 0 0 0 0\n",
            |n| !n.starts_with("loop"),
        );
        assert_eq!(d.len(), 1);
        assert_eq!(
            (
                d[0].reads,
                d[0].sectors_read,
                d[0].writes,
                d[0].sectors_written
            ),
            (10, 80, 20, 160)
        );
    }
}
