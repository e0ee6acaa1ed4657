//! Incremental HTTP/1.x response parser: status line and headers (with
//! `httparse`), then a body framed by Content-Length, chunked encoding, or
//! the end of the connection. It counts (and optionally checksums) the body
//! bytes without keeping them.

/// Largest response head (status line and headers) accepted.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most header lines accepted in one response.
pub const MAX_HEADERS: usize = 64;
/// Longest chunk-size line or trailer line accepted.
pub const MAX_CHUNK_LINE: usize = 4 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    HeadTooLarge,
    BadHead(String),
    BadChunk(&'static str),
    BadLength,
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::HeadTooLarge => {
                write!(f, "response head larger than {MAX_HEAD_BYTES} bytes")
            }
            HttpError::BadHead(e) => write!(f, "bad response head: {e}"),
            HttpError::BadChunk(e) => write!(f, "bad chunked body: {e}"),
            HttpError::BadLength => write!(f, "bad Content-Length"),
        }
    }
}

/// What feeding bytes did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// All bytes consumed; the response is not complete yet.
    More,
    /// The response is complete; `used` bytes of the input belonged to it.
    Done { used: usize },
}

/// What the end of the connection means for the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eof {
    /// The body was framed by the end of the connection: complete.
    Complete,
    /// Nothing of a response arrived.
    NoResponse,
    /// The head was cut off.
    TruncatedHead,
    /// The body is shorter than announced (Content-Length or chunked).
    ShortBody,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    Size {
        value: u64,
        digits: u32,
        ext: bool,
        len: usize,
    },
    Data(u64),
    DataCr,
    DataLf,
    Trailer {
        len: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Length(u64),
    Chunked(Chunk),
    UntilEof,
    Done,
}

/// FNV-1a, 64 bit: the `-checksum` hash over body bytes.
pub fn fnv1a(mut h: u64, data: &[u8]) -> u64 {
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

#[derive(Debug)]
pub struct ResponseParser {
    state: State,
    head: Vec<u8>,
    status: Option<u16>,
    keep_alive: bool,
    content_length: Option<u64>,
    body_bytes: u64,
    checksum: u64,
    do_checksum: bool,
    any_bytes: bool,
}

impl ResponseParser {
    pub fn new(do_checksum: bool) -> Self {
        ResponseParser {
            state: State::Head,
            head: Vec::new(),
            status: None,
            keep_alive: false,
            content_length: None,
            body_bytes: 0,
            checksum: FNV_OFFSET,
            do_checksum,
            any_bytes: false,
        }
    }

    /// Ready the parser for the next response on the same connection.
    pub fn reset(&mut self) {
        self.state = State::Head;
        self.head.clear();
        self.status = None;
        self.keep_alive = false;
        self.content_length = None;
        self.body_bytes = 0;
        self.checksum = FNV_OFFSET;
        self.any_bytes = false;
    }

    pub fn status(&self) -> Option<u16> {
        self.status
    }
    pub fn body_bytes(&self) -> u64 {
        self.body_bytes
    }
    pub fn checksum(&self) -> u64 {
        self.checksum
    }
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }
    /// True once the response is complete and the connection may carry
    /// another request.
    pub fn keep_alive(&self) -> bool {
        self.keep_alive && self.state == State::Done
    }
    /// Whether any byte of a response arrived.
    pub fn started(&self) -> bool {
        self.any_bytes
    }
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    fn body(&mut self, data: &[u8]) {
        self.body_bytes += data.len() as u64;
        if self.do_checksum {
            self.checksum = fnv1a(self.checksum, data);
        }
    }

    /// Feed received bytes.
    pub fn feed(&mut self, data: &[u8]) -> Result<Feed, HttpError> {
        if !data.is_empty() {
            self.any_bytes = true;
        }
        let mut pos = 0;
        loop {
            match self.state {
                State::Done => return Ok(Feed::Done { used: pos }),
                State::Head => {
                    if pos == data.len() {
                        return Ok(Feed::More);
                    }
                    match self.feed_head(&data[pos..])? {
                        None => return Ok(Feed::More),
                        Some(used) => pos += used,
                    }
                }
                State::Length(rem) => {
                    let n = (rem.min((data.len() - pos) as u64)) as usize;
                    self.body(&data[pos..pos + n]);
                    pos += n;
                    if rem == n as u64 {
                        self.state = State::Done;
                    } else {
                        self.state = State::Length(rem - n as u64);
                        return Ok(Feed::More);
                    }
                }
                State::UntilEof => {
                    self.body(&data[pos..]);
                    return Ok(Feed::More);
                }
                State::Chunked(c) => {
                    if pos == data.len() {
                        return Ok(Feed::More);
                    }
                    pos += self.feed_chunked(c, &data[pos..])?;
                }
            }
        }
    }

    /// Consume head bytes; returns how many bytes of `data` belonged to the
    /// head once it is complete.
    fn feed_head(&mut self, data: &[u8]) -> Result<Option<usize>, HttpError> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        if self.head.is_empty() {
            // Fast path: the whole head is in this read.
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(data) {
                Ok(httparse::Status::Complete(n)) => {
                    let (status, ka, framing) = interpret(&resp)?;
                    self.start_body(status, ka, framing);
                    return Ok(Some(n));
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => return Err(HttpError::BadHead(e.to_string())),
            }
            if data.len() > MAX_HEAD_BYTES {
                return Err(HttpError::HeadTooLarge);
            }
            self.head.extend_from_slice(data);
            return Ok(None);
        }
        let old = self.head.len();
        let take = data.len().min(MAX_HEAD_BYTES + 1 - old.min(MAX_HEAD_BYTES));
        self.head.extend_from_slice(&data[..take]);
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(&self.head) {
            Ok(httparse::Status::Complete(n)) => {
                let (status, ka, framing) = interpret(&resp)?;
                self.head.clear();
                self.start_body(status, ka, framing);
                Ok(Some(n - old))
            }
            Ok(httparse::Status::Partial) => {
                if self.head.len() > MAX_HEAD_BYTES {
                    Err(HttpError::HeadTooLarge)
                } else {
                    Ok(None)
                }
            }
            Err(e) => Err(HttpError::BadHead(e.to_string())),
        }
    }

    fn start_body(&mut self, status: u16, keep_alive: bool, framing: Framing) {
        if (100..200).contains(&status) && status != 101 {
            // Interim response: the real one follows.
            self.state = State::Head;
            return;
        }
        self.status = Some(status);
        self.keep_alive = keep_alive;
        let no_body = (100..200).contains(&status) || status == 204 || status == 304;
        self.state = if no_body {
            State::Done
        } else {
            match framing {
                Framing::Chunked => State::Chunked(Chunk::Size {
                    value: 0,
                    digits: 0,
                    ext: false,
                    len: 0,
                }),
                Framing::Length(0) => {
                    self.content_length = Some(0);
                    State::Done
                }
                Framing::Length(n) => {
                    self.content_length = Some(n);
                    State::Length(n)
                }
                Framing::Eof => {
                    self.keep_alive = false;
                    State::UntilEof
                }
            }
        };
    }

    fn feed_chunked(&mut self, mut c: Chunk, data: &[u8]) -> Result<usize, HttpError> {
        let mut i = 0;
        while i < data.len() {
            match c {
                Chunk::Data(rem) => {
                    let n = rem.min((data.len() - i) as u64) as usize;
                    self.body(&data[i..i + n]);
                    i += n;
                    c = if rem == n as u64 {
                        Chunk::DataCr
                    } else {
                        Chunk::Data(rem - n as u64)
                    };
                    continue;
                }
                Chunk::Size {
                    value,
                    digits,
                    ext,
                    len,
                } => {
                    let b = data[i];
                    i += 1;
                    if len >= MAX_CHUNK_LINE {
                        return Err(HttpError::BadChunk("chunk-size line too long"));
                    }
                    c = match b {
                        b'\n' => {
                            if digits == 0 {
                                return Err(HttpError::BadChunk("no chunk size"));
                            }
                            if value == 0 {
                                Chunk::Trailer { len: 0 }
                            } else {
                                Chunk::Data(value)
                            }
                        }
                        b'\r' => Chunk::Size {
                            value,
                            digits,
                            ext,
                            len: len + 1,
                        },
                        _ if ext => Chunk::Size {
                            value,
                            digits,
                            ext,
                            len: len + 1,
                        },
                        b';' | b' ' | b'\t' => Chunk::Size {
                            value,
                            digits,
                            ext: true,
                            len: len + 1,
                        },
                        _ => {
                            let d = (b as char)
                                .to_digit(16)
                                .ok_or(HttpError::BadChunk("bad chunk size"))?;
                            if digits >= 15 {
                                return Err(HttpError::BadChunk("chunk size too large"));
                            }
                            Chunk::Size {
                                value: value * 16 + u64::from(d),
                                digits: digits + 1,
                                ext,
                                len: len + 1,
                            }
                        }
                    };
                }
                Chunk::DataCr => {
                    let b = data[i];
                    i += 1;
                    c = match b {
                        b'\r' => Chunk::DataLf,
                        b'\n' => Chunk::Size {
                            value: 0,
                            digits: 0,
                            ext: false,
                            len: 0,
                        },
                        _ => return Err(HttpError::BadChunk("no CRLF after chunk data")),
                    };
                }
                Chunk::DataLf => {
                    let b = data[i];
                    i += 1;
                    if b != b'\n' {
                        return Err(HttpError::BadChunk("no CRLF after chunk data"));
                    }
                    c = Chunk::Size {
                        value: 0,
                        digits: 0,
                        ext: false,
                        len: 0,
                    };
                }
                Chunk::Trailer { len } => {
                    let b = data[i];
                    i += 1;
                    match b {
                        b'\n' if len == 0 => {
                            self.state = State::Done;
                            return Ok(i);
                        }
                        b'\n' => c = Chunk::Trailer { len: 0 },
                        b'\r' => {}
                        _ if len >= MAX_CHUNK_LINE => {
                            return Err(HttpError::BadChunk("trailer line too long"))
                        }
                        _ => c = Chunk::Trailer { len: len + 1 },
                    }
                }
            }
        }
        self.state = State::Chunked(c);
        Ok(i)
    }

    /// The connection ended (read returned 0).
    pub fn eof(&mut self) -> Eof {
        match self.state {
            State::Done => Eof::Complete,
            State::UntilEof => {
                self.state = State::Done;
                Eof::Complete
            }
            State::Head if !self.any_bytes => Eof::NoResponse,
            State::Head => Eof::TruncatedHead,
            State::Length(_) | State::Chunked(_) => Eof::ShortBody,
        }
    }
}

enum Framing {
    Length(u64),
    Chunked,
    Eof,
}

fn interpret(resp: &httparse::Response) -> Result<(u16, bool, Framing), HttpError> {
    let status = resp
        .code
        .ok_or_else(|| HttpError::BadHead("no status code".into()))?;
    let http11 = resp.version == Some(1);
    let mut keep_alive = http11;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value).map_err(|_| HttpError::BadLength)?;
            let n = v.trim().parse::<u64>().map_err(|_| HttpError::BadLength)?;
            if length.is_some_and(|l| l != n) {
                return Err(HttpError::BadLength);
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let v = String::from_utf8_lossy(h.value);
            chunked = v
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in String::from_utf8_lossy(h.value).split(',') {
                let t = token.trim();
                if t.eq_ignore_ascii_case("close") {
                    keep_alive = false;
                } else if t.eq_ignore_ascii_case("keep-alive") {
                    keep_alive = true;
                }
            }
        }
    }
    let framing = if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::Eof
    };
    Ok((status, keep_alive, framing))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_in_pieces(p: &mut ResponseParser, data: &[u8], piece: usize) -> Feed {
        let mut off = 0;
        while off < data.len() {
            let end = (off + piece).min(data.len());
            match p.feed(&data[off..end]).unwrap() {
                Feed::More => off = end,
                Feed::Done { used } => return Feed::Done { used: off + used },
            }
        }
        Feed::More
    }

    #[test]
    fn content_length_any_split() {
        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA";
        for piece in 1..resp.len() {
            let mut p = ResponseParser::new(true);
            assert_eq!(
                feed_in_pieces(&mut p, resp, piece),
                Feed::Done {
                    used: resp.len() - 5
                }
            );
            assert_eq!(p.status(), Some(200));
            assert_eq!(p.body_bytes(), 5);
            assert_eq!(p.checksum(), fnv1a(FNV_OFFSET, b"hello"));
            assert!(p.keep_alive());
        }
    }

    #[test]
    fn chunked_any_split() {
        let resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\nA\r\n0123456789\r\n0\r\nTrailer: t\r\n\r\n";
        for piece in 1..resp.len() {
            let mut p = ResponseParser::new(true);
            assert_eq!(
                feed_in_pieces(&mut p, resp, piece),
                Feed::Done { used: resp.len() }
            );
            assert_eq!(p.body_bytes(), 15);
            assert_eq!(p.checksum(), fnv1a(FNV_OFFSET, b"hello0123456789"));
        }
    }

    #[test]
    fn body_until_eof_and_short_bodies() {
        let mut p = ResponseParser::new(false);
        assert_eq!(p.feed(b"HTTP/1.0 200 OK\r\n\r\nabc").unwrap(), Feed::More);
        assert_eq!(p.eof(), Eof::Complete);
        assert_eq!(p.body_bytes(), 3);
        assert!(!p.keep_alive());

        let mut p = ResponseParser::new(false);
        p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            .unwrap();
        assert_eq!(p.eof(), Eof::ShortBody);

        let mut p = ResponseParser::new(false);
        assert_eq!(p.eof(), Eof::NoResponse);
        let mut p = ResponseParser::new(false);
        p.feed(b"HTTP/1.1 200").unwrap();
        assert_eq!(p.eof(), Eof::TruncatedHead);
    }

    #[test]
    fn connection_close_and_interim_and_no_body() {
        let mut p = ResponseParser::new(false);
        let r = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 2\r\n\r\nno";
        assert_eq!(p.feed(r).unwrap(), Feed::Done { used: r.len() });
        assert_eq!(p.status(), Some(404));
        assert!(!p.keep_alive());
        let mut p = ResponseParser::new(false);
        let r = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n";
        assert_eq!(p.feed(r).unwrap(), Feed::Done { used: r.len() });
        assert_eq!(p.body_bytes(), 0);
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(ResponseParser::new(false)
            .feed(b"HTTX/1.1 200 OK\r\n\r\n")
            .is_err());
        assert!(ResponseParser::new(false)
            .feed(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")
            .is_err());
        assert!(ResponseParser::new(false)
            .feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
            .is_err());
        let mut p = ResponseParser::new(false);
        let big = vec![b'a'; MAX_HEAD_BYTES + 10];
        p.feed(b"HTTP/1.1 200 OK\r\nX: ").unwrap();
        assert_eq!(p.feed(&big), Err(HttpError::HeadTooLarge));
    }
}
