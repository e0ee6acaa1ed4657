//! HTTP/2 served by the io-uring and posix-aio backends, with real clients: curl (its
//! nghttp2) by prior knowledge on the plain listener (h2c) and by ALPN on
//! the HTTPS one, nghttp for many streams on one connection, h2load for
//! a load of multiplexed requests. Each checks the bytes, the status and
//! the protocol the client says it used. The protocol core's own tests
//! (frames, HPACK, limits, floods) are in spindle-core.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// A tool the test needs; under CI its absence fails the test.
#[track_caller]
fn have(tool: &str) -> bool {
    let ok = Command::new(tool).arg("--version").output().is_ok();
    if !ok {
        test_skip::skip_or_fail(format!("{tool} is not installed (Debian nghttp2-client)"));
    }
    ok
}

/// spindle on `backend` with a plain and an HTTPS listener; the HTTPS port.
fn start(backend: &str, root: &DocRoot, extra: &[&str]) -> (Server, u16) {
    start_with_https(backend, &root.dir, None, extra)
}

/// curl with `args`; returns (`-w` fields: status, HTTP version, and
/// the content-range header, if any, body).
fn curl(port: Option<u16>, args: &[&str]) -> (String, Vec<u8>) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "60",
        "-w",
        "\n%{http_code} %{http_version}",
    ]);
    if let Some(port) = port {
        cmd.arg("--cacert")
            .arg(tls_data("ca.pem"))
            .arg("--resolve")
            .arg(format!("localhost:{port}:127.0.0.1"));
    }
    let out = cmd.args(args).output().expect("curl");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut body = out.stdout;
    let cut = body.iter().rposition(|&b| b == b'\n').unwrap();
    let meta = String::from_utf8_lossy(&body[cut + 1..]).into_owned();
    body.truncate(cut);
    (meta, body)
}

#[test]
fn files_of_every_size_over_h2c_and_h2_byte_for_byte() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        files_of_every_size_over_h2c_and_h2_byte_for_byte_on(b);
    }
}

fn files_of_every_size_over_h2c_and_h2_byte_for_byte_on(backend: &str) {
    let root = DocRoot::new(true);
    let (srv, port) = start(backend, &root, &[]);
    let mut names: Vec<String> = SIZES.iter().map(|s| format!("f{s}")).collect();
    names.push("big".into());
    for name in &names {
        let want = root.read(name);
        let h2c = srv.url(&format!("/{name}"));
        let (meta, body) = curl(None, &["--http2-prior-knowledge", &h2c]);
        assert_eq!(meta, "200 2", "h2c {name}");
        assert!(
            body == want,
            "h2c {name}: {} bytes, want {}",
            body.len(),
            want.len()
        );
        let h2 = format!("https://localhost:{port}/{name}");
        let (meta, body) = curl(Some(port), &["--http2", &h2]);
        assert_eq!(meta, "200 2", "h2 {name}");
        assert!(
            body == want,
            "h2 {name}: {} bytes, want {}",
            body.len(),
            want.len()
        );
    }
    // HTTP/1.1 still, on both listeners, when the client asks for it.
    let (meta, body) = curl(
        Some(port),
        &["--http1.1", &format!("https://localhost:{port}/f4097")],
    );
    assert_eq!(meta, "200 1.1");
    assert_eq!(body, root.read("f4097"));
    let (meta, _) = curl(None, &["--http1.1", &srv.url("/f1")]);
    assert_eq!(meta, "200 1.1");
}

#[test]
fn every_feature_of_a_request_holds_on_a_stream() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        every_feature_of_a_request_holds_on_a_stream_on(b);
    }
}

fn every_feature_of_a_request_holds_on_a_stream_on(backend: &str) {
    let root = DocRoot::new(false);
    let log = root.dir.with_extension("access.log");
    let (srv, port) = start(backend, &root, &["--access-log", log.to_str().unwrap()]);
    for tls in [false, true] {
        let (p, base) = if tls {
            (Some(port), format!("https://localhost:{port}"))
        } else {
            (None, format!("http://{}", srv.addr))
        };
        let proto = if tls {
            "--http2"
        } else {
            "--http2-prior-knowledge"
        };
        let f = root.read("f102400");
        // A range.
        let (meta, body) = curl(p, &[proto, "-r", "100-199", &format!("{base}/f102400")]);
        assert_eq!(meta, "206 2");
        assert_eq!(body, &f[100..200]);
        // Two ranges: multipart/byteranges.
        let out = Command::new("curl")
            .args(["-sS", "-i", proto, "-r", "0-9,20-29", "--cacert"])
            .arg(tls_data("ca.pem"))
            .arg("--resolve")
            .arg(format!("localhost:{port}:127.0.0.1"))
            .arg(format!("{base}/f102400"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
        assert!(text.starts_with("http/2 206"), "{text}");
        assert!(
            text.contains("content-type: multipart/byteranges"),
            "{text}"
        );
        // HEAD: the head and no body.
        let (meta, body) = curl(p, &[proto, "-I", &format!("{base}/f4096")]);
        assert_eq!(meta, "200 2");
        let head = String::from_utf8_lossy(&body).to_lowercase();
        assert!(head.contains("content-length: 4096"), "{head}");
        assert!(
            !head.contains("connection:"),
            "a connection field over HTTP/2: {head}"
        );
        // A conditional.
        let etag = head
            .lines()
            .find_map(|l| l.strip_prefix("etag: "))
            .expect("etag")
            .trim()
            .to_string();
        let (meta, body) = curl(
            p,
            &[
                proto,
                "-H",
                &format!("If-None-Match: {etag}"),
                &format!("{base}/f4096"),
            ],
        );
        assert_eq!(meta, "304 2");
        assert!(body.is_empty());
        // Errors and dotfiles.
        let (meta, _) = curl(p, &[proto, &format!("{base}/missing")]);
        assert_eq!(meta, "404 2");
        let (meta, _) = curl(p, &[proto, &format!("{base}/.hidden")]);
        assert_eq!(meta, "404 2");
        // An index, and a redirect to the slash.
        let (meta, body) = curl(p, &[proto, &format!("{base}/sub/")]);
        assert_eq!((meta.as_str(), &body[..]), ("200 2", &b"sub index\n"[..]));
        let (meta, _) = curl(p, &[proto, &format!("{base}/sub")]);
        assert_eq!(meta, "301 2");
    }
    // The access log says HTTP/2.0 for the streams: read once the server
    // has exited by SIGTERM, which writes every line out (a SIGKILL may
    // come before the log thread wrote the last one).
    let mut srv = srv;
    assert!(srv.terminate().success());
    drop(srv);
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert!(
        text.lines().filter(|l| l.contains("HTTP/2.0")).count() >= 16,
        "{text}"
    );
}

#[test]
fn many_streams_share_one_connection() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        many_streams_share_one_connection_on(b);
    }
}

fn many_streams_share_one_connection_on(backend: &str) {
    if !have("nghttp") {
        return;
    }
    let root = DocRoot::new(false);
    let (srv, port) = start(backend, &root, &[]);
    // 60 requests on one connection, all in flight at once (the
    // client's own limit is the server's 128 streams).
    let mut urls: Vec<String> = Vec::new();
    for i in 0..60 {
        let name = format!("f{}", SIZES[i % SIZES.len()]);
        // Distinct URLs: nghttp asks for a URL once.
        urls.push(srv.url(&format!("/{name}?n={i}")));
    }
    for (scheme_urls, _tls) in [
        (urls.clone(), false),
        (
            urls.iter()
                .map(|u| {
                    u.replace(
                        &format!("http://{}", srv.addr),
                        &format!("https://127.0.0.1:{port}"),
                    )
                })
                .collect::<Vec<_>>(),
            true,
        ),
    ] {
        let out = Command::new("nghttp")
            .args(["-n", "-s", "-t", "30"])
            .args(&scheme_urls)
            .output()
            .expect("nghttp");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "nghttp: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // One line of statistics per stream, each 200.
        let done = text.lines().filter(|l| l.contains(" 200 ")).count();
        assert_eq!(done, 60, "{text}");
    }
}

#[test]
fn h2load_gets_every_multiplexed_request_answered() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        h2load_gets_every_multiplexed_request_answered_on(b);
    }
}

fn h2load_gets_every_multiplexed_request_answered_on(backend: &str) {
    if !have("h2load") {
        return;
    }
    let root = DocRoot::new(false);
    // 200 small files: a first use is opened off the loop, later ones are
    // answered from the cache at once, streams of both kinds side by side
    // on ten connections of 32 streams (on posix-aio, a stream answered
    // from inside its connection's turn once broke about 1 in 140).
    std::fs::create_dir_all(root.path("many")).unwrap();
    for i in 0..200 {
        std::fs::write(root.path(&format!("many/{i}")), random_bytes(1024, i)).unwrap();
    }
    let (srv, port) = start(backend, &root, &[]);
    let urls = |base: String| {
        let list = root
            .dir
            .join(format!("../h2load-urls-{}-{port}", std::process::id()));
        let text: String = (0..200).map(|i| format!("{base}/many/{i}\n")).collect();
        std::fs::write(&list, text).unwrap();
        list
    };
    let plain = urls(srv.url(""));
    let tls = urls(format!("https://127.0.0.1:{port}"));
    for (what, n, c) in [
        (format!("-i{}", plain.display()), "30000", "10"),
        (format!("-i{}", tls.display()), "30000", "10"),
        (format!("https://127.0.0.1:{port}/f102400"), "4000", "4"),
    ] {
        let url = &what;
        let out = Command::new("h2load")
            .args(["-n", n, "-c", c, "-m", "32", "-T", "30", url])
            .output()
            .expect("h2load");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("{n} succeeded, 0 failed, 0 errored")),
            "{url}: {text}"
        );
        assert!(
            text.contains(&format!("status codes: {n} 2xx")),
            "{url}: {text}"
        );
    }
}

#[test]
fn a_small_file_is_not_stuck_behind_a_download_on_the_same_connection() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        a_small_file_is_not_stuck_behind_a_download_on_the_same_connection_on(b);
    }
}

fn a_small_file_is_not_stuck_behind_a_download_on_the_same_connection_on(backend: &str) {
    if !have("nghttp") {
        return;
    }
    let root = DocRoot::new(true);
    let (srv, _port) = start(backend, &root, &[]);
    // The 64 MiB file first, then the small one on the same connection:
    // nghttp prints each stream's completion time; the small one ends first.
    let out = Command::new("nghttp")
        .args(["-n", "-s", "-t", "60"])
        .arg(srv.url("/big"))
        .arg(srv.url("/f4096"))
        .output()
        .expect("nghttp");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let order: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" 200 "))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(order.len(), 2, "{text}");
    // Sorted by completion: the small file is listed where it finished.
    let big_at = text.find("/big").unwrap();
    let small_at = text.find("/f4096").unwrap();
    assert!(
        small_at < big_at,
        "the small file finished after the download:\n{text}"
    );
}

#[test]
fn no_http2_serves_http_1_1_only() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        no_http2_serves_http_1_1_only_on(b);
    }
}

fn no_http2_serves_http_1_1_only_on(backend: &str) {
    let root = DocRoot::new(false);
    let (srv, port) = start(backend, &root, &["--no-http2"]);
    let (meta, _) = curl(
        Some(port),
        &["--http2", &format!("https://localhost:{port}/f1")],
    );
    assert_eq!(meta, "200 1.1", "ALPN offered h2 under --no-http2");
    // The preface on the plain listener is not a request this server
    // serves over HTTP/1.1: it is answered as one and closed.
    let mut s = srv.connect();
    s.write_all(spindle_core::h2::conn::PREFACE).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(
        got.starts_with(b"HTTP/1.1 "),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn other_backends_say_they_serve_http_1_1_only() {
    let root = DocRoot::new(false);
    let srv = Server::start("linux-sendfile", &root.dir, &[]);
    assert!(
        srv.stderr()
            .contains("HTTP/2: backend linux-sendfile serves HTTP/1.1 only"),
        "{}",
        srv.stderr()
    );
}

#[test]
fn a_bad_preface_gets_goaway_and_a_close() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        a_bad_preface_gets_goaway_and_a_close_on(b);
    }
}

fn a_bad_preface_gets_goaway_and_a_close_on(backend: &str) {
    let root = DocRoot::new(false);
    let (srv, _) = start(backend, &root, &[]);
    let mut s = srv.connect();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    // Our SETTINGS, then GOAWAY (type 7) with PROTOCOL_ERROR (1).
    let mut at = 0;
    let mut goaway = None;
    while at + 9 <= got.len() {
        let len = (got[at] as usize) << 16 | (got[at + 1] as usize) << 8 | got[at + 2] as usize;
        if got[at + 3] == 7 && at + 9 + 8 <= got.len() {
            goaway = Some(u32::from_be_bytes(
                got[at + 13..at + 17].try_into().unwrap(),
            ));
        }
        at += 9 + len;
    }
    assert_eq!(goaway, Some(1), "{got:?}");
    // The server is well.
    assert_eq!(get(&srv, "/f1").status, 200);
}

#[test]
fn a_client_that_stops_reading_is_dropped_after_the_send_timeout() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        a_client_that_stops_reading_is_dropped_after_the_send_timeout_on(b);
    }
}

fn a_client_that_stops_reading_is_dropped_after_the_send_timeout_on(backend: &str) {
    let root = DocRoot::new(true);
    let (srv, _) = start(backend, &root, &["--send-timeout", "1"]);
    let pid = srv.child.id();
    let idle = sockets(pid);
    // curl at 1 byte/s reads almost nothing of the 64 MiB body: the
    // stream's bytes wait for window, then the socket fills.
    let _curl = Killed(
        Command::new("curl")
            .args([
                "-sS",
                "--http2-prior-knowledge",
                "--limit-rate",
                "1",
                "-o",
                "/dev/null",
            ])
            .arg(srv.url("/big"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    connected_then_dropped(pid, idle, "h2c");
    // The worker is well: HTTP/2 and HTTP/1.1 are served.
    let (meta, _) = curl(None, &["--http2-prior-knowledge", &srv.url("/f1")]);
    assert_eq!(meta, "200 2");
    assert_eq!(get(&srv, "/f1").status, 200);
}

#[test]
fn the_drain_sends_goaway_and_finishes_the_streams_in_flight() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        the_drain_sends_goaway_and_finishes_the_streams_in_flight_on(b);
    }
}

fn the_drain_sends_goaway_and_finishes_the_streams_in_flight_on(backend: &str) {
    let root = DocRoot::new(true);
    let (mut srv, port) = start(backend, &root, &[]);
    let out = root.dir.with_extension("h2-drain.out");
    let out_tls = root.dir.with_extension("h2-drain-tls.out");
    // Two downloads of 64 MiB at 16 MB/s, about 4 s each: over h2c and
    // over h2 (TLS); SIGTERM lands in the middle of both.
    let dl = |args: &[&str], to: &Path| {
        Command::new("curl")
            .args(["-sS", "--limit-rate", "16M", "-o"])
            .arg(to)
            .arg("--cacert")
            .arg(tls_data("ca.pem"))
            .arg("--resolve")
            .arg(format!("localhost:{port}:127.0.0.1"))
            .args(args)
            .spawn()
            .unwrap()
    };
    let mut a = dl(&["--http2-prior-knowledge", &srv.url("/big")], &out);
    let mut b = dl(
        &["--http2", &format!("https://localhost:{port}/big")],
        &out_tls,
    );
    std::thread::sleep(Duration::from_millis(1000));
    let st = srv.terminate();
    assert!(st.success(), "spindle exited with {st}");
    let want = root.read("big");
    for (child, file) in [(&mut a, &out), (&mut b, &out_tls)] {
        assert!(
            child.wait().unwrap().success(),
            "curl failed on {}",
            file.display()
        );
        let got = std::fs::read(file).unwrap();
        let _ = std::fs::remove_file(file);
        assert!(
            got == want,
            "{}: {} bytes of {}",
            file.display(),
            got.len(),
            want.len()
        );
    }
}

#[test]
fn a_large_body_goes_in_full_data_frames() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        a_large_body_goes_in_full_data_frames_on(b);
    }
}

/// A body read in record layout (windows open for all of it) ends each
/// chunk's READ at a whole record, so no short DATA frame (and record,
/// and send) sits between chunks: every frame of `big` but its last two
/// (the body's tail, and END_STREAM) has one length.
fn a_large_body_goes_in_full_data_frames_on(backend: &str) {
    if !have("nghttp") {
        return;
    }
    let root = DocRoot::new(true);
    let (srv, port) = start(backend, &root, &[]);
    for url in [srv.url("/big"), format!("https://127.0.0.1:{port}/big")] {
        let out = Command::new("nghttp")
            .args(["-nv", "-w", "30", "-W", "30", "-t", "30", &url])
            .output()
            .expect("nghttp");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "nghttp {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lens: Vec<usize> = text
            .lines()
            .filter(|l| l.contains("recv DATA frame <length="))
            .map(|l| {
                let v = l.split("length=").nth(1).unwrap();
                v[..v.find(',').unwrap()].parse().unwrap()
            })
            .collect();
        let total: usize = lens.iter().sum();
        assert_eq!(total as u64, BIG_SIZE, "{url}: the whole body");
        let full = lens[0];
        let short: Vec<(usize, usize)> = lens[..lens.len() - 2]
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, n)| n != full)
            .collect();
        assert!(
            short.is_empty(),
            "{url}: frames of {full} bytes but {short:?}"
        );
    }
}

#[test]
fn bodies_framed_in_place_survive_short_windows_and_resets_and_give_their_buffers_back() {
    for b in &backends_with(Cap::Http2) {
        eprintln!("backend {b}");
        bodies_framed_in_place_on(b);
    }
}

/// io-uring reads a large stream body in record layout and frames it
/// where it lies (ARCHITECTURE.md, "Copies of a body byte"). Three
/// streams whose bodies each fit their stream window but not, together,
/// the connection's, which the client opens only as DATA arrives: records
/// are split by a short window (the rest of a split record goes by copy).
/// Then streams and connections cut mid-body leave their held buffers to
/// the link and the send queue. With a pool of two chunk buffers, one
/// buffer not given back would stall the downloads that follow.
fn bodies_framed_in_place_on(backend: &str) {
    let root = DocRoot::new(true);
    let names = ["w1", "w2", "w3"];
    for (i, n) in names.iter().enumerate() {
        let body = random_bytes(100_000 + i as u64 * 7, i as u64);
        std::fs::write(root.dir.join(n), body).unwrap();
    }
    let (srv, port) = start(backend, &root, &["--max-inflight", "2"]);
    let got = three_streams_through_a_narrow_connection_window(&srv, &names);
    for (n, body) in names.iter().zip(got) {
        assert!(body == root.read(n), "/{n}: {} bytes", body.len());
    }
    let plain = format!("http://{}", srv.addr);
    // Downloads cut mid-body: the client goes away with chunks held.
    for args in [
        vec![
            "--http2-prior-knowledge".to_string(),
            format!("{plain}/big"),
        ],
        vec![
            "--http2".to_string(),
            format!("https://localhost:{port}/big"),
        ],
        vec![
            "--http1.1".to_string(),
            format!("https://localhost:{port}/big"),
        ],
    ] {
        let st = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "--max-time",
                "0.3",
                "--limit-rate",
                "2M",
            ])
            .arg("--cacert")
            .arg(tls_data("ca.pem"))
            .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
            .args(&args)
            .status()
            .unwrap();
        assert_eq!(st.code(), Some(28), "curl {args:?} timed out mid-body");
    }
    // Every buffer is back: whole downloads still complete, each way.
    let want = root.read("big");
    let (meta, body) = curl(None, &["--http2-prior-knowledge", &format!("{plain}/big")]);
    assert_eq!(meta, "200 2");
    assert!(body == want, "h2c big: {} bytes", body.len());
    for proto in ["--http2", "--http1.1"] {
        let (_, body) = curl(
            Some(port),
            &[proto, &format!("https://localhost:{port}/big")],
        );
        assert!(body == want, "{proto} big: {} bytes", body.len());
    }
}

/// An h2c client by hand (frames of RFC 9113 §6): stream windows of
/// 120,000 bytes, the connection's opened to 120,000 and then by each
/// DATA frame's length as it arrives; GETs of `names` on streams 1, 3,
/// 5. Returns each body, once all three ended (status 200 each).
fn three_streams_through_a_narrow_connection_window(srv: &Server, names: &[&str]) -> Vec<Vec<u8>> {
    const WINDOW: u32 = 120_000;
    let mut s = srv.connect();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE (4).
    let mut set = vec![0, 4];
    set.extend_from_slice(&WINDOW.to_be_bytes());
    h2_frame(&mut out, 4, 0, 0, &set);
    h2_frame(&mut out, 8, 0, 0, &(WINDOW - 65_535).to_be_bytes());
    for (i, n) in names.iter().enumerate() {
        // :method GET, :scheme http, :path and :authority as literals.
        let mut block = vec![0x82, 0x86, 0x04, n.len() as u8 + 1, b'/'];
        block.extend_from_slice(n.as_bytes());
        block.extend_from_slice(&[0x01, 9]);
        block.extend_from_slice(b"localhost");
        h2_frame(&mut out, 1, 0x5, 1 + 2 * i as u32, &block);
    }
    s.write_all(&out).unwrap();
    let mut bodies = vec![Vec::new(); names.len()];
    let mut status_ok = vec![false; names.len()];
    let mut ended = 0;
    while ended < names.len() {
        let mut head = [0u8; 9];
        s.read_exact(&mut head).expect("a frame");
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let id = u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).unwrap();
        let k = (id as usize).wrapping_sub(1) / 2;
        match kind {
            0 => {
                bodies[k].extend_from_slice(&payload);
                if len > 0 {
                    let mut wu = Vec::new();
                    h2_frame(&mut wu, 8, 0, 0, &(len as u32).to_be_bytes());
                    s.write_all(&wu).unwrap();
                }
            }
            // HEADERS: `:status 200` is static index 8, first.
            1 => status_ok[k] = payload.first() == Some(&0x88),
            // SETTINGS from the server: acknowledged.
            4 if flags & 1 == 0 => {
                let mut ack = Vec::new();
                h2_frame(&mut ack, 4, 1, 0, &[]);
                s.write_all(&ack).unwrap();
            }
            3 | 7 => panic!("stream {id}: frame {kind} {payload:?}"),
            _ => {}
        }
        if (kind == 0 || kind == 1) && flags & 1 != 0 {
            ended += 1;
        }
    }
    assert!(status_ok.iter().all(|&ok| ok), "every stream 200");
    bodies
}
