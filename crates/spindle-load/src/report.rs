//! The end-of-run summary: http_load's text report, the `--latency` and
//! `--cpu` blocks, and the `--json` document.
//!
//! # JSON schema (`"schema": "spindle-load/1"`)
//!
//! The `--json FILE` document is the [`Summary`] below, serialized with
//! serde. Fields are only ever added under the same schema name; a change of
//! meaning gets a new name. All times are milliseconds unless the field name
//! says otherwise; rates are per second of `seconds`.
//!
//! ```text
//! schema            "spindle-load/1"
//! tool_version      crate version
//! config            the run's settings (mode "parallel"|"rate", parallel, rate,
//!                   jitter, end "fetches"|"seconds", fetches_limit,
//!                   seconds_limit, keepalive, threads, idle, timeout_secs,
//!                   throttle, checksum, proxy, sip_count, url_count, url_file)
//! fetches           fetches that ended (success or not), as http_load counts
//! fetches_started   fetches begun
//! max_parallel      most fetches in flight at once (idle connections excluded)
//! bytes             body bytes received
//! seconds           wall time of the measured run
//! run_started_unix_secs, run_ended_unix_secs
//!                   its ends on the wall clock (seconds since 1970, fractional),
//!                   for cutting another tool's samples to the measured run
//! mean_bytes_per_connection, fetches_per_sec, bytes_per_sec   (null if undefined)
//! connects          TCP connections established for fetches
//! connect_ms        connect() start to connected      } each: count, mean, min,
//! first_response_ms request sent to first byte back   } max, p50, p90, p99,
//! fetch_ms          whole fetch (see below)           } p99_9 (null if count 0)
//! codes             {"200": n, ...} response status counts
//! timeouts, errors, bad_bytes, bad_checksums
//! reconnects        keep-alive connections the server closed (a new one is opened
//!                   if fetches remain)
//! tls               {full, resumed}: https connections by TLS handshake kind
//!                   (both 0 for http)
//! idle              {requested, held_at_start, held_at_end, dropped, errors}
//! client_cpu        {user_secs, system_secs}: CPU the load generator's worker
//!                   threads used during the measured run (getrusage
//!                   RUSAGE_THREAD; idle setup and closing excluded), so a
//!                   run can show whether the client, not the server, was the
//!                   limit
//! cpu               null without --cpu; else {interval_secs, samples: [CpuSample],
//!                   average: CpuSample over the whole run}; a CpuSample is
//!                   {t_secs, interval_secs, user, nice, system, iowait, steal,
//!                   idle (percent), devices: [{name, tps, mb_read_per_sec,
//!                   mb_written_per_sec, read_bytes_per_sec,
//!                   written_bytes_per_sec, mb_read, mb_written}]} (MB = 2^20 bytes)
//! ```
//!
//! `fetch_ms` runs from the fetch's start to its last byte: the connect start
//! for a new connection, the request write for a reused keep-alive
//! connection, and in `-rate` mode the fetch's *intended* start (so time
//! spent waiting for a free slot counts: no coordinated omission). It is
//! recorded for fetches that got a response; timeouts and errors are counted,
//! not timed.

use crate::gfmt::g;
use crate::stats::Timing;
use crate::sysstat::{render_iostat, CpuSample};
use serde::Serialize;
use std::collections::BTreeMap;

pub const SCHEMA: &str = "spindle-load/1";

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ConfigEcho {
    pub mode: &'static str,
    pub parallel: Option<u64>,
    pub rate: Option<f64>,
    pub jitter: bool,
    pub end: &'static str,
    pub fetches_limit: Option<u64>,
    pub seconds_limit: Option<f64>,
    pub keepalive: bool,
    pub threads: u32,
    pub idle: u64,
    pub timeout_secs: f64,
    pub throttle: bool,
    pub checksum: bool,
    pub proxy: Option<String>,
    pub sip_count: usize,
    pub url_count: usize,
    pub url_file: String,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub mean: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub p99_9: Option<f64>,
}

impl LatencySummary {
    pub fn from_timing(t: &Timing) -> Self {
        if t.count == 0 {
            return LatencySummary::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        let q = |p: f64| Some(ms(t.hist.value_at_quantile(p)));
        LatencySummary {
            count: t.count,
            mean: Some(t.sum_us as f64 / t.count as f64 / 1000.0),
            min: Some(ms(t.min_us)),
            max: Some(ms(t.max_us)),
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p99_9: q(0.999),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct IdleSummary {
    pub requested: u64,
    pub held_at_start: u64,
    pub held_at_end: u64,
    pub dropped: u64,
    pub errors: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CpuReport {
    pub interval_secs: f64,
    pub samples: Vec<CpuSample>,
    pub average: Option<CpuSample>,
}

/// Everything a run measured. See the module docs for the JSON schema.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub schema: &'static str,
    pub tool_version: &'static str,
    pub config: ConfigEcho,
    pub fetches: u64,
    pub fetches_started: u64,
    pub max_parallel: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub run_started_unix_secs: f64,
    pub run_ended_unix_secs: f64,
    pub mean_bytes_per_connection: Option<f64>,
    pub fetches_per_sec: Option<f64>,
    pub bytes_per_sec: Option<f64>,
    pub connects: u64,
    pub connect_ms: LatencySummary,
    pub first_response_ms: LatencySummary,
    pub fetch_ms: LatencySummary,
    pub codes: BTreeMap<u16, u64>,
    pub timeouts: u64,
    pub errors: u64,
    pub bad_bytes: u64,
    pub bad_checksums: u64,
    pub reconnects: u64,
    pub tls: TlsSummary,
    pub idle: IdleSummary,
    pub client_cpu: ClientCpu,
    pub cpu: Option<CpuReport>,
}

/// https connections by the kind of TLS handshake they made.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TlsSummary {
    pub full: u64,
    pub resumed: u64,
}

/// CPU seconds of the load generator's own worker threads during the run.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ClientCpu {
    pub user_secs: f64,
    pub system_secs: f64,
}

/// http_load's report, line for line (C `%g` numbers).
pub fn http_load_report(s: &Summary) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{} fetches, {} max parallel, {} bytes, in {} seconds\n",
        s.fetches,
        s.max_parallel,
        g(s.bytes as f64),
        g(s.seconds)
    ));
    if s.fetches > 0 {
        out.push_str(&format!(
            "{} mean bytes/connection\n",
            g(s.bytes as f64 / s.fetches as f64)
        ));
    }
    if s.seconds > 0.01 {
        out.push_str(&format!(
            "{} fetches/sec, {} bytes/sec\n",
            g(s.fetches as f64 / s.seconds),
            g(s.bytes as f64 / s.seconds)
        ));
    }
    for (label, l) in [
        ("msecs/connect", &s.connect_ms),
        ("msecs/first-response", &s.first_response_ms),
    ] {
        if let (true, Some(mean), Some(max), Some(min)) = (l.count > 0, l.mean, l.max, l.min) {
            out.push_str(&format!(
                "{label}: {} mean, {} max, {} min\n",
                g(mean),
                g(max),
                g(min)
            ));
        }
    }
    if s.timeouts != 0 {
        out.push_str(&format!("{} timeouts\n", s.timeouts));
    }
    if s.tls.full + s.tls.resumed != 0 {
        out.push_str(&format!(
            "TLS handshakes: {} full, {} resumed\n",
            s.tls.full, s.tls.resumed
        ));
    }
    if s.config.checksum {
        if s.bad_checksums != 0 {
            out.push_str(&format!("{} bad checksums\n", s.bad_checksums));
        }
    } else if s.bad_bytes != 0 {
        out.push_str(&format!("{} bad byte counts\n", s.bad_bytes));
    }
    out.push_str("HTTP response codes:\n");
    for (code, n) in &s.codes {
        if *n > 0 {
            out.push_str(&format!("  code {code:03} -- {n}\n"));
        }
    }
    out
}

/// The `--latency` block.
pub fn latency_report(s: &Summary) -> String {
    let mut out = format!(
        "{:<18}{:>11}{:>11}{:>11}{:>11}{:>11}\n",
        "latency msecs:", "p50", "p90", "p99", "p99.9", "max"
    );
    for (label, l) in [
        ("connect", &s.connect_ms),
        ("first-response", &s.first_response_ms),
        ("fetch", &s.fetch_ms),
    ] {
        let f = |v: Option<f64>| match v {
            Some(x) => format!("{x:>11.3}"),
            None => format!("{:>11}", "-"),
        };
        out.push_str(&format!(
            "  {label:<16}{}{}{}{}{}\n",
            f(l.p50),
            f(l.p90),
            f(l.p99),
            f(l.p99_9),
            f(l.max)
        ));
    }
    out
}

/// The `--cpu` averages block printed after the report.
pub fn cpu_report(c: &CpuReport) -> String {
    match &c.average {
        Some(avg) => format!(
            "iostat averages over the whole run ({} secs):\n{}",
            g(avg.interval_secs),
            render_iostat(avg)
        ),
        None => "iostat averages: no samples\n".to_string(),
    }
}
