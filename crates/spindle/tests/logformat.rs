//! `--log-format json`: one JSON object per access-log line, with the
//! request time and where each body came from, on every backend; a
//! download the client cut off is logged too.

mod common;

use std::os::fd::AsRawFd;

use common::*;

/// Drops a file's pages from the page cache, so the next read misses.
fn make_cold(path: &std::path::Path) {
    let f = std::fs::File::open(path).unwrap();
    // Dirty pages stay: write them back first.
    f.sync_all().unwrap();
    // SAFETY: fadvise on a live descriptor; no pointers.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
}

/// spindle on `backend` with one worker (so the lines come in the
/// order of the requests) and a JSON access log at `log`.
fn json_logged(backend: &str, root: &std::path::Path, log: &std::path::Path) -> Server {
    let log = log.to_str().unwrap();
    let args = [
        "--workers",
        "1",
        "--access-log",
        log,
        "--log-format",
        "json",
    ];
    Server::start(backend, root, &args)
}

#[test]
fn json_lines_on_every_backend() {
    let root = DocRoot::new(false);
    for b in backends() {
        let log = root.dir.join(format!("../json-{b}.log"));
        let _ = std::fs::remove_file(&log);
        let srv = json_logged(&b, &root.dir, &log);
        make_cold(&root.path("f1048583"));
        assert_eq!(get(&srv, "/f1048583").status, 200);
        assert_eq!(get(&srv, "/f1048583").status, 200);
        assert_eq!(get(&srv, "/nope\"\\").status, 404);
        assert_eq!(get(&srv, "/no-such").status, 404);
        let r = request(
            &srv,
            "GET /f1 HTTP/1.1\r\nHost: t\r\nUser-Agent: t\u{e9}st \"q\"\r\nReferer: http://x/\r\n\r\n",
        );
        assert_eq!(r.status, 200);
        let lines = wait_log_lines(&log, 5);
        assert_eq!(lines.len(), 5, "{b}: {lines:#?}");
        let v: Vec<serde_json::Value> = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{b}: {e}: {l}")))
            .collect();
        for (x, status) in v.iter().zip([200, 200, 404, 404, 200]) {
            assert_eq!(x["status"], status, "{b}: {x}");
            assert_eq!(x["client"], "127.0.0.1", "{b}");
            assert_eq!(x["protocol"], "HTTP/1.1", "{b}");
            assert!(x["time"].as_str().unwrap().ends_with('Z'), "{b}");
            assert!(x["request_us"].as_u64().is_some(), "{b}");
        }
        assert_eq!(v[0]["bytes"], 1048583, "{b}");
        assert_eq!(v[0]["target"], "/f1048583", "{b}");
        assert_eq!(v[2]["target"], "/nope\"\\", "{b}: escaping");
        // The cold read says so; the second is from the page cache.
        let cold = v[0]["outcome"].as_str().unwrap();
        let warm = v[1]["outcome"].as_str().unwrap();
        let (want_cold, want_warm) = match b.as_str() {
            "io-uring" => (&["read", "direct"][..], "cache"),
            "posix-aio" => (&["read"][..], "cache"),
            "linux-aio-sendfile" => (&["direct"][..], "direct"),
            _ => (&["sendfile"][..], "sendfile"),
        };
        assert!(want_cold.contains(&cold), "{b}: cold body {cold}");
        assert_eq!(warm, want_warm, "{b}: warm body");
        assert!(v[0]["request_us"].as_u64().unwrap() > 0, "{b}");
        assert_eq!(v[3]["outcome"], "memory", "{b}");
        assert_eq!(v[4]["user_agent"], "t\u{e9}st \"q\"", "{b}");
        assert_eq!(v[4]["referer"], "http://x/", "{b}");
        assert_eq!(v[3]["referer"], serde_json::Value::Null, "{b}");
        let _ = std::fs::remove_file(&log);
    }
}

#[test]
fn a_bad_log_format_gives_one_line_and_exit_1() {
    let dir = std::env::temp_dir().join(format!("spindle-logfmt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let toml = dir.join("bad.toml");
    std::fs::write(&toml, "log-format = \"xml\"\n").unwrap();
    startup_error(
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            toml.to_str().unwrap(),
        ],
        "combined or json",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_download_the_client_cuts_off_is_logged() {
    let root = DocRoot::new(true);
    for b in backends() {
        let log = root.dir.join(format!("../cut-{b}.log"));
        let _ = std::fs::remove_file(&log);
        let srv = json_logged(&b, &root.dir, &log);
        // The head and a little of a 64 MiB body, then the client goes.
        let mut s = std::net::TcpStream::connect(srv.addr).unwrap();
        std::io::Write::write_all(&mut s, b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut buf = [0u8; 4096];
        let n = std::io::Read::read(&mut s, &mut buf).unwrap();
        assert!(n > 0);
        drop(s);
        let lines = wait_log_lines(&log, 1);
        let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["status"], 200, "{b}: {}", lines[0]);
        assert_eq!(v["outcome"], "cut", "{b}: {}", lines[0]);
        let bytes = v["bytes"].as_u64().unwrap();
        assert!(bytes < BIG_SIZE, "{b}: {}", lines[0]);
    }
}
