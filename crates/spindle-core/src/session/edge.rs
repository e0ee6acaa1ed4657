//! A session as a caching edge (`--origin`): a file not found beneath
//! the root is asked of the driver's edge ([`Step::Fetch`]), and the cache
//! file it names is answered with the origin's validators and fields.

use super::*;
use crate::edge::meta::Meta;

/// A request's object at the origin (`--origin`).
#[derive(Debug)]
pub(super) enum Edge {
    /// Asked for ([`Step::Fetch`]); `rel_path` is what was looked for
    /// beneath the root.
    Fetching { rel_path: Vec<u8> },
    /// Found; its cache file is being opened. Its validators and fields
    /// answer for the file's.
    Opening {
        rel_path: Vec<u8>,
        meta: Arc<crate::edge::meta::Meta>,
    },
}

impl Session {
    /// The driver's answer to [`Step::Fetch`]: the object is in the edge's
    /// cache file `found.open`, which is opened next ([`Step::Open`];
    /// [`Session::opened`] then answers with the origin's validators and
    /// fields).
    pub fn edge_found(&mut self, found: EdgeFound) -> Step {
        assert_eq!(
            self.state,
            State::AwaitFetch,
            "edge_found() without Step::Fetch"
        );
        let Some(Edge::Fetching { rel_path }) = self.edge.take() else {
            panic!("edge_found() without a fetch");
        };
        self.edge = Some(Edge::Opening {
            rel_path,
            meta: found.meta,
        });
        self.state = State::AwaitOpen;
        Step::Open(found.open)
    }

    /// The driver's answer to [`Step::Fetch`] when the origin has no such
    /// object (404), failed (502), took too long (504), or the edge is
    /// too busy to ask it (503).
    pub fn edge_failed(&mut self, cfg: &SessionConfig, status: u16) -> Step {
        assert_eq!(
            self.state,
            State::AwaitFetch,
            "edge_failed() without Step::Fetch"
        );
        assert!(
            matches!(status, 404 | 502 | 503 | 504),
            "edge status {status}"
        );
        self.edge = None;
        let (req, ctx) = self.take_current(cfg);
        let extra: &[(&str, &str)] = if status == 503 {
            &[("Retry-After", "1")]
        } else {
            &[]
        };
        let resp = response::error(status, &ctx, extra);
        self.last_req = Some(req);
        self.finish(resp)
    }

    /// A GET or HEAD of a file not found beneath the root, with an origin
    /// (and no rule's `fallback` to try first): look for it there.
    pub(super) fn fetch_step(
        &mut self,
        cfg: &SessionConfig,
        open_path: &OpenRequest,
        result: &Result<FileMeta, OpenError>,
    ) -> Option<Step> {
        let req = self.current.as_ref().expect("current request");
        let wanted = cfg.edge
            && *result == Err(OpenError::NotFound)
            && !self.dir_request
            && self.error_page.is_none()
            && self.fallback.is_none()
            && matches!(req.method, Method::Get | Method::Head);
        if !wanted {
            return None;
        }
        let rel_path = open_path.path.as_bytes().to_vec();
        let mut path = Vec::with_capacity(rel_path.len() + 1);
        path.push(b'/');
        path.extend_from_slice(&rel_path);
        self.edge = Some(Edge::Fetching { rel_path });
        self.state = State::AwaitFetch;
        Some(Step::Fetch(FetchRequest { path }))
    }

    /// The open of the edge's cache file for an origin's object: its
    /// response, named by the origin's validators. A file that is gone
    /// or is not the object's length (evicted, replaced meanwhile) is a
    /// 503: the client asks again.
    pub(super) fn edge_opened(
        &mut self,
        cfg: &SessionConfig,
        result: Result<FileMeta, OpenError>,
        rel_path: &[u8],
        origin: Arc<Meta>,
    ) -> Step {
        let (req, ctx) = self.take_current(cfg);
        let resp = match result {
            Ok(m) if m.kind == FileKind::Regular && m.size == origin.version.length => {
                let rules = cfg.rules.apply(rel_path);
                let rep = Representation {
                    encoding: None,
                    vary: false,
                    validators: None,
                    origin: Some(origin),
                };
                response::for_file(&req, &m, rel_path, rep, &rules, &ctx)
            }
            _ => response::error(503, &ctx, &[("Retry-After", "1")]),
        };
        self.last_req = Some(req);
        self.finish(resp)
    }
}
