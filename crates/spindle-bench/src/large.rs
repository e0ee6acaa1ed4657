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
use crate::servers::{Running, Server};
use crate::sys;

pub const CONCURRENCY: [u64; 4] = [1, 2, 5, 10];

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
}

pub const COLUMNS: [Column; 9] = [
    col("mb_per_sec", "MB/s", 1),
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
    report.notes.push("cold: caches dropped before every run, server in the memory cgroup; %idle etc. are the whole machine's (/proc/stat)".into());
    // Rows of the sweep: each spindle server at each chunk size, each peer once.
    let mut rows: Vec<(Server, String, Vec<String>)> = Vec::new();
    for (s, _) in &servers {
        match s {
            Server::Spindle(_) => {
                for ch in &a.chunks {
                    rows.push((
                        s.clone(),
                        format!("{} chunk {ch}", s.name()),
                        vec!["--chunk-size".into(), ch.clone()],
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
    let progress = Progress::new((per_round as u64) * c.rounds() as u64, "large");
    let work = common::workdir(&c.out, "large")?;
    let probe = DiskProbe::Real(sys::block_device_of(&large.dir));
    let group_chunks = format!(
        "{} files of 10 MB, -parallel {}, {seconds} s",
        large.files.len(),
        a.parallel
    );
    for round in 0..c.rounds() {
        if do_chunks {
            for (server, label, flags) in &rows {
                progress.start(format!("round {} {label}", round + 1));
                let r = one(
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
                );
                let line = match &r {
                    Ok(m) => format!(
                        "round {} {label:<40} {:>8.1} MB/s {:>5.1}% idle",
                        round + 1,
                        m.get("mb_per_sec").unwrap_or(&0.0),
                        m.get("cpu_idle").unwrap_or(&0.0)
                    ),
                    Err(e) => format!("round {} {label}: {e:#}", round + 1),
                };
                report.add(&group_chunks, label, r);
                progress.done(line);
            }
        }
        if do_siege {
            for conc in CONCURRENCY {
                let group = format!(
                    "700 MB file ({:.0} MB), concurrency {conc}",
                    huge.file_size as f64 / 1e6
                );
                for (server, _) in &servers {
                    let label = server.name();
                    progress.start(format!("round {} {group} {label}", round + 1));
                    let r = one(
                        server,
                        &huge.dir,
                        &huge.files,
                        &cgroup,
                        c.workers,
                        &[],
                        conc,
                        End::Fetches(conc),
                        &probe,
                        &work,
                    );
                    let line = match &r {
                        Ok(m) => format!(
                            "round {} siege c={conc:<3} {label:<28} {:>8.1} MB/s {:>5.1}% idle",
                            round + 1,
                            m.get("mb_per_sec").unwrap_or(&0.0),
                            m.get("cpu_idle").unwrap_or(&0.0)
                        ),
                        Err(e) => format!("round {} {group} {label}: {e:#}", round + 1),
                    };
                    report.add(&group, &label, r);
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
) -> Result<std::collections::BTreeMap<String, f64>> {
    let mut setup = common::setup(root, workers);
    setup.cgroup_procs = Some(cgroup.procs.clone());
    setup.spindle_flags = flags.to_vec();
    let mut running = Running::start(server, &setup)?;
    let urls = work.join("urls");
    common::write_urls(&urls, running.port, files)?;
    let load = Load {
        urls,
        parallel,
        end,
        keepalive: false,
        idle: 0,
        timeout_secs: 300,
    };
    let r = cold_run(&running, &load, probe, work, true);
    running.stop()?;
    r
}
