//! Every receiver against every sender on a few MiB over real loopback
//! TCP sockets, checksums verified; the veth mode where `ip netns` works;
//! the command line end to end.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use clap::Parser;
use naio::bench::{verify, SockRecv};
use naio::{run_one, Net, NetnsPair, RecvMode, RunConfig, RunResult, SendMode, Source};

const FILE_LEN: usize = 8 << 20;
const BYTES: u64 = 4 << 20;
/// Far above what a few MiB need; the run's watchdog adds a minute to it.
const TIME_LIMIT: Duration = Duration::from_secs(30);

/// A directory on a file system with O_DIRECT (linux-aio-sendfile fails on
/// tmpfs before Linux 6.6): the target dir's tmp, else /var/tmp.
fn disk_dir() -> PathBuf {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(probe_disk_dir).clone()
}

fn probe_disk_dir() -> PathBuf {
    use std::os::unix::fs::OpenOptionsExt;
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let probe = target.join(format!("naio-odirect-probe-{}", std::process::id()));
    let ok = std::fs::write(&probe, [0u8; 4096]).is_ok()
        && std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)
            .is_ok();
    let _ = std::fs::remove_file(&probe);
    if ok {
        target
    } else {
        PathBuf::from("/var/tmp")
    }
}

fn source() -> &'static Source {
    static S: OnceLock<Source> = OnceLock::new();
    S.get_or_init(|| {
        let p = disk_dir().join("naio-test-source.bin");
        Source::open_or_create(&p, FILE_LEN).expect("source file")
    })
}

fn check(r: &RunResult, cfg: &RunConfig) {
    let per = cfg.bytes / cfg.sockets as u64 / cfg.size as u64 * cfg.size as u64;
    assert_eq!(r.bytes, per * cfg.sockets as u64, "{cfg:?}");
    assert!(!r.capped);
    assert!(r.send_cpu_s > 0.0 && r.recv_cpu_s > 0.0, "{r:?}");
    assert!(r.mbps > 0.0);
    if cfg.send == SendMode::UringSendZc {
        assert!(r.zc_sends > 0 && r.zc_notifs == r.zc_sends, "{r:?}");
    } else {
        assert_eq!(r.zc_notifs, 0);
    }
    if cfg.send == SendMode::UringSplice {
        // Splices run on io-wq workers; their CPU must be found.
        assert!(r.send_iowq_s > 0.0, "io-wq CPU not attributed: {r:?}");
    }
}

fn all_senders(recv: RecvMode, shift: usize) {
    let sizes = [512usize, 4096, 65536, 1 << 20];
    for (j, send) in SendMode::ALL.into_iter().enumerate() {
        let cfg = RunConfig {
            recv,
            send,
            size: sizes[(j + shift) % sizes.len()],
            sockets: [1, 3][j % 2],
            bytes: BYTES,
            time_limit: Some(TIME_LIMIT),
        };
        let r = run_one(&cfg, source(), &Net::Loopback)
            .unwrap_or_else(|e| panic!("{} <- {}: {e:#}", recv.name(), send.name()));
        check(&r, &cfg);
    }
}

#[test]
fn recv_against_every_sender() {
    all_senders(RecvMode::Recv, 0);
}

#[test]
fn epoll_against_every_sender() {
    all_senders(RecvMode::Epoll, 1);
}

#[test]
fn uring_recv_against_every_sender() {
    all_senders(RecvMode::UringRecv, 2);
}

#[test]
fn uring_recv_multishot_against_every_sender() {
    all_senders(RecvMode::UringRecvMultishot, 3);
}

#[test]
fn checksum_catches_a_changed_byte() {
    let src = source();
    let cfg = RunConfig {
        recv: RecvMode::UringRecvMultishot,
        send: SendMode::Sendfile,
        size: 65536,
        sockets: 2,
        bytes: BYTES,
        time_limit: Some(TIME_LIMIT),
    };
    let r = run_one(&cfg, src, &Net::Loopback).unwrap();
    let (sent, digest) = r.per_socket[1];
    let got = SockRecv {
        bytes: sent,
        digest,
    };
    verify(src, 1, sent, got).expect("the real stream verifies");
    // Change one byte inside socket 1's stream: the same receipt must fail.
    let mut content = src.content.clone();
    let off = src.offset(1, sent / 2);
    content[off] ^= 0x40;
    let changed = Source {
        path: src.path.clone(),
        content,
    };
    assert!(verify(&changed, 1, sent, got).is_err());
    assert!(
        verify(src, 1, sent - 1, got).is_err(),
        "a short count must fail"
    );
}

#[test]
fn sender_time_limit_stops_and_still_verifies() {
    // 64 GiB cannot move in 0.3 s: the time limit must end the run early,
    // on a message boundary, with the checksums still matching.
    let cfg = RunConfig {
        recv: RecvMode::Epoll,
        send: SendMode::UringSend,
        size: 65536,
        sockets: 2,
        bytes: 64 << 30,
        time_limit: Some(Duration::from_millis(300)),
    };
    let r = run_one(&cfg, source(), &Net::Loopback).unwrap();
    assert!(r.capped);
    assert!(r.bytes > 0 && r.bytes & 65535 == 0);
    assert!(r.secs < 30.0, "{r:?}");
}

#[test]
fn veth_between_namespaces() {
    let pair = match NetnsPair::create() {
        Ok(p) => p,
        Err(e) => {
            test_skip::skip_or_fail(format!(
                "no veth pair between network namespaces (needs root and iproute2): {e:#}"
            ));
            return;
        }
    };
    let names = [pair.tx.clone(), pair.rx.clone()];
    let net = Net::Veth(pair);
    for (recv, send) in [
        (RecvMode::UringRecvMultishot, SendMode::UringSendZc),
        (RecvMode::Recv, SendMode::LinuxAioSendfile),
        (RecvMode::Epoll, SendMode::UringSplice),
    ] {
        let cfg = RunConfig {
            recv,
            send,
            size: 65536,
            sockets: 3,
            bytes: BYTES,
            time_limit: Some(TIME_LIMIT),
        };
        let r = run_one(&cfg, source(), &net).unwrap_or_else(|e| panic!("veth: {e:#}"));
        assert!(r.netns);
        check(&r, &cfg);
    }
    drop(net);
    for n in names {
        assert!(
            !PathBuf::from("/run/netns").join(&n).exists(),
            "namespace {n} was not removed"
        );
    }
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: naio::Args,
}

fn cli(extra: &[&str]) -> Result<naio::Args, clap::Error> {
    let mut v = vec!["naio"];
    v.extend_from_slice(extra);
    Cli::try_parse_from(v).map(|c| c.args)
}

#[test]
fn command_line_writes_tables_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let file = disk_dir().join("naio-cli-source.bin");
    let out = dir.path().join("out");
    let a = cli(&[
        "--plan",
        "sweeps",
        "--recv",
        "recv,uring-recv",
        "--send",
        "send,uring-send-zc",
        "--sweep-send",
        "send",
        "--sweep-recv",
        "recv",
        "--size",
        "4K,64K",
        "--sockets",
        "1,2",
        "--bytes",
        "1M",
        "--file-size",
        "2M",
        "--file",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .unwrap();
    naio::run(a).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    // recv-sweep: recv, uring-recv (with send); send-sweep: send (shared), uring-send-zc.
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3 * 2 * 2, "{json}");
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 12);
    for stem in [
        "recv-sweep-1sock",
        "recv-sweep-2sock",
        "send-sweep-1sock",
        "send-sweep-2sock",
    ] {
        for kind in ["mbps", "cpu-send", "cpu-recv", "cpu-total"] {
            let p = out.join(format!("{stem}-{kind}.svg"));
            let svg = std::fs::read_to_string(&p).unwrap_or_else(|_| panic!("missing {p:?}"));
            assert!(svg.contains("<svg") && svg.contains("polyline"), "{p:?}");
        }
    }
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(md.contains("| uring-send-zc |"), "{md}");

    // --replot rebuilds the same tables from results.json without running.
    let again = dir.path().join("again");
    let a = cli(&[
        "--replot",
        out.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ])
    .unwrap();
    naio::run(a).unwrap();
    let md2 = std::fs::read_to_string(again.join("results.md")).unwrap();
    assert_eq!(md, md2);
    assert!(again.join("send-sweep-2sock-cpu-total.svg").exists());
}

#[test]
fn bad_flags_are_errors_not_panics() {
    assert!(cli(&["--size", "3X"]).is_err());
    assert!(cli(&["--recv", "nope"]).is_err());
    for bad in [
        &["--size", "1000"][..],
        &["--size", "2M"],
        &["--sockets", "0"],
        &["--sockets", "65"],
        &["--repeats", "0"],
        &["--bytes", "100", "--size", "512", "--sockets", "1"],
        &["--file-size", "3000"],
        &["--time-limit=-1"],
    ] {
        let a = cli(bad).unwrap();
        let e = naio::run(a).expect_err(&format!("{bad:?} accepted"));
        assert!(!e.to_string().is_empty());
    }
}
