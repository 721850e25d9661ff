//! The coordinator's read-only HTTP listener (`prova coordinator --http ADDR`), separate from
//! the QUIC port: `/healthz`, `/readyz`, `/metrics` (Prometheus text), `/api/state` (JSON),
//! the dashboard (`/`, refreshed from `/api/fragment`). A plain HTTP/1.1 server: `GET` and
//! `HEAD` only, one request per connection (never kept alive), no request body read.
//!
//! Slow clients (issue 29): the whole request head must arrive within [`HEAD_TIMEOUT`] (8 KiB
//! at most; 408 past it) and the whole answer be taken within [`WRITE_TIMEOUT`]; a connection
//! whose head is not in after [`gate::GRACE`] is *slow* and takes a place in [`gate::Book`] (a
//! share per source address, its oldest slow connection closed to make room), so a slowloris
//! cannot keep `/healthz` from answering — a probe sends its head at once and never needs a
//! place. The probes are answered as soon as their head is read; the pages that gather data
//! take one of [`RENDERS`] places (503 when all are taken) and `/readyz` waits at most
//! [`READY_TIMEOUT`].
//!
//! Access: a listener bound anywhere but 127.0.0.1 or ::1 needs a bearer token
//! ([`HttpError::NeedsToken`]); with a token every path but the probes asks for
//! `Authorization: Bearer TOKEN` (compared in constant time) and answers 401 without it.
//! [`render`] holds the pages; the data comes from the farm actor (asked, never told) and
//! [`crate::farm::observe::Observer`].

pub mod gate;
pub mod render;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prova_protocol::task::OwnedTask;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::farm::server::Shared;

/// Most bytes of a request head.
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a peer has to send its whole request head, from its connection's accept.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a peer has to take the whole answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Answers that gather the farm's data (`/metrics`, `/api/*`, `/`) being made at once.
pub const RENDERS: usize = 8;
/// How long `/readyz` waits for the cache thread before it answers "not ready".
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);
/// Fewest bytes of a bearer token (after trimming): a guessable token guards nothing.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Why the listener cannot start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// A non-loopback bind without a token.
    #[error(
        "--http {0} is reachable from other hosts: give --http-token-file FILE (a bearer token), or bind 127.0.0.1"
    )]
    NeedsToken(SocketAddr),
    /// The token file is empty.
    #[error("the HTTP token file {0} is empty")]
    EmptyToken(String),
    /// The token is too short to be secret.
    #[error(
        "the HTTP token (--http-token-file) is {len} bytes: use at least {MIN_TOKEN_BYTES} random \
         bytes, e.g. `head -c 32 /dev/urandom | base64 > FILE`"
    )]
    WeakToken {
        /// Its length after trimming.
        len: usize,
    },
    /// Binding or reading failed.
    #[error("--http {addr}: {source}")]
    Io {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// Only these two addresses count as loopback-only: anything else (127.0.0.2 included) is
/// treated as reachable by others.
pub fn loopback_only(addr: &SocketAddr) -> bool {
    match addr.ip() {
        std::net::IpAddr::V4(ip) => ip == std::net::Ipv4Addr::LOCALHOST,
        std::net::IpAddr::V6(ip) => ip == std::net::Ipv6Addr::LOCALHOST,
    }
}

/// A bound listener, not yet serving.
pub struct HttpListener {
    listener: TcpListener,
    token: Option<Arc<str>>,
    /// The address it is bound to.
    pub addr: SocketAddr,
}

/// Binds `addr`; `token`: the bearer token (trimmed), required unless [`loopback_only`].
pub async fn bind(addr: SocketAddr, token: Option<String>) -> Result<HttpListener, HttpError> {
    let token = match token {
        Some(t) if t.trim().is_empty() => return Err(HttpError::EmptyToken(addr.to_string())),
        Some(t) if t.trim().len() < MIN_TOKEN_BYTES => {
            return Err(HttpError::WeakToken { len: t.trim().len() });
        }
        Some(t) => Some(Arc::from(t.trim())),
        None if !loopback_only(&addr) => return Err(HttpError::NeedsToken(addr)),
        None => None,
    };
    let listener =
        TcpListener::bind(addr).await.map_err(|source| HttpError::Io { addr, source })?;
    let addr = listener.local_addr().map_err(|source| HttpError::Io { addr, source })?;
    Ok(HttpListener { listener, token, addr })
}

/// Equal in time independent of where they differ (the length is not secret).
pub fn token_matches(given: &[u8], want: &[u8]) -> bool {
    if given.len() != want.len() {
        return false;
    }
    given.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// What every connection of a listener shares: the bounds of [`gate`], the renders.
struct Bounds {
    young: Arc<Semaphore>,
    slow: Arc<gate::Book>,
    answering: Arc<Semaphore>,
    renders: Semaphore,
}

impl HttpListener {
    /// Serves until `shutdown`.
    pub async fn serve(self, shared: Arc<Shared>, shutdown: CancellationToken) {
        let bounds = Arc::new(Bounds {
            young: Arc::new(Semaphore::new(gate::MAX_YOUNG)),
            slow: gate::Book::new(gate::MAX_SLOW, gate::MAX_SLOW_PER_SOURCE),
            answering: Arc::new(Semaphore::new(gate::MAX_ANSWERING)),
            renders: Semaphore::new(RENDERS),
        });
        loop {
            let accepted = tokio::select! {
                () = shutdown.cancelled() => return,
                a = self.listener.accept() => a,
            };
            let Ok((stream, peer)) = accepted else { continue };
            // Only a flood of connections fills this; a slow one moves to the book.
            let Ok(young) = bounds.young.clone().try_acquire_owned() else {
                drop(stream);
                continue;
            };
            let (shared, bounds) = (shared.clone(), bounds.clone());
            let token = self.token.clone();
            // Bounded by the head and write deadlines, the readiness wait and the bounds.
            drop(
                OwnedTask::spawn("http.conn", async move {
                    serve_one(stream, peer, young, &bounds, &shared, token.as_deref()).await;
                })
                .detach(),
            );
        }
    }
}

/// A parsed request head: what the router needs.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// `GET` or `HEAD`.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The `Authorization` header's value, or `Bearer T` from a `token=T` query parameter
    /// (a browser opening the dashboard cannot set a header; its script then sends one).
    pub authorization: Option<String>,
}

/// Parses a request head (`None`: not HTTP/1.x).
pub fn parse_head(head: &str) -> Option<Request> {
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let target = first.next()?;
    if !first.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let path = path.to_owned();
    let from_query = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("token="))
        .map(|t| format!("Bearer {}", percent_decode(t)));
    let authorization = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.trim().to_owned())
        .or(from_query);
    Some(Request { method, path, authorization })
}

/// A query value with its `%XX` escapes decoded (`encodeURIComponent`'s, a browser's, curl's
/// `--data-urlencode`): a token holding `+`, `/`, `=` or `%` arrives escaped. A `+` stays a
/// `+` (a token pasted raw keeps its own), and a `%` not followed by two hex digits stays
/// as written. Bytes that do not decode to UTF-8 are replaced, so such a token never matches.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                // Two hex digits: at most 0xff, so the cast keeps every bit.
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An answer.
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Body.
    pub body: Vec<u8>,
}

impl Response {
    /// A plain-text answer.
    pub fn text(status: u16, body: &str) -> Self {
        Self { status, content_type: "text/plain; charset=utf-8", body: body.as_bytes().to_vec() }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// Why no request head was read.
enum NoHead {
    /// Not HTTP, too long, or the peer closed: 400.
    Bad,
    /// Not in within [`HEAD_TIMEOUT`]: 408.
    Late,
    /// Closed to make room for another slow connection: no answer.
    Evicted,
}

/// Reads into `buf` until it holds a whole head; `None` on EOF, an error or [`MAX_HEAD`].
/// Cancel-safe: a read that is dropped loses nothing already in `buf`.
async fn fill_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        if buf.len() >= MAX_HEAD {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(())
}

/// The request head: within [`gate::GRACE`] holding only the `young` permit, else as a slow
/// connection booked in `slow`, within [`HEAD_TIMEOUT`] in all.
async fn read_head(
    stream: &mut TcpStream,
    peer: SocketAddr,
    young: tokio::sync::OwnedSemaphorePermit,
    slow: &Arc<gate::Book>,
) -> Result<String, NoHead> {
    let started = tokio::time::Instant::now();
    let mut buf = Vec::with_capacity(1024);
    let text = |buf: Vec<u8>| String::from_utf8(buf).map_err(|_| NoHead::Bad);
    match tokio::time::timeout(gate::GRACE, fill_head(stream, &mut buf)).await {
        Ok(Some(())) => return text(buf),
        Ok(None) => return Err(NoHead::Bad),
        Err(_) => drop(young),
    }
    let Some(ticket) = slow.admit(peer.ip()) else { return Err(NoHead::Evicted) };
    let left = HEAD_TIMEOUT.saturating_sub(started.elapsed());
    tokio::select! {
        () = ticket.evicted.cancelled() => Err(NoHead::Evicted),
        got = tokio::time::timeout(left, fill_head(stream, &mut buf)) => match got {
            Ok(Some(())) => text(buf),
            Ok(None) => Err(NoHead::Bad),
            Err(_) => Err(NoHead::Late),
        },
    }
}

async fn serve_one(
    mut stream: TcpStream,
    peer: SocketAddr,
    young: tokio::sync::OwnedSemaphorePermit,
    bounds: &Bounds,
    shared: &Shared,
    token: Option<&str>,
) {
    let head = read_head(&mut stream, peer, young, &bounds.slow).await;
    let Ok(_answering) = bounds.answering.clone().try_acquire_owned() else { return };
    let (response, head_only) = match head.as_ref().map(|h| parse_head(h)) {
        Err(NoHead::Evicted) => return,
        Err(NoHead::Late) => (Response::text(408, "the request head took too long\n"), false),
        Err(NoHead::Bad) | Ok(None) => (Response::text(400, "bad request\n"), false),
        Ok(Some(req)) => {
            (respond_first(&req, shared, &bounds.renders, token).await, req.method == "HEAD")
        }
    };
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\
         Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\
         Content-Security-Policy: default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    if response.status == 401 {
        out.push_str("WWW-Authenticate: Bearer\r\n");
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    if !head_only {
        bytes.extend_from_slice(&response.body);
    }
    let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
        stream.write_all(&bytes).await?;
        stream.shutdown().await
    })
    .await;
}

/// The probes first: `/healthz` is answered on the spot, `/readyz` within [`READY_TIMEOUT`];
/// every other page takes one of [`RENDERS`] places, or is answered 503 at once.
async fn respond_first(
    req: &Request,
    shared: &Shared,
    renders: &Semaphore,
    token: Option<&str>,
) -> Response {
    match req.path.as_str() {
        "/healthz" | "/readyz" => respond(req, shared, token).await,
        _ if !authorised(req, token) => respond(req, shared, token).await,
        _ => match renders.try_acquire() {
            Ok(_permit) => respond(req, shared, token).await,
            Err(_) => Response::text(503, "busy: too many pages being made; try again\n"),
        },
    }
}

/// Whether `req` may see `path`: the probes always; the rest needs the token when one is set.
pub fn authorised(req: &Request, token: Option<&str>) -> bool {
    // The probes carry no data (a kubelet cannot read a token from a Secret for them); the
    // dashboard's script is static code (a `<script src>` cannot send a header).
    if matches!(req.path.as_str(), "/healthz" | "/readyz" | "/dashboard.js") {
        return true;
    }
    let Some(want) = token else { return true };
    let given = req.authorization.as_deref().and_then(|v| v.strip_prefix("Bearer ")).unwrap_or("");
    token_matches(given.trim().as_bytes(), want.as_bytes())
}

async fn respond(req: &Request, shared: &Shared, token: Option<&str>) -> Response {
    if req.method != "GET" && req.method != "HEAD" {
        return Response::text(405, "read-only: GET only\n");
    }
    if !authorised(req, token) {
        return Response::text(401, "a bearer token is required (Authorization: Bearer TOKEN)\n");
    }
    match req.path.as_str() {
        "/healthz" => json(200, &serde_json::json!({"status": "up"})),
        "/readyz" => {
            let asked = tokio::time::timeout(READY_TIMEOUT, shared.store.call(|_| ()));
            let cache = matches!(asked.await, Ok(Ok(())));
            let farm = shared.farm.is_alive();
            let ready = cache && farm;
            let body =
                serde_json::json!({"ready": ready, "cache_open": cache, "accepting_workers": farm});
            json(if ready { 200 } else { 503 }, &body)
        }
        "/metrics" => {
            let state = render::gather(shared).await;
            Response {
                status: 200,
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body: render::metrics(&state, &shared.observe).into_bytes(),
            }
        }
        "/api/state" => json(200, &render::gather(shared).await.json()),
        "/api/fragment" => html(render::body(&render::gather(shared).await)),
        "/dashboard.js" => Response {
            status: 200,
            content_type: "text/javascript; charset=utf-8",
            body: include_str!("dashboard.js").as_bytes().to_vec(),
        },
        "/" => html(render::page(&render::gather(shared).await)),
        _ => Response::text(404, "not found\n"),
    }
}

fn json(status: u16, v: &serde_json::Value) -> Response {
    Response { status, content_type: "application/json", body: v.to_string().into_bytes() }
}

fn html(body: String) -> Response {
    Response { status: 200, content_type: "text/html; charset=utf-8", body: body.into_bytes() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(path: &str, auth: Option<&str>) -> Request {
        Request { method: "GET".into(), path: path.into(), authorization: auth.map(Into::into) }
    }

    #[test]
    fn only_localhost_itself_counts_as_loopback() {
        assert!(loopback_only(&"127.0.0.1:0".parse().unwrap()));
        assert!(loopback_only(&"[::1]:0".parse().unwrap()));
        assert!(!loopback_only(&"127.0.0.2:0".parse().unwrap()));
        assert!(!loopback_only(&"0.0.0.0:0".parse().unwrap()));
        assert!(!loopback_only(&"[::]:0".parse().unwrap()));
    }

    #[test]
    fn the_token_is_asked_for_everything_but_the_probes() {
        let t = Some("s3cret");
        assert!(authorised(&req("/healthz", None), t));
        assert!(authorised(&req("/readyz", None), t));
        assert!(authorised(&req("/dashboard.js", None), t));
        for path in ["/", "/metrics", "/api/state", "/api/fragment", "/nope", "/healthz/x"] {
            assert!(!authorised(&req(path, None), t), "{path}");
            assert!(!authorised(&req(path, Some("Bearer s3creT")), t), "{path}");
            assert!(!authorised(&req(path, Some("Bearer s3cret2")), t), "{path}");
            assert!(!authorised(&req(path, Some("s3cret")), t), "{path}");
            assert!(authorised(&req(path, Some("Bearer s3cret")), t), "{path}");
        }
        assert!(authorised(&req("/metrics", None), None));
    }

    #[test]
    fn heads_parse_and_junk_does_not() {
        let r =
            parse_head("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nauthorization: Bearer x\r\n\r\n");
        assert_eq!(r, Some(req("/metrics", Some("Bearer x"))));
        let r = parse_head("GET /?token=abc HTTP/1.1\r\n\r\n");
        assert_eq!(r, Some(req("/", Some("Bearer abc"))));
        assert_eq!(parse_head("GET /\r\n\r\n"), None);
        // A percent-encoded token is decoded, a raw one kept (`+` included).
        let r = parse_head("GET /?x=1&token=a%2Bb%2Fc%3Dd%25e HTTP/1.1\r\n\r\n");
        assert_eq!(r, Some(req("/", Some("Bearer a+b/c=d%e"))));
        let r = parse_head("GET /metrics?token=a+b/c=d%25e HTTP/1.1\r\n\r\n");
        assert_eq!(r, Some(req("/metrics", Some("Bearer a+b/c=d%e"))));
        let r = parse_head("GET /?token=%2b%2F HTTP/1.1\r\n\r\n");
        assert_eq!(r, Some(req("/", Some("Bearer +/"))));
        assert_eq!(parse_head("\u{0}\u{1}"), None);
        assert_eq!(parse_head("GET / SPDY/3\r\n\r\n"), None);
    }

    #[test]
    fn percent_escapes_decode_and_junk_stays_as_written() {
        let cases = [
            ("plain", "plain"),
            ("a%2Bb", "a+b"),
            ("a+b", "a+b"),
            ("%2f%2F%3d%25", "//=%"),
            ("100%", "100%"),
            ("%4", "%4"),
            ("%zz%2", "%zz%2"),
            ("%C3%A9", "\u{e9}"),
            ("%ff", "\u{fffd}"),
            ("", ""),
        ];
        for (raw, want) in cases {
            assert_eq!(percent_decode(raw), want, "{raw}");
        }
        let t = Some("a+b/c=d%e");
        assert!(authorised(
            &parse_head("GET /?token=a%2Bb%2Fc%3Dd%25e HTTP/1.1\r\n\r\n").unwrap(),
            t
        ));
        assert!(!authorised(&parse_head("GET /?token=a%2Bb HTTP/1.1\r\n\r\n").unwrap(), t));
    }

    #[tokio::test]
    async fn a_public_bind_without_a_token_is_refused() {
        let e = bind("127.0.0.2:0".parse().unwrap(), None).await.err();
        assert!(matches!(e, Some(HttpError::NeedsToken(_))), "{e:?}");
        let e = bind("127.0.0.1:0".parse().unwrap(), Some("  \n".into())).await.err();
        assert!(matches!(e, Some(HttpError::EmptyToken(_))), "{e:?}");
    }

    #[tokio::test]
    async fn a_short_token_is_refused_and_sixteen_bytes_are_enough() {
        let local = "127.0.0.1:0".parse().unwrap();
        for short in ["x", "tok-3f9a1c", " 0123456789abcde \n"] {
            let e = bind(local, Some(short.into())).await.err();
            assert!(matches!(e, Some(HttpError::WeakToken { .. })), "{short:?}: {e:?}");
            let text = e.map(|e| e.to_string()).unwrap_or_default();
            assert!(text.contains("at least 16"), "{text}");
        }
        assert!(bind(local, Some("0123456789abcdef\n".into())).await.is_ok());
    }
}
