//! `cold`: the lighttpd 1.5 experiment (seed `004_40a104b5079a57bd.txt`).
//!
//! 100 KiB files, `-parallel 100`, the server in a memory cgroup whose limit makes the
//! data set at least 10× the page cache it may use, caches dropped before each run,
//! once with a connection per fetch (as http_load) and once with keep-alive. With
//! `--disk emulated` the data set is served through the slowdisk FUSE model of the
//! seed's RAID1 (daemon outside the cgroup).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::common::{self, CommonArgs, End, Load, LoadTls, Machine, Progress};
use crate::data::{self, DataSet, SetKind};
use crate::report::{col, Column, Report};
use crate::servers::{self, Running, Server};
use crate::sys;

mod fio;
pub use fio::{fio, fio_best_mb, fio_files, fio_groups, fio_markdown, run_fio_job, FioTarget};

/// Smallest cgroup limit we set.
const MIN_CGROUP_BYTES: u64 = 32 << 20;

/// Why `cold --quick` is a smoke test (its method line).
const QUICK_COLD: &str = "--quick serves 200 files (20 MB, inside the server's 32 MiB cgroup, so cold only until each is first read) with 200 fetches at -parallel 100, two waves: it measures server start and first opens. At that scale no length orders the servers as the full run does: with 200, 2,000 and 20,000 fetches per run (5 rounds each, 2026-11-26), nginx aio threads made 1.7x, 1.5x and 1.7x spindle io-uring's fetches/s, ahead in 14 of 15 rounds, where the full run (10 GB, 10x the cgroup) puts io-uring ahead.";

/// Why `cold --disk emulated --quick` is a smoke test (its method line).
const QUICK_EMULATED: &str = "--quick makes 200 fetches at -parallel 100 on the emulated disk, two waves: the model's queue filling and draining, not its steady state. The full run (4,000 fetches, 21 s per run) puts spindle io-uring and nginx aio threads within 1% of each other, a gap no run this short resolves.";

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disk {
    /// The machine's own disk.
    Real,
    /// The slowdisk model of the seed's RAID1, mounted over the data set for the run.
    Emulated,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modes {
    Both,
    Close,
    Keepalive,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ColdArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Fetches per run (the seed: 10,000).
    #[arg(long, default_value_t = 10_000)]
    pub fetches: u64,
    /// End each run after this many seconds instead of after --fetches.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Concurrent fetches (the seed: 100).
    #[arg(long, default_value_t = 100)]
    pub parallel: u64,
    /// Size of the 100 KiB set, as a fraction of the seed's 100,000 files.
    #[arg(long)]
    pub scale: Option<f64>,
    /// Memory cgroup limit of the server, bytes with optional k/m/g (default: data set / 10,
    /// at least 32 MiB).
    #[arg(long)]
    pub cgroup_mem: Option<String>,
    /// Run without a memory cgroup (not the seed's conditions).
    #[arg(long)]
    pub no_cgroup: bool,
    /// Which disk serves the data set.
    #[arg(long, value_enum, default_value_t = Disk::Real)]
    pub disk: Disk,
    /// Connection modes to run.
    #[arg(long, value_enum, default_value_t = Modes::Both)]
    pub modes: Modes,
    /// Skip the fio comparison.
    #[arg(long)]
    pub no_fio: bool,
    /// Skip the O_DIRECT read of the data set before the first round (it gives every
    /// server the same disk: see docs/benchmarks.md)
    #[arg(long)]
    pub no_warm: bool,
    /// Seconds per fio queue depth.
    #[arg(long, default_value_t = 10.0)]
    pub fio_seconds: f64,
    /// Extra flags for every spindle server, e.g. "--max-inflight 32" (space-separated).
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub spindle_flags: String,
    /// HTTPS: every server with the same ECDSA P-256 certificate (made for the
    /// run), servers that cannot encrypt skipped, sessions resumed; reports go to
    /// cold-tls.* (cold-emulated-tls.*).
    #[arg(long)]
    pub tls: bool,
    /// HTTP/2 over HTTPS, with h2load (Debian nghttp2-client): one
    /// connection of --parallel streams for --fetches requests;
    /// servers that serve no HTTP/2 skipped (add `h2o` to --servers to
    /// compare H2O). Reports go to cold-h2.*.
    #[arg(long)]
    pub h2: bool,
    /// Model of the emulated disk (with --disk emulated).
    #[command(flatten)]
    pub model: slowdisk::ModelArgs,
}

pub fn parse_bytes(s: &str) -> Result<u64> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mul) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (&t[..], 1),
    };
    let n: f64 = num
        .parse()
        .with_context(|| format!("bad size {s:?}: expected a number with optional k, m or g"))?;
    if n.is_nan() || n <= 0.0 {
        bail!("bad size {s:?}: must be positive");
    }
    Ok((n * mul as f64) as u64)
}

pub const COLUMNS: [Column; 17] = [
    col("fetches_per_sec", "fetches/sec", 1),
    col("mb_per_sec", "MB/s", 2),
    col("connect_ms_mean", "connect ms mean", 2),
    col("connect_ms_max", "connect ms max", 1),
    col("first_ms_mean", "first-response ms mean", 1),
    col("first_ms_max", "first-response ms max", 1),
    col("fetch_ms_p50", "fetch p50 ms", 1),
    col("fetch_ms_p99", "fetch p99 ms", 1),
    col("cpu_user", "%user", 1),
    col("cpu_system", "%system", 1),
    col("cpu_iowait", "%iowait", 1),
    col("cpu_idle", "%idle", 1),
    col("disk_tps", "disk tps", 0),
    col("disk_mb_per_sec", "disk MB/s", 1),
    col("disk_busy_pct", "disk busy %", 0),
    col("server_cpu_s", "server CPU s", 2),
    col("non_200", "non-200", 0),
];

/// What measures the disk during a run.
pub enum DiskProbe<'a> {
    Real(Option<String>),
    Emulated(&'a slowdisk::MountHandle),
}

pub enum DiskMark {
    Real(Option<sys::DiskCounters>),
    Emulated(Option<slowdisk::Stats>),
}

impl DiskProbe<'_> {
    pub fn mark(&self) -> DiskMark {
        match self {
            DiskProbe::Real(dev) => DiskMark::Real(dev.as_deref().and_then(sys::disk_counters)),
            DiskProbe::Emulated(h) => DiskMark::Emulated(h.snapshot().ok()),
        }
    }

    /// Disk metrics between two marks taken `secs` apart.
    pub fn metrics(&self, a: &DiskMark, b: &DiskMark, secs: f64, m: &mut BTreeMap<String, f64>) {
        match (a, b) {
            (DiskMark::Real(Some(a)), DiskMark::Real(Some(b))) if secs > 0.0 => {
                m.insert(
                    "disk_tps".into(),
                    ((b.reads - a.reads) + (b.writes - a.writes)) / secs,
                );
                m.insert(
                    "disk_mb_per_sec".into(),
                    (b.sectors_read - a.sectors_read) * 512.0 / 1e6 / secs,
                );
            }
            (DiskMark::Emulated(Some(a)), DiskMark::Emulated(Some(b))) => {
                let w = b.since(a);
                if w.elapsed_s > 0.0 {
                    m.insert("disk_tps".into(), w.requests as f64 / w.elapsed_s);
                    m.insert("disk_mb_per_sec".into(), w.bytes as f64 / 1e6 / w.elapsed_s);
                }
                let n = w.spindles.len().max(1) as f64;
                m.insert(
                    "disk_busy_pct".into(),
                    w.spindles.iter().map(|s| s.busy_pct).sum::<f64>() / n,
                );
                let reads: u64 = w.spindles.iter().map(|s| s.reads).sum();
                let seeks: u64 = w.spindles.iter().map(|s| s.seeks).sum();
                let pos: f64 = w.spindles.iter().map(|s| s.positioning_s).sum();
                m.insert("disk_seeks".into(), seeks as f64);
                m.insert("disk_max_queue".into(), w.max_queue as f64);
                if reads > 0 {
                    m.insert(
                        "disk_ms_positioning_per_read".into(),
                        1e3 * pos / reads as f64,
                    );
                    m.insert("disk_mean_wait_ms".into(), 1e3 * w.wait_s / reads as f64);
                }
                for (i, s) in w.spindles.iter().enumerate() {
                    m.insert(format!("spindle{i}_reads"), s.reads as f64);
                    m.insert(format!("spindle{i}_busy_pct"), s.busy_pct);
                }
            }
            _ => {}
        }
    }
}

/// One cold run: caches dropped, load, CPU and disk measured around it.
pub fn cold_run(
    running: &Running,
    load: &Load,
    probe: &DiskProbe,
    work: &Path,
    drop: bool,
) -> Result<BTreeMap<String, f64>> {
    if drop {
        sys::drop_caches()?;
    }
    measured(running, probe, || {
        Ok(common::load_metrics(&common::run_load(load, work, "cold")?))
    })
}

/// Runs `load` (which returns the load generator's metrics), with the
/// machine's CPU, the server's CPU and the disk measured around it.
pub(crate) fn measured(
    running: &Running,
    probe: &DiskProbe,
    load: impl FnOnce() -> Result<BTreeMap<String, f64>>,
) -> Result<BTreeMap<String, f64>> {
    let cpu0 = sys::CpuTimes::read();
    let s0 = running.cpu_seconds();
    let d0 = probe.mark();
    let t0 = std::time::Instant::now();
    let mut m = load()?;
    let secs = t0.elapsed().as_secs_f64();
    let d1 = probe.mark();
    let s1 = running.cpu_seconds();
    let cpu1 = sys::CpuTimes::read();
    let [u, s, w, i] = cpu1.percent_since(&cpu0);
    m.insert("cpu_user".into(), u);
    m.insert("cpu_system".into(), s);
    m.insert("cpu_iowait".into(), w);
    m.insert("cpu_idle".into(), i);
    m.insert("server_cpu_s".into(), s1 - s0);
    probe.metrics(&d0, &d1, secs, &mut m);
    Ok(m)
}

/// Reads the data set once with O_DIRECT before the first round
/// ([`sys::read_through`]); returns the report's note.
pub fn warm(set: &DataSet) -> String {
    eprintln!(
        "warming the disk: reading {} files once with O_DIRECT (--no-warm skips this)",
        set.files.len()
    );
    match sys::read_through(&set.dir, &set.files, WARM_THREADS) {
        Ok((bytes, secs)) => format!(
            "before the first round the data set ({:.2} GB) was read once with O_DIRECT in {secs:.0} s ({:.0} MB/s), so that every server and fio meet the same disk (a virtual disk's host cache holds what was read last); the page cache stays cold",
            bytes as f64 / 1e9,
            bytes as f64 / 1e6 / secs.max(1e-9)
        ),
        Err(e) => format!("the O_DIRECT read of the data set before the first round failed: {e:#}"),
    }
}

/// Threads of the warm-up read: enough to keep a disk's queue busy.
const WARM_THREADS: usize = 8;

pub fn run(a: ColdArgs) -> Result<()> {
    let c = &a.common;
    if !sys::is_root() {
        bail!("cold needs root: it drops the page cache, makes a memory cgroup and (with --disk emulated) mounts FUSE");
    }
    let scale = a.scale.unwrap_or(if c.quick { 0.002 } else { 1.0 });
    data::validate_scale(scale)?;
    let cgroup_mem = a.cgroup_mem.as_deref().map(parse_bytes).transpose()?;
    let (mut servers, mut notes) = c.servers()?;
    let tls_run = a.tls || a.h2;
    if tls_run {
        crate::tls::https_only(&mut servers, &mut notes)?;
    }
    if a.h2 {
        crate::h2load::h2_only(&mut servers, &mut notes)?;
    } else if servers.iter().any(|(s, _)| *s == Server::H2o) {
        bail!("h2o is compared over HTTP/2 only: add --h2");
    }
    let set = data::ensure(&c.data, SetKind::Small, scale, true)?;
    let (fetches, seconds) = if c.quick {
        (a.fetches.min(200), a.seconds.map(|s| s.min(2.0)))
    } else {
        (a.fetches, a.seconds)
    };
    let fio_seconds = if c.quick {
        a.fio_seconds.min(1.0)
    } else {
        a.fio_seconds
    };
    let baseline = c.baseline(&servers);
    let mut machine = Machine::probe(&set.dir);
    for (s, v) in &servers {
        machine.versions.insert(s.name(), v.clone());
    }
    let total = set.files.len() as u64 * set.file_size;
    let limit = cgroup_mem.unwrap_or((total / 10).max(MIN_CGROUP_BYTES));
    let cgroup = if a.no_cgroup {
        None
    } else {
        Some(sys::MemCgroup::create(
            &format!("spindle-bench-{}", std::process::id()),
            limit,
        )?)
    };
    machine.cgroup_limit = Some(match &cgroup {
        Some(g) => format!(
            "{} MiB (cgroup v{}); data set {:.2} GB = {:.1}× the limit",
            g.limit_bytes >> 20,
            g.version,
            total as f64 / 1e9,
            total as f64 / g.limit_bytes as f64
        ),
        None => "none (--no-cgroup)".into(),
    });
    let work = common::workdir(&c.out, "cold")?;
    if a.h2 {
        notes.push(format!(
            "HTTP/2: h2load -c 1 -m {} (one connection: h2load's clients each walk the URL list from its start, so several would fetch the same files) over the URLs shuffled from a fresh seed per run; nginx `listen ... ssl http2`, lighttpd `server.h2proto`, H2O with its defaults; p50 and p99 are h2load's mean and max time per request",
            a.parallel
        ));
    }
    let tls = if tls_run {
        notes.push(format!("{}; sessions resumed", crate::tls::note()));
        Some(crate::tls::make(&work.join("tls"))?)
    } else {
        None
    };
    // The emulated disk, mounted for the whole run, daemon outside the cgroup.
    let disk = if a.disk == Disk::Emulated {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.arg("slowdisk").stdout(Stdio::null());
        let mut opts = slowdisk::MountOptions::new(
            &set.dir,
            work.join("mnt"),
            work.join("slowdisk-stats.json"),
        );
        opts.model = a.model.clone();
        Some(slowdisk::MountHandle::spawn(cmd, &opts).context("mounting the emulated disk")?)
    } else {
        None
    };
    let root: PathBuf = match &disk {
        Some(d) => d.mount_point().to_path_buf(),
        None => set.dir.clone(),
    };
    if let Some(d) = &disk {
        machine.disk_model = format!(
            "emulated by slowdisk: {} spindles RAID1, seek {} ms, {} rpm, {} MB/s each, elevator {}",
            a.model.spindles,
            a.model.seek_ms,
            a.model.rpm,
            a.model.mbps,
            a.model.elevator.as_str()
        );
        machine.data_device = format!("FUSE mount {}", d.mount_point().display());
        machine.rotational = None;
    }
    let probe = match &disk {
        Some(d) => DiskProbe::Emulated(d),
        None => DiskProbe::Real(sys::block_device_of(&set.dir)),
    };
    let modes: Vec<bool> = match a.modes {
        // HTTP/2 is a connection's streams: keep-alive only.
        _ if a.h2 => vec![true],
        Modes::Both => vec![false, true],
        Modes::Close => vec![false],
        Modes::Keepalive => vec![true],
    };
    let end = match seconds {
        Some(s) => End::Seconds(s),
        None => End::Fetches(fetches),
    };
    let name = match (a.disk == Disk::Emulated, tls_run) {
        (true, _) if a.h2 => "cold-emulated-h2",
        (false, _) if a.h2 => "cold-h2",
        (true, false) => "cold-emulated",
        (false, false) => "cold",
        (true, true) => "cold-emulated-tls",
        (false, true) => "cold-tls",
    };
    let mut report = Report::new(
        name,
        &format!(
            "cold: {} files of 100 KiB, -parallel {}, {}",
            set.files.len(),
            a.parallel,
            if a.disk == Disk::Emulated {
                "emulated seek-bound RAID1 (slowdisk)"
            } else {
                "this machine's disk"
            }
        ),
        machine,
        json!({"files": set.files.len(), "scale": scale, "fetches": fetches, "seconds": seconds,
               "parallel": a.parallel, "workers": c.workers, "cgroup_bytes": cgroup.as_ref().map(|g| g.limit_bytes),
               "rounds": c.rounds(), "disk": format!("{:?}", a.disk), "model": a.model,
               "spindle_flags": a.spindle_flags}),
    );
    report.baseline = baseline;
    report.primary = "fetches_per_sec".into();
    report.notes = notes;
    if c.quick {
        report.smoke_test(if a.disk == Disk::Emulated {
            QUICK_EMULATED
        } else {
            QUICK_COLD
        });
    }
    report.notes.push("caches dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before every run; each run starts a fresh server; avg-cpu is the whole machine's (/proc/stat), as iostat; disk columns are the data set's device (/proc/diskstats) or, on the emulated disk, the model's reads/s, MB/s and mean spindle busy %".into());
    let mut fio_res: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    let do_fio = !a.no_fio && servers::which("fio").is_some();
    if !a.no_fio && !do_fio {
        report
            .notes
            .push("fio is not installed: no disk reference (apt-get install fio)".into());
    }
    let spindle_flags: Vec<String> = a
        .spindle_flags
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let fio_target = if !do_fio || disk.is_some() {
        FioTarget::Files {
            root: root.clone(),
            files: fio_files(&set),
        }
    } else {
        FioTarget::Groups(fio_groups(&set, servers::server_nofile() as usize)?)
    };
    if disk.is_none() && !a.no_warm {
        report.notes.push(warm(&set));
    }
    let per_round = servers.len() as u64 * modes.len() as u64 + if do_fio { 3 } else { 0 };
    let progress = Progress::new(per_round * c.rounds() as u64, name);
    for round in 0..c.rounds() {
        if do_fio {
            for qd in [1u32, 16, 64] {
                progress.start(format!("round {} fio QD {qd}", round + 1));
                sys::drop_caches()?;
                match fio(&fio_target, set.file_size, qd, fio_seconds, &work) {
                    Ok(r) => {
                        fio_res.entry(qd).or_default().push(r);
                        progress.done(format!(
                            "round {} fio QD {qd:<3} {:>8.0} IOPS {:>8.1} MB/s",
                            round + 1,
                            r.0,
                            r.1
                        ));
                    }
                    Err(e) => {
                        report.notes.push(format!("fio QD {qd} failed: {e:#}"));
                        progress.done(format!("round {} fio QD {qd}: {e:#}", round + 1));
                    }
                }
            }
        }
        for (server, _) in common::rotated(&servers, round as usize) {
            for &keepalive in &modes {
                let group = if a.h2 {
                    "HTTP/2, h2load"
                } else if keepalive {
                    "keep-alive"
                } else {
                    "connection per fetch (http_load)"
                };
                let sname = server.name();
                progress.start(format!("round {} {group} {sname}", round + 1));
                let sample = one(
                    server,
                    &root,
                    &set,
                    &cgroup,
                    c.workers,
                    &spindle_flags,
                    keepalive,
                    a.parallel,
                    end,
                    &probe,
                    &work,
                    tls.as_ref(),
                    a.h2.then_some((1, a.parallel)),
                );
                let line = match &sample {
                    Ok(m) => format!(
                        "round {} {:<10} {sname:<28} {:>8.1} fetches/s p99 {:>7.0} ms disk {:>6.0} tps",
                        round + 1,
                        if keepalive { "keep-alive" } else { "close" },
                        m.get("fetches_per_sec").unwrap_or(&0.0),
                        m.get("fetch_ms_p99").unwrap_or(&0.0),
                        m.get("disk_tps").unwrap_or(&0.0)
                    ),
                    Err(e) => format!("round {} {group} {sname}: {e:#}", round + 1),
                };
                report.add(group, &sname, sample);
                progress.done(line);
            }
        }
    }
    progress.finish();
    if let Some(d) = disk {
        let total = d.stop().context("stopping the emulated disk")?;
        report
            .extra
            .insert("slowdisk_total".into(), serde_json::to_value(&total)?);
        report.extra_md.push(format!(
            "## emulated disk, whole run\n\n```\n{}```\n",
            total.table()
        ));
    }
    if do_fio {
        report
            .extra
            .insert("fio".into(), serde_json::to_value(&fio_res)?);
        report
            .extra_md
            .insert(0, fio_markdown(&fio_res, set.file_size, &fio_target));
    }
    if !report.smoke_test && !a.h2 {
        report.extra_md.push(bars(&report, fio_best_mb(&fio_res)));
    }
    report.machine.finish();
    drop(cgroup);
    let files = report.write(&c.out, name, &COLUMNS, "fetches per second")?;
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn one(
    server: &Server,
    root: &Path,
    set: &DataSet,
    cgroup: &Option<sys::MemCgroup>,
    workers: u32,
    spindle_flags: &[String],
    keepalive: bool,
    parallel: u64,
    end: End,
    probe: &DiskProbe,
    work: &Path,
    tls: Option<&crate::tls::TlsFiles>,
    h2: Option<(u64, u64)>,
) -> Result<BTreeMap<String, f64>> {
    let mut setup = common::setup(root, workers);
    setup.cgroup_procs = cgroup.as_ref().map(|g| g.procs.clone());
    setup.spindle_flags = spindle_flags.to_vec();
    setup.tls = tls.cloned();
    setup.http2 = h2.is_some();
    let mut running = Running::start(server, &setup)?;
    let urls = work.join("urls");
    let scheme = if tls.is_some() { "https" } else { "http" };
    if let Some(cs) = h2 {
        // h2load asks for the URLs in the file's order: shuffled, from a
        // fresh seed each run.
        let mut files = set.files.clone();
        shuffle(&mut files);
        common::write_urls_scheme(&urls, scheme, running.port, &files)?;
        let r = cold_run_h2(&running, &urls, cs, end, probe, workers);
        running.stop()?;
        std::thread::sleep(Duration::from_millis(100));
        return r;
    }
    common::write_urls_scheme(&urls, scheme, running.port, &set.files)?;
    let load = Load {
        rate: None,
        urls,
        parallel,
        end,
        keepalive,
        idle: 0,
        timeout_secs: 120,
        tls: tls.map(|t| LoadTls {
            ca: t.ca.clone(),
            resume: true,
        }),
    };
    let r = cold_run(&running, &load, probe, work, true);
    running.stop()?;
    std::thread::sleep(Duration::from_millis(100));
    r
}

/// Shuffles `v` from a seed taken from the clock (Fisher-Yates,
/// xorshift64*).
fn shuffle<T>(v: &mut [T]) {
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    for i in (1..v.len()).rev() {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let j = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// One cold run over HTTP/2: caches dropped, h2load, CPU and disk
/// measured around it.
fn cold_run_h2(
    running: &Running,
    urls: &Path,
    cs: (u64, u64),
    end: End,
    probe: &DiskProbe,
    workers: u32,
) -> Result<BTreeMap<String, f64>> {
    let extra = match end {
        End::Fetches(n) => vec!["-n".to_string(), n.to_string()],
        End::Seconds(s) => vec!["-D".to_string(), format!("{}", s.max(1.0).round() as u64)],
    };
    sys::drop_caches()?;
    measured(running, probe, || {
        crate::h2load::metrics(&crate::h2load::run(urls, cs, &extra, workers)?)
    })
}

/// The issue's bars, checked on this report's medians.
fn bars(r: &Report, fio_best: Option<f64>) -> String {
    let mut o = String::from("## The bars (issue 5), on the medians above\n\n");
    for g in r.groups() {
        let io = r.median(&g, "spindle-io-uring", "fetches_per_sec");
        let ng = r.median(&g, "nginx-aio-threads", "fetches_per_sec");
        let sf = r.median(&g, "spindle-linux-sendfile", "fetches_per_sec");
        let p99_io = r.median(&g, "spindle-io-uring", "fetch_ms_p99");
        let p99_ng = r.median(&g, "nginx-aio-threads", "fetch_ms_p99");
        let mb_io = r.median(&g, "spindle-io-uring", "mb_per_sec");
        let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
        o.push_str(&format!("{g}:\n\n"));
        if let (Some(a), Some(b)) = (io, ng) {
            o.push_str(&format!(
                "- io-uring / nginx-aio-threads fetches/sec = {:.2} (bar ≥ 1.20): {}\n",
                a / b,
                verdict(a / b >= 1.2)
            ));
        }
        if let (Some(a), Some(b)) = (io, sf) {
            o.push_str(&format!(
                "- io-uring / spindle linux-sendfile fetches/sec = {:.2} (bar ≥ 2.00): {}\n",
                a / b,
                verdict(a / b >= 2.0)
            ));
        }
        if let (Some(a), Some(b)) = (p99_io, p99_ng) {
            o.push_str(&format!("- p99 fetch: io-uring {a:.1} ms, nginx-aio-threads {b:.1} ms (bar: no worse): {}\n", verdict(a <= b)));
        }
        if let (Some(a), Some(b)) = (mb_io, fio_best) {
            o.push_str(&format!(
                "- io-uring {a:.1} MB/s = {:.0}% of fio's best {b:.1} MB/s (bar ≥ 90%): {}\n",
                100.0 * a / b,
                verdict(a / b >= 0.9)
            ));
        }
        o.push('\n');
    }
    o
}
