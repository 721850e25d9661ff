//! The coordinator's HTTP listener takes its bearer token from `?token=` too (a browser
//! opening the dashboard cannot set a header), and decodes it (issue 28): a token holding
//! `+`, `/`, `=` or `%` arrives percent-encoded from a browser or `curl --data-urlencode`,
//! and was refused. A raw `+` stays a `+`. The dashboard's script sends the token it read
//! from the address the same way, so the page refreshes in a real browser.

use prova_tests::cluster::{Cluster, Sandbox};
use prova_tests::http::{chromium_dom, get, tool};

/// Long enough for the listener's 16-byte minimum; the tail holds every character a
/// query must decode.
const TOKEN: &str = "0123456789abcdef-a+b/c=d%e";
const ENCODED: &str = "0123456789abcdef-a%2Bb%2Fc%3Dd%25e";

#[test]
fn a_percent_encoded_token_in_the_query_is_accepted() {
    let secrets = tempfile::tempdir().expect("a temp dir");
    let token_file = secrets.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("writing the token");
    let farm = Cluster::builder()
        .workers(0)
        .sandbox(Sandbox::None)
        .coordinator_args([
            "--http".to_owned(),
            "127.0.0.2:0".to_owned(),
            "--http-token-file".to_owned(),
            token_file.to_string_lossy().into_owned(),
        ])
        .start();
    let http = farm.http_addr().expect("the coordinator prints its HTTP address").to_owned();
    for path in ["/metrics", "/api/state", "/"] {
        let q = |t: &str| format!("{path}?token={t}");
        assert_eq!(get(&http, &q(ENCODED), None).0, 200, "{path}: the encoded token");
        assert_eq!(
            get(&http, &q("0123456789abcdef-a+b/c=d%25e"), None).0,
            200,
            "{path}: `+` raw, `%` encoded"
        );
        assert_eq!(
            get(&http, &q("0123456789abcdef-a%2bb%2fc%3dd%25e"), None).0,
            200,
            "{path}: lower-case hex"
        );
        assert_eq!(
            get(&http, &q("0123456789abcdef-a%20b%2Fc%3Dd%25e"), None).0,
            401,
            "{path}: a space is no +"
        );
        assert_eq!(get(&http, &q("0123456789abcdef-a%2Bb"), None).0, 401, "{path}: a prefix of it");
        assert_eq!(get(&http, path, Some(TOKEN)).0, 200, "{path}: the header, as before");
    }

    let Some(chromium) = tool("chromium") else {
        prova_tests::skip_for_missing("chromium is not on PATH (Debian package chromium)");
        return;
    };
    let tmp = tempfile::tempdir().expect("a temp dir");
    for query in [ENCODED, "0123456789abcdef-a+b/c=d%25e"] {
        let url = format!("http://{http}/?token={query}");
        let dom = chromium_dom(&chromium, &url, &tmp.path().join("profile"), None);
        assert!(dom.contains("data-refreshed="), "{query}: the script's fetch was refused\n{dom}");
    }
}
