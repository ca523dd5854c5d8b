//! The little of HTTP/1.1 the inspector needs: one request per connection (a request line,
//! headers, a body of `Content-Length` bytes) and one response with `Connection: close`.
//! Chunked bodies, pipelining and keep-alive are not spoken; a request that needs them is refused.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The most a request line and its headers may take.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The most a request body may take (an op's JSON arguments).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The path without the query string.
    pub path: String,
    pub query: String,
    /// Header names lowercased, values trimmed, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The first header of that (lowercase) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Why a request could not be read; each has the status it is answered with.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error("request head over {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    #[error("request body over {MAX_BODY_BYTES} bytes")]
    BodyTooLarge,
    #[error("a body needs a Content-Length (chunked bodies are not accepted)")]
    LengthRequired,
    #[error("connection closed before the request was complete")]
    Closed,
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl HttpError {
    /// The status to answer with, or None when there is nobody left to answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            HttpError::Malformed(_) => Some(400),
            HttpError::HeadTooLarge => Some(431),
            HttpError::BodyTooLarge => Some(413),
            HttpError::LengthRequired => Some(411),
            HttpError::Closed | HttpError::Io(_) => None,
        }
    }
}

/// Reads one request: the head up to the blank line, then exactly `Content-Length` bytes.
pub async fn read_request<R: AsyncRead + Unpin>(r: &mut R) -> Result<Request, HttpError> {
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(HttpError::HeadTooLarge);
        }
        let mut chunk = [0u8; 4096];
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return Err(HttpError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if head_end > MAX_HEAD_BYTES {
        return Err(HttpError::HeadTooLarge);
    }
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| HttpError::Malformed("head is not UTF-8"))?;
    let mut req = parse_head(head)?;
    if req.header("transfer-encoding").is_some() {
        return Err(HttpError::LengthRequired);
    }
    let length = match req.header("content-length") {
        None => 0,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| HttpError::Malformed("bad Content-Length"))?,
    };
    if length > MAX_BODY_BYTES {
        return Err(HttpError::BodyTooLarge);
    }
    let mut body = buf.split_off(head_end + 4);
    if body.len() > length {
        return Err(HttpError::Malformed(
            "more bytes than Content-Length (pipelining is not spoken)",
        ));
    }
    let have = body.len();
    body.resize(length, 0);
    r.read_exact(&mut body[have..]).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => HttpError::Closed,
        _ => HttpError::Io(e),
    })?;
    req.body = body;
    Ok(req)
}

fn parse_head(head: &str) -> Result<Request, HttpError> {
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::Malformed("bad request line"));
    };
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(HttpError::Malformed("not HTTP/1.x"));
    }
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(HttpError::Malformed("bad method"));
    }
    if !target.starts_with('/') {
        return Err(HttpError::Malformed("the target must be a path"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(HttpError::Malformed("bad header line"));
        };
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(HttpError::Malformed("bad header name"));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    Ok(Request {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        headers,
        body: Vec::new(),
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One response; always sent with `Connection: close`.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// Sent on pages: the content security policy and friends.
    pub page_headers: bool,
}

impl Response {
    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(value).unwrap_or_default(),
            page_headers: false,
        }
    }

    /// `{"error": {code, message}}`: the shape of every refusal and daemon error.
    pub fn error(status: u16, code: &str, message: &str) -> Response {
        Response::json(
            status,
            &serde_json::json!({"error": {"code": code, "message": message}}),
        )
    }

    pub async fn write_to<W: AsyncWrite + Unpin>(&self, w: &mut W) -> std::io::Result<()> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\
             Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        if self.page_headers {
            // Everything the page needs is served from here; nothing else may load or frame it.
            head.push_str(
                "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; \
                 img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
                 frame-ancestors 'none'\r\nX-Frame-Options: DENY\r\n",
            );
        }
        head.push_str("\r\n");
        w.write_all(head.as_bytes()).await?;
        w.write_all(&self.body).await?;
        w.flush().await
    }
}

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(bytes: &[u8]) -> Result<Request, HttpError> {
        let mut r = bytes;
        read_request(&mut r).await
    }

    #[tokio::test]
    async fn a_post_with_a_body() {
        let req = read(b"POST /api/memories?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9\r\nContent-Length: 2\r\n\r\n{}")
            .await
            .unwrap();
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/api/memories");
        assert_eq!(req.query, "x=1");
        assert_eq!(req.header("host"), Some("127.0.0.1:9"));
        assert_eq!(req.body, b"{}");
    }

    #[tokio::test]
    async fn refusals() {
        let status = |r: Result<Request, HttpError>| r.unwrap_err().status();
        assert_eq!(status(read(b"GET / HTTP/1.1\r\nHost: x\r\n").await), None, "cut short");
        assert_eq!(status(read(b"GET /\r\n\r\n").await), Some(400));
        assert_eq!(status(read(b"GET http://a/ HTTP/1.1\r\n\r\n").await), Some(400));
        assert_eq!(status(read(b"GET / HTTP/1.1\r\nbad\r\n\r\n").await), Some(400));
        assert_eq!(
            status(read(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").await),
            Some(411)
        );
        assert_eq!(
            status(read(b"POST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n").await),
            Some(413)
        );
        let long = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD_BYTES));
        assert_eq!(status(read(long.as_bytes()).await), Some(431));
        assert_eq!(
            status(read(b"POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\n{}").await),
            Some(400)
        );
    }
}
