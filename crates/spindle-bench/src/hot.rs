//! `hot`: everything cached. Requests per second and the server's CPU seconds per
//! 10,000 requests, for 100 KiB and 1 KiB files, with keep-alive and with a connection
//! per fetch.

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::json;

use crate::common::{self, CommonArgs, End, Load, LoadTls, Machine, Progress};
use crate::data::{self, DataSet, SetKind};
use crate::report::{col, Column, Report};
use crate::servers::Running;

/// Files of the 100 KiB set served hot (1 GB: fits in memory).
const HOT_SMALL_FILES: usize = 10_000;

/// Why `hot --quick` is a smoke test (its method line).
const QUICK_HOT: &str = "--quick measures 0.5 s per server and mode over 200 files of 100 KiB and 200 of 1 KiB. The full run (10 s each) puts spindle io-uring at 0.96-1.17x the best peer, with rounds spreading 2-21%; on this machine, with other work on its two cores, samples of 0.25 s spread 27-170% between rounds, of 1 s 23-109% and of 3 s 45-158%, so no quick length orders servers that close.";

#[derive(clap::Args, Debug, Clone)]
pub struct HotArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Seconds of load per measurement.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Concurrent fetches.
    #[arg(long, default_value_t = 100)]
    pub parallel: u64,
    /// HTTPS: every server with the same ECDSA P-256 certificate (made for the
    /// run), servers that cannot encrypt skipped; connection per fetch is measured
    /// with TLS session resumption and with a full handshake each. Reports go to
    /// hot-tls.*.
    #[arg(long)]
    pub tls: bool,
    /// HTTP/2 over HTTPS, measured with h2load (Debian nghttp2-client),
    /// `-c 10 -m 32` by default: spindle io-uring against nginx (`http2`),
    /// lighttpd (`server.h2proto`) and H2O (`--servers ...,h2o`), the same
    /// certificate for all. Reports go to hot-h2.*.
    #[arg(long)]
    pub h2: bool,
    /// With --h2: h2load's connections.
    #[arg(long, default_value_t = 10)]
    pub h2_clients: u64,
    /// With --h2: h2load's concurrent streams per connection.
    #[arg(long, default_value_t = 32)]
    pub h2_streams: u64,
    /// An extra flag for every spindle server (repeatable), e.g. to run
    /// with features on: `--spindle-flag=--autoindex`; committed reports
    /// say which they used.
    #[arg(long = "spindle-flag", allow_hyphen_values = true)]
    pub spindle_flags: Vec<String>,
}

/// The ways a run's connections are used: keep-alive, or a new connection per
/// fetch (over HTTPS, resumed or with a full handshake).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    KeepAlive,
    PerFetch,
    PerFetchFull,
}

impl Mode {
    fn label(self, tls: bool) -> &'static str {
        match (self, tls) {
            (Mode::KeepAlive, _) => "keep-alive",
            (Mode::PerFetch, false) => "connection per fetch",
            (Mode::PerFetch, true) => "connection per fetch, resumed",
            (Mode::PerFetchFull, _) => "connection per fetch, full handshake",
        }
    }
}

/// Over HTTPS, also the handshakes the client made, by kind.
pub const COLUMNS_TLS: [Column; 8] = [
    col("req_per_sec", "req/s", 0),
    col("cpu_s_per_10k", "server CPU s / 10k req", 3),
    col("fetch_ms_p50", "p50 ms", 2),
    col("fetch_ms_p99", "p99 ms", 2),
    col("mb_per_sec", "MB/s", 1),
    col("tls_full", "full handshakes", 0),
    col("tls_resumed", "resumed", 0),
    col("non_200", "non-200", 0),
];

pub const COLUMNS: [Column; 6] = [
    col("req_per_sec", "req/s", 0),
    col("cpu_s_per_10k", "server CPU s / 10k req", 3),
    col("fetch_ms_p50", "p50 ms", 2),
    col("fetch_ms_p99", "p99 ms", 2),
    col("mb_per_sec", "MB/s", 1),
    col("non_200", "non-200", 0),
];

/// The hot experiment's sets, made if missing: 100 KiB files (1 GB;
/// 20 MB with `--quick`) and 1 KiB files.
pub(crate) fn sets(c: &CommonArgs) -> Result<(DataSet, DataSet)> {
    let scale = if c.quick { 0.002 } else { 0.1 };
    let small = data::ensure(&c.data, SetKind::Small, scale, true)?;
    let tiny_scale = if c.quick { 0.2 } else { 1.0 };
    let tiny = data::ensure(&c.data, SetKind::Tiny, tiny_scale, true)?;
    Ok((small, tiny))
}

/// The first `n` files of a set as paths from the data root
/// (`small-s0.1/000123`).
pub(crate) fn rel(set: &DataSet, n: usize) -> Vec<String> {
    let prefix = set
        .dir
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .to_string();
    set.files
        .iter()
        .take(n)
        .map(|f| format!("{prefix}/{f}"))
        .collect()
}

/// Reads the first `n` files of a set, so that they are cached.
pub(crate) fn warm(set: &DataSet, n: usize) {
    read_all(set, &set.files.iter().take(n).cloned().collect::<Vec<_>>());
}

fn read_all(set: &DataSet, files: &[String]) {
    for f in files {
        let _ = std::fs::read(set.dir.join(f));
    }
}

pub fn run(a: HotArgs) -> Result<()> {
    let c = &a.common;
    let (mut servers, mut notes) = c.servers()?;
    let tls_run = a.tls || a.h2;
    if tls_run {
        crate::tls::https_only(&mut servers, &mut notes)?;
    }
    if a.h2 {
        crate::h2load::h2_only(&mut servers, &mut notes)?;
    } else if servers
        .iter()
        .any(|(s, _)| *s == crate::servers::Server::H2o)
    {
        anyhow::bail!("h2o is compared over HTTP/2 only: add --h2");
    }
    let name_of_run = match (a.h2, a.tls) {
        (true, _) => "hot-h2",
        (false, true) => "hot-tls",
        (false, false) => "hot",
    };
    let modes: &[Mode] = if a.h2 {
        &[Mode::KeepAlive]
    } else if a.tls {
        &[Mode::KeepAlive, Mode::PerFetch, Mode::PerFetchFull]
    } else {
        &[Mode::KeepAlive, Mode::PerFetch]
    };
    let (small, tiny) = sets(c)?;
    let seconds = if c.quick {
        a.seconds.min(0.5)
    } else {
        a.seconds
    };
    let baseline = c.baseline(&servers);
    let mut machine = Machine::probe(&c.data);
    for (s, v) in &servers {
        machine.versions.insert(s.name(), v.clone());
    }
    let sets = [
        ("100 KiB", rel(&small, HOT_SMALL_FILES), &small),
        ("1 KiB", rel(&tiny, usize::MAX), &tiny),
    ];
    for (_, _, set) in &sets {
        warm(set, HOT_SMALL_FILES);
    }
    let mut report = Report::new(
        name_of_run,
        match (a.h2, a.tls) {
            (true, _) => "hot over HTTP/2 (HTTPS): everything cached",
            (false, true) => "hot over HTTPS: everything cached",
            (false, false) => "hot: everything cached",
        },
        machine,
        json!({"seconds": seconds, "parallel": a.parallel, "workers": c.workers,
               "files_100k": sets[0].1.len(), "files_1k": sets[1].1.len(), "rounds": c.rounds()}),
    );
    report.baseline = baseline;
    report.primary = "req_per_sec".into();
    report.notes = notes;
    if c.quick {
        report.smoke_test(QUICK_HOT);
    }
    if !a.spindle_flags.is_empty() {
        report.notes.push(format!(
            "spindle servers ran with {}",
            a.spindle_flags.join(" ")
        ));
    }
    report.notes.push(format!(
        "server pinned to CPU {}, load generator to CPU {}; server CPU = utime+stime of every process and thread in the server's process group (/proc/PID/stat)",
        common::pinning(c.workers).0.unwrap_or_else(|| "any".into()),
        common::pinning(c.workers).1.unwrap_or_else(|| "any".into())
    ));
    let work = common::workdir(&c.out, name_of_run)?;
    if a.h2 {
        report.notes.push(format!(
            "HTTP/2: h2load -c {} -m {} (one thread, pinned like the load generator), each server's HTTPS listener offering h2; nginx `listen ... ssl http2`, lighttpd `server.h2proto`, H2O with one thread and its defaults; p50 and p99 are h2load's mean and max time per request",
            a.h2_clients, a.h2_streams
        ));
    }
    let tls = if tls_run {
        let files = crate::tls::make(&work.join("tls"))?;
        report.notes.push(format!(
            "{}; `resumed` reuses a session ticket per connection, `full handshake` turns resumption off",
            crate::tls::note()
        ));
        Some(files)
    } else {
        None
    };
    let total = c.rounds() as u64 * servers.len() as u64 * 2 * modes.len() as u64;
    let progress = Progress::new(total, name_of_run);
    for round in 0..c.rounds() {
        for (server, _) in common::rotated(&servers, round as usize) {
            let name = server.name();
            let mut setup = common::setup(&c.data, c.workers);
            setup.tls = tls.clone();
            setup.http2 = a.h2;
            setup.spindle_flags = a.spindle_flags.clone();
            let mut running = match Running::start(server, &setup) {
                Ok(r) => r,
                Err(e) => {
                    for (label, _, _) in &sets {
                        for mode in modes {
                            report.add(
                                &format!("{label}, {}", mode.label(tls_run)),
                                &name,
                                Err(anyhow::anyhow!("{e:#}")),
                            );
                            progress.done(format!(
                                "round {} {name}: failed to start: {e:#}",
                                round + 1
                            ));
                        }
                    }
                    continue;
                }
            };
            for (label, paths, _) in &sets {
                let urls = work.join(format!("urls-{}", label.replace(' ', "")));
                let scheme = if tls_run { "https" } else { "http" };
                common::write_urls_scheme(&urls, scheme, running.port, paths)?;
                for &mode in modes {
                    let group = format!("{label}, {}", mode.label(tls_run));
                    progress.start(format!("round {} {group} {name}", round + 1));
                    let load_tls = tls.as_ref().map(|t| LoadTls {
                        ca: t.ca.clone(),
                        resume: mode != Mode::PerFetchFull,
                    });
                    let keepalive = mode == Mode::KeepAlive;
                    let sample = if a.h2 {
                        measure_h2(
                            &running,
                            &urls,
                            seconds,
                            (a.h2_clients, a.h2_streams),
                            c.workers,
                        )
                    } else {
                        measure(
                            &running, &urls, keepalive, load_tls, seconds, a.parallel, &work,
                        )
                    };
                    let line = match &sample {
                        Ok(m) => format!(
                            "round {} {group:<28} {name:<28} {:>9.0} req/s {:>7.3} CPU s/10k",
                            round + 1,
                            m.get("req_per_sec").unwrap_or(&0.0),
                            m.get("cpu_s_per_10k").unwrap_or(&0.0)
                        ),
                        Err(e) => format!("round {} {group} {name}: {e:#}", round + 1),
                    };
                    report.add(&group, &name, sample);
                    progress.done(line);
                }
            }
            running.stop()?;
        }
    }
    progress.finish();
    report.machine.finish();
    let columns: &[Column] = if a.tls && !a.h2 {
        &COLUMNS_TLS
    } else {
        &COLUMNS
    };
    let files = report.write(&c.out, name_of_run, columns, "requests per second")?;
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// One measurement with the load generator: a short warm-up (open-file
/// caches, TCP), then `seconds` of load, the server's CPU counted around
/// it.
pub(crate) fn measure(
    running: &Running,
    urls: &std::path::Path,
    keepalive: bool,
    tls: Option<LoadTls>,
    seconds: f64,
    parallel: u64,
    work: &std::path::Path,
) -> Result<BTreeMap<String, f64>> {
    let mut load = Load {
        rate: None,
        urls: urls.to_path_buf(),
        parallel,
        end: End::Seconds((seconds / 5.0).clamp(0.2, 2.0)),
        keepalive,
        idle: 0,
        timeout_secs: 30,
        tls,
    };
    // Warm-up: open-file caches, TCP.
    common::run_load(&load, work, "warmup")?;
    load.end = End::Seconds(seconds);
    let c0 = running.cpu_seconds();
    let v = common::run_load(&load, work, "hot")?;
    let c1 = running.cpu_seconds();
    let mut m = common::load_metrics(&v);
    let fetches = m.get("fetches").copied().unwrap_or(0.0);
    m.insert(
        "req_per_sec".into(),
        m.get("fetches_per_sec").copied().unwrap_or(0.0),
    );
    m.insert("server_cpu_s".into(), c1 - c0);
    if fetches > 0.0 {
        m.insert("cpu_s_per_10k".into(), (c1 - c0) / fetches * 10_000.0);
    }
    Ok(m)
}

/// One HTTP/2 measurement: a short h2load warm-up, then `seconds` of
/// `-c clients -m streams` over the URLs, the server's CPU counted
/// around the second run.
fn measure_h2(
    running: &Running,
    urls: &std::path::Path,
    seconds: f64,
    (clients, streams): (u64, u64),
    workers: u32,
) -> Result<BTreeMap<String, f64>> {
    let cs = (clients, streams);
    crate::h2load::run(
        urls,
        cs,
        &["-n".into(), (clients * streams * 20).to_string()],
        workers,
    )?;
    let c0 = running.cpu_seconds();
    let secs = format!("{}", seconds.max(1.0).round() as u64);
    let text = crate::h2load::run(urls, cs, &["-D".into(), secs], workers)?;
    let c1 = running.cpu_seconds();
    let mut m = crate::h2load::metrics(&text)?;
    let fetches = m.get("fetches").copied().unwrap_or(0.0);
    m.insert("server_cpu_s".into(), c1 - c0);
    if fetches > 0.0 {
        m.insert("cpu_s_per_10k".into(), (c1 - c0) / fetches * 10_000.0);
    }
    Ok(m)
}
