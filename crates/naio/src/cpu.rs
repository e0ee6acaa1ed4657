//! CPU time of io_uring's io-wq worker threads.
//!
//! Requests io_uring cannot complete inline (every `SPLICE`, for one) run
//! on kernel worker threads that belong to this process and are named
//! `iou-wrk-<tid>` after the thread that owns the ring. Their time would
//! otherwise be charged to nobody, so each side adds up the workers of its
//! own threads from `/proc/self/task/*/schedstat` (ns of run time).

use std::fs;

/// (total run time in ns, number of workers) of the live io-wq workers
/// owned by thread `tid`.
pub fn iowq_cpu_ns(tid: i32) -> (u64, usize) {
    let want = format!("iou-wrk-{tid}");
    let Ok(dir) = fs::read_dir("/proc/self/task") else {
        return (0, 0);
    };
    let mut total = 0;
    let mut n = 0;
    for e in dir.flatten() {
        let p = e.path();
        let Ok(comm) = fs::read_to_string(p.join("comm")) else {
            continue;
        };
        if comm.trim_end() != want {
            continue;
        }
        if let Some(ns) = task_run_ns(&p) {
            total += ns;
            n += 1;
        }
    }
    (total, n)
}

/// Run time of the task whose /proc directory is `dir`: the first field of
/// `schedstat`, or utime+stime from `stat` in clock ticks when schedstat is
/// missing.
fn task_run_ns(dir: &std::path::Path) -> Option<u64> {
    if let Ok(s) = fs::read_to_string(dir.join("schedstat")) {
        if let Some(v) = s.split_whitespace().next().and_then(|f| f.parse().ok()) {
            return Some(v);
        }
    }
    let stat = fs::read_to_string(dir.join("stat")).ok()?;
    // Fields after the parenthesised comm: state is field 3; utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux ABI naio runs on.
    Some((utime + stime) * 10_000_000)
}

/// Run time in ns of all `ksoftirqd/N` kernel threads. Network receive
/// work that the kernel defers to them is charged to neither side, so runs
/// report how much of it happened.
pub fn ksoftirqd_ns() -> u64 {
    static PIDS: std::sync::OnceLock<Vec<std::path::PathBuf>> = std::sync::OnceLock::new();
    let pids = PIDS.get_or_init(|| {
        let Ok(dir) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .filter(|p| {
                fs::read_to_string(p.join("comm")).is_ok_and(|c| c.starts_with("ksoftirqd/"))
            })
            .collect()
    });
    pids.iter().filter_map(|p| task_run_ns(p)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_thread_reads_and_no_workers() {
        let me = format!("/proc/self/task/{}", crate::sys::gettid());
        let ns = task_run_ns(std::path::Path::new(&me)).expect("schedstat or stat");
        // Burn a little CPU so the counter cannot stay at zero.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let ns2 = task_run_ns(std::path::Path::new(&me)).unwrap();
        assert!(ns2 > ns, "run time did not advance: {ns} -> {ns2}");
        assert_eq!(iowq_cpu_ns(crate::sys::gettid()), (0, 0));
    }
}
