//! Issue 6: the seed's lighttpd experiment (seed 004) on the emulated RAID1 at CI scale.
//! 4,000 files of 100 KiB (410 MB), the server in a 64 MiB memory cgroup, caches dropped
//! before each run, `-parallel 100` with a connection per fetch as http_load. The disk
//! is the slowdisk model (2 spindles, 8.5 ms seek, 7,200 rpm, 30 MB/s), so the bars are
//! properties of the model, not of this machine's disk.

mod common;

use common::EXE;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn async_backends_beat_sendfile_on_the_emulated_raid1() {
    if let Some(why) = common::fuse_missing() {
        test_skip::skip_or_fail(why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let st = Command::new(EXE)
        .args([
            "cold",
            "--disk",
            "emulated",
            "--scale",
            "0.04",
            "--cgroup-mem",
            "64m",
            "--servers",
            "spindle-io-uring,spindle-linux-sendfile,spindle-posix-aio,spindle-linux-aio-sendfile",
            "--seconds",
            "8",
            "--rounds",
            "1",
            "--no-fio",
            "--modes",
            "close",
        ])
        .arg("--data")
        .arg(tmp.path().join("data"))
        .arg("--out")
        .arg(tmp.path().join("out"))
        .status()
        .unwrap();
    assert!(st.success());
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("out/cold-emulated.json")).unwrap(),
    )
    .unwrap();
    let fps = |server: &str| -> f64 {
        let s = json["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["server"] == server)
            .unwrap_or_else(|| panic!("{server} ran"));
        assert!(s["failures"].as_array().unwrap().is_empty(), "{s}");
        assert_eq!(s["samples"][0]["non_200"].as_f64().unwrap(), 0.0, "{s}");
        s["medians"]["fetches_per_sec"].as_f64().unwrap()
    };
    let uring = fps("spindle-io-uring");
    let sendfile = fps("spindle-linux-sendfile");
    let posix = fps("spindle-posix-aio");
    let linux_aio = fps("spindle-linux-aio-sendfile");
    eprintln!(
        "fetches/sec: io-uring {uring:.1}, linux-sendfile {sendfile:.1}, posix-aio {posix:.1}, linux-aio-sendfile {linux_aio:.1} (seed: 40.5 sendfile, 72.7 linux-aio-sendfile); {:?}",
        t0.elapsed()
    );
    assert!(
        sendfile > 10.0,
        "the blocking server still serves: {sendfile}"
    );
    assert!(
        uring >= 1.5 * sendfile,
        "io-uring {uring:.1} >= 1.5 x linux-sendfile {sendfile:.1}"
    );
    assert!(
        posix > sendfile,
        "posix-aio {posix:.1} > linux-sendfile {sendfile:.1}"
    );
    assert!(
        linux_aio > sendfile,
        "linux-aio-sendfile {linux_aio:.1} > linux-sendfile {sendfile:.1}"
    );
    assert!(t0.elapsed() < Duration::from_secs(120), "under 2 minutes");
}
