//! What a session does with a path the driver opened: the response for a
//! file, a directory's index or listing, a precompressed sidecar search,
//! a rule's fallback, and the configured error pages.

use super::edge::Edge;
use super::*;

impl Session {
    /// Opens the configured page of error `status` in answer to `req`, if
    /// there is one; else gives `req` back.
    pub(super) fn open_error_page(
        &mut self,
        cfg: &SessionConfig,
        req: Box<Request>,
        status: u16,
        keep_alive: bool,
    ) -> Result<Step, Box<Request>> {
        let Some(page) = cfg.error_page(status) else {
            return Err(req);
        };
        self.current_keep_alive = keep_alive;
        self.current = Some(req);
        self.state = State::AwaitOpen;
        self.error_page = Some(status);
        Ok(Step::Open(OpenRequest {
            path: page.clone(),
            root: self.root,
        }))
    }

    /// The driver's answer to [`Step::Open`]: the response to transmit
    /// ([`Step::Respond`]), or, while looking for a precompressed sidecar,
    /// the next path to open ([`Step::Open`], answered here again). The
    /// driver sends the file of the last successful open.
    pub fn opened(
        &mut self,
        cfg: &SessionConfig,
        open_path: &OpenRequest,
        result: Result<FileMeta, OpenError>,
    ) -> Step {
        assert_eq!(self.state, State::AwaitOpen, "opened() without Step::Open");
        if let Some(Edge::Opening { rel_path, meta }) = self.edge.take() {
            return self.edge_opened(cfg, result, &rel_path, meta);
        }
        let vary = !cfg.precompressed.is_empty();
        let mut rep = Representation {
            encoding: None,
            vary,
            validators: None,
            origin: None,
        };
        let mut chosen = None;
        let mut stored = None;
        if let Some(cp) = self.compressed.take() {
            match self.stored_opened(cp, &result, &mut rep) {
                Ok(step) => return step,
                Err(found) => stored = found,
            }
        } else {
            match (self.sidecar.take(), &result) {
                (Some(sc), Ok(m)) if sc.trying.is_some() && newer_file(m, &sc.src) => {
                    // This sidecar will do: it is sent, typed as the resource.
                    rep.encoding = sc.trying;
                    chosen = Some(sc);
                }
                // Missing, not a file, or older than the resource: the next.
                (Some(sc), _) if sc.trying.is_some() => return self.next_sidecar(sc),
                (None, Ok(m)) if vary && m.kind == FileKind::Regular => {
                    let req = self.current.as_ref().expect("current request");
                    if matches!(req.method, Method::Get | Method::Head) {
                        let todo =
                            encoding::negotiate(req.accept_encoding.as_deref(), &cfg.precompressed);
                        if !todo.is_empty() {
                            let sc = Box::new(Sidecar {
                                src_path: open_path.path.clone(),
                                src: *m,
                                todo,
                                trying: None,
                            });
                            return self.next_sidecar(sc);
                        }
                    }
                }
                // No search, or its end: the resource's own open, again.
                _ => {}
            }
            if chosen.is_none() {
                if let Some(step) = self.look_for_stored(cfg, open_path, &result, &mut rep) {
                    return step;
                }
            }
        }
        if cfg.autoindex && self.dir_request && result == Err(OpenError::NotFound) {
            // No index file: the directory's listing instead (a file
            // where the directory should be fails the list with 404).
            if let Some(dir) = open_path.path.as_bytes().strip_suffix(path::INDEX_FILE) {
                let dir = dir.strip_suffix(b"/").unwrap_or(dir);
                let req = self.current.as_ref().expect("current request");
                let format = crate::listing::negotiate(req.accept.as_deref());
                let coding = cfg
                    .compress
                    .as_ref()
                    .filter(|c| c.typed(format.content_type()))
                    .and_then(|c| {
                        let codings =
                            encoding::negotiate(req.accept_encoding.as_deref(), &c.codings);
                        codings.first().copied()
                    });
                let path = CString::new(if dir.is_empty() { &b"."[..] } else { dir })
                    .expect("path has no NUL");
                self.state = State::AwaitList;
                return Step::List(ListRequest {
                    path,
                    format,
                    root: self.root,
                    coding,
                });
            }
        }
        if let Some(step) = self.fetch_step(cfg, open_path, &result) {
            return step;
        }
        if result == Err(OpenError::NotFound) && self.error_page.is_none() {
            // Not found beneath a rule's `fallback`: that file instead
            // (once: a missing fallback is a 404).
            if let Some(path) = self.fallback.take() {
                self.dir_request = false;
                return Step::Open(OpenRequest {
                    path,
                    root: self.root,
                });
            }
        }
        self.fallback = None;
        let rel_path = match (&chosen, &stored) {
            (Some(sc), _) => sc.src_path.as_bytes(),
            (_, Some(cp)) => cp.src_path.as_bytes(),
            _ => open_path.path.as_bytes(),
        };
        let error_page = self.error_page.take();
        if error_page.is_none() {
            // An error with a configured page: open the page instead.
            let status = match &result {
                Ok(m) if m.kind == FileKind::Regular => None,
                Ok(m)
                    if m.kind == FileKind::Directory
                        && !open_path.path.as_bytes().ends_with(path::INDEX_FILE) =>
                {
                    None
                }
                Ok(_) => Some(404),
                Err(e) => Some(e.status()),
            };
            if let Some(page) = status.and_then(|st| cfg.error_page(st)) {
                self.error_page = status;
                return Step::Open(OpenRequest {
                    path: page.clone(),
                    root: self.root,
                });
            }
        }
        let req = self.current.take().expect("current request");
        let keep_alive = self.current_keep_alive;
        let ctx = self.ctx(
            cfg,
            keep_alive,
            req.minor_version == 0,
            req.method == Method::Head,
        );
        if let Some(status) = error_page {
            // The page of an error: its bytes if it is a file, else the
            // built-in page.
            let resp = match result {
                Ok(m) if m.kind == FileKind::Regular => response::error_page(
                    status,
                    &m,
                    open_path.path.as_bytes(),
                    &ctx,
                    error_extra(status),
                ),
                _ => error_for(status, &ctx),
            };
            self.last_req = Some(req);
            return self.finish(resp);
        }
        let resp = match result {
            Ok(meta) => match meta.kind {
                FileKind::Regular => {
                    self.coding = rep.encoding;
                    let rules = cfg.rules.apply(rel_path);
                    response::for_file(&req, &meta, rel_path, rep, &rules, &ctx)
                }
                FileKind::Directory if !open_path.path.as_bytes().ends_with(path::INDEX_FILE) => {
                    let location = redirect_location(&req.target);
                    response::error(301, &ctx, &[("Location", &location)])
                }
                _ => response::error(404, &ctx, &[]),
            },
            Err(e) => error_for(e.status(), &ctx),
        };
        self.last_req = Some(req);
        self.finish(resp)
    }

    /// Starts a look for the compressed result of a file just opened for
    /// a GET or HEAD, if `--compress` covers its type and size (then the
    /// response varies by `Accept-Encoding`, whatever this client takes)
    /// and the client accepts one of the codings made.
    fn look_for_stored(
        &mut self,
        cfg: &SessionConfig,
        open_path: &OpenRequest,
        result: &Result<FileMeta, OpenError>,
        rep: &mut Representation,
    ) -> Option<Step> {
        let c = cfg.compress.as_ref()?;
        let Ok(m) = result else { return None };
        if m.kind != FileKind::Regular || self.error_page.is_some() {
            return None;
        }
        let req = self.current.as_ref()?;
        if !matches!(req.method, Method::Get | Method::Head) {
            return None;
        }
        if !c.sized(m.size) {
            return None;
        }
        let rel = open_path.path.as_bytes();
        let ctype = match cfg.rules.apply(rel).content_type {
            Some(t) => std::borrow::Cow::Borrowed(t),
            None => response::content_type(rel),
        };
        if !c.typed(&ctype) {
            return None;
        }
        rep.vary = true;
        let coding = *encoding::negotiate(req.accept_encoding.as_deref(), &c.codings).first()?;
        let name = compress::stored_name(c.tag(open_path.root), m, coding);
        self.compressed = Some(Box::new(Compressed {
            src_path: open_path.path.clone(),
            src: *m,
            coding,
            name: name.clone(),
            hunt: Hunt::Looking,
        }));
        Some(Step::Open(OpenRequest {
            path: name,
            root: compress::CACHE_ROOT,
        }))
    }

    /// The open of a look's stored result, or of the file again after it:
    /// `Ok`, the next open; `Err(Some)`, the stored result was found and
    /// goes in the file's place (`rep` says so); `Err(None)`, the file
    /// reopened goes as it is.
    fn stored_opened(
        &mut self,
        mut cp: Box<Compressed>,
        result: &Result<FileMeta, OpenError>,
        rep: &mut Representation,
    ) -> Result<Step, Option<Box<Compressed>>> {
        rep.vary = true;
        match cp.hunt {
            Hunt::Looking => {
                let make = match result {
                    Ok(m) if m.kind == FileKind::Regular && m.size > 0 => {
                        rep.encoding = Some(cp.coding);
                        rep.validators = Some(cp.src);
                        self.compress_note = Some(compress::Note::Served {
                            name: cp.name.clone(),
                            coding: cp.coding,
                        });
                        return Err(Some(cp));
                    }
                    // An empty result: compressing did not pay.
                    Ok(m) if m.kind == FileKind::Regular => false,
                    Err(OpenError::NotFound) => true,
                    _ => false,
                };
                let path = cp.src_path.clone();
                cp.hunt = Hunt::Reopening { make };
                self.compressed = Some(cp);
                Ok(Step::Open(OpenRequest {
                    path,
                    root: self.root,
                }))
            }
            Hunt::Reopening { make } => {
                // Made from the version the name is of, or not at all.
                if make && result.as_ref().is_ok_and(|m| *m == cp.src) {
                    self.compress_note = Some(compress::Note::Make(compress::Job {
                        root: self.root,
                        path: cp.src_path,
                        src: cp.src,
                        coding: cp.coding,
                        name: cp.name,
                    }));
                }
                Err(None)
            }
        }
    }

    /// Opens the next sidecar of a search, or the resource itself again
    /// when none is left.
    pub(super) fn next_sidecar(&mut self, mut sc: Box<Sidecar>) -> Step {
        let path = if sc.todo.is_empty() {
            sc.trying = None;
            sc.src_path.clone()
        } else {
            let e = sc.todo.remove(0);
            sc.trying = Some(e);
            let mut p = sc.src_path.as_bytes().to_vec();
            p.extend_from_slice(e.suffix().as_bytes());
            CString::new(p).expect("path has no NUL")
        };
        self.sidecar = Some(sc);
        Step::Open(OpenRequest {
            path,
            root: self.root,
        })
    }
}
