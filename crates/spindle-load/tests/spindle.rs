//! A run against spindle itself: start the `spindle` binary built in the
//! same target directory on a free loopback port (and an HTTPS one, with the
//! test certificate in tests/data), fetch a small file set, and check every
//! code is 200 and every byte count matches.

mod common;

use common::*;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `target/<profile>/deps/<this test>` → `target/<profile>/spindle`.
fn spindle_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap();
    let bin = profile_dir.join("spindle");
    assert!(
        bin.exists(),
        "{} not found: build the workspace (cargo test --workspace builds it)",
        bin.display()
    );
    bin
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_run_against_spindle() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir(&root).unwrap();
    // 20 files of assorted sizes, with distinct contents.
    let sizes: Vec<usize> = (0..20).map(|i| 1 + i * 5_123).collect();
    let mut urls = String::new();
    let mut https_urls = String::new();
    let port = free_port();
    let tls_port = free_port();
    for (i, len) in sizes.iter().enumerate() {
        let name = format!("f{i}");
        let content: Vec<u8> = (0..*len).map(|j| ((i * 31 + j * 7) % 251) as u8).collect();
        std::fs::write(root.join(&name), content).unwrap();
        urls.push_str(&format!("http://127.0.0.1:{port}/{name}\n"));
        https_urls.push_str(&format!("https://localhost:{tls_port}/{name}\n"));
    }
    let urlfile = write_file(dir.path(), "urls", &urls);
    let https_file = write_file(dir.path(), "https-urls", &https_urls);
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let ca = data.join("test-ca.pem");

    let child = Command::new(spindle_bin())
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--tls-listen")
        .arg(format!("127.0.0.1:{tls_port}"))
        .arg("--tls-cert")
        .arg(data.join("test-server.pem"))
        .arg("--tls-key")
        .arg(data.join("test-server.key"))
        .arg(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start spindle");
    let _server = Server(child);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let t = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "spindle did not start listening"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let cacert = ["--cacert", ca.to_str().unwrap()];
    let https_runs = [
        (&https_file, &cacert[..]),
        (
            &https_file,
            &["--cacert", ca.to_str().unwrap(), "--keepalive"][..],
        ),
        (
            &https_file,
            &["--cacert", ca.to_str().unwrap(), "--no-resume"][..],
        ),
    ];
    let plain_runs = [(&urlfile, &[][..]), (&urlfile, &["--keepalive"][..])];
    for (urlfile, extra) in plain_runs.into_iter().chain(https_runs) {
        let jp = dir.path().join("o.json");
        let mut args = vec![
            "-checksum",
            "-p",
            "8",
            "-f",
            "400",
            "--json",
            jp.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.push(urlfile.to_str().unwrap());
        let out = load(&args, Duration::from_secs(60));
        assert!(out.status.success(), "{}", text(&out.stderr));
        let j = json(&jp);
        assert_eq!(j["fetches"], 400, "{extra:?}");
        assert_eq!(j["codes"]["200"], 400, "{extra:?}: {}", j["codes"]);
        assert_eq!(
            j["codes"].as_object().unwrap().len(),
            1,
            "only 200s: {}",
            j["codes"]
        );
        for k in ["errors", "timeouts", "bad_bytes", "bad_checksums"] {
            assert_eq!(j[k], 0, "{extra:?}: {k}: {}", text(&out.stderr));
        }
        let handshakes = j["tls"]["full"].as_u64().unwrap() + j["tls"]["resumed"].as_u64().unwrap();
        if urlfile == &https_file {
            assert!(handshakes >= 8, "{extra:?}: TLS handshakes: {}", j["tls"]);
            if extra.contains(&"--no-resume") {
                assert_eq!(j["tls"]["resumed"], 0);
            } else if !extra.contains(&"--keepalive") {
                assert!(j["tls"]["resumed"].as_u64().unwrap() > 300, "{}", j["tls"]);
            }
        } else {
            assert_eq!(handshakes, 0);
        }
        // The bytes received are exactly the files' sizes, fetch by fetch:
        // every fetch matched its URL's first fetch (checked above), and the
        // mean lies within the files' size range.
        let mean = j["mean_bytes_per_connection"].as_f64().unwrap();
        assert!(
            mean >= 1.0 && mean <= *sizes.last().unwrap() as f64,
            "{mean}"
        );
    }

    // Many connections at once, a new one per fetch: only the first wave
    // pays a full handshake; every later connection finds a TLS 1.3 ticket
    // (each resumes one connection, so the store must hold more than
    // rustls's default 8 per server).
    let jp = dir.path().join("wave.json");
    let out = load(
        &[
            "-p",
            "64",
            "-f",
            "1280",
            "--cacert",
            ca.to_str().unwrap(),
            "--json",
            jp.to_str().unwrap(),
            https_file.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j = json(&jp);
    let full = j["tls"]["full"].as_u64().unwrap();
    assert!(
        full <= 64 + 8,
        "{full} full handshakes for 64 parallel: {}",
        j["tls"]
    );

    // One URL, so the total is exact.
    let one = write_file(dir.path(), "one", &format!("http://127.0.0.1:{port}/f7\n"));
    let out = load(
        &["-p", "4", "-f", "100", one.to_str().unwrap()],
        Duration::from_secs(60),
    );
    assert!(out.status.success());
    let first = text(&out.stdout).lines().next().unwrap().to_string();
    let want_bytes = spindle_load::gfmt::g((100 * sizes[7]) as f64);
    assert!(
        first.starts_with(&format!("100 fetches, 4 max parallel, {want_bytes} bytes")),
        "{first}"
    );
}
