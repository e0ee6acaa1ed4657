//! `idle`: throughput as idle keep-alive connections grow (0, 1k, 5k, 10k), with
//! `spindle-load --idle`, and the server's RSS at each step: the first figure of
//! LaHaise's OLS 2002 paper, for whole servers. Files: 1 KiB, cached.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use crate::common::{self, CommonArgs, End, Load, Machine, Progress};
use crate::data::{self, SetKind};
use crate::report::{col, Column, Report};
use crate::servers::Running;

#[derive(clap::Args, Debug, Clone)]
pub struct IdleArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Idle connection counts.
    #[arg(long, value_delimiter = ',', default_value = "0,1000,5000,10000")]
    pub idle: Vec<u64>,
    /// Seconds of load per step.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Working keep-alive connections.
    #[arg(long, default_value_t = 100)]
    pub parallel: u64,
    /// HTTP/2 over HTTPS: the idle connections are TLS connections that
    /// chose h2 by ALPN and exchanged SETTINGS, with no stream open, held
    /// by the harness; the load is h2load `-c 10 -m 32`. The servers that
    /// speak HTTP/2 only, with the same certificate. Reports go to idle-h2.*
    #[arg(long)]
    pub h2: bool,
}

/// Why `idle --quick` is a smoke test (its method line).
const QUICK_IDLE: &str = "--quick holds 0 and 100 idle connections (the full run: up to 10,000) for 1 s per step: too few for idle connections to cost anything measurable, and rounds of 10 s in the full run already spread 21-40%, so a 1 s step orders nothing.";

pub const COLUMNS: [Column; 8] = [
    col("req_per_sec", "req/s", 0),
    col("rss_mib", "server RSS MiB (max during run)", 1),
    col("idle_held_at_end", "idle held at end", 0),
    col("fetch_ms_p99", "p99 ms", 2),
    col("cpu_s_per_10k", "server CPU s / 10k req", 3),
    col("client_cpu_s_per_10k", "client CPU s / 10k req", 3),
    col("client_busy", "client core busy (share)", 2),
    col("non_200", "non-200", 0),
];

pub fn run(a: IdleArgs) -> Result<()> {
    let c = &a.common;
    let (mut servers, mut notes) = c.servers()?;
    if a.h2 {
        crate::tls::https_only(&mut servers, &mut notes)?;
        crate::h2load::h2_only(&mut servers, &mut notes)?;
    }
    let name_of_run = if a.h2 { "idle-h2" } else { "idle" };
    let steps: Vec<u64> = if c.quick {
        vec![0, 100]
    } else {
        a.idle.clone()
    };
    let seconds = if c.quick {
        a.seconds.min(1.0)
    } else {
        a.seconds
    };
    let tiny = data::ensure(
        &c.data,
        SetKind::Tiny,
        if c.quick { 0.2 } else { 1.0 },
        true,
    )?;
    for f in &tiny.files {
        let _ = std::fs::read(tiny.dir.join(f));
    }
    let mut machine = Machine::probe(&tiny.dir);
    for (s, v) in &servers {
        machine.versions.insert(s.name(), v.clone());
    }
    let mut report = Report::new(
        name_of_run,
        if a.h2 {
            "idle HTTP/2 connections (TLS, SETTINGS exchanged, no stream): throughput and server RSS"
        } else {
            "idle keep-alive connections: throughput and server RSS"
        },
        machine,
        json!({"idle": steps, "seconds": seconds, "parallel": a.parallel, "workers": c.workers,
               "files": tiny.files.len(), "rounds": c.rounds()}),
    );
    report.baseline = c.baseline(&servers);
    report.primary = "req_per_sec".into();
    report.notes = notes;
    if c.quick {
        report.smoke_test(QUICK_IDLE);
    }
    report.notes.push("a fresh server process group for every round, step and server: a step's RSS is that of a server that has held only that step's connections; each server runs its steps back to back (the bar is a ratio between steps of one server), in ascending order in odd rounds and descending in even ones, and the servers' order rotates from round to round, so that drift in the machine does not fall on one step or one server; RSS = sum of VmRSS over the server's processes, sampled every 100 ms during the run, max kept".into());
    let work = common::workdir(&c.out, name_of_run)?;
    let tls = if a.h2 {
        report.notes.push(format!(
            "{}; the idle connections: rustls clients offering only h2, each sending the preface and SETTINGS and acknowledging the server's, then silent, all opened before the measured run; load: h2load -c {H2_CLIENTS} -m {H2_STREAMS} over 1 KiB files",
            crate::tls::note()
        ));
        Some(crate::tls::make(&work.join("tls"))?)
    } else {
        None
    };
    let progress = Progress::new(
        c.rounds() as u64 * servers.len() as u64 * steps.len() as u64,
        name_of_run,
    );
    for round in 0..c.rounds() {
        let mut order = steps.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        // Each server runs all its steps back to back: the bar is a ratio
        // between steps of one server, so its terms are measured a minute
        // apart, not several. With the steps minutes apart, one server's
        // per-round ratio ranged from 0.63 to 1.13 in a five-round run.
        let k = round as usize % servers.len().max(1);
        for (server, _) in servers[k..].iter().chain(&servers[..k]) {
            for &n in &order {
                let group = format!("{n} idle connections");
                let name = server.name();
                progress.start(format!("round {} {group} {name}", round + 1));
                let mut setup = common::setup(&tiny.dir, c.workers);
                setup.tls = tls.clone();
                setup.http2 = a.h2;
                let r = Running::start(server, &setup)
                    .and_then(|running| {
                        let urls = work.join("urls");
                        match &tls {
                            Some(t) => {
                                common::write_urls_scheme(
                                    &urls,
                                    "https",
                                    running.port,
                                    &tiny.files,
                                )?;
                                step_h2(&running, &urls, n, seconds, t, c.workers)
                            }
                            None => {
                                common::write_urls(&urls, running.port, &tiny.files)?;
                                step(&running, &urls, n, seconds, a.parallel, &work)
                            }
                        }
                    })
                    .map(|mut m| {
                        m.insert("round".into(), (round + 1) as f64);
                        m
                    });
                let line = match &r {
                    Ok(m) => format!(
                        "round {} {n:>6} idle {name:<28} {:>9.0} req/s RSS {:>7.1} MiB",
                        round + 1,
                        m.get("req_per_sec").unwrap_or(&0.0),
                        m.get("rss_mib").unwrap_or(&0.0)
                    ),
                    Err(e) => format!("round {} {group} {name}: {e:#}", round + 1),
                };
                report.add(&group, &name, r);
                progress.done(line);
            }
        }
    }
    progress.finish();
    // The bars: throughput at the largest step vs 0, RSS growth per idle connection.
    let mut o = String::from("## Per idle connection\n\n| server | req/s at max idle / at 0 | the same, round by round | server CPU per request, at max idle / at 0 | client CPU per request, at max idle / at 0 | RSS growth per idle connection (KiB) |\n|---|---:|---|---:|---:|---:|\n");
    let (first, last) = (
        steps.first().copied().unwrap_or(0),
        steps.last().copied().unwrap_or(0),
    );
    for (s, _) in &servers {
        let g0 = format!("{first} idle connections");
        let g1 = format!("{last} idle connections");
        let r0 = report.median(&g0, &s.name(), "req_per_sec");
        let r1 = report.median(&g1, &s.name(), "req_per_sec");
        let m0 = report.median(&g0, &s.name(), "rss_mib");
        let m1 = report.median(&g1, &s.name(), "rss_mib");
        let ratio = match (r0, r1) {
            (Some(a), Some(b)) if a > 0.0 => format!("{:.2}", b / a),
            _ => "–".into(),
        };
        let per = match (m0, m1) {
            (Some(a), Some(b)) if last > first => {
                format!("{:.2}", (b - a) * 1024.0 / (last - first) as f64)
            }
            _ => "–".into(),
        };
        let rounds = paired_ratios(&report, &g0, &g1, &s.name(), "req_per_sec")
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ");
        let cost = |key: &str| match (
            report.median(&g0, &s.name(), key),
            report.median(&g1, &s.name(), key),
        ) {
            (Some(a), Some(b)) if a > 0.0 => format!("{:.2}", b / a),
            _ => "–".into(),
        };
        o.push_str(&format!(
            "| {} | {ratio} | {rounds} | {} | {} | {per} |\n",
            s.name(),
            cost("cpu_s_per_10k"),
            cost("client_cpu_s_per_10k")
        ));
    }
    o.push_str(if a.h2 {
        "\nBar (issue 38): 10,000 idle HTTP/2 connections (SETTINGS exchanged, no stream open) cost spindle io-uring at most 16 KiB of RSS each.\n"
    } else {
        "\nBars (issue 5): spindle io-uring keeps ≥ 0.95 of its 0-idle throughput at 10,000 idle connections, and its RSS grows by ≤ 4 KiB per idle connection.\n"
    });
    o.push_str("\nReading the CPU columns: the client and the server each have one core, and both are near busy at these rates, so req/s moves with the speed of the machine as well as with the server. The client's CPU per request is the yardstick for the machine: when the server's ratio rises with the client's, the machine was slower in that step; when it rises alone, the idle connections cost the server. The server's CPU is taken over the measured run alone (from the load generator's start and end times and the server's CPU sampled every 100 ms), so setting up the step's idle connections is not in it.\n");
    report.extra_md.push(o);
    report.machine.finish();
    for f in report.write(&c.out, name_of_run, &COLUMNS, "requests per second")? {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// `key` at group `g1` over `key` at group `g0`, for each round in which
/// the server has a sample in both.
fn paired_ratios(report: &Report, g0: &str, g1: &str, server: &str, key: &str) -> Vec<f64> {
    let (a, b) = (
        report.per_round(g0, server, key),
        report.per_round(g1, server, key),
    );
    a.iter()
        .filter_map(|(r, x)| Some(b.get(r)? / x).filter(|_| *x > 0.0))
        .collect()
}

fn step(
    running: &Running,
    urls: &std::path::Path,
    idle: u64,
    seconds: f64,
    parallel: u64,
    work: &std::path::Path,
) -> Result<std::collections::BTreeMap<String, f64>> {
    let sampler = Sampler::start(running.pgid);
    let load = Load {
        rate: None,
        urls: urls.to_path_buf(),
        parallel,
        end: End::Seconds(seconds),
        keepalive: true,
        idle,
        timeout_secs: 60,
        tls: None,
    };
    let c0 = running.cpu_seconds();
    let r = common::run_load(&load, work, "idle");
    let c1 = running.cpu_seconds();
    let (max_rss_kib, samples) = sampler.finish();
    let v = r?;
    let mut m = common::load_metrics(&v);
    let fetches = m.get("fetches").copied().unwrap_or(0.0);
    let f = |p: &str| v.pointer(p).and_then(serde_json::Value::as_f64);
    let window = match (f("/run_started_unix_secs"), f("/run_ended_unix_secs")) {
        (Some(t0), Some(t1)) => cpu_between(&samples, t0, t1),
        _ => None,
    };
    m.insert(
        "req_per_sec".into(),
        m.get("fetches_per_sec").copied().unwrap_or(0.0),
    );
    m.insert("rss_mib".into(), max_rss_kib as f64 / 1024.0);
    m.insert("idle".into(), idle as f64);
    if fetches > 0.0 {
        // Over the measured run when the samples cover it; else the whole
        // step, setup included.
        let cpu = window.unwrap_or(c1 - c0);
        m.insert("cpu_s_per_10k".into(), cpu / fetches * 10_000.0);
        m.insert(
            "cpu_over_run_only".into(),
            if window.is_some() { 1.0 } else { 0.0 },
        );
    }
    Ok(m)
}

/// The server's RSS (its maximum) and CPU on the wall clock, every 100 ms,
/// so that its CPU per request can be taken over the measured run alone:
/// setting up 10,000 idle connections (an accept and a request each)
/// comes before it.
struct Sampler {
    stop: Arc<AtomicBool>,
    max_rss: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<Vec<(f64, f64)>>,
}

impl Sampler {
    fn start(pgid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let max_rss = Arc::new(AtomicU64::new(0));
        let thread = {
            let stop = stop.clone();
            let max_rss = max_rss.clone();
            std::thread::spawn(move || {
                let mut cpu = Vec::with_capacity(CPU_SAMPLES_MAX);
                while !stop.load(Ordering::Relaxed) {
                    max_rss.fetch_max(crate::sys::group_rss_kib(pgid), Ordering::Relaxed);
                    if cpu.len() < CPU_SAMPLES_MAX {
                        cpu.push((unix_now(), crate::sys::group_cpu_seconds(pgid)));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                cpu.push((unix_now(), crate::sys::group_cpu_seconds(pgid)));
                cpu
            })
        };
        Sampler {
            stop,
            max_rss,
            thread,
        }
    }

    /// The maximum RSS (KiB) and the CPU samples.
    fn finish(self) -> (u64, Vec<(f64, f64)>) {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self.thread.join().unwrap_or_default();
        (self.max_rss.load(Ordering::Relaxed), samples)
    }
}

/// h2load's connections and streams per connection in `idle --h2`.
const H2_CLIENTS: u64 = 10;
const H2_STREAMS: u64 = 32;

/// One `idle --h2` step: `idle` HTTP/2 connections held (SETTINGS
/// exchanged, no stream), then `seconds` of h2load, the server's RSS
/// sampled throughout.
fn step_h2(
    running: &Running,
    urls: &std::path::Path,
    idle: u64,
    seconds: f64,
    tls: &crate::tls::TlsFiles,
    workers: u32,
) -> Result<std::collections::BTreeMap<String, f64>> {
    let sampler = Sampler::start(running.pgid);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], running.port));
    let held = if idle > 0 {
        Some(crate::h2idle::Holder::open(addr, idle, &tls.ca))
    } else {
        None
    };
    let held = match held.transpose() {
        Ok(h) => h,
        Err(e) => {
            sampler.finish();
            return Err(e);
        }
    };
    let c0 = running.cpu_seconds();
    let secs = format!("{}", seconds.max(1.0).round() as u64);
    let text = crate::h2load::run(
        urls,
        (H2_CLIENTS, H2_STREAMS),
        &["-D".into(), secs],
        workers,
    );
    let c1 = running.cpu_seconds();
    let at_end = held.map_or(0, crate::h2idle::Holder::close);
    let (max_rss_kib, _) = sampler.finish();
    let mut m = crate::h2load::metrics(&text?)?;
    m.insert("rss_mib".into(), max_rss_kib as f64 / 1024.0);
    m.insert("idle".into(), idle as f64);
    m.insert("idle_held_at_end".into(), at_end as f64);
    m.insert("server_cpu_s".into(), c1 - c0);
    if let Some(f) = m.get("fetches").copied().filter(|f| *f > 0.0) {
        m.insert("cpu_s_per_10k".into(), (c1 - c0) / f * 10_000.0);
    }
    Ok(m)
}

/// Most CPU samples kept per step (100 ms apart: over 13 minutes).
const CPU_SAMPLES_MAX: usize = 8192;

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// CPU seconds used between wall-clock times `t0` and `t1`, linearly
/// interpolated between the samples `(time, cumulative CPU)` around each;
/// None unless samples lie on both sides of both ends.
fn cpu_between(samples: &[(f64, f64)], t0: f64, t1: f64) -> Option<f64> {
    let at = |t: f64| {
        let i = samples.iter().position(|s| s.0 >= t)?;
        if samples[i].0 == t {
            return Some(samples[i].1);
        }
        let (b, a) = (samples[i], samples[i.checked_sub(1)?]);
        let k = if b.0 > a.0 {
            (t - a.0) / (b.0 - a.0)
        } else {
            1.0
        };
        Some(a.1 + (b.1 - a.1) * k)
    };
    (t1 > t0).then_some(())?;
    Some(at(t1)? - at(t0)?)
}

#[cfg(test)]
mod tests {
    use super::cpu_between;

    #[test]
    fn cpu_between_interpolates_inside_the_samples_only() {
        let s = [(10.0, 1.0), (11.0, 2.0), (12.0, 4.0)];
        assert_eq!(cpu_between(&s, 10.5, 11.5), Some(1.5));
        assert_eq!(cpu_between(&s, 10.0, 12.0), Some(3.0));
        assert_eq!(
            cpu_between(&s, 9.0, 11.0),
            None,
            "starts before the samples"
        );
        assert_eq!(cpu_between(&s, 11.0, 12.5), None, "ends after them");
        assert_eq!(cpu_between(&s, 11.5, 11.0), None);
    }
}
