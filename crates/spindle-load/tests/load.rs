//! Runs of the spindle-load binary against test servers on loopback.

mod common;

use common::*;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

fn lines(out: &std::process::Output) -> Vec<String> {
    text(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn good_server_gives_http_load_report_and_json() {
    let srv = TestServer::start(Behavior::Good(body(1000)));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(
        dir.path(),
        "urls",
        &format!("{}\n{}\n", srv.url("/a"), srv.url("/b")),
    );
    let jp = dir.path().join("out.json");
    let out = load(
        &[
            "-p",
            "4",
            "-f",
            "40",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut l = lines(&out);
    assert!(
        l[0].starts_with("40 fetches, 4 max parallel, 40000 bytes, in "),
        "{l:?}"
    );
    assert!(l[0].ends_with(" seconds"));
    assert_eq!(l[1], "1000 mean bytes/connection");
    // As in http_load, the rate line shows only for runs over 10 ms.
    let secs = json(&jp)["seconds"].as_f64().unwrap();
    if secs > 0.01 {
        assert!(
            l[2].contains(" fetches/sec, ") && l[2].ends_with(" bytes/sec"),
            "{l:?}"
        );
        l.remove(2);
    }
    assert!(
        l[2].starts_with("msecs/connect: ") && l[2].ends_with(" min"),
        "{l:?}"
    );
    assert!(l[3].starts_with("msecs/first-response: "), "{l:?}");
    assert_eq!(l[4..], ["HTTP response codes:", "  code 200 -- 40"]);
    assert_eq!(srv.requests.load(SeqCst), 40);
    assert_eq!(srv.connections.load(SeqCst), 40, "one connection per fetch");
    let lines = srv.request_lines.lock().unwrap().clone();
    assert!(
        lines
            .iter()
            .all(|l| l == "GET /a HTTP/1.1" || l == "GET /b HTTP/1.1"),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.contains("/a")) && lines.iter().any(|l| l.contains("/b")));

    let j = json(&jp);
    assert_eq!(j["schema"], "spindle-load/1");
    assert_eq!(j["fetches"], 40);
    assert_eq!(j["fetches_started"], 40);
    assert_eq!(j["bytes"], 40000);
    assert_eq!(j["max_parallel"], 4);
    assert_eq!(j["connects"], 40);
    assert_eq!(j["codes"]["200"], 40);
    assert_eq!(j["first_response_ms"]["count"], 40);
    assert_eq!(j["fetch_ms"]["count"], 40);
    for k in ["errors", "timeouts", "bad_bytes", "bad_checksums"] {
        assert_eq!(j[k], 0, "{k}");
    }
    let f = &j["fetch_ms"];
    let (p50, p99, max) = (
        f["p50"].as_f64().unwrap(),
        f["p99"].as_f64().unwrap(),
        f["max"].as_f64().unwrap(),
    );
    assert!(p50 > 0.0 && p50 <= p99 && p99 <= max * 1.001, "{f}");
    assert!(j["cpu"].is_null());
    assert_eq!(j["config"]["mode"], "parallel");
    assert_eq!(j["config"]["url_count"], 2);
}

#[test]
fn keepalive_reuses_connections() {
    let srv = TestServer::start(Behavior::Good(body(1024)));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/k")));
    let jp = dir.path().join("out.json");
    let out = load(
        &[
            "-p",
            "2",
            "-f",
            "50",
            "--keepalive",
            "--latency",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let l = lines(&out);
    assert!(
        l[0].starts_with("50 fetches, 2 max parallel, 51200 bytes"),
        "{l:?}"
    );
    assert!(l.iter().any(|x| x.starts_with("latency msecs:")), "{l:?}");
    assert!(l.iter().any(|x| x.starts_with("  fetch ")), "{l:?}");
    assert_eq!(srv.requests.load(SeqCst), 50);
    assert_eq!(
        srv.connections.load(SeqCst),
        2,
        "two persistent connections"
    );
    let j = json(&jp);
    assert_eq!(j["connects"], 2);
    assert_eq!(j["first_response_ms"]["count"], 50);
    assert_eq!(j["codes"]["200"], 50);
    assert_eq!(j["reconnects"], 0);
}

#[test]
fn keepalive_reconnects_when_the_server_closes() {
    let srv = TestServer::start(Behavior::CloseEvery(body(500), 3));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/c")));
    let jp = dir.path().join("out.json");
    let out = load(
        &[
            "-p",
            "1",
            "-f",
            "9",
            "--keepalive",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j = json(&jp);
    assert_eq!(j["codes"]["200"], 9);
    assert_eq!(j["errors"], 0);
    assert_eq!(srv.connections.load(SeqCst), 3);
    assert_eq!(j["connects"], 3);
    assert_eq!(j["reconnects"], 3, "the server closed each connection");
}

#[test]
fn keepalive_retries_when_the_server_drops_a_connection_silently() {
    let srv = TestServer::start(Behavior::DropAfter(body(500), 3));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/d")));
    let jp = dir.path().join("out.json");
    let out = load(
        &[
            "-p",
            "1",
            "-f",
            "9",
            "--keepalive",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j = json(&jp);
    assert_eq!(j["codes"]["200"], 9, "{}", text(&out.stderr));
    assert_eq!(j["errors"], 0, "{}", text(&out.stderr));
    assert_eq!(j["fetches"], 9);
    assert_eq!(j["max_parallel"], 1, "a retried fetch is still one fetch");
    assert_eq!(srv.connections.load(SeqCst), 3);
    assert_eq!(j["reconnects"], 2);
}

#[test]
fn chunked_bodies_count_decoded_bytes() {
    let srv = TestServer::start(Behavior::Chunked(body(3000)));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/c")));
    for extra in [&[][..], &["--keepalive"][..]] {
        let mut args = vec!["-p", "3", "-f", "12", "-checksum"];
        args.extend_from_slice(extra);
        args.push(urls.to_str().unwrap());
        let out = load(&args, LIMIT);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let l = lines(&out);
        assert!(
            l[0].starts_with("12 fetches, 3 max parallel, 36000 bytes"),
            "{extra:?} {l:?}"
        );
        assert!(!l.iter().any(|x| x.contains("bad")), "{l:?}");
        assert_eq!(l.last().unwrap(), "  code 200 -- 12");
    }
}

#[test]
fn checksum_catches_wrong_bytes_of_the_same_length() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(Behavior::WrongBytesAfterFirst(body(2000)));
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/x")));
    let out = load(
        &["-checksum", "-p", "1", "-f", "5", urls.to_str().unwrap()],
        LIMIT,
    );
    assert!(out.status.success());
    let l = lines(&out);
    assert!(l.contains(&"4 bad checksums".to_string()), "{l:?}");
    assert!(
        text(&out.stderr).contains("/x: checksum wrong"),
        "{}",
        text(&out.stderr)
    );

    // Without -checksum only byte counts are compared: same length, no alarm.
    let srv = TestServer::start(Behavior::WrongBytesAfterFirst(body(2000)));
    let urls = write_file(dir.path(), "urls2", &format!("{}\n", srv.url("/x")));
    let out = load(&["-p", "1", "-f", "5", urls.to_str().unwrap()], LIMIT);
    let l = lines(&out);
    assert!(!l.iter().any(|x| x.contains("bad")), "{l:?}");
}

#[test]
fn byte_count_mismatch_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(Behavior::ShorterAfterFirst(body(2000)));
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/y")));
    let jp = dir.path().join("o.json");
    let out = load(
        &[
            "-p",
            "1",
            "-f",
            "5",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success());
    let l = lines(&out);
    assert!(l.contains(&"4 bad byte counts".to_string()), "{l:?}");
    assert!(
        l[0].starts_with("5 fetches, 1 max parallel, 9960 bytes"),
        "{l:?}"
    );
    assert_eq!(json(&jp)["bad_bytes"], 4);
}

#[test]
fn body_shorter_than_content_length_is_a_bad_byte_count() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(Behavior::ShortBody(body(1000)));
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/s")));
    let out = load(&["-p", "2", "-f", "6", urls.to_str().unwrap()], LIMIT);
    assert!(out.status.success());
    let l = lines(&out);
    assert!(l.contains(&"6 bad byte counts".to_string()), "{l:?}");
    assert_eq!(l.last().unwrap(), "  code 200 -- 6");
    assert!(text(&out.stderr).contains("body ended after 990 of 1000 bytes"));
    // With -checksum the same lie shows as bad checksums.
    let out = load(&["-c", "-p", "2", "-f", "6", urls.to_str().unwrap()], LIMIT);
    assert!(lines(&out).contains(&"6 bad checksums".to_string()));
}

#[test]
fn server_that_never_answers_times_out() {
    let srv = TestServer::start(Behavior::Silent);
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/never")));
    let jp = dir.path().join("o.json");
    let t = Instant::now();
    let out = load(
        &[
            "-p",
            "3",
            "-f",
            "3",
            "-timeout",
            "0.5",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    let took = t.elapsed();
    assert!(out.status.success());
    assert!(took >= Duration::from_millis(500), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let l = lines(&out);
    assert!(
        l[0].starts_with("3 fetches, 3 max parallel, 0 bytes"),
        "{l:?}"
    );
    assert!(l.contains(&"3 timeouts".to_string()), "{l:?}");
    assert_eq!(l.last().unwrap(), "HTTP response codes:");
    assert!(!l.iter().any(|x| x.starts_with("msecs/first-response")));
    assert!(text(&out.stderr).contains("/never: timed out"));
    let j = json(&jp);
    assert_eq!(j["timeouts"], 3);
    assert!(j["first_response_ms"]["mean"].is_null());
}

#[test]
fn connection_refused_is_an_error_not_a_hang() {
    // A port nobody listens on: bind, read the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("http://127.0.0.1:{port}/\n"));
    let jp = dir.path().join("o.json");
    let out = load(
        &[
            "-p",
            "2",
            "-f",
            "4",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("Connection refused"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(json(&jp)["errors"], 4);
    assert_eq!(json(&jp)["fetches"], 4);
}

#[test]
fn rate_mode_starts_fetches_on_schedule() {
    let srv = TestServer::start(Behavior::Good(body(100)));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/r")));
    let jp = dir.path().join("o.json");
    let out = load(
        &[
            "-r",
            "40",
            "-j",
            "-s",
            "1",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j = json(&jp);
    let n = j["fetches"].as_u64().unwrap();
    assert!((35..=42).contains(&n), "40/s for 1 s gave {n} fetches");
    assert_eq!(j["config"]["mode"], "rate");
    assert_eq!(j["config"]["jitter"], true);
    let secs = j["seconds"].as_f64().unwrap();
    assert!((0.95..1.5).contains(&secs), "{secs}");
    // Between fetches the thread sleeps in epoll_wait: its CPU is a small
    // part of the wall time.
    let cpu = client_cpu(&j);
    assert!(cpu < 0.25 * secs, "client CPU {cpu} s in {secs} s");
}

fn client_cpu(j: &serde_json::Value) -> f64 {
    j["client_cpu"]["user_secs"].as_f64().unwrap()
        + j["client_cpu"]["system_secs"].as_f64().unwrap()
}

#[test]
fn client_cpu_counts_the_busy_run() {
    // Keep-alive fetches back to back for 1 s: the client's one thread is
    // busy much of that second, and never more than all of it.
    let srv = TestServer::start(Behavior::Good(body(100)));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/c")));
    let jp = dir.path().join("o.json");
    let out = load(
        &[
            "-p",
            "4",
            "-seconds",
            "1",
            "--keepalive",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j = json(&jp);
    let secs = j["seconds"].as_f64().unwrap();
    let cpu = client_cpu(&j);
    assert!(j["fetches"].as_u64().unwrap() > 100);
    assert!(
        cpu > 0.05 && cpu <= secs * 1.05,
        "client CPU {cpu} s in {secs} s"
    );
    // The run's ends on the wall clock: as far apart as `seconds`, and
    // within the last minute.
    let t0 = j["run_started_unix_secs"].as_f64().unwrap();
    let t1 = j["run_ended_unix_secs"].as_f64().unwrap();
    assert!(((t1 - t0) - secs).abs() < 0.01, "{t0} {t1} {secs}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(t1 <= now && now - t0 < 60.0, "{t0} {t1} {now}");
}

#[test]
fn open_loop_rate_counts_waiting_time() {
    // One fetch in flight at most, against a server that makes each fetch
    // wait: in open loop the later fetches' latency includes their wait
    // for the slot, so the p99 is far above the fastest fetch.
    let srv = TestServer::start(Behavior::Silent);
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/slow")));
    let jp = dir.path().join("o.json");
    let out = load(
        &[
            "-r",
            "20",
            "-f",
            "4",
            "-timeout",
            "0.3",
            "--max-in-flight",
            "1",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success());
    let j = json(&jp);
    assert_eq!(j["timeouts"], 4);
    // 4 fetches due every 50 ms but each one holds the only slot for 300 ms.
    let secs = j["seconds"].as_f64().unwrap();
    assert!(secs >= 1.2, "{secs}");
}

#[test]
fn throttle_limits_each_connection() {
    let srv = TestServer::start(Behavior::Good(body(5000)));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/t")));
    let t = Instant::now();
    let out = load(
        &["-throttle", "-p", "1", "-f", "1", urls.to_str().unwrap()],
        LIMIT,
    );
    let took = t.elapsed();
    assert!(out.status.success());
    assert!(lines(&out)[0].starts_with("1 fetches, 1 max parallel, 5000 bytes"));
    // 3,360 bytes/s with a 1,680-byte head start: 5 kB takes about 1 s.
    assert!(took >= Duration::from_millis(800), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn sip_binds_source_addresses() {
    let srv = TestServer::start(Behavior::Good(body(10)));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/sip")));
    let sips = write_file(dir.path(), "sips", "127.0.0.2\n127.0.0.3\n");
    let out = load(
        &[
            "-sip",
            sips.to_str().unwrap(),
            "-p",
            "2",
            "-f",
            "30",
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let peers = srv.peers.lock().unwrap().clone();
    assert_eq!(peers.len(), 30);
    let two: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let three: std::net::IpAddr = "127.0.0.3".parse().unwrap();
    assert!(peers.iter().all(|p| *p == two || *p == three), "{peers:?}");
    assert!(peers.contains(&two) && peers.contains(&three), "{peers:?}");
}

#[test]
fn proxy_gets_absolute_urls() {
    let srv = TestServer::start(Behavior::Good(body(10)));
    let dir = tempfile::tempdir().unwrap();
    // The host in the URL is never contacted: everything goes to the proxy.
    let urls = write_file(dir.path(), "urls", "http://origin.invalid:8080/p/q\n");
    let proxy = srv.addr.to_string();
    let out = load(
        &["-pr", &proxy, "-p", "1", "-f", "2", urls.to_str().unwrap()],
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let seen = srv.request_lines.lock().unwrap().clone();
    assert_eq!(seen, vec!["GET http://origin.invalid:8080/p/q HTTP/1.1"; 2]);
}

#[test]
fn idle_connections_are_held_during_the_run() {
    let srv = TestServer::start(Behavior::Good(body(100)));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/i")));
    let jp = dir.path().join("o.json");
    let out = load(
        &[
            "--idle",
            "50",
            "--threads",
            "2",
            "-p",
            "2",
            "-f",
            "20",
            "--keepalive",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j = json(&jp);
    assert_eq!(j["idle"]["requested"], 50);
    assert_eq!(j["idle"]["held_at_start"], 50);
    assert_eq!(j["idle"]["held_at_end"], 50);
    assert_eq!(j["idle"]["errors"], 0);
    assert_eq!(j["fetches"], 20);
    // 50 idle connections, each with its one request, plus 2 working ones.
    assert_eq!(srv.connections.load(SeqCst), 52);
    assert_eq!(srv.requests.load(SeqCst), 70);
    assert_eq!(j["max_parallel"], 2, "idle connections are not fetches");
}

#[test]
fn ten_thousand_concurrent_connections() {
    let limit = spindle_load::sys::raise_nofile_limit().unwrap();
    // The test server and spindle-load each hold 10,000 descriptors.
    assert!(
        limit >= 10_200,
        "RLIMIT_NOFILE hard limit {limit} is below what this test needs"
    );
    let srv = TestServer::start(Behavior::HoldIdle(body(64)));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/z")));
    let jp = dir.path().join("o.json");
    let out = load(
        &[
            "--idle",
            "10000",
            "-p",
            "20",
            "-f",
            "200",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        Duration::from_secs(90),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j = json(&jp);
    assert_eq!(j["idle"]["held_at_start"], 10_000, "{}", text(&out.stderr));
    assert_eq!(j["idle"]["held_at_end"], 10_000);
    assert_eq!(j["codes"]["200"], 200);
    assert_eq!(srv.connections.load(SeqCst), 10_200);
}

#[test]
fn threads_share_the_fetch_count() {
    let srv = TestServer::start(Behavior::Good(body(256)));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/th")));
    let jp = dir.path().join("o.json");
    let out = load(
        &[
            "--threads",
            "3",
            "-p",
            "6",
            "-f",
            "300",
            "--keepalive",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j = json(&jp);
    assert_eq!(j["fetches"], 300);
    assert_eq!(j["fetches_started"], 300);
    assert_eq!(j["codes"]["200"], 300);
    assert_eq!(srv.requests.load(SeqCst), 300);
    assert_eq!(j["config"]["threads"], 3);
}

#[test]
fn verbose_progress_lines() {
    let srv = TestServer::start(Behavior::Good(body(100)));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/v")));
    let out = load(
        &[
            "-v",
            "--interval",
            "0.3",
            "-r",
            "20",
            "-s",
            "1",
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success());
    let err = text(&out.stderr);
    let progress: Vec<&str> = err.lines().filter(|l| l.starts_with("--- ")).collect();
    assert!(progress.len() >= 2, "{err}");
    for p in progress {
        // --- 0.300123 secs, 7 fetches started, 7 completed, 0 current
        let f: Vec<&str> = p.split_whitespace().collect();
        assert_eq!(f.len(), 10, "{p}");
        assert!(f[1].parse::<f64>().is_ok(), "{p}");
        assert_eq!(
            (f[2], f[4], f[5], f[7], f[9]),
            ("secs,", "fetches", "started,", "completed,", "current"),
            "{p}"
        );
    }
}

#[test]
fn cpu_sampling_prints_iostat_lines() {
    let srv = TestServer::start(Behavior::Good(body(100)));
    let dir = tempfile::tempdir().unwrap();
    let urls = write_file(dir.path(), "urls", &format!("{}\n", srv.url("/cpu")));
    let jp = dir.path().join("o.json");
    let out = load(
        &[
            "--cpu",
            "--cpu-interval",
            "0.3",
            "-p",
            "2",
            "-s",
            "1",
            "--json",
            jp.to_str().unwrap(),
            urls.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("avg-cpu:  %user   %nice %system %iowait  %steal   %idle"),
        "{err}"
    );
    assert!(err.contains("Device:            tps    MB_read/s"), "{err}");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("iostat averages over the whole run"),
        "{stdout}"
    );
    let j = json(&jp);
    let samples = j["cpu"]["samples"].as_array().unwrap();
    assert!(samples.len() >= 2, "{samples:?}");
    let avg = &j["cpu"]["average"];
    let total: f64 = ["user", "nice", "system", "iowait", "steal", "idle"]
        .iter()
        .map(|k| avg[k].as_f64().unwrap())
        .sum();
    assert!(total > 90.0 && total <= 100.01, "{avg}");
    assert!(avg["devices"].is_array());
}
