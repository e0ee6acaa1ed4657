//! `rules`: what `[[rules]]` that decide who may fetch cost spindle
//! io-uring on hot files, and what a flood of wrong passwords does to
//! another client (issue 39's bars).
//!
//! Three configurations of the same server, in interleaved rounds with
//! rotated order, on the `hot` experiment's files and load:
//! - `no rules`;
//! - `one rule of each kind, none matching`: `allow`/`deny`, `referers`,
//!   `secure-link`, `redirect`, `fallback` and `auth`, each on a glob no
//!   request meets;
//! - `auth matching, cached`: an `auth` rule over every file, the client
//!   sending a bcrypt user's credentials with each request (the worker's
//!   cache of successes holds them after the warm-up).
//!
//! Then the flood, with an `auth` rule over the 100 KiB files only: a
//! probe fetches the public 1 KiB files at a fixed rate (open loop,
//! keep-alive) alone, and while another client sends wrong passwords for
//! the 100 KiB files at `--flood-rate` a second; the probe's p99 is the
//! bar.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::json;

use crate::common::{self, CommonArgs, End, Load, Machine, Progress};
use crate::report::{col, Column, Report};
use crate::servers::{Running, Server};

/// The bcrypt cost of the benchmark's user: `htpasswd -B`'s default.
const BCRYPT_COST: u32 = 5;
/// Files of each set fetched (the hot experiment's 100 KiB count).
const FILES: usize = 10_000;
const USER: &str = "bench";
const PASSWORD: &str = "correct horse";

#[derive(clap::Args, Debug, Clone)]
pub struct RulesArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Seconds of load per measurement.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Concurrent fetches of the hot measurements.
    #[arg(long, default_value_t = 100)]
    pub parallel: u64,
    /// Fetches a second of the probe (1 KiB, public, keep-alive).
    #[arg(long, default_value_t = 200)]
    pub probe_rate: u64,
    /// Wrong passwords a second of the flood.
    #[arg(long, default_value_t = 1000)]
    pub flood_rate: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Config {
    None,
    Unmatched,
    AuthCached,
    /// The flood's: `auth` over the 100 KiB files only.
    AuthSmall,
}

impl Config {
    const ALL: [Config; 3] = [Config::None, Config::Unmatched, Config::AuthCached];

    fn name(self) -> &'static str {
        match self {
            Config::None => "no rules",
            Config::Unmatched => "one rule of each kind, none matching",
            Config::AuthCached => "auth matching, cached",
            Config::AuthSmall => "auth over the 100 KiB files",
        }
    }
}

pub const COLUMNS: [Column; 8] = [
    col("req_per_sec", "req/s", 0),
    col("cpu_s_per_10k", "server CPU s / 10k req", 3),
    col("fetch_ms_p50", "p50 ms", 2),
    col("fetch_ms_p99", "p99 ms", 2),
    col("fetch_ms_max", "max ms", 2),
    col("non_200", "non-200", 0),
    col("flood_401_per_sec", "flood 401/s", 0),
    col("flood_503_per_sec", "flood 503/s", 0),
];

/// The rules file of a configuration; `small` is the 100 KiB set's
/// directory (the flood's target), `work` where the files go.
fn rules_file(config: Config, small: &str, work: &Path, users: &Path) -> Result<Option<String>> {
    let users = users.display();
    let secret = work.join("link.key");
    std::fs::write(&secret, "benchmark secret\n")?;
    let text = match config {
        Config::None => return Ok(None),
        Config::Unmatched => format!(
            "[[rules]]\nmatch = \"/no-such/a/**\"\nallow = [\"10.0.0.0/8\"]\ndeny = [\"192.0.2.0/24\"]\n\n\
             [[rules]]\nmatch = \"/no-such/b/**\"\nreferers = [\"none\", \"*.example.org\"]\n\n\
             [[rules]]\nmatch = \"/no-such/c/**\"\nsecure-link = \"{}\"\n\n\
             [[rules]]\nmatch = \"/no-such/d/**\"\nredirect = \"301 https://example.org{{path}}\"\n\n\
             [[rules]]\nmatch = \"/no-such/e/**\"\nfallback = \"/index.html\"\n\n\
             [[rules]]\nmatch = \"/no-such/f/**\"\nauth = \"htpasswd:{users}\"\n",
            secret.display()
        ),
        Config::AuthCached => format!("[[rules]]\nmatch = \"/**\"\nauth = \"htpasswd:{users}\"\n"),
        Config::AuthSmall => {
            format!("[[rules]]\nmatch = \"/{small}/**\"\nauth = \"htpasswd:{users}\"\n")
        }
    };
    let f = work.join(format!("rules-{}.toml", config as u8));
    std::fs::write(&f, text)?;
    Ok(Some(f.display().to_string()))
}

/// URLs of `paths` on `port`, with `userinfo@` when given.
fn write_urls(file: &Path, port: u16, paths: &[String], userinfo: Option<&str>) -> Result<()> {
    let at = userinfo.map_or(String::new(), |u| format!("{u}@"));
    let mut s = String::with_capacity(paths.len() * 48);
    for p in paths {
        s.push_str(&format!("http://{at}127.0.0.1:{port}/{p}\n"));
    }
    std::fs::write(file, s).with_context(|| format!("writing {}", file.display()))
}

pub fn run(a: RulesArgs) -> Result<()> {
    let c = &a.common;
    let (small, tiny) = crate::hot::sets(c)?;
    let seconds = if c.quick {
        a.seconds.min(0.5)
    } else {
        a.seconds
    };
    let small_paths = crate::hot::rel(&small, FILES);
    let tiny_paths = crate::hot::rel(&tiny, FILES);
    let small_dir = small
        .dir
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .to_string();
    crate::hot::warm(&small, FILES);
    crate::hot::warm(&tiny, FILES);
    let spindle = Server::Spindle("io-uring".into());
    let mut machine = Machine::probe(&c.data);
    let version = spindle
        .version()
        .map_err(|e| anyhow::anyhow!("spindle cannot run: {e}"))?;
    machine.versions.insert(spindle.name(), version);
    let mut report = Report::new(
        "rules",
        "rules: the cost of access rules on hot files, and a flood of wrong passwords",
        machine,
        json!({"seconds": seconds, "parallel": a.parallel, "workers": c.workers,
               "probe_rate": a.probe_rate, "flood_rate": a.flood_rate,
               "files": FILES, "rounds": c.rounds(), "bcrypt_cost": BCRYPT_COST}),
    );
    report.baseline = Config::None.name().into();
    report.primary = "req_per_sec".into();
    if c.quick {
        report.smoke_test(
            "--quick measures 0.5 s per configuration and mode: a smoke test of the harness.",
        );
    }
    let (server_cpu, load_cpu) = common::pinning(c.workers);
    report.notes.push(format!(
        "spindle io-uring, {} worker(s), pinned to CPU {} with its password thread (nice 10); load generator (and the flood) on CPU {}",
        c.workers,
        server_cpu.unwrap_or_else(|| "any".into()),
        load_cpu.unwrap_or_else(|| "any".into())
    ));
    report.notes.push(format!(
        "the htpasswd user is bcrypt at cost {BCRYPT_COST} (htpasswd -B's default); `auth matching, cached` sends its credentials with every request (URLs with user info), so after the warm-up each worker's cache of successes answers"
    ));
    let work = common::workdir(&c.out, "rules")?;
    let users = work.join("users.htpasswd");
    let hash = bcrypt::hash(PASSWORD, BCRYPT_COST).context("hashing the benchmark's password")?;
    std::fs::write(&users, format!("{USER}:{hash}\n"))?;
    let modes = [(true, "keep-alive"), (false, "connection per fetch")];
    let sets = [("100 KiB", &small_paths), ("1 KiB", &tiny_paths)];
    let flood_groups = 2;
    let total =
        c.rounds() as u64 * (Config::ALL.len() * sets.len() * modes.len() + flood_groups) as u64;
    let progress = Progress::new(total, "rules");
    let start = |config: Config| -> Result<Running> {
        let mut setup = common::setup(&c.data, c.workers);
        if let Some(f) = rules_file(config, &small_dir, &work, &users)? {
            setup.spindle_flags = vec!["--config".into(), f];
        }
        Running::start(&spindle, &setup)
    };
    let userinfo = format!("{USER}:{}", PASSWORD.replace(' ', "%20"));
    for round in 0..c.rounds() {
        // Each group's configurations back to back (a fresh server each),
        // so that the samples compared are seconds apart, not minutes:
        // this machine's speed drifts more than the bars allow.
        for (label, paths) in &sets {
            for (keepalive, mode) in modes {
                let group = format!("{label}, {mode}");
                for &config in common::rotated(&Config::ALL, round as usize) {
                    let running = start(config)?;
                    let urls = work.join(format!("urls-{}", label.replace(' ', "")));
                    let who = (config == Config::AuthCached).then_some(userinfo.as_str());
                    write_urls(&urls, running.port, paths, who)?;
                    progress.start(format!("round {} {group} {}", round + 1, config.name()));
                    let sample = crate::hot::measure(
                        &running, &urls, keepalive, None, seconds, a.parallel, &work,
                    );
                    let line = match &sample {
                        Ok(m) => format!(
                            "round {} {group:<28} {:<40} {:>9.0} req/s {:>7.3} CPU s/10k",
                            round + 1,
                            config.name(),
                            m.get("req_per_sec").unwrap_or(&0.0),
                            m.get("cpu_s_per_10k").unwrap_or(&0.0)
                        ),
                        Err(e) => format!("round {} {group} {}: {e:#}", round + 1, config.name()),
                    };
                    report.add(&group, config.name(), sample);
                    progress.done(line);
                }
            }
        }
        // The flood: the probe alone, then under it (rotated).
        let group = format!("1 KiB probe at {}/s, keep-alive", a.probe_rate);
        let flooded = format!("under {} wrong passwords/s", a.flood_rate);
        let order: [bool; 2] = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for flood in order {
            let running = start(Config::AuthSmall)?;
            let name = if flood { flooded.as_str() } else { "alone" };
            progress.start(format!("round {} {group} {name}", round + 1));
            let sample = probe(
                &running,
                &a,
                &tiny_paths,
                &small_paths,
                flood,
                seconds,
                &work,
            );
            let line = match &sample {
                Ok(m) => format!(
                    "round {} {group} {name}: p99 {:.2} ms, flood 401/s {:.0}, 503/s {:.0}",
                    round + 1,
                    m.get("fetch_ms_p99").unwrap_or(&0.0),
                    m.get("flood_401_per_sec").unwrap_or(&0.0),
                    m.get("flood_503_per_sec").unwrap_or(&0.0)
                ),
                Err(e) => format!("round {} {group} {name}: {e:#}", round + 1),
            };
            report.add(&group, name, sample);
            progress.done(line);
        }
    }
    progress.finish();
    report.machine.finish();
    let files = report.write(&c.out, "rules", &COLUMNS, "requests per second")?;
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}

/// The probe's numbers (public 1 KiB files at `probe_rate`), with the
/// flood's answers beside them when `flood` (wrong passwords for the
/// 100 KiB files at `flood_rate`, run at the same time).
fn probe(
    running: &Running,
    a: &RulesArgs,
    tiny: &[String],
    small: &[String],
    flood: bool,
    seconds: f64,
    work: &Path,
) -> Result<BTreeMap<String, f64>> {
    let probe_urls = work.join("urls-probe");
    write_urls(&probe_urls, running.port, tiny, None)?;
    let flood_urls = work.join("urls-flood");
    write_urls(&flood_urls, running.port, small, Some("bench:wrong"))?;
    let load = |urls: &Path, rate: u64| Load {
        rate: Some(rate),
        urls: urls.to_path_buf(),
        parallel: 0,
        end: End::Seconds(seconds),
        keepalive: true,
        idle: 0,
        timeout_secs: 30,
        tls: None,
    };
    // Warm the open-file cache and the connection.
    let mut warm = load(&probe_urls, a.probe_rate);
    warm.end = End::Seconds(1.0);
    common::run_load(&warm, work, "probe-warmup")?;
    let flooding = flood.then(|| {
        let l = load(&flood_urls, a.flood_rate);
        let w = work.to_path_buf();
        std::thread::spawn(move || common::run_load(&l, &w, "flood"))
    });
    let v = common::run_load(&load(&probe_urls, a.probe_rate), work, "probe")?;
    let mut m = common::load_metrics(&v);
    let rate = m.get("fetches_per_sec").copied().unwrap_or(0.0);
    m.insert("req_per_sec".into(), rate);
    if let Some(t) = flooding {
        let f = t
            .join()
            .map_err(|_| anyhow::anyhow!("the flood's thread panicked"))??;
        let secs = f
            .pointer("/seconds")
            .and_then(|x| x.as_f64())
            .unwrap_or(seconds)
            .max(1e-9);
        let code = |c: &str| {
            f.pointer(&format!("/codes/{c}"))
                .and_then(|x| x.as_f64())
                .unwrap_or(0.0)
        };
        m.insert("flood_401_per_sec".into(), code("401") / secs);
        m.insert("flood_503_per_sec".into(), code("503") / secs);
    }
    Ok(m)
}
