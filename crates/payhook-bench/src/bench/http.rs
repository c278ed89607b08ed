//! A minimal HTTP/1.1 client for the benchmark's deliveries, so that on a small machine the load generator's CPU
//! goes to signing and sending rather than to a general-purpose client stack.
//!
//! One keep-alive connection per [`Conn`] on a plain `TcpStream` (`TCP_NODELAY`). A request is one buffer written
//! at once: the request line, `Host` and `content-type` formatted once per target, then `content-length`, the
//! signature headers and the body. A response is read as little as needed: the status line, the headers up to the
//! blank line (only `content-length`, `connection` and `Retry-After` are looked at) and a `content-length` body, or
//! a body up to the end of the stream when the server says `connection: close` without a length. A connection the
//! server closed is an IO error; the next request reconnects.
//!
//! Not supported, because payhook's ingress never needs them: TLS, chunked transfer encoding, `1xx` interim
//! answers, pipelining more than one request per connection, proxies, redirects.

use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Where requests go: `http://host:port[/prefix]` and the path under it, with the fixed part of every request's
/// head formatted once.
#[derive(Debug)]
pub struct Target {
    authority: String,
    head: Vec<u8>,
}

impl Target {
    /// `base` is `http://host[:port][/prefix]`; requests are `POST {prefix}{path}` with a JSON body.
    pub fn post(base: &str, path: &str) -> Result<Target, String> {
        let rest =
            base.strip_prefix("http://").ok_or_else(|| format!("{base}: the lean client speaks http:// only"))?;
        let (authority, prefix) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
        if authority.is_empty() {
            return Err(format!("{base}: no host"));
        }
        let authority = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        let prefix = prefix.trim_end_matches('/');
        let slash = if prefix.is_empty() { "" } else { "/" };
        let head =
            format!("POST {slash}{prefix}{path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n")
                .into_bytes();
        Ok(Target { authority, head })
    }
}

/// What the benchmark reads of an answer.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// `Retry-After` in seconds (the HTTP-date form is not read).
    pub retry_after: Option<Duration>,
    pub body: Vec<u8>,
}

/// One keep-alive connection to a target, opened on first use and again after any error.
#[derive(Debug)]
pub struct Conn {
    stream: Option<TcpStream>,
    request: Vec<u8>,
    read: Vec<u8>,
}

impl Conn {
    pub fn new() -> Conn {
        Conn { stream: None, request: Vec::with_capacity(1024), read: Vec::with_capacity(1024) }
    }

    /// Sends one request and reads its answer. Any error (including a timeout, which the caller applies by dropping
    /// this future) leaves the connection to be reopened, so a half-read answer never confuses the next request.
    pub async fn post(&mut self, target: &Target, headers: &[(String, String)], body: &[u8]) -> io::Result<Response> {
        self.request.clear();
        self.request.extend_from_slice(&target.head);
        self.request.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
        for (name, value) in headers {
            for part in [name.as_bytes(), b": ", value.as_bytes(), b"\r\n"] {
                self.request.extend_from_slice(part);
            }
        }
        self.request.extend_from_slice(b"\r\n");
        self.request.extend_from_slice(body);
        // Taken out for the exchange: if the future is dropped midway (timeout), the connection is gone with it.
        let mut stream = match self.stream.take() {
            Some(s) => s,
            None => {
                let s = TcpStream::connect(&target.authority).await?;
                s.set_nodelay(true)?;
                s
            }
        };
        stream.write_all(&self.request).await?;
        let (response, keep) = read_response(&mut stream, &mut self.read).await?;
        if keep {
            self.stream = Some(stream);
        }
        Ok(response)
    }
}

/// How the body of an answer ends.
#[derive(Debug, PartialEq, Eq)]
enum Framing {
    Length(usize),
    UntilClose,
}

/// A parsed status line and headers.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    status: u16,
    retry_after: Option<Duration>,
    framing: Framing,
    close: bool,
    /// Bytes of the head, blank line included.
    len: usize,
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("malformed HTTP response: {what}"))
}

/// Parses the head at the start of `buf`, or `None` if the blank line has not arrived yet.
fn parse_head(buf: &[u8]) -> io::Result<Option<Head>> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > 64 * 1024 {
            return Err(invalid("head longer than 64 KiB"));
        }
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| invalid("head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(invalid("status line"));
    }
    let status: u16 = parts.next().and_then(|s| s.parse().ok()).ok_or_else(|| invalid("status code"))?;
    let (mut length, mut close, mut retry_after) = (None, version == "HTTP/1.0", None);
    for line in lines {
        let (name, value) = line.split_once(':').ok_or_else(|| invalid("header line"))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse::<usize>().map_err(|_| invalid("content-length"))?);
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        } else if name.eq_ignore_ascii_case("retry-after") {
            retry_after = value.parse::<u64>().ok().map(Duration::from_secs);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(invalid("transfer-encoding is not supported"));
        }
    }
    let framing = match length {
        Some(n) => Framing::Length(n),
        // No body can follow these, whatever the headers say.
        None if status == 204 || status == 304 => Framing::Length(0),
        None if close => Framing::UntilClose,
        None => return Err(invalid("no content-length on a kept-alive connection")),
    };
    Ok(Some(Head { status, retry_after, framing, close, len: end + 4 }))
}

/// Reads one answer from `stream`, using `buf` as scratch. Returns it and whether the connection can be reused.
async fn read_response<R: AsyncRead + Unpin>(stream: &mut R, buf: &mut Vec<u8>) -> io::Result<(Response, bool)> {
    buf.clear();
    let closed = || io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed before the answer was complete");
    let head = loop {
        if let Some(head) = parse_head(buf)? {
            break head;
        }
        if read_more(stream, buf).await? == 0 {
            return Err(closed());
        }
    };
    let body = match head.framing {
        Framing::Length(n) => {
            while buf.len() < head.len + n {
                if read_more(stream, buf).await? == 0 {
                    return Err(closed());
                }
            }
            if buf.len() > head.len + n {
                // One request is in flight at a time: bytes after the answer mean the stream is out of step.
                return Err(invalid("bytes after the answer"));
            }
            buf[head.len..].to_vec()
        }
        Framing::UntilClose => {
            while read_more(stream, buf).await? > 0 {}
            buf[head.len..].to_vec()
        }
    };
    let keep = !head.close && head.framing != Framing::UntilClose;
    Ok((Response { status: head.status, retry_after: head.retry_after, body }, keep))
}

async fn read_more<R: AsyncRead + Unpin>(stream: &mut R, buf: &mut Vec<u8>) -> io::Result<usize> {
    if buf.len() > 16 * 1024 * 1024 {
        return Err(invalid("answer longer than 16 MiB"));
    }
    buf.reserve(4096);
    stream.read_buf(buf).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    /// Yields the given pieces one read at a time, then end of stream.
    struct Pieces(VecDeque<Vec<u8>>);

    impl AsyncRead for Pieces {
        fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            if let Some(mut piece) = self.0.pop_front() {
                let n = piece.len().min(out.remaining());
                out.put_slice(&piece[..n]);
                if n < piece.len() {
                    self.0.push_front(piece.split_off(n));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    async fn read(pieces: &[&[u8]]) -> io::Result<(Response, bool)> {
        let mut stream = Pieces(pieces.iter().map(|p| p.to_vec()).collect());
        read_response(&mut stream, &mut Vec::new()).await
    }

    fn ok(status: u16, body: &str) -> Response {
        Response { status, retry_after: None, body: body.as_bytes().to_vec() }
    }

    #[tokio::test]
    async fn an_answer_split_anywhere_reads_the_same() {
        let raw = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 22\r\n\r\n{\"status\":\"processed\"}";
        for split in 1..raw.len() {
            let (a, b) = raw.split_at(split);
            assert_eq!(read(&[a, b]).await.unwrap(), (ok(200, "{\"status\":\"processed\"}"), true), "split at {split}");
        }
        let bytes: Vec<&[u8]> = raw.chunks(1).collect();
        assert_eq!(read(&bytes).await.unwrap(), (ok(200, "{\"status\":\"processed\"}"), true), "one byte per read");
    }

    #[tokio::test]
    async fn content_length_zero_is_an_empty_body_on_a_kept_connection() {
        let answer = read(&[b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n"]).await.unwrap();
        assert_eq!(answer, (ok(202, ""), true));
    }

    #[tokio::test]
    async fn without_content_length_connection_close_reads_to_the_end() {
        let answer = read(&[b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{\"a\"", b":1}"]).await.unwrap();
        assert_eq!(answer, (ok(200, "{\"a\":1}"), false));
        let answer = read(&[b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"]).await.unwrap();
        assert_eq!(answer, (ok(200, "ok"), false), "a length with close: read it, then reconnect");
    }

    #[tokio::test]
    async fn a_503_carries_its_retry_after() {
        let raw = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 2\r\ncontent-length: 4\r\n\r\nbusy";
        let (answer, keep) = read(&[raw]).await.unwrap();
        assert_eq!(answer, Response { status: 503, retry_after: Some(Duration::from_secs(2)), body: b"busy".to_vec() });
        assert!(keep);
    }

    #[tokio::test]
    async fn a_connection_closed_early_is_an_io_error() {
        for pieces in [
            &[][..],
            &[&b"HTTP/1.1 200 OK\r\ncontent-le"[..]],
            &[&b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort"[..]],
        ] {
            let err = read(pieces).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{pieces:?}");
        }
    }

    #[tokio::test]
    async fn what_the_client_cannot_frame_is_refused() {
        for raw in [
            &b"HTTP/1.1 200 OK\r\n\r\nbody"[..],
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nbody\r\n0\r\n\r\n",
            b"SPDY 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 2xx OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\nextra",
        ] {
            assert_eq!(
                read(&[raw]).await.unwrap_err().kind(),
                io::ErrorKind::InvalidData,
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn targets_keep_the_base_path_and_default_the_port() {
        let t = Target::post("http://127.0.0.1:8080", "/webhooks/payments").unwrap();
        assert_eq!(t.authority, "127.0.0.1:8080");
        assert!(t.head.starts_with(b"POST /webhooks/payments HTTP/1.1\r\nhost: 127.0.0.1:8080\r\n"));
        let t = Target::post("http://localhost/hooks/", "/webhooks/p").unwrap();
        assert_eq!(t.authority, "localhost:80");
        assert!(t.head.starts_with(b"POST /hooks/webhooks/p HTTP/1.1\r\n"));
        assert!(Target::post("https://example.com", "/x").is_err());
    }
}
