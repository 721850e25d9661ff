//! A plain HTTP/1.1 client for the coordinator's `--http` listener (one request per
//! connection, bounded), `promtool check metrics`, and a headless Chromium that renders a
//! page (`--dump-dom`, `--screenshot`). Each tool is found on `PATH`; a suite asks
//! [`tool`] and passes with a printed reason only when it is truly absent.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long one request may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// `GET path` on `addr` (`HOST:PORT`) with an optional bearer token: (status, body).
pub fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(TIMEOUT)).expect("a read timeout");
    s.set_write_timeout(Some(TIMEOUT)).expect("a write timeout");
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap_or_else(|e| panic!("send to {addr}: {e}"));
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap_or_else(|e| panic!("read from {addr}: {e}"));
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head: {text:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"));
    (status, body.to_owned())
}

/// The value of a sample line `name{labels} value` (exact `series` text before the value).
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.rsplit_once(' ').filter(|(s, _)| *s == series).map(|(_, v)| v))
        .and_then(|v| v.parse().ok())
}

/// `name` on `PATH`, if there.
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// `promtool check metrics` over `text`: `Err(its output)` when it finds a problem.
pub fn promtool_check(promtool: &Path, text: &str) -> Result<(), String> {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting promtool: {e}"));
    child.stdin.take().expect("piped").write_all(text.as_bytes()).expect("writing to promtool");
    let out = child.wait_with_output().expect("promtool ran");
    let said =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() { Ok(()) } else { Err(said) }
}

/// Renders `url` in headless Chromium (virtual time lets the page's script run) and returns
/// the DOM; with `screenshot`, also writes a PNG there.
pub fn chromium_dom(
    chromium: &Path,
    url: &str,
    profile: &Path,
    screenshot: Option<&Path>,
) -> String {
    let mut args: Vec<String> = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--virtual-time-budget=5000",
        "--window-size=1280,900",
    ]
    .map(str::to_owned)
    .to_vec();
    args.push(format!("--user-data-dir={}", profile.display()));
    match screenshot {
        Some(p) => args.push(format!("--screenshot={}", p.display())),
        None => args.push("--dump-dom".to_owned()),
    }
    args.push(url.to_owned());
    let mut child = Command::new(chromium)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", chromium.display()));
    let mut stdout = child.stdout.take().expect("piped");
    // Read on a thread so a hung browser is killed after a bound instead of hanging the suite.
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while matches!(child.try_wait(), Ok(None)) {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish rendering {url} within 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    String::from_utf8_lossy(&reader.join().unwrap_or_default()).into_owned()
}
