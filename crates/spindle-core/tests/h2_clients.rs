//! Real HTTP/2 clients (curl, nghttp, h2load: nghttp2's encoder, flow
//! control and Huffman coding, not ours) against `H2Conn`, driven over
//! TCP (h2c, prior knowledge) by the small driver below: a thread per
//! connection, a non-blocking socket, bodies made up on the fly. It is a
//! check of the protocol core with real peers, not of the server's data
//! path, which drives the same API from its event loops.
//!
//! `GET /N` answers N bytes, byte i being `i % 251`.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use spindle_core::h2::{Event, H2Conn, H2Settings};

/// Bytes the driver queues for the socket before it stops making frames.
const WRITE_QUEUE: usize = 256 << 10;

/// A driver loop with nothing to do waits this long before trying again.
const IDLE_WAIT: Duration = Duration::from_micros(200);

/// Longest a client command may take.
const CLIENT_TIMEOUT: &str = "60";

fn body_byte(i: u64) -> u8 {
    (i % 251) as u8
}

fn serve(mut sock: TcpStream) {
    sock.set_nonblocking(true).unwrap();
    sock.set_nodelay(true).unwrap();
    let start = Instant::now();
    let mut c = H2Conn::new(H2Settings::default());
    let mut inbuf = Vec::new();
    let mut rd = vec![0u8; 64 << 10];
    let mut wbuf: Vec<u8> = Vec::new();
    // Stream id -> (bytes sent, body length).
    let mut bodies: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut closing = false;
    let mut eof = false;
    loop {
        let mut progress = false;
        if !eof && !closing {
            match sock.read(&mut rd) {
                Ok(0) => eof = true,
                Ok(n) => {
                    inbuf.extend_from_slice(&rd[..n]);
                    progress = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
        let n = c.feed(&inbuf, start.elapsed().as_millis() as u64);
        inbuf.drain(..n);
        progress |= n > 0;
        while let Some(e) = c.poll_event() {
            progress = true;
            match e {
                Event::Request(r) => {
                    let len: u64 = r.path()[1..].parse().unwrap_or(0);
                    let head = r.method() == "HEAD";
                    let cl = len.to_string();
                    c.send_headers(
                        r.stream_id,
                        200,
                        &[
                            (b"content-length", cl.as_bytes()),
                            (b"content-type", b"application/octet-stream"),
                        ],
                        len == 0 || head,
                    );
                    if len > 0 && !head {
                        bodies.insert(r.stream_id, (0, len));
                    }
                }
                Event::StreamReset { stream_id } => {
                    bodies.remove(&stream_id);
                }
                Event::Close => closing = true,
                Event::WindowOpened | Event::GoAway { .. } => {}
            }
        }
        wbuf.extend_from_slice(c.out());
        c.advance_out(c.out().len());
        while wbuf.len() < WRITE_QUEUE {
            let Some(id) = c.next_sendable() else { break };
            let (sent, len) = bodies[&id];
            let n = (c.data_budget(id) as u64).min(len - sent);
            let end = sent + n == len;
            let h = c.data_frame(id, n as usize, end).unwrap();
            wbuf.extend_from_slice(&h);
            wbuf.extend((sent..sent + n).map(body_byte));
            if end {
                bodies.remove(&id);
            } else {
                bodies.insert(id, (sent + n, len));
            }
            progress = true;
        }
        if !wbuf.is_empty() {
            match sock.write(&wbuf) {
                Ok(n) => {
                    wbuf.drain(..n);
                    progress = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
        if (closing || eof) && wbuf.is_empty() {
            return;
        }
        if !progress {
            std::thread::sleep(IDLE_WAIT);
        }
    }
}

/// A listening driver; returns its base URL.
fn server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let s = s.unwrap();
            std::thread::spawn(move || serve(s));
        }
    });
    url
}

/// Whether `tool` runs; if not, says why, and fails under CI.
fn have(tool: &str) -> bool {
    if Command::new(tool).arg("--version").output().is_ok() {
        return true;
    }
    test_skip::skip_or_fail(format_args!(
        "{tool} is not installed (Debian: curl, nghttp2-client)"
    ));
    false
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn check_body(path: &std::path::Path, len: u64) {
    let got = std::fs::read(path).unwrap();
    assert_eq!(got.len() as u64, len, "{}", path.display());
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, &b)| b == body_byte(i as u64)),
        "{}: wrong bytes",
        path.display()
    );
}

/// One curl per URL: curl 7.88 with `--http2-prior-knowledge` fails every
/// transfer after the first on a connection ("Error in the HTTP2 framing
/// layer"), against nghttpd too. nghttp and h2load multiplex.
#[test]
fn curl_downloads_and_uploads() {
    if !have("curl") {
        return;
    }
    let url = server();
    let dir = tempfile::tempdir().unwrap();
    let sizes = [0u64, 1, 16_384, 16_385, 1_000_000, 30_000_000];
    for n in sizes {
        let file = dir.path().join(n.to_string());
        let out = run(Command::new("curl")
            .args(["--http2-prior-knowledge", "-sS", "--fail"])
            .args(["--max-time", CLIENT_TIMEOUT])
            .args(["-w", "%{http_version} %{http_code} %{size_download}"])
            .arg(format!("{url}/{n}"))
            .arg("-o")
            .arg(&file));
        assert_eq!(out, format!("2 200 {n}"));
        check_body(&file, n);
    }
    // A 60 KB upload: read and dropped before the answer, as HTTP/1.1
    // does up to the same limit.
    let up = dir.path().join("up");
    std::fs::write(&up, vec![7u8; 60_000]).unwrap();
    let out = run(Command::new("curl").args([
        "--http2-prior-knowledge",
        "-sS",
        "--max-time",
        CLIENT_TIMEOUT,
        "-w",
        "%{http_version} %{http_code} %{size_upload} %{size_download}",
        "-o",
        "/dev/null",
        "--data-binary",
        &format!("@{}", up.display()),
        &format!("{url}/10"),
    ]));
    assert_eq!(out, "2 200 60000 10");
    // HEAD: headers only.
    let out = run(Command::new("curl").args([
        "--http2-prior-knowledge",
        "-sS",
        "-I",
        &format!("{url}/12345"),
    ]));
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    assert!(out.contains("content-length: 12345"), "{out}");
}

#[test]
fn nghttp_fetches_with_small_windows() {
    if !have("nghttp") {
        return;
    }
    let url = server();
    // -w/-W 16: the client's stream and connection windows are 64 KiB
    // (2^16 - 1), so a 3 MB body moves only as nghttp opens them.
    let out = run(Command::new("nghttp").args([
        "-n",
        "-s",
        "-w",
        "16",
        "-W",
        "16",
        "-t",
        CLIENT_TIMEOUT,
        &format!("{url}/3000000"),
        &format!("{url}/1"),
        &format!("{url}/70000"),
    ]));
    // A 5 MB upload: answered at once (it is over the limit read
    // first), the rest of the body reset with NO_ERROR. (curl 7.88 calls
    // that reset an error, against nginx as here.)
    let up = std::env::temp_dir().join(format!("h2-up-{}", std::process::id()));
    std::fs::write(&up, vec![7u8; 5 << 20]).unwrap();
    let post = run(Command::new("nghttp").args([
        "-n",
        "-s",
        "-t",
        CLIENT_TIMEOUT,
        "-d",
        up.to_str().unwrap(),
        &format!("{url}/10"),
    ]));
    std::fs::remove_file(&up).unwrap();
    assert!(
        post.lines()
            .any(|l| l.contains(" 200 ") && l.ends_with("/10")),
        "{post}"
    );
    // nghttp's statistics: a line per response, its status and path.
    let mut done: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(" 200 "))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    done.sort();
    assert_eq!(done, ["/1", "/3000000", "/70000"], "{out}");
}

#[test]
fn h2load_gets_every_request_answered() {
    if !have("h2load") {
        return;
    }
    let url = server();
    let out = run(Command::new("h2load").args([
        "-n",
        "20000",
        "-c",
        "4",
        "-m",
        "32",
        &format!("{url}/1024"),
    ]));
    assert!(
        out.contains("requests: 20000 total, 20000 started, 20000 done, 20000 succeeded, 0 failed, 0 errored"),
        "{out}"
    );
    // Large bodies, many at once, through small client windows (64 KiB
    // per stream, 1 MiB per connection): flow control and the scheduler
    // under load.
    let out = run(Command::new("h2load").args([
        "-n",
        "64",
        "-c",
        "2",
        "-m",
        "16",
        "-w",
        "16",
        "-W",
        "20",
        &format!("{url}/1000000"),
    ]));
    assert!(
        out.contains("requests: 64 total, 64 started, 64 done, 64 succeeded, 0 failed, 0 errored"),
        "{out}"
    );
    assert!(out.contains("traffic: 61.0"), "64 MB of bodies: {out}");
}
