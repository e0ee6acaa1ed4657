//! 200 clients asking for the same uncached 700 MB file at once: the
//! origin sees each slice once, and every client gets the whole file.
//! A test binary of its own: its 140 GB of loopback traffic would skew
//! the timing of the other edge tests (cargo runs test binaries one after
//! another, and a binary's tests side by side).

mod common;

use std::path::Path;
use std::process::Command;

use common::edge::*;
use common::*;

#[test]
fn two_hundred_clients_of_one_uncached_file_fetch_each_slice_once() {
    // A new 700 MB image that 200 clients ask for at once, as when a
    // release lands: each downloads all of it, and the origin sees each
    // of its 668 slices once. Every client's status and length are
    // checked; every 20th client's bytes are compared with the origin's
    // file as they stream (cmp), so that no client's body is held.
    const SIZE: u64 = 700_000_000;
    let iso = random_bytes(SIZE, 8);
    let Some(e) = Edge::start(&[("debian.iso", &iso)], &[]) else {
        return;
    };
    drop(iso);
    let (n, srv) = (&e.nginx, &e.srv);
    let url = srv.url("/debian.iso");
    let file = e.origin_root.path().join("debian.iso");
    let clients: Vec<_> = (0..200)
        .map(|i| {
            let (url, file) = (url.clone(), file.clone());
            std::thread::spawn(move || {
                let out = if i % 20 == 0 {
                    compared(&url, &file)
                } else {
                    Command::new("curl")
                        .args(["-sS", "--max-time", "600", "-o", "/dev/null"])
                        .args(["-w", "%{http_code} %{size_download}"])
                        .arg(&url)
                        .output()
                        .expect("curl")
                        .stdout
                };
                (i, String::from_utf8_lossy(&out).into_owned())
            })
        })
        .collect();
    for c in clients {
        let (i, got) = c.join().unwrap();
        let want = if i % 20 == 0 {
            format!("200 {SIZE} same")
        } else {
            format!("200 {SIZE}")
        };
        assert_eq!(got.trim(), want, "client {i}");
    }
    let log = n.log();
    let ranges: std::collections::BTreeSet<&String> = log.iter().collect();
    assert!(
        log.len() == 668 && ranges.len() == 668,
        "each of 668 slices once: {} requests, {} distinct, from {:#?}",
        log.len(),
        ranges.len(),
        &log[..log.len().min(10)]
    );
}

/// curl's status and length for `url`, then "same" if its body, streamed
/// through `cmp`, equals `file` (else "differs"): no body is held.
fn compared(url: &str, file: &Path) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    // curl's body to fd 3, the pipe into cmp; its -w line to a file.
    let script = "{ curl -sS --max-time 600 -o /dev/fd/3 \
                  -w '%{http_code} %{size_download}' \"$1\" > \"$3\"; } 3>&1 \
                  | cmp -s - \"$2\"; r=$?; \
                  printf '%s %s' \"$(cat \"$3\")\" \"$([ $r = 0 ] && echo same || echo differs)\"";
    Command::new("sh")
        .args(["-c", script, "sh", url])
        .arg(file)
        .arg(dir.path().join("head"))
        .output()
        .expect("sh")
        .stdout
}
