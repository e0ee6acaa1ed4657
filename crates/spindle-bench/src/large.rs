//! `large`: the two large-file posts (seeds `000_…` and `001_…`).
//!
//! * 1,000 × 10 MB files, cold, in the memory cgroup, with spindle's `--chunk-size`
//!   swept over 256k, 384k, 512k, 768k and 1M (seed 001), peers beside them;
//! * the 700 MB file at concurrency 1, 2, 5 and 10, cold, MB/s and %idle: the seed's
//!   siege table (seed 000). Each of the C clients fetches the whole file once
//!   (`siege --reps=1 -c C`).

use std::path::Path;

use anyhow::{bail, Result};
use serde_json::json;

use crate::cold::{cold_run, parse_bytes, DiskProbe};
use crate::common::{self, CommonArgs, End, Load, Machine, Progress};
use crate::data::{self, SetKind};
use crate::report::{col, Column, Report};
use crate::servers::{self, Running, Server};
use crate::sys;

pub const CONCURRENCY: [u64; 4] = [1, 2, 5, 10];

/// Why `large --quick` is a smoke test (its method line).
const QUICK_LARGE: &str = "--quick serves 4 files of 10 MB for 1.5 s per row and a 2.8 MB stand-in for the 700 MB file, all inside the server's 64 MiB cgroup: after the first read nothing comes from the disk, and a 2.8 MB download lasts milliseconds, so the rows measure neither the disk nor the large-file path the full run compares.";

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Both,
    Chunks,
    Siege,
}

#[derive(clap::Args, Debug, Clone)]
pub struct LargeArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Which part: the 10 MB chunk-size sweep, the 700 MB siege table, or both.
    #[arg(long, value_enum, default_value_t = Part::Both)]
    pub part: Part,
    /// Seconds per run of the 10 MB sweep.
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    /// Concurrent fetches in the 10 MB sweep.
    #[arg(long, default_value_t = 20)]
    pub parallel: u64,
    /// Scale of the data sets (file count of the 10 MB set, size of the 700 MB file).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Memory cgroup limit of the server (default: the 10 MB set / 10, at least 64 MiB).
    #[arg(long)]
    pub cgroup_mem: Option<String>,
    /// Chunk sizes to sweep (spindle servers only).
    #[arg(long, value_delimiter = ',', default_value = "256k,384k,512k,768k,1m")]
    pub chunks: Vec<String>,
    /// Skip the O_DIRECT read of the data set before the first round (it gives every
    /// server the same disk: see docs/benchmarks.md)
    #[arg(long)]
    pub no_warm: bool,
    /// Skip the fio rows (the disk's own rate, the limit every row is a fraction of).
    #[arg(long)]
    pub no_fio: bool,
    /// Skip the hot rows (the 700 MB file already in the page cache, 1 and 10 clients).
    #[arg(long)]
    pub no_hot: bool,
    /// An extra flag for every spindle server (repeatable), for A/B runs, e.g.
    /// `--spindle-flag=--first-miss=cache`; committed reports use the defaults.
    #[arg(long = "spindle-flag", allow_hyphen_values = true)]
    pub spindle_flags: Vec<String>,
    /// The 700 MB file over one HTTP/2 stream, cold and cached, against
    /// spindle's HTTPS/1.1 and the peers' HTTP/2 (h2load), and with a
    /// small file fetched beside it on the same connection. Reports go to
    /// large-h2.*.
    #[arg(long)]
    pub h2: bool,
}

/// Clients of the hot rows: the 700 MB file already in the page cache.
pub const HOT_CONCURRENCY: [u64; 2] = [1, 10];

/// Fetches of the cached 700 MB file per client in a hot run. One fetch took
/// 0.1 s at one client, and a round's figure then ranged over 3x between
/// rounds; five make a run of 0.5 s to several seconds.
pub const HOT_FETCHES_PER_CLIENT: u64 = 5;

/// fio's reads in flight per job on the 700 MB file: 8 × 1 MiB, the window the
/// kernel's readahead keeps on this machine's disk (`read_ahead_kb` 8192).
pub const FIO_SEQ_DEPTH: u32 = 8;

/// One contender of a round: a server with its flags, or fio.
#[derive(Clone)]
enum Contender {
    Server(Server, Vec<String>),
    Fio,
}

pub const COLUMNS: [Column; 12] = [
    col("mb_per_sec", "MB/s", 1),
    col("server_cpu_s_per_gb", "server CPU s/GB", 3),
    col("small_p99_ms", "small file p99 ms", 1),
    col("small_max_ms", "small file max ms", 1),
    col("fetches", "fetches", 0),
    col("cpu_user", "%user", 1),
    col("cpu_system", "%system", 1),
    col("cpu_iowait", "%iowait", 1),
    col("cpu_idle", "%idle", 1),
    col("disk_mb_per_sec", "disk MB/s", 1),
    col("server_cpu_s", "server CPU s", 2),
    col("non_200", "non-200", 0),
];

pub fn run(a: LargeArgs) -> Result<()> {
    if a.h2 {
        return crate::large_h2::run(a);
    }
    let c = &a.common;
    if !sys::is_root() {
        bail!("large needs root: it drops the page cache and makes a memory cgroup");
    }
    let scale = a.scale.unwrap_or(if c.quick { 0.004 } else { 1.0 });
    data::validate_scale(scale)?;
    let cgroup_mem = a.cgroup_mem.as_deref().map(parse_bytes).transpose()?;
    for ch in &a.chunks {
        parse_bytes(ch)?;
    }
    let (servers, notes) = c.servers()?;
    let seconds = if c.quick {
        a.seconds.min(1.5)
    } else {
        a.seconds
    };
    let large = data::ensure(&c.data, SetKind::Large, scale, true)?;
    let huge = data::ensure(&c.data, SetKind::Huge, scale, true)?;
    let mut machine = Machine::probe(&large.dir);
    for (s, v) in &servers {
        machine.versions.insert(s.name(), v.clone());
    }
    let total = large.files.len() as u64 * large.file_size;
    let limit = cgroup_mem.unwrap_or((total / 10).max(64 << 20));
    let cgroup = sys::MemCgroup::create(
        &format!("spindle-bench-large-{}", std::process::id()),
        limit,
    )?;
    machine.cgroup_limit = Some(format!(
        "{} MiB (cgroup v{}); 10 MB set {:.2} GB, 700 MB file {:.0} MB",
        limit >> 20,
        cgroup.version,
        total as f64 / 1e9,
        huge.file_size as f64 / 1e6
    ));
    let mut report = Report::new(
        "large",
        "large files: 10 MB chunk-size sweep and the 700 MB siege table",
        machine,
        json!({"files_10mb": large.files.len(), "huge_bytes": huge.file_size, "seconds": seconds,
               "parallel": a.parallel, "chunks": a.chunks, "workers": c.workers, "rounds": c.rounds(),
               "cgroup_bytes": limit, "scale": scale}),
    );
    report.primary = "mb_per_sec".into();
    report.notes = notes;
    if c.quick {
        report.smoke_test(QUICK_LARGE);
    }
    if !a.spindle_flags.is_empty() {
        report.notes.push(format!(
            "spindle servers ran with {}",
            a.spindle_flags.join(" ")
        ));
    }
    report.notes.push("cold: caches dropped before every run, server in the memory cgroup; %idle etc. are the whole machine's (/proc/stat); the order of the contenders rotates from round to round (and from one concurrency to the next), and each run draws its URLs from a fresh seed".into());
    report.notes.push(format!("small file p99/max: during the {PROBE_AT}-client runs, one more keep-alive connection fetches a 16 KiB cached file back to back for 1 s (starting 0.1 s in), on the same server; its latency says whether a worker busy with large downloads still answers at once"));
    report.notes.push(format!("hot rows: the 700 MB file read once by the harness (outside the server's cgroup, so the cgroup cannot evict it) before each concurrency's servers, and not dropped; each client fetches it {HOT_FETCHES_PER_CLIENT} times; server CPU s/GB is the server's CPU (all threads) over the bytes it sent"));
    // Rows of the sweep: each spindle server at each chunk size, each peer once.
    let mut rows: Vec<(Server, String, Vec<String>)> = Vec::new();
    for (s, _) in &servers {
        match s {
            Server::Spindle(_) => {
                for ch in &a.chunks {
                    rows.push((
                        s.clone(),
                        format!("{} chunk {ch}", s.name()),
                        [
                            vec!["--chunk-size".into(), ch.clone()],
                            a.spindle_flags.clone(),
                        ]
                        .concat(),
                    ));
                }
            }
            _ => rows.push((s.clone(), s.name(), Vec::new())),
        }
    }
    report.baseline = rows
        .iter()
        .find(|r| r.1 == "spindle-linux-sendfile chunk 512k")
        .or(rows.first())
        .map(|r| r.1.clone())
        .unwrap_or_default();
    if let Some(b) = &c.baseline {
        report.baseline = b.clone();
    }
    let do_chunks = a.part != Part::Siege;
    let do_siege = a.part != Part::Chunks;
    let per_round = if do_chunks { rows.len() } else { 0 }
        + if do_siege {
            servers.len() * CONCURRENCY.len()
        } else {
            0
        };
    if !a.no_warm {
        report.notes.push(crate::cold::warm(&large));
        if do_siege {
            report.notes.push(crate::cold::warm(&huge));
        }
    }
    let work = common::workdir(&c.out, "large")?;
    let probe = DiskProbe::Real(sys::block_device_of(&large.dir));
    let group_chunks = format!(
        "{} files of 10 MB, -parallel {}, {seconds} s",
        large.files.len(),
        a.parallel
    );
    let do_fio = !a.no_fio && servers::which("fio").is_some();
    if !a.no_fio && !do_fio {
        report
            .notes
            .push("fio rows skipped: fio is not installed".into());
    }
    let fio_groups = if do_fio && do_chunks {
        Some(crate::cold::fio_groups(
            &large,
            servers::server_nofile() as usize,
        )?)
    } else {
        None
    };
    let mut chunk_contenders: Vec<(String, Contender)> = rows
        .iter()
        .map(|(s, label, flags)| (label.clone(), Contender::Server(s.clone(), flags.clone())))
        .collect();
    let mut siege_contenders: Vec<(String, Contender)> = servers
        .iter()
        .map(|(s, _)| {
            let flags = match s {
                Server::Spindle(_) => a.spindle_flags.clone(),
                _ => Vec::new(),
            };
            (s.name(), Contender::Server(s.clone(), flags))
        })
        .collect();
    if do_fio {
        chunk_contenders.push(("fio".into(), Contender::Fio));
        siege_contenders.push(("fio".into(), Contender::Fio));
        report.reference = Some("fio".into());
        report.notes.push(format!(
            "fio rows, the disk's own rate in the same rounds: on the 10 MB set, random whole-file reads (1 MiB O_DIRECT reads, each file read through before the next is drawn), as many jobs as fetches in flight (`fio` = {} jobs, `fio QD 1` = one; `fio deep`: the same jobs with 4 MiB reads, 8 in flight each, the most this disk gives to reads of each file once); on the 700 MB file, N jobs each reading the whole file sequentially in 1 MiB O_DIRECT reads, {} in flight per job (the kernel's readahead window here); caches dropped first. A server that shares cached pages among its clients can pass the fio row at concurrency above 1",
            a.parallel, FIO_SEQ_DEPTH
        ));
    }
    report.vs_best_peer = true;
    let n_hot = if a.no_hot || !do_siege {
        0
    } else {
        HOT_CONCURRENCY.len() * servers.len()
    };
    let progress = Progress::new(
        (per_round as u64 + n_hot as u64 + if do_fio { 7 } else { 0 }) * c.rounds() as u64,
        "large",
    );
    for round in 0..c.rounds() {
        let r = round as usize;
        if do_chunks {
            for (label, who) in common::rotated(&chunk_contenders, r) {
                progress.start(format!("round {} {label}", round + 1));
                let res = match who {
                    Contender::Server(server, flags) => one(
                        server,
                        &large.dir,
                        &large.files,
                        &cgroup,
                        c.workers,
                        flags,
                        a.parallel,
                        End::Seconds(seconds),
                        &probe,
                        &work,
                        true,
                    ),
                    Contender::Fio => {
                        let g = fio_groups.as_ref().expect("fio groups");
                        let f = |jobs, reads: FioReads| {
                            fio_whole_files(g, large.file_size, jobs, reads, seconds, &work)
                        };
                        report.add(&group_chunks, "fio QD 1", f(1, FioReads::ONE_MIB));
                        report.add(
                            &group_chunks,
                            "fio deep",
                            f(a.parallel as u32, FioReads::DEEP),
                        );
                        f(a.parallel as u32, FioReads::ONE_MIB)
                    }
                };
                let line = match &res {
                    Ok(m) => format!(
                        "round {} {label:<40} {:>8.1} MB/s {:>5.1}% idle",
                        round + 1,
                        m.get("mb_per_sec").unwrap_or(&0.0),
                        m.get("cpu_idle").unwrap_or(&0.0)
                    ),
                    Err(e) => format!("round {} {label}: {e:#}", round + 1),
                };
                report.add(&group_chunks, label, res);
                progress.done(line);
            }
        }
        if do_siege {
            for conc in CONCURRENCY {
                let group = format!(
                    "700 MB file ({:.0} MB), concurrency {conc}",
                    huge.file_size as f64 / 1e6
                );
                for (label, who) in common::rotated(&siege_contenders, r + conc as usize) {
                    progress.start(format!("round {} {group} {label}", round + 1));
                    let res = match who {
                        Contender::Server(server, flags) => one(
                            server,
                            &huge.dir,
                            &huge.files,
                            &cgroup,
                            c.workers,
                            flags,
                            conc,
                            End::Fetches(conc),
                            &probe,
                            &work,
                            true,
                        ),
                        Contender::Fio => {
                            fio_sequential(&huge.dir.join(&huge.files[0]), conc as u32, &work)
                        }
                    };
                    let line = match &res {
                        Ok(m) => format!(
                            "round {} siege c={conc:<3} {label:<28} {:>8.1} MB/s {:>5.1}% idle",
                            round + 1,
                            m.get("mb_per_sec").unwrap_or(&0.0),
                            m.get("cpu_idle").unwrap_or(&0.0)
                        ),
                        Err(e) => format!("round {} {group} {label}: {e:#}", round + 1),
                    };
                    report.add(&group, label, res);
                    progress.done(line);
                }
            }
        }
        if n_hot > 0 {
            for conc in HOT_CONCURRENCY {
                let group = format!(
                    "700 MB file ({:.0} MB), cached, concurrency {conc}",
                    huge.file_size as f64 / 1e6
                );
                for (i, (server, _)) in common::rotated(&servers, r + conc as usize).enumerate() {
                    let label = server.name();
                    progress.start(format!("round {} {group} {label}", round + 1));
                    // Read by this process, outside the server's cgroup: the pages
                    // are not charged to it, so the cgroup cannot evict them.
                    if i == 0 {
                        sys::read_whole(&huge.dir.join(&huge.files[0]))?;
                    }
                    // Not dropped: the file stays in the page cache.
                    let res = one(
                        server,
                        &huge.dir,
                        &huge.files,
                        &cgroup,
                        c.workers,
                        &a.spindle_flags,
                        conc,
                        End::Fetches(conc * HOT_FETCHES_PER_CLIENT),
                        &probe,
                        &work,
                        false,
                    );
                    let line = match &res {
                        Ok(m) => format!(
                            "round {} hot c={conc:<3} {label:<28} {:>8.1} MB/s {:>6.3} CPU s/GB",
                            round + 1,
                            m.get("mb_per_sec").unwrap_or(&0.0),
                            m.get("server_cpu_s_per_gb").unwrap_or(&0.0)
                        ),
                        Err(e) => format!("round {} {group} {label}: {e:#}", round + 1),
                    };
                    report.add(&group, &label, res);
                    progress.done(line);
                }
            }
        }
    }
    progress.finish();
    report.machine.finish();
    report.extra_md.push(SEED_TABLES.to_string());
    drop(cgroup);
    for f in report.write(&c.out, "large", &COLUMNS, "MB/s")? {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

const SEED_TABLES: &str = "## The seeds' numbers\n\nSeed 001 (1,000 × 10 MB, RAID1 of two 7,200 rpm disks, Gigabit client): linux-aio-sendfile 21 / 54 / 58 / 55 / 52 MB/s at 256k / 384k / 512k / 768k / 1M chunks; linux-sendfile 30 MB/s (5.6% idle).\n\nSeed 000 (siege, 700 MB file): non-aio 52.4 / 39.9 / 35.5 MB/s at concurrency 1 / 2 / 5 (9 / 8 / 7% idle); aio 512k 89.9 / 94.5 / 31.8 / 25.2 MB/s at 1 / 2 / 5 / 10 (70 / 70 / 86 / 82% idle); aio 1M 107.5 / 92.7 / 72.8 / 32.9 MB/s (67 / 70 / 70 / 90% idle).\n";

#[allow(clippy::too_many_arguments)]
fn one(
    server: &Server,
    root: &Path,
    files: &[String],
    cgroup: &sys::MemCgroup,
    workers: u32,
    flags: &[String],
    parallel: u64,
    end: End,
    probe: &DiskProbe,
    work: &Path,
    drop: bool,
) -> Result<std::collections::BTreeMap<String, f64>> {
    let mut setup = common::setup(root, workers);
    setup.cgroup_procs = Some(cgroup.procs.clone());
    setup.spindle_flags = flags.to_vec();
    let mut running = Running::start(server, &setup)?;
    let urls = work.join("urls");
    common::write_urls(&urls, running.port, files)?;
    let load = Load {
        rate: None,
        urls,
        parallel,
        end,
        keepalive: false,
        idle: 0,
        timeout_secs: 300,
        tls: None,
    };
    let whole_files = matches!(end, End::Fetches(_));
    let small = whole_files && parallel == PROBE_AT;
    let r = with_small_probe(small, root, running.port, work, || {
        cold_run(&running, &load, probe, work, drop)
    });
    running.stop()?;
    r.map(with_cpu_per_gb).map(|mut m| {
        // The siege and hot rows: each client downloads the 700 MB file a
        // set number of times by design; a wave is a whole download, not a
        // start cost, so only their seconds are held to the length rule.
        if whole_files {
            m.remove("waves");
        }
        m
    })
}

/// Clients of the large downloads during which a small cached file's latency
/// is probed.
pub const PROBE_AT: u64 = 10;

/// The small file the probe fetches (written beside the 700 MB file).
const PROBE_FILE: &str = "small-probe.bin";
const PROBE_BYTES: usize = 16 * 1024;

/// Runs `f` (the large downloads) while one keep-alive connection fetches a
/// small cached file back to back for the first second, and adds that
/// probe's p99 and maximum latency (ms) to `f`'s sample: whether a worker
/// busy with large downloads still answers its other clients at once.
fn with_small_probe(
    on: bool,
    root: &Path,
    port: u16,
    work: &Path,
    f: impl FnOnce() -> Result<std::collections::BTreeMap<String, f64>>,
) -> Result<std::collections::BTreeMap<String, f64>> {
    if !on {
        return f();
    }
    let path = root.join(PROBE_FILE);
    if std::fs::metadata(&path).map(|m| m.len() as usize).ok() != Some(PROBE_BYTES) {
        std::fs::write(&path, vec![b'x'; PROBE_BYTES])?;
    }
    sys::read_whole(&path)?;
    let urls = work.join("urls-probe");
    common::write_urls(&urls, port, &[PROBE_FILE.to_string()])?;
    let load = Load {
        rate: None,
        urls,
        parallel: 1,
        end: End::Seconds(1.0),
        keepalive: true,
        idle: 0,
        timeout_secs: 30,
        tls: None,
    };
    let pwork = work.to_path_buf();
    let h = std::thread::spawn(move || {
        // Let the downloads start first.
        std::thread::sleep(std::time::Duration::from_millis(100));
        common::run_load(&load, &pwork, "probe")
    });
    let r = f();
    let p = h
        .join()
        .map_err(|_| anyhow::anyhow!("the probe thread panicked"))?;
    let mut m = r?;
    if let Ok(v) = p {
        let pm = common::load_metrics(&v);
        if let Some(x) = pm.get("fetch_ms_p99") {
            m.insert("small_p99_ms".into(), *x);
        }
        if let Some(x) = pm.get("fetch_ms_max") {
            m.insert("small_max_ms".into(), *x);
        }
    }
    Ok(m)
}

/// Adds the server's CPU seconds per GB, for a run that sent `bytes`.
pub(crate) fn with_cpu_per_gb_of(
    mut m: std::collections::BTreeMap<String, f64>,
    bytes: f64,
) -> std::collections::BTreeMap<String, f64> {
    if let Some(cpu) = m.get("server_cpu_s").copied() {
        if bytes > 0.0 {
            m.insert("server_cpu_s_per_gb".into(), cpu / (bytes / 1e9));
        }
    }
    m
}

/// Adds the server's CPU seconds per GB sent.
fn with_cpu_per_gb(
    m: std::collections::BTreeMap<String, f64>,
) -> std::collections::BTreeMap<String, f64> {
    match (m.get("mb_per_sec").copied(), m.get("seconds").copied()) {
        (Some(mb), Some(secs)) => with_cpu_per_gb_of(m, mb * secs * 1e6),
        _ => m,
    }
}

/// Runs one fio job file (`cold::run_fio_job`); its MB/s and the machine's CPU
/// shares while it ran, as a sample.
fn run_fio(job: &str, work: &Path) -> Result<std::collections::BTreeMap<String, f64>> {
    let cpu0 = sys::CpuTimes::read();
    let t0 = std::time::Instant::now();
    let (_, mb) = crate::cold::run_fio_job(job, work)?;
    let secs = t0.elapsed().as_secs_f64();
    let cpu1 = sys::CpuTimes::read();
    let mut m = std::collections::BTreeMap::new();
    m.insert("mb_per_sec".into(), mb);
    // fio's run with its start: the length rule's measure.
    m.insert("seconds".into(), secs);
    let [u, s, w, i] = cpu1.percent_since(&cpu0);
    m.insert("cpu_user".into(), u);
    m.insert("cpu_system".into(), s);
    m.insert("cpu_iowait".into(), w);
    m.insert("cpu_idle".into(), i);
    Ok(m)
}

/// fio on the 700 MB file: `jobs` jobs, each reading all of it in 1 MiB O_DIRECT
/// reads, [`FIO_SEQ_DEPTH`] in flight per job, caches dropped first.
pub(crate) fn fio_sequential(
    file: &Path,
    jobs: u32,
    work: &Path,
) -> Result<std::collections::BTreeMap<String, f64>> {
    sys::drop_caches()?;
    run_fio(
        &format!(
            "[global]\nrw=read\nbs=1m\ndirect=1\nioengine=libaio\niodepth={FIO_SEQ_DEPTH}\n\
             group_reporting\nfilename={}\n[seq]\nnumjobs={jobs}\n",
            file.display()
        ),
        work,
    )
}

/// How each fio job on the 10 MB set reads: the read size, and how many reads
/// it keeps in flight.
#[derive(Clone, Copy)]
struct FioReads {
    bytes: u64,
    in_flight: u32,
}

impl FioReads {
    /// One 1 MiB read at a time: a server that reads each file in 1 MiB
    /// chunks, one at a time per response.
    const ONE_MIB: FioReads = FioReads {
        bytes: 1 << 20,
        in_flight: 1,
    };
    /// 4 MiB reads (`max_sectors_kb` here), 8 in flight per job: more than
    /// the kernel's 8 MiB readahead window keeps, the most this disk gave
    /// in by-hand trials (2.3-2.8 GB/s against 2.0 for `ONE_MIB`). The
    /// limit a server reading each file once can reach.
    const DEEP: FioReads = FioReads {
        bytes: 4 << 20,
        in_flight: 8,
    };
}

/// fio on the 10 MB set: `jobs` jobs, each drawing a random file of its share
/// (see `cold::fio_groups`) and reading it through in O_DIRECT reads
/// (`reads`) before drawing the next, for `seconds`.
fn fio_whole_files(
    groups: &[std::path::PathBuf],
    file_size: u64,
    jobs: u32,
    reads: FioReads,
    seconds: f64,
    work: &Path,
) -> Result<std::collections::BTreeMap<String, f64>> {
    sys::drop_caches()?;
    let per_file = file_size.div_ceil(reads.bytes).max(1);
    let engine = if reads.in_flight > 1 {
        "libaio"
    } else {
        "psync"
    };
    let mut job = format!(
        "[global]\nrw=read\nbs={}\ndirect=1\nioengine={engine}\niodepth={}\n\
         file_service_type=random:{per_file}\ngroup_reporting\ntime_based\nruntime={}ms\n",
        reads.bytes,
        reads.in_flight,
        (seconds * 1000.0) as u64
    );
    for k in 0..jobs.max(1) as usize {
        job += &format!("[g{k}]\nopendir={}\n", groups[k % groups.len()].display());
    }
    run_fio(&job, work)
}
