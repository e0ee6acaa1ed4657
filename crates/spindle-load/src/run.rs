//! One run: read the inputs, start the worker threads, watch them (progress
//! line, progress bar, CPU samples), and build the [`Summary`].

use crate::cli::{Config, End, Start, THROTTLE_BYTES_PER_SEC};
use crate::engine::{build_requests, thread_main, Plan, Shared, Target, ThreadPlan, ThreadResult};
use crate::gfmt::g;
use crate::report::{
    ClientCpu, ConfigEcho, CpuReport, IdleSummary, LatencySummary, Summary, SCHEMA,
};
use crate::stats::Stats;
use crate::sys;
use crate::sysstat;
use crate::urls::{load_sip_file, load_url_file, Resolver};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Descriptors kept back for stdio, epoll instances, files.
pub const RESERVED_FDS: u64 = 64;
/// How often the monitor wakes to look at the workers.
pub const MONITOR_TICK: Duration = Duration::from_millis(50);

/// Why a run did not happen.
#[derive(Debug)]
pub enum RunError {
    /// Bad input (files, hosts, limits): exit status 2.
    Input(String),
    /// Something broke during the run: exit status 1.
    Fatal(String),
}

/// Split `total` into `parts` shares that differ by at most one.
pub fn split(total: u64, parts: u32, i: u32) -> u64 {
    let p = u64::from(parts);
    total / p + u64::from(u64::from(i) < total % p)
}

/// Everything the workers need, from the configuration.
pub fn prepare(cfg: &Config) -> Result<Plan, RunError> {
    let urls = load_url_file(&cfg.url_file).map_err(RunError::Input)?;
    let sips = match &cfg.sip_file {
        Some(p) => load_sip_file(p).map_err(RunError::Input)?,
        None => Vec::new(),
    };
    let mut resolver = Resolver::new();
    let mut targets = Vec::with_capacity(urls.len());
    for u in &urls {
        if u.tls && cfg.proxy.is_some() {
            return Err(RunError::Input(format!(
                "https through -proxy is not supported: {}",
                u.text
            )));
        }
        let addr = match &cfg.proxy {
            Some((h, p)) => resolver.resolve(h, *p),
            None => resolver.resolve(&u.host, u.port),
        }
        .map_err(RunError::Input)?;
        if let Some(ip) = sips.first() {
            if ip.is_ipv4() != addr.is_ipv4() {
                return Err(RunError::Input(format!(
                    "source address {ip} and server address {addr} are not the same IP version"
                )));
            }
        }
        let target = match cfg.proxy {
            Some(_) => format!("http://{}{}", u.host_header(), u.path),
            None => u.path.clone(),
        };
        let (request_close, request_keepalive) = build_requests(
            &target,
            &u.host_header(),
            u.authorization.as_deref(),
            u.range.as_deref(),
        );
        targets.push(Target {
            text: u.text.clone(),
            addr,
            request_close,
            request_keepalive,
            tls_name: u.tls.then(|| u.host.clone()),
        });
    }
    let tls = if targets.iter().any(|t| t.tls_name.is_some()) {
        Some(crate::tls::client_config(&cfg.tls).map_err(RunError::Input)?)
    } else {
        None
    };
    Ok(Plan {
        targets,
        sips,
        keepalive: cfg.keepalive,
        checksum: cfg.checksum,
        throttle: cfg.throttle.then_some(THROTTLE_BYTES_PER_SEC),
        timeout: cfg.timeout,
        fetch_limit: match cfg.end {
            End::Fetches(n) => Some(n),
            End::Seconds(_) => None,
        },
        seconds: match cfg.end {
            End::Seconds(s) => Some(Duration::from_secs_f64(s)),
            End::Fetches(_) => None,
        },
        tls,
    })
}

fn echo(cfg: &Config, plan: &Plan) -> ConfigEcho {
    let (mode, parallel, rate, jitter) = match cfg.start {
        Start::Parallel(n) => ("parallel", Some(n), None, false),
        Start::Rate { per_sec, jitter } => ("rate", None, Some(per_sec), jitter),
    };
    let (end, fetches_limit, seconds_limit) = match cfg.end {
        End::Fetches(n) => ("fetches", Some(n), None),
        End::Seconds(s) => ("seconds", None, Some(s)),
    };
    ConfigEcho {
        mode,
        parallel,
        rate,
        jitter,
        end,
        fetches_limit,
        seconds_limit,
        keepalive: cfg.keepalive,
        threads: cfg.threads,
        idle: cfg.idle,
        timeout_secs: cfg.timeout.as_secs_f64(),
        throttle: cfg.throttle,
        checksum: cfg.checksum,
        proxy: cfg.proxy.as_ref().map(|(h, p)| format!("{h}:{p}")),
        sip_count: plan.sips.len(),
        url_count: plan.targets.len(),
        url_file: cfg.url_file.display().to_string(),
    }
}

/// Print to stderr without tearing the progress bar.
fn status_line(pb: &Option<ProgressBar>, text: &str) {
    use std::io::Write;
    // Not eprint!: a closed stderr must not panic the monitor.
    let put = || {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    };
    match pb {
        Some(pb) => pb.suspend(put),
        None => put(),
    }
}

/// Run the load described by `cfg` and return what was measured.
pub fn run(cfg: &Config) -> Result<Summary, RunError> {
    let plan = prepare(cfg)?;

    let connections = match cfg.start {
        Start::Parallel(n) => n,
        Start::Rate { .. } => cfg.max_in_flight,
    };
    let limit = sys::raise_nofile_limit()
        .map_err(|e| RunError::Fatal(format!("cannot read RLIMIT_NOFILE: {e}")))?;
    let needed = connections + cfg.idle + RESERVED_FDS + u64::from(cfg.threads);
    if needed > limit {
        return Err(RunError::Input(format!(
            "{connections} connections and {} idle need about {needed} descriptors, but RLIMIT_NOFILE allows {limit}",
            cfg.idle
        )));
    }

    let shared = Shared::new(plan.targets.len());
    let barrier = Barrier::new(cfg.threads as usize + 1);
    let seed_base: u64 = {
        use rand::{Rng, SeedableRng};
        rand::rngs::SmallRng::from_os_rng().random()
    };
    let plans: Vec<ThreadPlan> = (0..cfg.threads)
        .map(|i| {
            let (parallel, rate, jitter) = match cfg.start {
                Start::Parallel(n) => (split(n, cfg.threads, i), 0.0, false),
                Start::Rate { per_sec, jitter } => (0, per_sec / f64::from(cfg.threads), jitter),
            };
            ThreadPlan {
                parallel,
                rate,
                jitter,
                max_in_flight: split(cfg.max_in_flight, cfg.threads, i).max(1),
                idle: split(cfg.idle, cfg.threads, i),
                seed: seed_base.wrapping_add(u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            }
        })
        .collect();

    let show_bar = !cfg.no_progress_bar && std::io::stderr().is_terminal();

    let (results, start, cpu) = std::thread::scope(|scope| {
        let handles: Vec<_> = plans
            .into_iter()
            .enumerate()
            .map(|(i, tp)| {
                let (plan, shared, barrier) = (&plan, &shared, &barrier);
                std::thread::Builder::new()
                    .name(format!("load-{i}"))
                    .spawn_scoped(scope, move || thread_main(plan, shared, tp, barrier))
                    .expect("spawning a worker thread")
            })
            .collect();

        if cfg.idle > 0 && show_bar {
            eprintln!("spindle-load: opening {} idle connections", cfg.idle);
        }
        barrier.wait();
        let start = Instant::now();
        let held = shared.idle_held.load(Relaxed);
        if cfg.idle > 0 && held < cfg.idle {
            eprintln!(
                "spindle-load: holding {held} of {} idle connections (see the errors above)",
                cfg.idle
            );
        }

        let pb = show_bar.then(|| {
            let (len, tmpl) = match cfg.end {
                End::Fetches(n) => (n, "{bar:40} {pos}/{len} fetches {per_sec} eta {eta}"),
                End::Seconds(s) => (s.ceil() as u64, "{bar:40} {pos}/{len} s {msg}"),
            };
            let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(tmpl) {
                pb.set_style(style);
            }
            pb
        });

        let mut cpu_prev = if cfg.cpu {
            sysstat::snapshot().ok()
        } else {
            None
        };
        let cpu_first = cpu_prev.clone();
        let mut cpu_prev_at = start;
        let mut samples = Vec::new();
        let mut next_cpu = start + cfg.cpu_interval;
        let mut next_progress = start + cfg.progress_interval;

        while shared.threads_done.load(Relaxed) < cfg.threads as usize {
            std::thread::sleep(MONITOR_TICK);
            let now = Instant::now();
            let elapsed = now.duration_since(start).as_secs_f64();
            if cfg.verbose && now >= next_progress {
                next_progress += cfg.progress_interval;
                status_line(
                    &pb,
                    &format!(
                        "--- {} secs, {} fetches started, {} completed, {} current\n",
                        g(elapsed),
                        shared.started.load(Relaxed),
                        shared.completed.load(Relaxed),
                        shared.current.load(Relaxed)
                    ),
                );
            }
            if cpu_prev.is_some() && now >= next_cpu {
                next_cpu += cfg.cpu_interval;
                if let (Ok(snap), Some(prev)) = (sysstat::snapshot(), cpu_prev.as_ref()) {
                    let s = sysstat::delta(
                        prev,
                        &snap,
                        now.duration_since(cpu_prev_at).as_secs_f64(),
                        elapsed,
                    );
                    status_line(&pb, &format!("{}\n", sysstat::render_iostat(&s)));
                    samples.push(s);
                    cpu_prev = Some(snap);
                    cpu_prev_at = now;
                }
            }
            if let Some(pb) = &pb {
                match cfg.end {
                    End::Fetches(_) => pb.set_position(shared.completed.load(Relaxed)),
                    End::Seconds(_) => {
                        pb.set_position(elapsed as u64);
                        pb.set_message(format!("{} fetches", shared.completed.load(Relaxed)));
                    }
                }
            }
        }
        let results: Vec<Result<ThreadResult, String>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a worker thread panicked".to_string()))
            })
            .collect();
        if let Some(pb) = pb {
            pb.finish_and_clear();
        }
        let cpu = cpu_first.map(|first| {
            let now = Instant::now();
            let average = sysstat::snapshot().ok().map(|last| {
                let secs = now.duration_since(start).as_secs_f64();
                sysstat::delta(&first, &last, secs, secs)
            });
            CpuReport {
                interval_secs: cfg.cpu_interval.as_secs_f64(),
                samples,
                average,
            }
        });
        (results, start, cpu)
    });

    // The run lasts from the first worker's start to the last one's end.
    let mut stats = Stats::new();
    let (mut first, mut last) = (None::<Instant>, start);
    for r in results {
        let r = r.map_err(RunError::Fatal)?;
        stats.merge(&r.stats);
        first = Some(first.map_or(r.started, |f| f.min(r.started)));
        last = last.max(r.ended);
    }
    let seconds = last
        .saturating_duration_since(first.unwrap_or(start))
        .as_secs_f64();
    // The run's ends on the wall clock, so that a tool sampling a server
    // beside it can cut its samples to the measured run.
    let (wall_now, mono_now) = (SystemTime::now(), Instant::now());
    let unix = |t: Instant| {
        let now = wall_now
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        now - mono_now.saturating_duration_since(t).as_secs_f64()
    };
    let (run_started_unix_secs, run_ended_unix_secs) = (unix(first.unwrap_or(start)), unix(last));
    if cfg.cpu && cpu.is_none() {
        eprintln!("spindle-load: --cpu: cannot read /proc/stat");
    }
    let codes: BTreeMap<u16, u64> = stats
        .codes
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(c, n)| (c as u16, *n))
        .collect();
    let per_sec = |x: f64| (seconds > 0.0).then(|| x / seconds);
    Ok(Summary {
        schema: SCHEMA,
        tool_version: env!("CARGO_PKG_VERSION"),
        config: echo(cfg, &plan),
        fetches: stats.fetches,
        fetches_started: shared.started.load(Relaxed),
        max_parallel: shared.max_parallel.load(Relaxed),
        bytes: stats.bytes,
        seconds,
        run_started_unix_secs,
        run_ended_unix_secs,
        mean_bytes_per_connection: (stats.fetches > 0)
            .then(|| stats.bytes as f64 / stats.fetches as f64),
        fetches_per_sec: per_sec(stats.fetches as f64),
        bytes_per_sec: per_sec(stats.bytes as f64),
        connects: stats.connect.count,
        connect_ms: LatencySummary::from_timing(&stats.connect),
        first_response_ms: LatencySummary::from_timing(&stats.first_response),
        fetch_ms: LatencySummary::from_timing(&stats.fetch),
        codes,
        timeouts: stats.timeouts,
        errors: stats.errors,
        bad_bytes: stats.bad_bytes,
        bad_checksums: stats.bad_checksums,
        reconnects: stats.reconnects,
        tls: crate::report::TlsSummary {
            full: stats.tls_full,
            resumed: stats.tls_resumed,
        },
        idle: IdleSummary {
            requested: cfg.idle,
            held_at_start: stats.idle_held_at_start,
            held_at_end: stats.idle_held_at_end,
            dropped: stats.idle_dropped,
            errors: stats.idle_errors,
        },
        client_cpu: ClientCpu {
            user_secs: stats.cpu_user_secs,
            system_secs: stats.cpu_system_secs,
        },
        cpu,
    })
}
