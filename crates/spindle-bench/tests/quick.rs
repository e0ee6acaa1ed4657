//! `cold --quick`, `hot --quick` and `idle --quick` end to end against every spindle
//! backend (and nginx and lighttpd when installed): the harness itself, not performance.

mod common;

use common::{is_root, EXE};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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

#[test]
fn quick_cold_and_hot_end_to_end() {
    if !is_root() {
        eprintln!("SKIPPED quick_cold_and_hot_end_to_end: needs root (cgroup, drop_caches)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = tmp.path().join("out");
    let t0 = Instant::now();
    let st = Command::new(EXE)
        .args([
            "cold",
            "--quick",
            "--servers",
            SERVERS,
            "--fio-seconds",
            "0.5",
        ])
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "cold --quick exits 0");
    let cold = check_outputs(&out, "cold", 2);
    assert!(cold["machine"]["cgroup_limit"]
        .as_str()
        .unwrap()
        .contains("MiB"));
    if installed("fio") {
        assert!(
            cold["extra"]["fio"]["1"][0][1].as_f64().unwrap() > 0.0,
            "fio QD 1 measured"
        );
    }
    let cold_s = t0.elapsed();
    let st = Command::new(EXE)
        .args(["hot", "--quick", "--servers", SERVERS])
        .arg("--data")
        .arg(&data)
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "hot --quick exits 0");
    let hot = check_outputs(&out, "hot", 4);
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
    let st = Command::new(EXE)
        .args(["idle", "--quick", "--servers", SERVERS])
        .arg("--data")
        .arg(tmp.path().join("data"))
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "idle --quick exits 0");
    // Two steps (0 and 100 idle connections), a fresh server for each.
    let idle = check_outputs(&out, "idle", 2);
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
