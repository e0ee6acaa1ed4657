//! Tests of the session's compression on the fly (`session/open.rs`):
//! the look for a stored result, and compressed listings.

use super::*;

/// Plays the driver for one request with compression on the fly: `world`
/// says what each path is, the cache's under `@` + its name. Returns the
/// paths opened (the cache's as `@`), the response, and the note to the
/// driver.
fn compress_run(
    accept: &str,
    method: &str,
    path: &str,
    world: &[(&str, FileMeta)],
) -> (Vec<String>, Response, Option<compress::Note>) {
    let cfg = SessionConfig {
        compress: Some(compress::CompressConfig::new(vec![7])),
        ..SessionConfig::default()
    };
    let mut s = Session::new();
    s.feed(
        format!("{method} /{path} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: {accept}\r\n\r\n")
            .as_bytes(),
    );
    let Step::Open(mut o) = s.next(&cfg) else {
        panic!("open expected")
    };
    let mut opened = Vec::new();
    loop {
        let p = String::from_utf8(o.path.as_bytes().to_vec()).unwrap();
        let key = if o.root == compress::CACHE_ROOT {
            format!("@{p}")
        } else {
            p
        };
        let found = world
            .iter()
            .find(|(n, _)| *n == key || (n.starts_with('@') && key.starts_with('@')))
            .map(|(_, m)| *m)
            .ok_or(OpenError::NotFound);
        opened.push(if key.starts_with('@') {
            "@".to_string()
        } else {
            key
        });
        assert!(opened.len() <= 4, "{opened:?}");
        match s.opened(&cfg, &o, found) {
            Step::Respond(r) => return (opened, r, s.take_compress_note()),
            Step::Open(next) => o = next,
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn compressed_result_missing_sends_the_file_and_asks_for_it() {
    let world = [("app.js", at(5000, 10))];
    let (opened, r, note) = compress_run("gzip, br", "GET", "app.js", &world);
    assert_eq!(opened, ["app.js", "@", "app.js"]);
    let h = head_str(&r);
    assert!(!h.contains("Content-Encoding"), "{h}");
    assert!(h.contains("Vary: Accept-Encoding\r\n"), "{h}");
    assert_eq!(r.file, Some((0, 5000)));
    let Some(compress::Note::Make(job)) = note else {
        panic!("{note:?}")
    };
    assert_eq!(job.coding, Encoding::Br, "the server's order among equals");
    assert_eq!(job.path.to_str().unwrap(), "app.js");
    assert_eq!(job.src, at(5000, 10));
    assert_eq!(
        job.name,
        compress::stored_name(7, &at(5000, 10), Encoding::Br)
    );
}

#[test]
fn compressed_result_found_goes_in_the_files_place() {
    let src = at(5000, 10);
    let world = [("app.js", src), ("@", at(900, 12))];
    let (opened, r, note) = compress_run("gzip", "GET", "app.js", &world);
    assert_eq!(opened, ["app.js", "@"]);
    let h = head_str(&r);
    assert!(h.contains("Content-Encoding: gzip\r\n"), "{h}");
    assert!(h.contains("Vary: Accept-Encoding\r\n"), "{h}");
    assert!(h.contains("Content-Length: 900\r\n"), "{h}");
    assert!(h.contains("Content-Type: text/javascript"), "{h}");
    // Validators of the version it was made from, with the coding.
    assert!(h.contains("ETag: \"2a-1388-a.5-gzip\"\r\n"), "{h}");
    assert!(
        h.contains("Last-Modified: Thu, 01 Jan 1970 00:00:10 GMT\r\n"),
        "{h}"
    );
    assert_eq!(r.file, Some((0, 900)));
    assert!(matches!(
        note,
        Some(compress::Note::Served {
            coding: Encoding::Gzip,
            ..
        })
    ));
    // An empty result: not worth it; the file, and nothing asked.
    let world = [("app.js", src), ("@", at(0, 12))];
    let (opened, r, note) = compress_run("gzip", "GET", "app.js", &world);
    assert_eq!(opened, ["app.js", "@", "app.js"]);
    assert_eq!(r.file, Some((0, 5000)));
    assert_eq!(note, None);
}

#[test]
fn compression_declined_opens_once() {
    let world = [
        ("app.js", at(5000, 10)),
        ("tiny.js", at(100, 10)),
        ("pic.png", at(5000, 10)),
    ];
    for accept in [
        "",
        "identity",
        "identity;q=0",
        "gzip;q=0, br;q=0, zstd;q=0",
        "deflate",
    ] {
        let (opened, r, note) = compress_run(accept, "GET", "app.js", &world);
        assert_eq!(opened, ["app.js"], "{accept}");
        assert!(
            head_str(&r).contains("Vary: Accept-Encoding\r\n"),
            "{accept}"
        );
        assert_eq!(note, None);
    }
    for p in ["tiny.js", "pic.png"] {
        let (opened, r, _) = compress_run("gzip", "GET", p, &world);
        assert_eq!(opened, [p]);
        assert!(!head_str(&r).contains("Vary"), "{p}");
    }
    let (opened, r, _) = compress_run("gzip", "HEAD", "app.js", &world);
    assert_eq!(opened, ["app.js", "@", "app.js"], "HEAD looks as GET does");
    assert!(head_str(&r).contains("Content-Length: 5000\r\n"));
}

#[test]
fn a_listing_is_asked_for_in_the_coding_taken_and_says_so() {
    use crate::listing::{render, Entry, Format};
    let cfg = SessionConfig {
        autoindex: true,
        compress: Some(compress::CompressConfig::new(vec![7])),
        ..SessionConfig::default()
    };
    let ask = |accept: &str| {
        let mut s = Session::new();
        s.feed(format!("GET /d/ HTTP/1.1\r\nHost: x\r\n{accept}\r\n").as_bytes());
        let Step::Open(o) = s.next(&cfg) else {
            panic!()
        };
        let Step::List(l) = s.opened(&cfg, &o, Err(OpenError::NotFound)) else {
            panic!("a listing expected")
        };
        (s, l)
    };
    let (_, l) = ask("");
    assert_eq!((l.format, l.coding), (Format::Html, None));
    let (_, l) = ask("Accept-Encoding: gzip;q=0.5, zstd\r\n");
    assert_eq!(l.coding, Some(Encoding::Zstd));
    let (mut s, l) = ask("Accept: application/json\r\nAccept-Encoding: br\r\n");
    assert_eq!((l.format, l.coding), (Format::Json, Some(Encoding::Br)));
    let entries = vec![Entry {
        name: b"f".to_vec(),
        kind: FileKind::Regular,
        size: 1,
        mtime_sec: 0,
    }];
    let plain = render(l.dir(), entries, false, l.format, false);
    let tag = plain.etag.clone();
    let coded = plain.encoded(Encoding::Br, b"not really brotli".to_vec());
    assert_ne!(coded.etag, tag, "a tag per coding");
    assert!(coded.etag.ends_with("-br\""), "{}", coded.etag);
    let r = s.listed(&cfg, Ok(&coded)).into_response().unwrap();
    let h = head_str(&r);
    assert!(h.contains("Content-Encoding: br\r\n"), "{h}");
    assert!(h.contains("Vary: Accept, Accept-Encoding\r\n"), "{h}");
    assert!(h.contains("Content-Length: 17\r\n"), "{h}");
    assert!(h.ends_with("not really brotli"), "{h}");
    // A type compression does not cover: neither asked nor varying.
    let cfg = SessionConfig {
        compress: Some(compress::CompressConfig {
            types: vec!["text/css".into()],
            ..compress::CompressConfig::new(vec![7])
        }),
        ..cfg
    };
    let mut s = Session::new();
    s.feed(b"GET /d/ HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
    let Step::Open(o) = s.next(&cfg) else {
        panic!()
    };
    let Step::List(l) = s.opened(&cfg, &o, Err(OpenError::NotFound)) else {
        panic!()
    };
    assert_eq!(l.coding, None);
    let listing = render(l.dir(), Vec::new(), false, l.format, false);
    let r = s.listed(&cfg, Ok(&listing)).into_response().unwrap();
    assert!(head_str(&r).contains("Vary: Accept\r\n"));
}
