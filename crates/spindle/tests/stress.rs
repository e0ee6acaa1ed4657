//! Many clients at once, every body checked; against every backend.

mod common;

use std::io::{BufReader, Write};
use std::sync::Arc;

use common::*;

const CLIENTS: usize = 100;
const REQUESTS_PER_CLIENT: usize = 200;

#[test]
fn hundred_keepalive_clients_two_hundred_requests_each() {
    for b in backends() {
        let root = DocRoot::new(false);
        let srv = Server::start(&b, &root.dir, &[]);
        // Bodies keyed by name, loaded once.
        let files: Arc<Vec<(String, Vec<u8>)>> = Arc::new(
            SIZES
                .iter()
                .map(|s| format!("f{s}"))
                .chain(["index.html".to_string()])
                .map(|n| {
                    let body = root.read(&n);
                    (n, body)
                })
                .collect(),
        );
        let addr = srv.addr;
        let threads: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let files = files.clone();
                std::thread::spawn(move || {
                    let s = std::net::TcpStream::connect(addr).expect("connect");
                    s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
                        .unwrap();
                    let mut w = s.try_clone().unwrap();
                    let mut r = BufReader::new(s);
                    let mut x = client as u64 * 7919 + 1;
                    for i in 0..REQUESTS_PER_CLIENT {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // Mostly small files, one in fifty the 1 MiB + 7 one.
                        let pick = if x.is_multiple_of(50) {
                            6
                        } else {
                            [0, 1, 2, 3, 4, 5, 7][(x % 7) as usize]
                        };
                        let (name, body) = &files[pick];
                        w.write_all(format!("GET /{name} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
                            .unwrap();
                        let resp = read_response(&mut r, false)
                            .unwrap_or_else(|e| panic!("client {client} request {i} /{name}: {e}"));
                        assert_eq!(resp.status, 200, "client {client} request {i} /{name}");
                        assert!(
                            resp.body == *body,
                            "client {client} request {i}: body of /{name} differs"
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap_or_else(|_| panic!("{b}: a client failed"));
        }
    }
}
