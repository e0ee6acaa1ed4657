//! Command line: http_load's single-dash flags plus long `--` options.
//!
//! http_load matches each argument against its flags in a fixed order and
//! takes the first flag the argument is a prefix of. We do the same, so the
//! short forms people typed for twenty years keep their meaning:
//! `-p` is `-parallel` (not `-proxy`), `-t` is `-throttle` (not `-timeout`),
//! `-s` is `-seconds` (not `-sip`). The order is
//! `-checksum -throttle -verbose -timeout -jitter -parallel -rate -fetches
//! -seconds -sip -proxy`.
//!
//! Long options must be spelled out and take `--opt VALUE` or `--opt=VALUE`.

use std::path::PathBuf;
use std::time::Duration;

/// Most threads `--threads` accepts.
pub const MAX_THREADS: u32 = 256;
/// Most connections (parallel fetches, in-flight rate fetches or idle
/// connections, each) a run may ask for. The real bound is RLIMIT_NOFILE,
/// checked at start.
pub const MAX_CONNECTIONS: u64 = 1_000_000;
/// Default per-connection idle timeout, as http_load.
pub const DEFAULT_TIMEOUT_SECS: f64 = 60.0;
/// Default period of the `-verbose` progress line, as http_load.
pub const DEFAULT_PROGRESS_SECS: f64 = 60.0;
/// Default period of the `--cpu` samples (iostat's usual `5`).
pub const DEFAULT_CPU_INTERVAL_SECS: f64 = 5.0;
/// Default cap on fetches in flight in `-rate` mode.
pub const DEFAULT_MAX_IN_FLIGHT: u64 = 10_000;
/// http_load's throttle: a 33.6 kbit/s modem, in bytes per second.
pub const THROTTLE_BYTES_PER_SEC: u64 = 3_360;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Start {
    /// Keep N fetches in flight.
    Parallel(u64),
    /// Start N fetches a second (open loop).
    Rate { per_sec: f64, jitter: bool },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum End {
    Fetches(u64),
    Seconds(f64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub checksum: bool,
    pub throttle: bool,
    pub proxy: Option<(String, u16)>,
    pub verbose: bool,
    pub timeout: Duration,
    pub sip_file: Option<PathBuf>,
    pub start: Start,
    pub end: End,
    pub url_file: PathBuf,
    pub keepalive: bool,
    pub latency: bool,
    pub cpu: bool,
    pub cpu_interval: Duration,
    pub idle: u64,
    pub json: Option<PathBuf>,
    pub threads: u32,
    pub progress_interval: Duration,
    pub max_in_flight: u64,
    pub no_progress_bar: bool,
    /// Certificates, verification and resumption for `https://` URLs.
    pub tls: crate::tls::TlsOptions,
}

#[derive(Debug, PartialEq)]
pub enum Command {
    Run(Box<Config>),
    Help,
    Version,
}

pub const USAGE: &str = "\
usage:  spindle-load [-checksum] [-throttle] [-proxy host:port] [-verbose] [-timeout secs] [-sip sip_file]
            -parallel N | -rate N [-jitter]
            -fetches N | -seconds N
            [--keepalive] [--latency] [--cpu] [--cpu-interval SECS] [--idle N]
            [--json FILE] [--threads N] [--interval SECS] [--max-in-flight N] [--no-progress]
            [--cacert FILE] [--insecure] [--no-resume]
            url_file
url_file: one URL a line, http://[user:password@]host[:port]/path or https://...
(user info is sent as Basic credentials; a fragment #bytes=FIRST-[LAST] is sent
as a Range field, and its 206 counts as a success).
One start specifier, either -parallel or -rate, is required.
One end specifier, either -fetches or -seconds, is required.
Any prefix of a single-dash flag works, as in http_load (-p 100 -f 10000);
a prefix that fits several flags means the first of: -checksum -throttle
-verbose -timeout -jitter -parallel -rate -fetches -seconds -sip -proxy.

  -checksum        check each URL's body against its first fetch (else byte counts)
  -throttle        limit each connection to 3,360 bytes/s
  -proxy host:port send every request to this proxy
  -verbose         progress line on stderr every 60 s (see --interval)
  -timeout secs    per-connection idle timeout (default 60)
  -sip file        bind each connection to a random source IP from file
  -parallel N      keep N fetches in flight
  -rate N          start N fetches a second, open loop (latency counts from the
                   intended start); -jitter varies the gap by +-10%
  -fetches N       stop after N completed fetches
  -seconds N       stop after N seconds
  --keepalive      reuse connections (HTTP/1.1 persistent)
  --latency        print p50/p90/p99/p99.9/max of connect, first response, fetch
  --cpu            sample /proc/stat and /proc/diskstats (iostat-style lines on
                   stderr every --cpu-interval, default 5 s; averages at the end)
  --idle N         hold N extra idle keep-alive connections for the whole run
  --json FILE      write every figure to FILE as JSON
  --threads N      spread connections over N threads (default 1)
  --interval SECS  period of the -verbose progress line (default 60)
  --max-in-flight N  cap on fetches in flight in -rate mode (default 10000)
  --no-progress    no progress bar even on a terminal
  --cacert FILE    https: trust the certificates in this PEM file (default: the
                   system's, /etc/ssl/certs/ca-certificates.crt)
  --insecure       https: accept any server certificate (a self-signed test server)
  --no-resume      https: no session resumption, every connection a full handshake
";

/// A usage error: one line, exit status 2.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

/// http_load's flags in its matching order; `true` if the flag takes a value.
const SHORT_FLAGS: &[(&str, bool)] = &[
    ("-checksum", false),
    ("-throttle", false),
    ("-verbose", false),
    ("-timeout", true),
    ("-jitter", false),
    ("-parallel", true),
    ("-rate", true),
    ("-fetches", true),
    ("-seconds", true),
    ("-sip", true),
    ("-proxy", true),
];

const LONG_FLAGS: &[(&str, bool)] = &[
    ("--keepalive", false),
    ("--latency", false),
    ("--cpu", false),
    ("--cpu-interval", true),
    ("--idle", true),
    ("--json", true),
    ("--threads", true),
    ("--interval", true),
    ("--max-in-flight", true),
    ("--no-progress", false),
    ("--cacert", true),
    ("--insecure", false),
    ("--no-resume", false),
    ("--help", false),
    ("--version", false),
];

/// Resolve a single-dash argument to its flag, http_load style.
pub fn resolve_short(arg: &str) -> Option<&'static str> {
    if arg.len() < 2 {
        return None;
    }
    SHORT_FLAGS
        .iter()
        .find(|(name, _)| name.starts_with(arg))
        .map(|(name, _)| *name)
}

fn parse_count(flag: &str, v: &str, min: u64, max: u64) -> Result<u64, UsageError> {
    match v.parse::<u64>() {
        Ok(n) if n >= min && n <= max => Ok(n),
        Ok(_) => err(format!("{flag} must be between {min} and {max}, not {v}")),
        Err(_) => err(format!("{flag} needs a whole number, not '{v}'")),
    }
}

fn parse_secs(flag: &str, v: &str) -> Result<f64, UsageError> {
    match v.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= 1e9 => Ok(s),
        _ => err(format!(
            "{flag} needs a positive number of seconds, not '{v}'"
        )),
    }
}

fn parse_proxy(v: &str) -> Result<(String, u16), UsageError> {
    let bad = || UsageError(format!("-proxy needs host:port, not '{v}'"));
    let (host, port) = if let Some(rest) = v.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(bad)?;
        match after {
            "" => (h, None),
            _ => (h, Some(after.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match v.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (v, None),
        }
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(bad());
    }
    let port = match port {
        None => 80,
        Some(p) => p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(bad)?,
    };
    Ok((host.to_string(), port))
}

/// Parse the arguments after the program name.
pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Command, UsageError> {
    let mut checksum = false;
    let mut throttle = false;
    let mut proxy = None;
    let mut verbose = false;
    let mut timeout = None;
    let mut sip_file = None;
    let mut jitter = false;
    let mut parallel: Option<u64> = None;
    let mut rate: Option<u64> = None;
    let mut fetches: Option<u64> = None;
    let mut seconds: Option<f64> = None;
    let mut keepalive = false;
    let mut latency = false;
    let mut cpu = false;
    let mut cpu_interval = None;
    let mut idle = None;
    let mut json = None;
    let mut threads = None;
    let mut interval = None;
    let mut max_in_flight = None;
    let mut no_progress = false;
    let mut tls = crate::tls::TlsOptions::default();
    let mut positional: Vec<String> = Vec::new();

    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_ref();
        i += 1;
        if arg.starts_with("--") && arg.len() > 2 {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (arg, None),
            };
            let Some(&(flag, takes)) = LONG_FLAGS.iter().find(|(n, _)| *n == name) else {
                return err(format!("unknown option {name} (see --help)"));
            };
            let value = if takes {
                match inline {
                    Some(v) => v,
                    None if i < args.len() => {
                        i += 1;
                        args[i - 1].as_ref().to_string()
                    }
                    None => return err(format!("{flag} needs a value")),
                }
            } else {
                if inline.is_some() {
                    return err(format!("{flag} takes no value"));
                }
                String::new()
            };
            match flag {
                "--keepalive" => keepalive = true,
                "--latency" => latency = true,
                "--cpu" => cpu = true,
                "--cpu-interval" => cpu_interval = Some(parse_secs(flag, &value)?),
                "--idle" => idle = Some(parse_count(flag, &value, 0, MAX_CONNECTIONS)?),
                "--json" => {
                    if value.is_empty() {
                        return err("--json needs a file name");
                    }
                    json = Some(PathBuf::from(value))
                }
                "--threads" => {
                    threads = Some(parse_count(flag, &value, 1, MAX_THREADS as u64)? as u32)
                }
                "--interval" => interval = Some(parse_secs(flag, &value)?),
                "--max-in-flight" => {
                    max_in_flight = Some(parse_count(flag, &value, 1, MAX_CONNECTIONS)?)
                }
                "--no-progress" => no_progress = true,
                "--cacert" => {
                    if value.is_empty() {
                        return err("--cacert needs a file name");
                    }
                    tls.cacert = Some(PathBuf::from(value))
                }
                "--insecure" => tls.insecure = true,
                "--no-resume" => tls.no_resume = true,
                "--help" => return Ok(Command::Help),
                "--version" => return Ok(Command::Version),
                _ => unreachable!("every long flag is handled"),
            }
            continue;
        }
        if arg == "-h" || arg == "-help" {
            return Ok(Command::Help);
        }
        if arg.starts_with('-') && arg.len() > 1 {
            let Some(flag) = resolve_short(arg) else {
                return err(format!("unknown flag {arg} (see --help)"));
            };
            let takes = SHORT_FLAGS.iter().any(|&(n, t)| n == flag && t);
            let value = if takes {
                if i >= args.len() {
                    return err(format!("{flag} needs a value"));
                }
                i += 1;
                args[i - 1].as_ref()
            } else {
                ""
            };
            let once = |already: bool| {
                if already {
                    err(format!("{flag} given twice"))
                } else {
                    Ok(())
                }
            };
            match flag {
                "-checksum" => checksum = true,
                "-throttle" => throttle = true,
                "-verbose" => verbose = true,
                "-jitter" => jitter = true,
                "-timeout" => {
                    once(timeout.is_some())?;
                    timeout = Some(parse_secs(flag, value)?)
                }
                "-parallel" => {
                    once(parallel.is_some())?;
                    parallel = Some(parse_count(flag, value, 1, MAX_CONNECTIONS)?)
                }
                "-rate" => {
                    once(rate.is_some())?;
                    rate = Some(parse_count(flag, value, 1, 10_000_000)?)
                }
                "-fetches" => {
                    once(fetches.is_some())?;
                    fetches = Some(parse_count(flag, value, 1, u64::MAX / 2)?)
                }
                "-seconds" => {
                    once(seconds.is_some())?;
                    seconds = Some(parse_secs(flag, value)?)
                }
                "-sip" => {
                    once(sip_file.is_some())?;
                    sip_file = Some(PathBuf::from(value))
                }
                "-proxy" => {
                    once(proxy.is_some())?;
                    proxy = Some(parse_proxy(value)?)
                }
                _ => unreachable!("every short flag is handled"),
            }
            continue;
        }
        positional.push(arg.to_string());
    }

    let start = match (parallel, rate) {
        (Some(_), Some(_)) => return err("-parallel and -rate conflict: give one of them"),
        (Some(n), None) => {
            if jitter {
                return err("-jitter only goes with -rate");
            }
            Start::Parallel(n)
        }
        (None, Some(r)) => Start::Rate {
            per_sec: r as f64,
            jitter,
        },
        (None, None) => return err("one start specifier, -parallel or -rate, is required"),
    };
    let end = match (fetches, seconds) {
        (Some(_), Some(_)) => return err("-fetches and -seconds conflict: give one of them"),
        (Some(n), None) => End::Fetches(n),
        (None, Some(s)) => End::Seconds(s),
        (None, None) => return err("one end specifier, -fetches or -seconds, is required"),
    };
    let url_file = match positional.len() {
        0 => return err("the url_file argument is missing"),
        1 => PathBuf::from(positional.remove(0)),
        _ => {
            return err(format!(
                "only one url_file may be given, got '{}' and '{}'",
                positional[0], positional[1]
            ))
        }
    };
    let threads = threads.unwrap_or(1);
    if let Start::Parallel(n) = start {
        if u64::from(threads) > n {
            return err(format!("--threads {threads} is more than -parallel {n}"));
        }
    }
    if cpu_interval.is_some() && !cpu {
        return err("--cpu-interval only goes with --cpu");
    }
    if interval.is_some() && !verbose {
        return err("--interval only goes with -verbose");
    }
    if max_in_flight.is_some() && !matches!(start, Start::Rate { .. }) {
        return err("--max-in-flight only goes with -rate");
    }
    Ok(Command::Run(Box::new(Config {
        checksum,
        throttle,
        proxy,
        verbose,
        timeout: Duration::from_secs_f64(timeout.unwrap_or(DEFAULT_TIMEOUT_SECS)),
        sip_file,
        start,
        end,
        url_file,
        keepalive,
        latency,
        cpu,
        cpu_interval: Duration::from_secs_f64(cpu_interval.unwrap_or(DEFAULT_CPU_INTERVAL_SECS)),
        idle: idle.unwrap_or(0),
        json,
        threads,
        progress_interval: Duration::from_secs_f64(interval.unwrap_or(DEFAULT_PROGRESS_SECS)),
        max_in_flight: max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT),
        no_progress_bar: no_progress,
        tls,
    })))
}
