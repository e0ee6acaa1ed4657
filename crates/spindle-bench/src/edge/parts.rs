//! The experiment's machinery: the capped link to the origin ([`Wan`]),
//! the processes it starts ([`Proc`]), and the watch on a cache's bytes
//! on disk ([`CacheWatch`]).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{HOST_ADDR, ORIGIN_ADDR, START_TIMEOUT};
use crate::scaleout::net::ip;
use crate::servers::which;
use crate::sys;

/// The origin's network namespace, veth pair and capped link; removed on
/// drop.
pub(super) struct Wan {
    pub(super) ns: String,
    host_dev: String,
    peer: String,
}

impl Wan {
    pub(super) fn create(mbit: u64) -> Result<Wan> {
        let pid = std::process::id();
        let ns = format!("spindle-edge-{pid}");
        let (host_dev, peer) = (
            format!("sed{}h", pid % 100_000),
            format!("sed{}p", pid % 100_000),
        );
        ip(&["netns", "add", &ns])?;
        let wan = Wan {
            ns: ns.clone(),
            host_dev: host_dev.clone(),
            peer: peer.clone(),
        };
        ip(&[
            "link", "add", &host_dev, "type", "veth", "peer", "name", &peer,
        ])?;
        ip(&["link", "set", &peer, "netns", &ns])?;
        ip(&["addr", "add", &format!("{HOST_ADDR}/24"), "dev", &host_dev])?;
        ip(&["link", "set", &host_dev, "up"])?;
        let inside = |a: &[&str]| {
            let mut v = vec!["netns", "exec", &ns, "ip"];
            v.extend_from_slice(a);
            ip(&v)
        };
        inside(&["addr", "add", &format!("{ORIGIN_ADDR}/24"), "dev", &peer])?;
        inside(&["link", "set", &peer, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        wan.tbf("add", mbit)?;
        Ok(wan)
    }

    /// Caps the origin's side of the link at `mbit`.
    pub(super) fn set_rate(&self, mbit: u64) -> Result<()> {
        self.tbf("change", mbit)
    }

    /// A token bucket of `mbit`, whose burst is 2 ms of it (at least 256
    /// KB): a smaller bucket than the kernel's timer tick drains caps
    /// the link below its rate.
    fn tbf(&self, verb: &str, mbit: u64) -> Result<()> {
        let burst_kb = (mbit * 1_000_000 / 8 / 500 / 1000).max(256);
        let tc = Command::new("ip")
            .args(["netns", "exec", &self.ns, "tc", "qdisc", verb, "dev"])
            .args([&self.peer, "root"])
            .args(["tbf", "rate", &format!("{mbit}mbit")])
            .args(["burst", &format!("{burst_kb}kb")])
            .args(["latency", "50ms"])
            .status()
            .context("running tc (iproute2)")?;
        if !tc.success() {
            bail!("tc could not cap the origin's link at {mbit} Mbit/s");
        }
        Ok(())
    }

    /// Bytes the host received from the origin so far.
    pub(super) fn origin_bytes(&self) -> f64 {
        std::fs::read_to_string(format!(
            "/sys/class/net/{}/statistics/rx_bytes",
            self.host_dev
        ))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0.0)
    }
}

impl Drop for Wan {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_dev]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// Samples the bytes a cache directory holds on disk (allocated blocks,
/// as `du`), once per `CACHE_SAMPLE`, until stopped: nginx's cache
/// manager enforces `max_size` after the fact, so the bytes a cache
/// actually held are measured, not taken from its setting.
pub(super) struct CacheWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<u64>>>,
}

/// How often `CacheWatch` walks the cache directory.
const CACHE_SAMPLE: Duration = Duration::from_secs(1);

impl CacheWatch {
    pub(super) fn start(dir: PathBuf) -> CacheWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                samples.push(disk_bytes(&dir));
                std::thread::sleep(CACHE_SAMPLE);
            }
            samples
        });
        CacheWatch {
            stop,
            thread: Some(thread),
        }
    }

    /// (mean, peak) bytes held while it ran.
    pub(super) fn finish(mut self) -> (f64, f64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let v = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let peak = v.iter().copied().max().unwrap_or(0) as f64;
        let mean = v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
        (mean, peak)
    }
}

/// Bytes allocated on disk beneath `dir` (files vanish while it walks).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => disk_bytes(&e.path()),
            Ok(_) => e.metadata().map(|m| m.blocks() * 512).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

/// A process group started for the experiment; killed on drop.
pub(super) struct Proc {
    child: Option<Child>,
    pgid: u32,
}

impl Proc {
    /// `argv` in `cgroup` (if any), pinned to `cpu` (if any), its stderr
    /// to `log`.
    pub(super) fn spawn(
        argv: &[String],
        cgroup: Option<&Path>,
        cpu: Option<&str>,
        log: &Path,
    ) -> Result<Proc> {
        let mut full: Vec<String> = Vec::new();
        if let (Some(c), Some(_)) = (cpu, which("taskset")) {
            full.extend(["taskset".into(), "-c".into(), c.into()]);
        }
        full.extend(argv.iter().cloned());
        let procs = cgroup.map(|p| p.display().to_string()).unwrap_or_default();
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg("if [ -n \"$0\" ]; then echo $$ > \"$0\" || exit 1; fi; exec \"$@\"")
            .arg(procs)
            .args(&full);
        use std::os::unix::process::CommandExt;
        cmd.process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", argv[0]))?;
        Ok(Proc {
            pgid: child.id(),
            child: Some(child),
        })
    }

    pub(super) fn cpu_seconds(&self) -> f64 {
        sys::group_cpu_seconds(self.pgid)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            sys::kill_group(self.pgid, libc::SIGKILL);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(super) fn wait_listening(addr: (&str, u16), log: &Path) -> Result<()> {
    let t0 = Instant::now();
    while TcpStream::connect(addr).is_err() {
        if t0.elapsed() > START_TIMEOUT {
            bail!(
                "nothing listened on {}:{} within {START_TIMEOUT:?}: {}",
                addr.0,
                addr.1,
                std::fs::read_to_string(log).unwrap_or_default().trim()
            );
        }
        std::thread::sleep(Duration::from_millis(30));
    }
    Ok(())
}
