//! h2load (Debian nghttp2-client), the HTTP/2 load generator of `hot
//! --h2` and `cold --h2`: which servers take part, running it pinned like
//! the load generator, and reading its summary.

use std::collections::BTreeMap;

use anyhow::Result;

use crate::common;

/// Keeps the servers that speak HTTP/2 here: spindle io-uring and
/// posix-aio, and the peers; spindle's sendfile backends serve HTTP/1.1
/// only.
pub fn h2_only(
    servers: &mut Vec<(crate::servers::Server, String)>,
    notes: &mut Vec<String>,
) -> Result<()> {
    servers.retain(|(s, _)| {
        let ok = !matches!(s.spindle_backend(), Some(b) if b != "io-uring" && b != "posix-aio");
        if !ok {
            notes.push(format!("{} skipped: it serves HTTP/1.1 only", s.name()));
        }
        ok
    });
    if servers.is_empty() {
        anyhow::bail!("none of the servers serves HTTP/2");
    }
    Ok(())
}

/// The numbers of one h2load run that the report keeps.
pub fn metrics(text: &str) -> Result<BTreeMap<String, f64>> {
    let mut m = BTreeMap::new();
    let num = |s: &str| -> f64 {
        s.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '/' || c == ',')
            .parse()
            .unwrap_or(0.0)
    };
    let ms = |s: &str| -> f64 {
        if let Some(v) = s.strip_suffix("us") {
            num(v) / 1000.0
        } else if let Some(v) = s.strip_suffix("ms") {
            num(v)
        } else if let Some(v) = s.strip_suffix('s') {
            num(v) * 1000.0
        } else {
            0.0
        }
    };
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["finished", "in", _, rps, "req/s,", mbps, ..] => {
                m.insert("req_per_sec".into(), num(rps));
                m.insert("fetches_per_sec".into(), num(rps));
                let mb = mbps.trim_end_matches("MB/s").trim_end_matches("GB/s");
                let scale = if mbps.ends_with("GB/s") { 1000.0 } else { 1.0 };
                m.insert("mb_per_sec".into(), num(mb) * scale);
            }
            ["requests:", total, "total,", ..] => {
                m.insert("fetches".into(), num(total));
                let failed = w
                    .windows(2)
                    .filter(|p| matches!(p[1], "failed," | "errored," | "timeout"))
                    .map(|p| num(p[0]))
                    .sum::<f64>();
                m.insert("errors".into(), failed);
            }
            ["status", "codes:", ok, "2xx,", ..] => {
                let total = m.get("fetches").copied().unwrap_or(0.0);
                m.insert("non_200".into(), (total - num(ok)).max(0.0));
            }
            ["time", "for", "request:", _min, max, mean, ..] => {
                m.insert("fetch_ms_p50".into(), ms(mean));
                m.insert("fetch_ms_p99".into(), ms(max));
            }
            _ => {}
        }
    }
    if !m.contains_key("req_per_sec") {
        anyhow::bail!("h2load printed no result: {}", text.trim());
    }
    Ok(m)
}

/// What an h2load run received, from its `traffic:` line: every byte
/// read from its sockets (`total`), the header names and values
/// (`headers`, not the status lines and CRLFs), and the bodies as
/// decoded from HTTP/1.1 chunks (`data`). With `--warm-up-time`, h2load
/// 1.52 counts the warm-up's headers and data but not its total: run the
/// warm-up apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Traffic {
    pub total: f64,
    pub headers: f64,
    pub data: f64,
}

/// The byte counts of h2load's `traffic:` line (the exact numbers in
/// parentheses), if it printed one.
pub fn traffic(text: &str) -> Option<Traffic> {
    let line = text.lines().find(|l| l.starts_with("traffic:"))?;
    // "traffic: 39.56MB (41483366) total, 650.91KB (666531) headers
    // (space savings 0.00%), 38.73MB (40607861) data"
    let mut counts = line.split('(').skip(1).filter_map(|p| {
        let (n, rest) = p.split_once(')')?;
        let what = rest.split_whitespace().next()?.trim_end_matches(',');
        Some((what.to_string(), n.parse::<f64>().ok()?))
    });
    let mut get = |want: &str| counts.find(|(w, _)| w == want).map(|(_, n)| n);
    Some(Traffic {
        total: get("total")?,
        headers: get("headers")?,
        data: get("data")?,
    })
}

/// How long the run took, from `finished in 1.83s` (or `500.71ms`).
pub fn elapsed_seconds(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("finished in "))?;
    let t = line.strip_prefix("finished in ")?.split(',').next()?.trim();
    match t.strip_suffix("ms") {
        Some(ms) => ms.parse::<f64>().ok().map(|v| v / 1000.0),
        None => t.strip_suffix('s')?.parse().ok(),
    }
}

/// Longest an h2load run may take: it waits without end for a
/// connection a server never accepts (lighttpd at its descriptor limit).
const MAX_RUN_SECS: &str = "300";

/// Runs h2load with `-c clients -m streams -t 1 -i urls` and `extra`,
/// pinned to the load generator's CPU and killed after [`MAX_RUN_SECS`];
/// its standard output.
pub fn run(
    urls: &std::path::Path,
    (clients, streams): (u64, u64),
    extra: &[String],
    workers: u32,
) -> Result<String> {
    let mut cmd = std::process::Command::new("timeout");
    cmd.args(["--kill-after=5", MAX_RUN_SECS]);
    if let Some(cpu) = common::pinning(workers).1 {
        if crate::servers::which("taskset").is_some() {
            cmd.args(["taskset", "-c", &cpu]);
        }
    }
    cmd.arg("h2load");
    let out = cmd
        .args([
            "-c",
            &clients.to_string(),
            "-m",
            &streams.to_string(),
            "-t",
            "1",
            "-i",
        ])
        .arg(urls)
        .args(extra)
        .output()
        .map_err(|e| anyhow::anyhow!("h2load (Debian nghttp2-client): {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn h2load_output_is_read() {
        let text = "finished in 10.00s, 76123.40 req/s, 83.11MB/s
requests: 761234 total, 761234 started, 761234 done, 761230 succeeded, 4 failed, 0 errored, 0 timeout
status codes: 761230 2xx, 0 3xx, 4 4xx, 0 5xx
time for request:      120us     45.67ms      4.12ms      2.01ms    89.00%
";
        let m = super::metrics(text).unwrap();
        assert_eq!(m["req_per_sec"], 76123.40);
        assert_eq!(m["mb_per_sec"], 83.11);
        assert_eq!(m["fetches"], 761234.0);
        assert_eq!(m["errors"], 4.0);
        assert_eq!(m["non_200"], 4.0);
        assert_eq!(m["fetch_ms_p50"], 4.12);
        assert_eq!(m["fetch_ms_p99"], 45.67);
        assert!(super::metrics("nothing").is_err());
    }

    #[test]
    fn traffic_and_elapsed_time_are_read() {
        let text = "finished in 5.00s, 609.80 req/s, 7.91MB/s
requests: 3049 total, 3099 started, 3049 done, 3049 succeeded, 0 failed, 0 errored, 0 timeout
traffic: 39.56MB (41483366) total, 650.91KB (666531) headers (space savings 0.00%), 38.73MB (40607861) data
";
        let t = super::traffic(text).unwrap();
        assert_eq!(t.total, 41483366.0);
        assert_eq!(t.headers, 666531.0);
        assert_eq!(t.data, 40607861.0);
        assert_eq!(super::elapsed_seconds(text), Some(5.0));
        assert_eq!(
            super::elapsed_seconds("finished in 500.71ms, 1 req/s, 1MB/s"),
            Some(0.50071)
        );
        assert!(super::traffic("requests: 1 total").is_none());
    }
}
