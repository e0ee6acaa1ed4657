//! The short soak CI runs: 15 s of the mixed traffic (GETs, HEADs, ranges,
//! conditionals, pipelined bursts, malformed requests, resets, slow readers,
//! slowloris heads, files replaced and truncated while served) against every spindle
//! backend, with truncation in place only where `--no-sendfile` applies. Every client check must pass and the server must stay up; growth is only
//! judged in long runs (`spindle-bench soak`, docs/reliability.md).

mod common;

use common::EXE;
use std::process::Command;

/// One short soak of `servers` with these extra flags; checks every server's figures.
fn short_soak(servers: &str, extra: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let st = Command::new(EXE)
        .args([
            "soak",
            "--minutes",
            "0.25",
            "--rate",
            "100",
            "--idle",
            "50",
            "--seed",
            "7",
        ])
        .args(extra)
        .args(["--servers", servers])
        .arg("--out")
        .arg(tmp.path())
        .status()
        .unwrap();
    let md = std::fs::read_to_string(tmp.path().join("soak.md")).unwrap_or_default();
    assert!(st.success(), "the soak failed:\n{md}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("soak.json")).unwrap())
            .unwrap();
    let servers_run = json["servers"].as_array().unwrap();
    assert_eq!(servers_run.len(), servers.split(',').count());
    for s in servers_run {
        let name = s["server"].as_str().unwrap();
        assert_eq!(s["errors"], 0, "{name}:\n{md}");
        assert_eq!(s["crashed"], false, "{name}");
        assert!(
            s["requests"].as_u64().unwrap() > 500,
            "{name}: too few requests:\n{md}"
        );
        for (scenario, n) in s["scenarios"].as_object().unwrap() {
            assert!(
                n.as_u64().unwrap() > 0,
                "{name}: no {scenario} scenario ran"
            );
        }
    }
}

/// With `--no-sendfile`, truncation in place is part of the mix: nothing
/// may reach bytes already queued (docs/reliability.md, "Files changed in
/// place").
#[test]
fn a_short_soak_with_truncation_passes_every_check_without_sendfile() {
    short_soak(
        "spindle-io-uring,spindle-posix-aio",
        &["--spindle-flag=--no-sendfile"],
    );
}

/// With `sendfile` (the default, and the only way of the sendfile
/// backends) a truncation after the whole body is queued can still zero
/// bytes under the promised length, as with nginx and lighttpd; the long
/// runs show it, CI leaves truncation out here.
#[test]
fn a_short_soak_of_every_backend_passes_every_check() {
    short_soak(
        "spindle-io-uring,spindle-linux-sendfile,spindle-posix-aio,spindle-linux-aio-sendfile",
        &["--no-truncate"],
    );
}
