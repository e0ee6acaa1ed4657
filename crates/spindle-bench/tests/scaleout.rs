//! `scaleout --quick` end to end: HAProxy over three spindle replicas in network
//! namespaces and memory cgroups, both balance modes, and the failover (a replica
//! SIGKILLed under a download that must resume with Range and end byte for byte).

mod common;

use common::EXE;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn installed(p: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(p).is_file())
}

#[test]
fn quick_scaleout_end_to_end() {
    let missing: Vec<&str> = ["haproxy", "ip"]
        .into_iter()
        .filter(|p| !installed(p))
        .collect();
    if !test_skip::is_root() {
        test_skip::skip_or_fail("needs root (network namespaces, cgroups, drop_caches)");
        return;
    }
    if !missing.is_empty() {
        test_skip::skip_or_fail(format!(
            "missing {missing:?} (apt-get install haproxy iproute2)"
        ));
        return;
    }
    // Not /tmp: on tmpfs the content would be shared memory, not page cache.
    let tmp = tempfile::Builder::new()
        .prefix("spindle-scaleout-test")
        .tempdir_in("/var/tmp")
        .unwrap();
    let out = tmp.path().join("out");
    let t0 = Instant::now();
    let o = Command::new(EXE)
        .args(["scaleout", "--quick"])
        .arg("--data")
        .arg(tmp.path().join("data"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "scaleout --quick exits 0: {err}");
    let took = t0.elapsed();
    eprintln!("scaleout --quick took {took:?}");
    assert!(
        took < Duration::from_secs(50),
        "quick stays quick: {took:?}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scaleout.json")).unwrap())
            .expect("report JSON parses");
    assert_eq!(json["schema"], "spindle-bench/1");
    assert!(!json["machine"]["load_average_start"]
        .as_str()
        .unwrap()
        .is_empty());
    let series = json["series"].as_array().unwrap();
    for mode in ["roundrobin", "uri"] {
        let s = series
            .iter()
            .find(|s| s["server"] == mode)
            .unwrap_or_else(|| panic!("a {mode} series: {series:?}"));
        assert!(s["failures"].as_array().unwrap().is_empty(), "{s}");
        let m = &s["samples"][0];
        assert!(m["fetches"].as_f64().unwrap() > 0.0, "{mode}: {m}");
        assert_eq!(m["non_200"].as_f64().unwrap(), 0.0, "{mode}: all 200: {m}");
        let via = m["haproxy_requests"].as_f64().unwrap();
        assert!(
            via >= m["fetches"].as_f64().unwrap(),
            "{mode}: every fetch went through HAProxy: {m}"
        );
        let hit = m["hit_ratio"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&hit), "{mode}: hit ratio {hit}");
        for k in 0..3 {
            assert!(
                m[format!("served_r{k}")].as_f64().unwrap() > 0.0,
                "{mode}: replica r{k} served: {m}"
            );
        }
    }

    let f = &json["extra"]["failover"];
    assert!(f["error"].is_null(), "failover ran: {f}");
    assert!(
        f["killed"]["replica"].is_string(),
        "a replica was killed: {f}"
    );
    assert!(
        f["killed"]["marked_down_ms"].as_f64().is_some(),
        "HAProxy marked it down: {f}"
    );
    assert_eq!(
        f["lost"].as_u64(),
        Some(0),
        "no fetch lost after retries: {f}"
    );
    assert!(f["fetches_ok"].as_u64().unwrap() > 0, "{f}");
    let d = &f["download"];
    assert!(
        d["resumes"].as_u64().unwrap() >= 1,
        "the kill interrupted the download: {f}"
    );
    assert_eq!(d["bytes"], d["size"], "every byte: {f}");
    assert_eq!(d["digest_match"], true, "digest matches: {f}");

    let md = std::fs::read_to_string(out.join("scaleout.md")).unwrap();
    assert!(
        md.contains("| roundrobin |") && md.contains("| uri |"),
        "{md}"
    );
    assert!(md.contains("## Failover"), "{md}");
    assert!(
        md.contains("**0 lost**") && md.contains("**match**"),
        "{md}"
    );
    let svg = std::fs::read_to_string(out.join("scaleout.svg")).unwrap();
    assert!(svg.contains("<rect"), "bars drawn");

    // Nothing left behind: namespaces, veths, cgroups.
    let pid_ns: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("spindle-so-"))
                .collect()
        })
        .unwrap_or_default();
    assert!(pid_ns.is_empty(), "namespaces removed: {pid_ns:?}");
}
