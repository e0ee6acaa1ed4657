//! `large --h2`: the 700 MB file over one HTTP/2 stream (issue 38), cold
//! and cached, against spindle's own HTTPS/1.1 and the peers' HTTP/2,
//! with one client (h2load, `--h1` for the HTTP/1.1 rows); then the same
//! download with a small file fetched beside it on the same connection
//! ([`crate::h2mixed`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::json;

use crate::cold::{parse_bytes, DiskProbe};
use crate::common::{self, Machine, Progress};
use crate::data::{self, SetKind};
use crate::large::LargeArgs;
use crate::report::{col, Column, Report};
use crate::servers::{Running, Server};
use crate::sys;

/// The server's memory cgroup when none is given: the limit of the `large`
/// report, above the 700 MB file, so a cold run reads the file once.
const DEFAULT_CGROUP: u64 = 1000 << 20;
/// Fetches of the cached file in one h2load run, one after another on one
/// connection: one fetch lasts about 0.5 s here.
const HOT_FETCHES: u64 = 5;
/// The pause between the small file's answer and its next request in the
/// mixed runs: about a hundred small fetches during one cached download.
const MIXED_GAP: Duration = Duration::from_millis(2);
/// The small file of the mixed runs (written beside the 700 MB file).
const SMALL_FILE: &str = "small-mixed.bin";
const SMALL_BYTES: u64 = 1024;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Proto {
    H2,
    Https1,
}

#[derive(Clone)]
enum Contender {
    Server(Server, Proto),
    Fio,
}

const COLUMNS: [Column; 10] = [
    col("mb_per_sec", "MB/s", 1),
    col("server_cpu_s_per_gb", "server CPU s/GB", 3),
    col("small_fetches", "1 KiB fetches", 0),
    col("small_p50_ms", "1 KiB p50 ms", 2),
    col("small_p99_ms", "1 KiB p99 ms", 2),
    col("small_max_ms", "1 KiB max ms", 2),
    col("cpu_iowait", "%iowait", 1),
    col("cpu_idle", "%idle", 1),
    col("disk_mb_per_sec", "disk MB/s", 1),
    col("non_200", "non-200", 0),
];

pub fn run(a: LargeArgs) -> Result<()> {
    let c = &a.common;
    if !sys::is_root() {
        bail!("large needs root: it drops the page cache and makes a memory cgroup");
    }
    let scale = a.scale.unwrap_or(if c.quick { 0.004 } else { 1.0 });
    data::validate_scale(scale)?;
    let limit = match a.cgroup_mem.as_deref() {
        Some(s) => parse_bytes(s)?,
        None if c.quick => 64 << 20,
        None => DEFAULT_CGROUP,
    };
    let (mut servers, mut notes) = c.servers()?;
    crate::tls::https_only(&mut servers, &mut notes)?;
    crate::h2load::h2_only(&mut servers, &mut notes)?;
    let huge = data::ensure(&c.data, SetKind::Huge, scale, true)?;
    let mut machine = Machine::probe(&huge.dir);
    for (s, v) in &servers {
        machine.versions.insert(s.name(), v.clone());
    }
    let cgroup = sys::MemCgroup::create(
        &format!("spindle-bench-large-h2-{}", std::process::id()),
        limit,
    )?;
    machine.cgroup_limit = Some(format!(
        "{} MiB (cgroup v{}); 700 MB file {:.0} MB",
        limit >> 20,
        cgroup.version,
        huge.file_size as f64 / 1e6
    ));
    let mut report = Report::new(
        "large-h2",
        "one large file over HTTP/2: the 700 MB file on one stream",
        machine,
        json!({"huge_bytes": huge.file_size, "workers": c.workers, "rounds": c.rounds(),
               "cgroup_bytes": limit, "scale": scale, "hot_fetches": HOT_FETCHES,
               "small_bytes": SMALL_BYTES, "small_gap_ms": MIXED_GAP.as_millis() as u64}),
    );
    report.primary = "mb_per_sec".into();
    report.notes = notes;
    report.vs_best_peer = true;
    if c.quick {
        report.smoke_test("--quick serves a 2.8 MB stand-in for the 700 MB file, inside a 64 MiB cgroup: a download lasts milliseconds, so the rows measure nothing the full run compares.");
    }
    let work = common::workdir(&c.out, "large-h2")?;
    let tls = crate::tls::make(&work.join("tls"))?;
    report.notes.push(crate::tls::note());
    report.notes.push("one client for every row: h2load -c 1 -m 1 (one thread, pinned like the load generator; stream and connection windows 2^30-1, its defaults), over HTTP/2 by ALPN, or with `--h1` over HTTPS/1.1 (the rows marked HTTP/1.1, from the same server process); nginx `listen ... ssl http2`, lighttpd `server.h2proto`, H2O with its defaults".to_string());
    report.notes.push(format!("cold: caches dropped before every run, server in the memory cgroup, one fetch of the file; cached: the file read once by the harness (outside the cgroup) before each round's servers, then {HOT_FETCHES} fetches one after another; server CPU s/GB is the server's CPU (all threads) over the bytes sent"));
    report.notes.push(format!("1 KiB beside it: one HTTP/2 connection (the harness's own client, rustls, windows of 1 GiB, default 16 KiB frames) downloads the file on stream 1 and meanwhile asks for a cached 1 KiB file on other streams, one at a time, {} ms after the last answer; the 1 KiB latency is from its request to its last byte. MB/s is the large download's", MIXED_GAP.as_millis()));
    let small = huge.dir.join(SMALL_FILE);
    if std::fs::metadata(&small).map(|m| m.len()).ok() != Some(SMALL_BYTES) {
        std::fs::write(&small, vec![b'x'; SMALL_BYTES as usize])?;
    }
    if !a.no_warm {
        report.notes.push(crate::cold::warm(&huge));
    }
    let do_fio = !a.no_fio && crate::servers::which("fio").is_some();
    let mut contenders: Vec<(String, Contender)> = Vec::new();
    for (s, _) in &servers {
        contenders.push((s.name(), Contender::Server(s.clone(), Proto::H2)));
        if matches!(s, Server::Spindle(_)) {
            contenders.push((
                format!("{} HTTP/1.1", s.name()),
                Contender::Server(s.clone(), Proto::Https1),
            ));
        }
    }
    report.baseline = contenders
        .iter()
        .find(|(l, _)| l == "spindle-io-uring HTTP/1.1")
        .or(contenders.first())
        .map(|(l, _)| l.clone())
        .unwrap_or_default();
    if let Some(b) = &c.baseline {
        report.baseline = b.clone();
    }
    let mut cold_contenders = contenders.clone();
    if do_fio {
        cold_contenders.push(("fio".into(), Contender::Fio));
        report.reference = Some("fio".into());
        report.notes.push(format!("fio row: one job reading the file sequentially in 1 MiB O_DIRECT reads, {} in flight, caches dropped first: the disk's own rate in the same rounds", crate::large::FIO_SEQ_DEPTH));
    }
    let mixed: Vec<(String, Server)> = servers.iter().map(|(s, _)| (s.name(), s.clone())).collect();
    let mb = huge.file_size as f64 / 1e6;
    let g_cold = format!("700 MB file ({mb:.0} MB), one stream, cold");
    let g_hot = format!("700 MB file ({mb:.0} MB), one stream, cached");
    let g_mixed_cold =
        "700 MB file, cold, and 1 KiB files beside it on one HTTP/2 connection".to_string();
    let g_mixed_hot =
        "700 MB file, cached, and 1 KiB files beside it on one HTTP/2 connection".to_string();
    let probe = DiskProbe::Real(sys::block_device_of(&huge.dir));
    let file = huge.files[0].clone();
    let per_round = cold_contenders.len() + contenders.len() + 2 * mixed.len();
    let progress = Progress::new((per_round * c.rounds() as usize) as u64, "large --h2");
    let ctx = Ctx {
        root: &huge.dir,
        file: &file,
        size: huge.file_size,
        cgroup: &cgroup,
        workers: c.workers,
        flags: &a.spindle_flags,
        tls: &tls,
        probe: &probe,
        work: &work,
    };
    for round in 0..c.rounds() as usize {
        let line = |label: &str, what: &str, res: &Result<BTreeMap<String, f64>>| match res {
            Ok(m) => format!(
                "round {} {what:<12} {label:<28} {:>8.1} MB/s  1 KiB p99 {:.2} ms",
                round + 1,
                m.get("mb_per_sec").unwrap_or(&0.0),
                m.get("small_p99_ms").unwrap_or(&f64::NAN)
            ),
            Err(e) => format!("round {} {what} {label}: {e:#}", round + 1),
        };
        for (label, who) in common::rotated(&cold_contenders, round) {
            progress.start(format!("round {} cold {label}", round + 1));
            let res = match who {
                Contender::Server(s, p) => ctx.h2load(s, *p, true),
                Contender::Fio => crate::large::fio_sequential(&huge.dir.join(&file), 1, &work),
            };
            progress.done(line(label, "cold", &res));
            report.add(&g_cold, label, res);
        }
        sys::read_whole(&huge.dir.join(&file))?;
        for (label, who) in common::rotated(&contenders, round + 1) {
            progress.start(format!("round {} cached {label}", round + 1));
            let Contender::Server(s, p) = who else {
                unreachable!("fio runs cold only")
            };
            let res = ctx.h2load(s, *p, false);
            progress.done(line(label, "cached", &res));
            report.add(&g_hot, label, res);
        }
        for (group, cold) in [(&g_mixed_cold, true), (&g_mixed_hot, false)] {
            for (label, s) in common::rotated(&mixed, round) {
                progress.start(format!("round {} mixed {label}", round + 1));
                if !cold {
                    sys::read_whole(&huge.dir.join(&file))?;
                }
                let res = ctx.mixed(s, cold);
                progress.done(line(
                    label,
                    if cold { "mixed cold" } else { "mixed cached" },
                    &res,
                ));
                report.add(group, label, res);
            }
        }
    }
    progress.finish();
    report.machine.finish();
    drop(cgroup);
    for f in report.write(&c.out, "large-h2", &COLUMNS, "MB/s")? {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// What every run of the experiment shares.
struct Ctx<'a> {
    root: &'a Path,
    file: &'a str,
    size: u64,
    cgroup: &'a sys::MemCgroup,
    workers: u32,
    flags: &'a [String],
    tls: &'a crate::tls::TlsFiles,
    probe: &'a DiskProbe<'a>,
    work: &'a Path,
}

impl Ctx<'_> {
    fn start(&self, server: &Server) -> Result<Running> {
        let mut setup = common::setup(self.root, self.workers);
        setup.cgroup_procs = Some(self.cgroup.procs.clone());
        if matches!(server, Server::Spindle(_)) {
            setup.spindle_flags = self.flags.to_vec();
        }
        setup.tls = Some(self.tls.clone());
        setup.http2 = true;
        Running::start(server, &setup)
    }

    /// One h2load run over the file: one fetch cold, or [`HOT_FETCHES`]
    /// cached.
    fn h2load(&self, server: &Server, proto: Proto, cold: bool) -> Result<BTreeMap<String, f64>> {
        let mut running = self.start(server)?;
        let urls = self.work.join("urls");
        common::write_urls_scheme(&urls, "https", running.port, &[self.file.to_string()])?;
        let n = if cold { 1 } else { HOT_FETCHES };
        let mut extra = vec!["-n".to_string(), n.to_string()];
        if proto == Proto::Https1 {
            extra.push("--h1".into());
        }
        if cold {
            sys::drop_caches()?;
        }
        let r = crate::cold::measured(&running, self.probe, || {
            crate::h2load::metrics(&crate::h2load::run(&urls, (1, 1), &extra, self.workers)?)
        });
        running.stop()?;
        std::thread::sleep(Duration::from_millis(100));
        r.map(|mut m| {
            m.remove("fetch_ms_p50");
            m.remove("fetch_ms_p99");
            crate::large::with_cpu_per_gb_of(m, self.size as f64 * n as f64)
        })
    }

    /// One download with the 1 KiB file beside it on the same connection.
    fn mixed(&self, server: &Server, cold: bool) -> Result<BTreeMap<String, f64>> {
        let mut running = self.start(server)?;
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], running.port).into();
        // The small file is cached before the run in both modes.
        sys::read_whole(&self.root.join(SMALL_FILE))?;
        if cold {
            sys::drop_caches()?;
            sys::read_whole(&self.root.join(SMALL_FILE))?;
        }
        let cpu = common::pinning(self.workers).1;
        let m = crate::h2mixed::Mixed {
            addr,
            ca: &self.tls.ca,
            large: (self.file, self.size),
            small: (SMALL_FILE, SMALL_BYTES),
            gap: MIXED_GAP,
        };
        let r = std::thread::scope(|sc| {
            sc.spawn(|| {
                if let Some(cpu) = cpu.as_deref().and_then(|c| c.parse().ok()) {
                    sys::pin_this_thread(cpu)?;
                }
                crate::cold::measured(&running, self.probe, || crate::h2mixed::run(&m))
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the mixed client panicked"))?
        });
        running.stop()?;
        std::thread::sleep(Duration::from_millis(100));
        r.map(|m| crate::large::with_cpu_per_gb_of(m, self.size as f64))
    }
}
