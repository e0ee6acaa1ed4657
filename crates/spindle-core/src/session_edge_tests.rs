//! Tests of the session as a caching edge (`--origin`): a file not found
//! beneath the root is asked of the edge, and the cache file's response
//! is named by the origin's validators and carries its fields.

use super::*;
use crate::edge::meta::{Freshness, Meta, Version};
use crate::edge::EDGE_ROOT;

fn origin_meta(etag: &str) -> Arc<Meta> {
    Arc::new(Meta {
        version: Version {
            length: 5000,
            etag: Some(etag.into()),
            last_modified: Some("Sun, 06 Nov 1994 08:49:37 GMT".into()),
        },
        fields: vec![
            (
                "content-type".into(),
                "application/vnd.debian.binary-package".into(),
            ),
            ("cache-control".into(), "max-age=60".into()),
        ],
        fetched: 0,
        freshness: Freshness {
            store: true,
            lifetime: 60,
            stale_if_error: 0,
        },
    })
}

/// Plays the driver: the path is not beneath the root; the edge finds it
/// (`found`) or answers `status`. Returns the fetch asked for and the
/// response.
fn edge_run(req: &str, found: Result<Arc<Meta>, u16>) -> (FetchRequest, Response) {
    let cfg = SessionConfig {
        edge: true,
        ..SessionConfig::default()
    };
    let mut s = Session::new();
    s.feed(req.as_bytes());
    let Step::Open(o) = s.next(&cfg) else {
        panic!("open expected")
    };
    let Step::Fetch(f) = s.opened(&cfg, &o, Err(OpenError::NotFound)) else {
        panic!("fetch expected")
    };
    let step = match found {
        Ok(meta) => {
            let open = OpenRequest {
                path: CString::new("ab/ab12.1.d").unwrap(),
                root: EDGE_ROOT,
            };
            let Step::Open(o) = s.edge_found(EdgeFound {
                open: open.clone(),
                meta,
            }) else {
                panic!("open of the cache file expected")
            };
            assert_eq!(o, open);
            s.opened(&cfg, &o, Ok(at(5000, 77)))
        }
        Err(status) => s.edge_failed(&cfg, status),
    };
    let Step::Respond(r) = step else {
        panic!("response expected")
    };
    (f, r)
}

#[test]
fn a_file_not_found_is_fetched_and_named_by_the_origin() {
    let (f, r) = edge_run(
        "GET /pool/a.deb HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9\r\n\r\n",
        Ok(origin_meta("\"5f-61\"")),
    );
    assert_eq!(f.path, b"/pool/a.deb");
    let h = head_str(&r);
    assert_eq!(r.status, 206, "{h}");
    assert!(h.contains("ETag: \"5f-61\"\r\n"), "{h}");
    assert!(
        h.contains("Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\n"),
        "{h}"
    );
    assert!(
        h.contains("Content-Type: application/vnd.debian.binary-package\r\n"),
        "{h}"
    );
    assert!(h.contains("Cache-Control: max-age=60\r\n"), "{h}");
    assert!(h.contains("Content-Range: bytes 0-9/5000\r\n"), "{h}");
    assert_eq!(r.file, Some((0, 10)));
    // Its bytes never change under it: no version to check.
    assert_eq!(r.version, None);
}

#[test]
fn the_origins_validators_answer_conditionals() {
    let (_, r) = edge_run(
        "GET /a HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"5f-61\"\r\n\r\n",
        Ok(origin_meta("\"5f-61\"")),
    );
    let h = head_str(&r);
    assert_eq!(r.status, 304, "{h}");
    assert!(h.contains("ETag: \"5f-61\"\r\n") && h.contains("Cache-Control: max-age=60\r\n"));
    let (_, r) = edge_run(
        "GET /a HTTP/1.1\r\nHost: x\r\nIf-Match: \"other\"\r\n\r\n",
        Ok(origin_meta("\"5f-61\"")),
    );
    assert_eq!(r.status, 412);
    // A weak tag never satisfies If-Range: the whole object.
    let (_, r) = edge_run(
        "GET /a HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9\r\nIf-Range: W/\"w\"\r\n\r\n",
        Ok(origin_meta("W/\"w\"")),
    );
    assert_eq!((r.status, r.file), (200, Some((0, 5000))));
    // But it does If-None-Match (the weak comparison).
    let (_, r) = edge_run(
        "GET /a HTTP/1.1\r\nHost: x\r\nIf-None-Match: W/\"w\"\r\n\r\n",
        Ok(origin_meta("W/\"w\"")),
    );
    assert_eq!(r.status, 304);
}

#[test]
fn what_the_edge_could_not_do_is_its_status() {
    for status in [404, 502, 503, 504] {
        let (_, r) = edge_run("GET /a HTTP/1.1\r\nHost: x\r\n\r\n", Err(status));
        assert_eq!(r.status, status);
        assert_eq!(r.file, None);
    }
}

#[test]
fn only_a_get_or_head_of_a_file_goes_to_the_origin() {
    let cfg = SessionConfig {
        edge: true,
        ..SessionConfig::default()
    };
    for req in [
        "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        "GET /dir/ HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        let mut s = Session::new();
        s.feed(req.as_bytes());
        let step = s.next(&cfg);
        if let Step::Open(o) = step {
            match s.opened(&cfg, &o, Err(OpenError::NotFound)) {
                Step::Respond(r) => assert!(r.status >= 400, "{req}"),
                other => panic!("{req}: {other:?}"),
            }
        }
    }
}
