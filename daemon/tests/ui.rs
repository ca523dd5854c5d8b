//! The web inspector's HTTP layer against a real daemon: the Host check, the token, the op
//! allow-list, an op forwarded and its reply or error passed back, a daemon that is not there.

use crate::util;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;

use recalld::ui::{Options, Server};
use serde_json::{json, Value};
use util::Daemon;

const TOKEN: &str = "test-token-0123456789abcdef";

/// A response: status, headers (lowercased names) and body.
struct Reply {
    status: u16,
    headers: String,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn code(&self) -> String {
        self.json()["error"]["code"].as_str().unwrap_or_default().to_owned()
    }
}

/// One request over a fresh connection, as written (the server closes after answering).
fn send(addr: SocketAddr, raw: &str) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(raw.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let end = out.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8(out[..end].to_vec()).unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Reply {
        status,
        headers: head.to_ascii_lowercase(),
        body: out[end + 4..].to_vec(),
    }
}

fn post(addr: SocketAddr, host: &str, token: Option<&str>, op: &str, body: &str) -> Reply {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    send(
        addr,
        &format!(
            "POST /api/{op} HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// An inspector for `socket`, served on its own runtime for the rest of the test.
fn inspector(socket: &Path) -> (tokio::runtime::Runtime, SocketAddr) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = rt
        .block_on(Server::bind(&Options {
            socket: socket.to_owned(),
            port: 0,
            token: Some(TOKEN.into()),
        }))
        .unwrap();
    let addr = server.addr();
    assert!(addr.ip().is_loopback());
    assert_eq!(server.url(), format!("http://{addr}/?token={TOKEN}"));
    rt.spawn(server.serve(std::future::pending()));
    (rt, addr)
}

#[test]
fn the_inspector_checks_host_token_and_op_and_forwards_to_the_daemon() {
    let daemon = Daemon::start();
    let (_rt, addr) = inspector(&daemon.socket);
    let host = format!("127.0.0.1:{}", addr.port());

    // The page itself needs no token; it carries the security headers.
    let page = send(addr, &format!("GET /?token={TOKEN} HTTP/1.1\r\nHost: {host}\r\n\r\n"));
    assert_eq!(page.status, 200);
    assert!(page.headers.contains("content-security-policy: default-src 'none'"));
    assert!(String::from_utf8_lossy(&page.body).contains("<script src=\"app.js\""));
    let script = send(
        addr,
        &format!("GET /app.js HTTP/1.1\r\nHost: localhost:{}\r\n\r\n", addr.port()),
    );
    assert_eq!(script.status, 200);
    assert!(script.headers.contains("content-type: text/javascript"));
    assert_eq!(
        send(addr, &format!("GET /nothing HTTP/1.1\r\nHost: {host}\r\n\r\n")).status,
        404
    );

    // No token, a wrong one, a token in the query string only: 401.
    let none = post(addr, &host, None, "health", "{}");
    assert_eq!((none.status, none.code().as_str()), (401, "unauthorized"));
    assert_eq!(
        post(addr, &host, Some("wrong-token-0123456789abcdef"), "health", "{}").status,
        401
    );
    let in_query = send(
        addr,
        &format!("POST /api/health?token={TOKEN} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n"),
    );
    assert_eq!(in_query.status, 401);
    let header = send(
        addr,
        &format!("POST /api/health HTTP/1.1\r\nHost: {host}\r\nX-Recalld-Token: {TOKEN}\r\nContent-Length: 0\r\n\r\n"),
    );
    assert_eq!(header.status, 200, "the X-Recalld-Token header works too");

    // A name that resolves here but is not ours (DNS rebinding), or no Host at all: 403.
    let port = addr.port();
    for h in [
        format!("evil.example:{port}"),
        "127.0.0.1".into(),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
    ] {
        let r = post(addr, &h, Some(TOKEN), "health", "{}");
        assert_eq!((r.status, r.code().as_str()), (403, "forbidden_host"), "{h}");
    }
    let r = send(addr, "GET / HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 403, "no Host header");

    // Ops outside the allow-list are never forwarded.
    for op in ["decorate", "report", "forget_memory", "import", "quiet", "no_such_op"] {
        let r = post(addr, &host, Some(TOKEN), op, "{}");
        assert_eq!((r.status, r.code().as_str()), (403, "op_not_allowed"), "{op}");
    }
    let get = send(
        addr,
        &format!("GET /api/health HTTP/1.1\r\nHost: {host}\r\nX-Recalld-Token: {TOKEN}\r\n\r\n"),
    );
    assert_eq!(get.status, 405);
    assert_eq!(post(addr, &host, Some(TOKEN), "health", "[1]").code(), "bad_request");
    assert_eq!(post(addr, &host, Some(TOKEN), "health", "{not json").status, 400);

    // Allowed ops reach the real daemon, as this uid: a memory made over the socket is seen.
    let ok = post(addr, &host, Some(TOKEN), "health", "");
    assert_eq!(ok.status, 200);
    assert_eq!(ok.json()["status"], "ok");
    let mut c = daemon.client();
    c.call(
        "decorate",
        json!({"memory": "m1", "request": {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}, "now": 1_767_225_600.0}),
    )
    .unwrap();
    let listed = post(addr, &host, Some(TOKEN), "memories", "{}");
    assert_eq!(listed.status, 200);
    assert_eq!(
        listed.json()["memories"][0]["memory"],
        "m1",
        "the caller's own memory, unqualified"
    );
    let inspected = post(
        addr,
        &host,
        Some(TOKEN),
        "inspect",
        r#"{"memory": "m1", "turns": [1, 1]}"#,
    );
    assert_eq!(inspected.status, 200);
    assert_eq!(inspected.json()["messages"][0]["text"], "hello there");
    let export = post(addr, &host, Some(TOKEN), "export", r#"{"memory": "m1"}"#);
    assert_eq!(export.status, 200);
    assert_eq!(export.json()["memory"], "m1");
    assert_eq!(export.json()["messages"][0]["message"]["content"], "hello there");

    // A daemon error keeps its code and message, with a status of its kind.
    let missing = post(addr, &host, Some(TOKEN), "export", r#"{"memory": "nope"}"#);
    assert_eq!((missing.status, missing.code().as_str()), (404, "not_found"));
    assert!(missing.json()["error"]["message"].as_str().unwrap().contains("nope"));
    let bad = post(addr, &host, Some(TOKEN), "export", r#"{"memory": 5}"#);
    assert_eq!((bad.status, bad.code().as_str()), (400, "invalid_argument"));
}

#[test]
fn a_daemon_that_is_not_there_is_reported_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let (_rt, addr) = inspector(&dir.path().join("absent.sock"));
    let host = format!("localhost:{}", addr.port());
    let r = post(addr, &host, Some(TOKEN), "memories", "{}");
    assert_eq!((r.status, r.code().as_str()), (502, "daemon_unreachable"));
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("absent.sock"));
}

#[test]
fn random_tokens_are_128_bits_and_bad_ones_are_refused() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = rt
        .block_on(Server::bind(&Options {
            socket: "/nonexistent".into(),
            port: 0,
            token: None,
        }))
        .unwrap();
    assert_eq!(server.token().len(), 32);
    assert!(server.token().bytes().all(|b| b.is_ascii_hexdigit()));
    let bad = rt.block_on(Server::bind(&Options {
        socket: "/nonexistent".into(),
        port: 0,
        token: Some("x y".into()),
    }));
    assert!(bad.is_err());
}
