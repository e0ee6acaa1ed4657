//! The seam between the protocol core and a driver: what a session asks
//! its driver to do next ([`Step`]), the files and directories it asks it
//! to open or list ([`OpenRequest`], [`ListRequest`]), the credentials it
//! asks it to check ([`AuthCheck`]), and how a driver says an open failed
//! ([`OpenError`]). The driver answers through the session's methods
//! (`feed`, `opened`, `listed`, `authenticated`, `sent`).

use std::ffi::CString;
use std::sync::Arc;

use crate::auth::{Auth, Credentials};

use crate::encoding::Encoding;
use crate::listing;
use crate::response::Response;

/// A path the driver must open beneath the document root (with
/// `openat2(RESOLVE_BENEATH)` or an equally strict walk) and `fstat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRequest {
    /// Relative path, never empty, never absolute, no `..`.
    pub path: CString,
    /// Which document root: 0 is the server's, `n` the `n`th virtual
    /// host's (`SessionConfig::hosts`).
    pub root: u16,
}

impl OpenRequest {
    /// A key that names this file among every root's: the path itself
    /// for the server's root (no allocation), else a NUL (never in a
    /// path), the root's number, and the path.
    pub fn cache_key(&self) -> std::borrow::Cow<'_, [u8]> {
        if self.root == 0 {
            return std::borrow::Cow::Borrowed(self.path.as_bytes());
        }
        let mut k = Vec::with_capacity(self.path.as_bytes().len() + 3);
        k.push(0);
        k.extend_from_slice(&self.root.to_le_bytes());
        k.extend_from_slice(self.path.as_bytes());
        std::borrow::Cow::Owned(k)
    }
}

/// A path not found beneath the document root, which the driver must
/// look for at the origin (`--origin`): in the edge's cache, or fetched
/// (its first slice at least). Then it calls
/// [`Session::edge_found`](crate::Session::edge_found) or
/// [`Session::edge_failed`](crate::Session::edge_failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// The object's path at the origin: `/` and the request's decoded
    /// path (what was looked for beneath the root).
    pub path: Vec<u8>,
}

/// What a driver found at the origin for a [`FetchRequest`]: the cache
/// file that holds the object (opened beneath [`crate::edge::EDGE_ROOT`] as
/// any file) and what the edge keeps of the object.
#[derive(Debug, Clone)]
pub struct EdgeFound {
    pub open: OpenRequest,
    pub meta: Arc<crate::edge::meta::Meta>,
}

/// A directory the driver must list (`--autoindex`): open it beneath the
/// root as it opens files, read its entries (at most
/// [`listing::MAX_ENTRIES`], without blocking its event loop), render them
/// with [`listing::render`], then call [`Session::listed`](crate::Session::listed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    /// Relative path of the directory: `.` for the root, else as in
    /// [`OpenRequest::path`].
    pub path: CString,
    /// The representation the client asked for (`Accept`).
    pub format: listing::Format,
    /// Which document root, as [`OpenRequest::root`].
    pub root: u16,
    /// Compress the listing in this coding (`--compress` covers the
    /// format's type and the client takes it), if it is large enough and
    /// the saving is worth it.
    pub coding: Option<Encoding>,
}

impl ListRequest {
    /// The directory's path as [`listing::render`] wants it: empty for
    /// the root.
    pub fn dir(&self) -> &[u8] {
        match self.path.as_bytes() {
            b"." => b"",
            p => p,
        }
    }
}

/// Credentials the driver must check against an `auth` rule's users, off
/// its event loop ([`Auth`]'s `users.verify` costs milliseconds), then
/// call [`Session::authenticated`](crate::Session::authenticated) with it
/// and the answer. A
/// driver may keep recent successes: the same `auth` (by its
/// `generation`), user and password succeed again.
#[derive(Debug, Clone)]
pub struct AuthCheck {
    pub auth: Arc<Auth>,
    pub credentials: Credentials,
}

impl AuthCheck {
    /// Runs the check (slow; see above).
    pub fn run(&self) -> bool {
        let c = &self.credentials;
        self.auth.users.verify(c.user(), c.password())
    }
}

/// A driver's answer to an [`AuthCheck`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// The password is the user's.
    Granted,
    /// It is not (or there is no such user).
    Denied,
    /// The check could not run now (the helpers' queue is full): 503.
    Busy,
}

/// Why a driver could not open a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// ENOENT, ENOTDIR, ELOOP, EXDEV (escapes the root), ENAMETOOLONG: 404.
    NotFound,
    /// EACCES, EPERM: 403.
    Forbidden,
    /// EMFILE, ENFILE, ENOMEM: 503, try later.
    Busy,
    /// Anything else: 500.
    Other,
}

impl OpenError {
    /// The status that answers it.
    pub fn status(self) -> u16 {
        match self {
            OpenError::NotFound => 404,
            OpenError::Forbidden => 403,
            OpenError::Busy => 503,
            OpenError::Other => 500,
        }
    }

    /// Classifies an errno from `openat2`/`fstat`.
    pub fn from_errno(errno: i32) -> OpenError {
        match errno {
            2 /* ENOENT */ | 20 /* ENOTDIR */ | 40 /* ELOOP */ | 18 /* EXDEV */
            | 36 /* ENAMETOOLONG */ | 6 /* ENXIO */ => OpenError::NotFound,
            13 /* EACCES */ | 1 /* EPERM */ => OpenError::Forbidden,
            24 /* EMFILE */ | 23 /* ENFILE */ | 12 /* ENOMEM */ | 11 /* EAGAIN */ => OpenError::Busy,
            _ => OpenError::Other,
        }
    }
}

/// What the driver must do next.
#[derive(Debug)]
pub enum Step {
    /// Receive more bytes, then [`Session::feed`](crate::Session::feed) them.
    NeedInput,
    /// Open this path, then call [`Session::opened`](crate::Session::opened).
    Open(OpenRequest),
    /// List this directory, then call [`Session::listed`](crate::Session::listed) (only from
    /// [`Session::opened`](crate::Session::opened), with `autoindex` on).
    List(ListRequest),
    /// Find this object at the origin, then call
    /// [`Session::edge_found`](crate::Session::edge_found) or
    /// [`Session::edge_failed`](crate::Session::edge_failed) (only from
    /// [`Session::opened`](crate::Session::opened), with an origin).
    Fetch(FetchRequest),
    /// Check these credentials, then call
    /// [`Session::authenticated`](crate::Session::authenticated) (only
    /// from [`Session::next`](crate::Session::next), for a path an `auth`
    /// rule covers).
    Authenticate(AuthCheck),
    /// Transmit this response, then call [`Session::sent`](crate::Session::sent).
    Respond(Response),
    /// Close the connection (after a lingering close, if the peer may
    /// still be sending).
    Close,
}

impl Step {
    /// The response, if this step is one.
    pub fn into_response(self) -> Option<Response> {
        match self {
            Step::Respond(r) => Some(r),
            _ => None,
        }
    }
}
