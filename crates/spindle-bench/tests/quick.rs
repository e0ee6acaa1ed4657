//! `cold --quick`, `hot --quick` and `idle --quick` end to end against every spindle
//! backend (and nginx and lighttpd when installed): the harness itself, not performance.
//! A quick report says it is a smoke test and gives no ratios; a sample too short to
//! mean anything is marked, whatever the flags.

mod common;

use common::EXE;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use spindle::config::{BackendKind, Cap};

const SERVERS: &str = "spindle-io-uring,spindle-linux-sendfile,spindle-posix-aio,spindle-linux-aio-sendfile,nginx-sendfile,nginx-aio-threads,lighttpd";

fn installed(p: &str) -> bool {
    [
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/usr/local/sbin",
        "/usr/local/bin",
    ]
    .iter()
    .any(|d| Path::new(d).join(p).is_file())
}

/// Checks NAME.{json,md,svg} under `out`; returns the JSON.
fn check_outputs(out: &Path, name: &str, groups: usize) -> serde_json::Value {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap())
            .expect("report JSON parses");
    assert_eq!(json["schema"], "spindle-bench/1");
    assert!(json["machine"]["cpus"].as_u64().unwrap() >= 1);
    assert!(!json["machine"]["kernel"].as_str().unwrap().is_empty());
    let series = json["series"].as_array().unwrap();
    let mut expected = 4;
    for (p, n) in [("nginx", 2), ("lighttpd", 1)] {
        if installed(p) {
            expected += n;
        } else {
            let notes = json["notes"].to_string();
            assert!(notes.contains("skipped"), "missing {p} is noted: {notes}");
            test_skip::skip_or_fail(format!(
                "{p} is not installed: the harness is not checked with it (apt-get install {p})"
            ));
        }
    }
    assert_eq!(
        series.len(),
        expected * groups,
        "one series per server and group"
    );
    for s in series {
        assert!(
            s["failures"].as_array().unwrap().is_empty(),
            "{} failed: {}",
            s["server"],
            s["failures"]
        );
        let sample = &s["samples"][0];
        assert!(sample["fetches"].as_f64().unwrap() > 0.0, "{s}");
        assert_eq!(sample["non_200"].as_f64().unwrap(), 0.0, "all 200: {s}");
        assert!(sample["fetches_per_sec"].as_f64().unwrap() > 0.0);
    }
    let md = std::fs::read_to_string(out.join(format!("{name}.md"))).unwrap();
    assert!(md.starts_with("# "));
    for s in series {
        assert!(md.contains(&format!("| {} |", s["server"].as_str().unwrap())));
    }
    // Every table row has as many cells as its header.
    let mut header_cells = None;
    for line in md.lines().filter(|l| l.starts_with('|')) {
        let cells = line.matches('|').count();
        if line.starts_with("|---") {
            continue;
        }
        if line.starts_with("| server |")
            || line.starts_with("| machine")
            || line.starts_with("| queue depth")
        {
            header_cells = Some(cells);
        } else if let Some(h) = header_cells {
            assert_eq!(cells, h, "row has as many cells as its header: {line}");
        }
    }
    let svg = std::fs::read_to_string(out.join(format!("{name}.svg"))).unwrap();
    assert!(svg.trim_start().starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("<rect"), "bars drawn");
    json
}

/// Runs the harness, stderr captured; returns it, and fails on a failed run.
fn run_bench(args: &[&str], data: &Path, out: &Path) -> String {
    let o = Command::new(EXE)
        .args(args)
        .arg("--data")
        .arg(data)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{args:?} exits 0: {err}");
    err
}

/// The smoke-test rule on a `--quick` run's screen output, JSON and Markdown:
/// the notice on screen and above the first table, the reason in the method
/// line, no ratio column and no ratio anywhere in the tables.
fn check_smoke_test(out: &Path, name: &str, screen: &str) {
    const NOTICE: &str = "Smoke test (--quick): these numbers are not a comparison.";
    assert!(
        screen.contains(&format!("NOTICE: {NOTICE}")),
        "{name}: notice on screen: {screen}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap())
            .unwrap();
    assert_eq!(json["smoke_test"], true, "{name}: smoke_test in the JSON");
    let why = json["method"].as_str().unwrap();
    assert!(
        why.contains("--quick"),
        "{name}: the method line says why: {why}"
    );
    let md = std::fs::read_to_string(out.join(format!("{name}.md"))).unwrap();
    let notice = md.find(NOTICE).expect("the notice in the Markdown");
    let first_table = md.find("\n## ").expect("a table");
    assert!(
        notice < first_table,
        "{name}: the notice is above the tables"
    );
    assert!(
        md.contains("Method: ") && md.contains(why),
        "{name}: method line"
    );
    for line in md.lines().filter(|l| l.starts_with("| server |")) {
        assert!(!line.contains("| vs "), "{name}: no ratio column: {line}");
    }
    for line in md[first_table..].lines().filter(|l| l.starts_with('|')) {
        assert!(!line.contains('×'), "{name}: no ratio in a table: {line}");
    }
    assert!(
        !md.contains("The bars"),
        "{name}: no bars checked on a smoke test"
    );
}

/// Every series of `name` has each sample marked too short, in the JSON and
/// with the mark and its footnote in the Markdown.
fn check_all_short(out: &Path, name: &str) {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap())
            .unwrap();
    let md = std::fs::read_to_string(out.join(format!("{name}.md"))).unwrap();
    for s in json["series"].as_array().unwrap() {
        let n = s["samples"].as_array().unwrap().len() as u64;
        assert_eq!(
            s["short_samples"].as_u64(),
            Some(n),
            "{name}: marked short: {s}"
        );
        let server = s["server"].as_str().unwrap();
        assert!(
            md.lines()
                .any(|l| l.starts_with(&format!("| {server} | ")) && l.contains(" † |")),
            "{name}: {server}'s row marked: {md}"
        );
    }
    assert!(
        md.contains("† too short to mean anything"),
        "{name}: footnote"
    );
}

#[test]
fn quick_cold_and_hot_end_to_end() {
    if !test_skip::is_root() {
        test_skip::skip_or_fail("needs root (cgroup, drop_caches)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = tmp.path().join("out");
    let t0 = Instant::now();
    let screen = run_bench(
        &[
            "cold",
            "--quick",
            "--servers",
            SERVERS,
            "--fio-seconds",
            "0.5",
        ],
        &data,
        &out,
    );
    let cold = check_outputs(&out, "cold", 2);
    check_smoke_test(&out, "cold", &screen);
    // 200 fetches at -parallel 100: two waves.
    check_all_short(&out, "cold");
    assert!(cold["machine"]["cgroup_limit"]
        .as_str()
        .unwrap()
        .contains("MiB"));
    if installed("fio") {
        assert!(
            cold["extra"]["fio"]["1"][0][1].as_f64().unwrap() > 0.0,
            "fio QD 1 measured"
        );
    } else {
        test_skip::skip_or_fail(
            "fio is not installed: its rows are not checked (apt-get install fio)",
        );
    }
    let cold_s = t0.elapsed();
    let screen = run_bench(&["hot", "--quick", "--servers", SERVERS], &data, &out);
    let hot = check_outputs(&out, "hot", 4);
    check_smoke_test(&out, "hot", &screen);
    // 0.5 s per sample.
    check_all_short(&out, "hot");
    for s in hot["series"].as_array().unwrap() {
        assert!(
            s["samples"][0]["cpu_s_per_10k"].as_f64().unwrap() > 0.0,
            "server CPU measured: {s}"
        );
    }
    eprintln!("cold --quick {cold_s:?}, both {:?}", t0.elapsed());
    assert!(
        t0.elapsed() < Duration::from_secs(110),
        "quick mode stays quick"
    );
}

#[test]
fn quick_idle_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let screen = run_bench(
        &["idle", "--quick", "--servers", SERVERS],
        &tmp.path().join("data"),
        &out,
    );
    // Two steps (0 and 100 idle connections), a fresh server for each.
    let idle = check_outputs(&out, "idle", 2);
    check_smoke_test(&out, "idle", &screen);
    for s in idle["series"].as_array().unwrap() {
        let m = &s["samples"][0];
        assert_eq!(m["round"].as_f64(), Some(1.0), "{s}");
        assert!(m["rss_mib"].as_f64().unwrap() > 0.0, "RSS sampled: {s}");
        assert!(m["req_per_sec"].as_f64().unwrap() > 0.0, "{s}");
        // The load generator's own CPU: busy, and at most its one core.
        let busy = m["client_busy"].as_f64().unwrap();
        assert!(busy > 0.0 && busy <= 1.05, "client busy share: {s}");
        // The server's CPU over the measured run only (idle setup left out).
        assert_eq!(m["cpu_over_run_only"].as_f64(), Some(1.0), "{s}");
        assert!(m["cpu_s_per_10k"].as_f64().unwrap() > 0.0, "{s}");
    }
    let held: Vec<f64> = idle["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["group"] == "100 idle connections")
        .map(|s| s["samples"][0]["idle_held_at_end"].as_f64().unwrap())
        .collect();
    assert!(
        !held.is_empty() && held.iter().all(|&h| h == 100.0),
        "{held:?}"
    );
    // The bar table pairs the steps round by round.
    let md = std::fs::read_to_string(out.join("idle.md")).unwrap();
    let row = md
        .lines()
        .find(|l| l.starts_with("| spindle-io-uring | ") && l.matches('|').count() == 7)
        .expect("a per-idle-connection row for spindle-io-uring");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(
        cells[2], cells[3],
        "one round: the paired ratio is the ratio of medians: {row}"
    );
    assert!(cells[2].parse::<f64>().unwrap() > 0.0, "{row}");
    // Server and client CPU per request, at the last step over the first.
    for c in [&cells[4], &cells[5]] {
        assert!(c.parse::<f64>().unwrap() > 0.0, "{row}");
    }
}

/// The length rule holds whatever the flags: a full (not `--quick`) run with
/// samples under a second is marked, and gives its ratios; the same run with
/// two-second samples is not marked.
#[test]
fn short_samples_are_marked_whatever_the_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let run = |seconds: &str, out: &Path| -> (serde_json::Value, String) {
        let screen = run_bench(
            &[
                "idle",
                "--idle",
                "0",
                "--rounds",
                "1",
                "--servers",
                "spindle-io-uring",
                "--seconds",
                seconds,
            ],
            &data,
            out,
        );
        assert!(!screen.contains("NOTICE"), "not a smoke test: {screen}");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("idle.json")).unwrap()).unwrap();
        assert_eq!(json["smoke_test"], false);
        let md = std::fs::read_to_string(out.join("idle.md")).unwrap();
        assert!(
            md.contains("| vs spindle-io-uring |"),
            "a full run gives its ratio column: {md}"
        );
        (json, md)
    };
    let short = tmp.path().join("short");
    let (json, md) = run("0.3", &short);
    let s = &json["series"][0];
    assert_eq!(s["short_samples"].as_u64(), Some(1), "{s}");
    assert!(
        md.contains("| spindle-io-uring | ") && md.contains(" † | 1.00× |"),
        "the row is marked: {md}"
    );
    assert!(md.contains("† too short to mean anything"), "{md}");
    let long = tmp.path().join("long");
    let (json, md) = run("2", &long);
    let s = &json["series"][0];
    assert_eq!(s["short_samples"].as_u64(), Some(0), "{s}");
    assert!(s["samples"][0]["seconds"].as_f64().unwrap() >= 1.0, "{s}");
    assert!(s["samples"][0]["waves"].as_f64().unwrap() >= 20.0, "{s}");
    assert!(
        md.lines().all(|l| !l.starts_with('|') || !l.contains('†')) && !md.contains("† too short"),
        "nothing marked: {md}"
    );
}

#[test]
fn bad_flags_give_one_line_and_fail() {
    for args in [
        vec!["cold", "--servers", "apache"],
        vec!["mkfiles", "--scale", "2"],
        vec!["mkfiles", "--sets", "medium", "--scale", "0.001"],
        vec!["cold", "--cgroup-mem", "lots"],
    ] {
        let o = Command::new(EXE).args(&args).output().unwrap();
        assert!(!o.status.success(), "{args:?} fails");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains("error"), "{args:?}: {err}");
    }
}

#[test]
fn mkfiles_is_idempotent_and_repairs() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path();
    let run = || {
        let o = Command::new(EXE)
            .args(["mkfiles", "--sets", "small,tiny", "--scale", "0.001"])
            .arg("--data")
            .arg(data)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let first = run();
    assert!(first.contains("100 file(s) written"), "{first}");
    let f = data.join("small-s0.001/files-1/1");
    let content = std::fs::read(&f).unwrap();
    assert_eq!(content.len(), 100 * 1024);
    assert!(content.iter().any(|&b| b != 0), "random content");
    let second = run();
    assert!(second.contains("present and verified"), "{second}");
    // Damage a sampled file (same size) and delete another: both come back.
    let mut bad = content.clone();
    bad[5] ^= 0xff;
    std::fs::write(&f, &bad).unwrap();
    std::fs::remove_file(data.join("small-s0.001/files-1/50")).unwrap();
    let third = run();
    assert!(third.contains("2 file(s) written"), "{third}");
    assert_eq!(
        std::fs::read(&f).unwrap(),
        content,
        "repaired byte for byte"
    );
    assert_eq!(
        std::fs::metadata(data.join("small-s0.001/files-1/50"))
            .unwrap()
            .len(),
        102_400
    );
}

/// `hot`, `cold`, `idle` and `large` with `--h2 --quick`: h2load against the servers
/// that speak HTTP/2 (spindle on each backend with [`Cap::Http2`], nginx when
/// installed, said when not); every series answered, every request a 2xx, server CPU
/// measured.
#[test]
fn quick_h2_end_to_end() {
    if !test_skip::is_root() {
        test_skip::skip_or_fail("needs root (cgroup, drop_caches)");
        return;
    }
    if Command::new("h2load").arg("--version").output().is_err() {
        test_skip::skip_or_fail("h2load is not installed (Debian nghttp2-client)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = tmp.path().join("out");
    // spindle on each backend that serves HTTP/2.
    let mut servers: Vec<String> = BackendKind::ALL
        .into_iter()
        .filter(|b| b.has(Cap::Http2))
        .map(|b| format!("spindle-{}", b.name()))
        .collect();
    let spindles = servers.len();
    if installed("nginx") {
        servers.push("nginx-sendfile".to_string());
    } else {
        test_skip::skip_or_fail(
            "nginx is not installed: its HTTP/2 rows (nginx-sendfile) are not run (apt-get install nginx)",
        );
    }
    let list = servers.join(",");
    for (mode, name, extra) in [
        ("hot", "hot-h2", &[][..]),
        ("cold", "cold-h2", &["--fio-seconds", "0.5"][..]),
        ("idle", "idle-h2", &[][..]),
    ] {
        let mut args = vec![mode, "--h2", "--quick", "--servers", &list];
        args.extend_from_slice(extra);
        let screen = run_bench(&args, &data, &out);
        check_smoke_test(&out, name, &screen);
        let json: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap(),
        )
        .unwrap();
        let series = json["series"].as_array().unwrap();
        // hot: 100 KiB and 1 KiB; idle: 0 and 100 idle connections.
        let groups = if mode == "cold" { 1 } else { 2 };
        assert_eq!(series.len(), servers.len() * groups, "{name}: {series:?}");
        for s in series {
            let sample = &s["samples"][0];
            assert!(sample["req_per_sec"].as_f64().unwrap() > 0.0, "{name}: {s}");
            assert_eq!(sample["non_200"].as_f64(), Some(0.0), "{name}: {s}");
            assert!(
                sample["server_cpu_s"].as_f64().unwrap() > 0.0,
                "{name}: server CPU measured: {s}"
            );
            if let Some(idle) = sample["idle"].as_f64() {
                // Every idle HTTP/2 connection set up and still open.
                assert_eq!(
                    sample["idle_held_at_end"].as_f64(),
                    Some(idle),
                    "{name}: {s}"
                );
            }
        }
    }
    // `large --h2`: the large file by h2load (HTTP/2, and HTTPS/1.1 from
    // spindle), cold and cached, then with 1 KiB fetches beside it on one
    // connection; every run whole (the client checks the bytes).
    let screen = run_bench(
        &["large", "--h2", "--quick", "--no-fio", "--servers", &list],
        &data,
        &out,
    );
    check_smoke_test(&out, "large-h2", &screen);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("large-h2.json")).unwrap()).unwrap();
    let series = json["series"].as_array().unwrap();
    let h2load_rows = servers.len() + spindles;
    assert_eq!(
        series.len(),
        2 * h2load_rows + 2 * servers.len(),
        "cold and cached by h2load, then the two mixed groups: {series:?}"
    );
    for s in series {
        assert!(
            s["failures"].as_array().unwrap().is_empty(),
            "large-h2: {s}"
        );
        let sample = &s["samples"][0];
        assert!(
            sample["mb_per_sec"].as_f64().unwrap() > 0.0,
            "large-h2: {s}"
        );
        // A 3 MB download may take less than one clock tick of CPU.
        assert!(
            sample["server_cpu_s_per_gb"].as_f64().is_some(),
            "large-h2: {s}"
        );
        if s["group"].as_str().unwrap().contains("1 KiB") {
            assert!(
                sample["small_fetches"].as_f64().unwrap() >= 1.0,
                "large-h2: {s}"
            );
            assert!(
                sample["small_p99_ms"].as_f64().unwrap() > 0.0,
                "large-h2: {s}"
            );
        } else {
            assert_eq!(sample["non_200"].as_f64(), Some(0.0), "large-h2: {s}");
        }
    }
}

#[test]
fn quick_rules_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = tmp.path().join("out");
    let screen = run_bench(&["rules", "--quick"], &data, &out);
    check_smoke_test(&out, "rules", &screen);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("rules.json")).unwrap()).unwrap();
    let series = json["series"].as_array().unwrap();
    // Three configurations in four hot groups, and the probe alone and
    // under the flood.
    assert_eq!(series.len(), 3 * 4 + 2, "{json}");
    for s in series {
        assert!(s["failures"].as_array().unwrap().is_empty(), "{s}");
        let m = &s["samples"][0];
        // Every hot fetch and every probe fetch is a 200: the cached
        // credentials pass, the unmatched rules do not refuse, and the
        // flood's wrong passwords never reach the probe.
        assert_eq!(m["non_200"].as_f64(), Some(0.0), "{s}");
        if s["server"].as_str().unwrap().starts_with("under ") {
            let answered =
                m["flood_401_per_sec"].as_f64().unwrap() + m["flood_503_per_sec"].as_f64().unwrap();
            assert!(answered > 0.0, "the flood was answered: {s}");
        }
    }
}
