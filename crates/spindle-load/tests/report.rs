//! Golden tests of http_load's report format.

use spindle_load::report::*;
use std::collections::BTreeMap;

fn summary() -> Summary {
    Summary {
        schema: SCHEMA,
        tool_version: "test",
        config: ConfigEcho {
            mode: "parallel",
            parallel: Some(100),
            rate: None,
            jitter: false,
            end: "fetches",
            fetches_limit: Some(10000),
            seconds_limit: None,
            keepalive: false,
            threads: 1,
            idle: 0,
            timeout_secs: 60.0,
            throttle: false,
            checksum: false,
            proxy: None,
            sip_count: 0,
            url_count: 100000,
            url_file: "urls".into(),
        },
        fetches: 10000,
        fetches_started: 10000,
        max_parallel: 100,
        bytes: 1_024_000_000,
        seconds: 137.5508,
        run_started_unix_secs: 0.0,
        run_ended_unix_secs: 0.0,
        mean_bytes_per_connection: None,
        fetches_per_sec: None,
        bytes_per_sec: None,
        connects: 10000,
        connect_ms: LatencySummary {
            count: 10000,
            mean: Some(66.9088),
            max: Some(197.157),
            min: Some(0.223),
            ..Default::default()
        },
        first_response_ms: LatencySummary {
            count: 10000,
            mean: Some(226.181),
            max: Some(6066.96),
            min: Some(2.098),
            ..Default::default()
        },
        fetch_ms: LatencySummary::default(),
        codes: BTreeMap::from([(200, 10000)]),
        timeouts: 0,
        errors: 0,
        bad_bytes: 0,
        bad_checksums: 0,
        reconnects: 0,
        tls: Default::default(),
        idle: IdleSummary::default(),
        client_cpu: ClientCpu::default(),
        cpu: None,
    }
}

#[test]
fn the_seed_report_byte_for_byte() {
    // The last http_load report of seed 004 (lighttpd 1.5.0, linux-aio-sendfile).
    let want = "\
10000 fetches, 100 max parallel, 1.024e+09 bytes, in 137.551 seconds
102400 mean bytes/connection
72.7004 fetches/sec, 7.44452e+06 bytes/sec
msecs/connect: 66.9088 mean, 197.157 max, 0.223 min
msecs/first-response: 226.181 mean, 6066.96 max, 2.098 min
HTTP response codes:
  code 200 -- 10000
";
    assert_eq!(http_load_report(&summary()), want);
}

#[test]
fn g_edge_cases_in_the_report() {
    let mut s = summary();
    s.fetches = 1000;
    s.bytes = 1_000_000; // 1e+06
    s.seconds = 2.0;
    s.connect_ms.mean = Some(0.000123);
    s.connect_ms.max = Some(12.0); // an integer prints without a point
    s.connect_ms.min = Some(0.0);
    s.first_response_ms.mean = Some(1234565.0); // tie, rounds to even
    s.first_response_ms.max = Some(999999.5); // rounds up a decade
    s.first_response_ms.min = Some(0.00001);
    let want = "\
1000 fetches, 100 max parallel, 1e+06 bytes, in 2 seconds
1000 mean bytes/connection
500 fetches/sec, 500000 bytes/sec
msecs/connect: 0.000123 mean, 12 max, 0 min
msecs/first-response: 1.23456e+06 mean, 1e+06 max, 1e-05 min
HTTP response codes:
  code 200 -- 10000
";
    assert_eq!(http_load_report(&s), want);
}

#[test]
fn optional_lines() {
    let mut s = summary();
    s.fetches = 7;
    s.bytes = 7;
    s.seconds = 0.005; // too short for a rate line, as http_load
    s.timeouts = 3;
    s.bad_bytes = 2;
    s.bad_checksums = 1;
    s.codes = BTreeMap::from([(200, 2), (404, 1), (99, 1)]);
    s.first_response_ms = LatencySummary::default();
    let want = "\
7 fetches, 100 max parallel, 7 bytes, in 0.005 seconds
1 mean bytes/connection
msecs/connect: 66.9088 mean, 197.157 max, 0.223 min
3 timeouts
2 bad byte counts
HTTP response codes:
  code 099 -- 1
  code 200 -- 2
  code 404 -- 1
";
    assert_eq!(http_load_report(&s), want);

    // With -checksum, only the checksum line shows.
    s.config.checksum = true;
    let r = http_load_report(&s);
    assert!(
        r.contains("1 bad checksums\n") && !r.contains("byte counts"),
        "{r}"
    );

    // No fetches: no mean line, no timing lines.
    let mut s = summary();
    s.fetches = 0;
    s.bytes = 0;
    s.connect_ms = LatencySummary::default();
    s.first_response_ms = LatencySummary::default();
    s.codes.clear();
    s.seconds = 1.5;
    assert_eq!(
        http_load_report(&s),
        "0 fetches, 100 max parallel, 0 bytes, in 1.5 seconds\n0 fetches/sec, 0 bytes/sec\nHTTP response codes:\n"
    );
}

#[test]
fn latency_block_lines_up() {
    let mut s = summary();
    s.fetch_ms = LatencySummary {
        count: 5,
        mean: Some(2.0),
        min: Some(1.0),
        max: Some(9.5),
        p50: Some(1.5),
        p90: Some(3.25),
        p99: Some(9.0),
        p99_9: Some(9.5),
    };
    let r = latency_report(&s);
    let l: Vec<&str> = r.lines().collect();
    assert_eq!(
        l[0],
        "latency msecs:            p50        p90        p99      p99.9        max"
    );
    assert_eq!(
        l[3],
        "  fetch                 1.500      3.250      9.000      9.500      9.500"
    );
    assert_eq!(
        l[1],
        "  connect                   -          -          -          -    197.157"
    );
    // Every value column ends under its header.
    assert_eq!(l[0].len(), l[3].len());
}

#[test]
fn json_has_the_documented_fields() {
    let v = serde_json::to_value(summary()).unwrap();
    for k in [
        "schema",
        "tool_version",
        "config",
        "fetches",
        "fetches_started",
        "max_parallel",
        "bytes",
        "seconds",
        "mean_bytes_per_connection",
        "fetches_per_sec",
        "bytes_per_sec",
        "connects",
        "connect_ms",
        "first_response_ms",
        "fetch_ms",
        "codes",
        "timeouts",
        "errors",
        "bad_bytes",
        "bad_checksums",
        "reconnects",
        "tls",
        "idle",
        "cpu",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    for k in ["count", "mean", "min", "max", "p50", "p90", "p99", "p99_9"] {
        assert!(v["connect_ms"].get(k).is_some(), "missing connect_ms.{k}");
    }
    assert_eq!(v["codes"]["200"], 10000);
    assert_eq!(v["schema"], "spindle-load/1");
}
