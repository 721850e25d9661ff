//! mTLS handshakes over loopback QUIC: the happy path, and every way a peer is refused.
//! STACK.md pitfall 3: a client whose certificate the server refuses may still see `connect()`
//! succeed, so refusals are asserted on the first exchange and on the server's accept.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;

use crate::task::OwnedTask;
use crate::transport::certs::{Bundle, Identity, Role};
use crate::transport::frame::{read_msg, write_msg};
use crate::transport::test_support::{Msg, Pki, connected_pair, loopback_server, within};
use crate::transport::tls::{self, client_crypto_with_alpn, quic_client_config};
use crate::transport::{TransportError, endpoint};

/// Serves one connection: accepts it, reads one framed message on the first bi stream and
/// echoes it back with `a + 1`. Returns the client's identity (or why the accept failed).
async fn serve_one(server_ep: quinn::Endpoint) -> Result<Identity, TransportError> {
    let incoming = server_ep.accept().await.expect("the endpoint stays open");
    let (conn, identity) = endpoint::accept(incoming).await?;
    let (mut send, mut recv) = conn.accept_bi().await?;
    let msg: Msg = read_msg(&mut recv).await.expect("read").expect("a message");
    write_msg(&mut send, &Msg { a: msg.a + 1, ..msg }).await.expect("write");
    send.finish().expect("finish");
    // Keep the connection open until the client has read the reply and closed.
    conn.closed().await;
    Ok(identity)
}

/// The client's side of one exchange; any failure as a string.
async fn exchange(conn: &quinn::Connection, msg: &Msg) -> Result<Msg, String> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| format!("open: {e}"))?;
    write_msg(&mut send, msg).await.map_err(|e| format!("write: {e}"))?;
    send.finish().map_err(|e| format!("finish: {e}"))?;
    match read_msg::<_, Msg>(&mut recv).await {
        Ok(Some(reply)) => Ok(reply),
        Ok(None) => Err("stream ended without a reply".into()),
        Err(e) => Err(format!("read: {e}")),
    }
}

/// A client endpoint whose default configuration is `config`.
fn client_endpoint(config: quinn::ClientConfig, remote: SocketAddr) -> quinn::Endpoint {
    let mut ep = quinn::Endpoint::client(SocketAddr::from(([0, 0, 0, 0], 0))).expect("bind");
    assert!(remote.is_ipv4());
    ep.set_default_client_config(config);
    ep
}

#[tokio::test]
async fn a_worker_connects_and_both_sides_know_who_the_other_is() {
    let pki = Pki::new();
    let (server_ep, addr) = loopback_server(&pki.coordinator());
    let server = OwnedTask::spawn("test.server", serve_one(server_ep));
    let client_ep = endpoint::client(&pki.worker(), addr).expect("client endpoint");
    let conn =
        within("connect", endpoint::connect(&client_ep, addr, "127.0.0.1")).await.expect("connect");
    let server_identity = endpoint::peer_identity(&conn).expect("server identity");
    assert_eq!(server_identity, Identity { role: Role::Coordinator, name: "coordinator".into() });
    let reply = within("the echo", exchange(&conn, &Msg::sample(7))).await.expect("exchange");
    assert_eq!(reply, Msg { a: 8, ..Msg::sample(7) });
    conn.close(0u32.into(), b"done");
    let identity = within("the server", server).await.expect("join").expect("served");
    assert_eq!(identity, Identity { role: Role::Worker, name: "w1".into() });
}

#[tokio::test]
async fn the_server_is_verified_by_dns_name_too_and_a_wrong_name_fails() {
    let pki = Pki::new();
    let (server_ep, addr) = loopback_server(&pki.coordinator());
    let server = OwnedTask::spawn("test.server", serve_one(server_ep.clone()));
    let client_ep = endpoint::client(&pki.worker(), addr).expect("client endpoint");
    let conn = within("connect", endpoint::connect(&client_ep, addr, "localhost"))
        .await
        .expect("connect by DNS name");
    within("the echo", exchange(&conn, &Msg::sample(1))).await.expect("exchange");
    conn.close(0u32.into(), b"done");
    within("the server", server).await.expect("join").expect("served");

    let server = OwnedTask::spawn("test.server", serve_one(server_ep));
    let err = within("connect", endpoint::connect(&client_ep, addr, "elsewhere.example"))
        .await
        .expect_err("a name not in the coordinator's SANs");
    assert!(matches!(err, TransportError::Connection(_)), "{err}");
    assert!(within("the server", server).await.expect("join").is_err());
}

#[tokio::test]
async fn frames_round_trip_over_a_real_quinn_stream() {
    let pki = Pki::new();
    let (client, server, _cep, _sep) = connected_pair(&pki).await;
    let echo = OwnedTask::spawn("test.echo", async move {
        let (mut send, mut recv) = server.accept_bi().await.expect("accept bi");
        let mut n = 0;
        while let Some(msg) = read_msg::<_, Msg>(&mut recv).await.expect("read") {
            write_msg(&mut send, &msg).await.expect("write");
            n += 1;
        }
        send.finish().expect("finish");
        let _ = send.stopped().await;
        n
    });
    let (mut send, mut recv) = client.open_bi().await.expect("open bi");
    let msgs: Vec<Msg> = (0..200).map(Msg::sample).collect();
    let reader = async {
        let mut got = Vec::new();
        while let Some(msg) = read_msg::<_, Msg>(&mut recv).await.expect("read reply") {
            got.push(msg);
        }
        got
    };
    let writer = async {
        for msg in &msgs {
            write_msg(&mut send, msg).await.expect("write");
        }
        send.finish().expect("finish");
    };
    let ((), got) = within("200 echoes", async { tokio::join!(writer, reader) }).await;
    assert_eq!(got, msgs);
    assert_eq!(within("the echo task", echo).await.expect("join"), 200);
}

/// Asserts a client that the server should refuse gets nowhere: the server's accept fails
/// and the client's connect or first exchange fails.
async fn assert_refused(config: quinn::ClientConfig, server_bundle: &Bundle) -> (String, String) {
    let (server_ep, addr) = loopback_server(server_bundle);
    let server = OwnedTask::spawn("test.server", serve_one(server_ep));
    let client_ep = client_endpoint(config, addr);
    let client_err = within("the refused client", async {
        match endpoint::connect(&client_ep, addr, "localhost").await {
            Err(e) => e.to_string(),
            Ok(conn) => {
                let err = exchange(&conn, &Msg::sample(3)).await.expect_err("first exchange");
                let reason = conn.closed().await;
                format!("{err}; closed: {reason}")
            }
        }
    })
    .await;
    let server_err = match within("the server's accept", server).await.expect("join") {
        Ok(identity) => panic!("server accepted {identity}"),
        Err(e) => e.to_string(),
    };
    (client_err, server_err)
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    let pki = Pki::new();
    let worker = pki.worker();
    let mut roots = RootCertStore::empty();
    roots.add(worker.ca.clone()).expect("root");
    let mut crypto = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    crypto.alpn_protocols = vec![tls::ALPN.to_vec()];
    let config = quic_client_config(crypto).expect("config");
    let (client, server) = assert_refused(config, &pki.coordinator()).await;
    assert!(server.to_lowercase().contains("certificate"), "server: {server}");
    assert!(client.to_lowercase().contains("certificate"), "client: {client}");
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused() {
    let pki = Pki::new();
    let other = Pki::new();
    // Trusts our CA (so the server is accepted) but presents a certificate from another CA.
    let foreign = Bundle { ca: pki.worker().ca, ..other.worker() };
    let config = tls::client_config(&foreign).expect("config");
    let (client, server) = assert_refused(config, &pki.coordinator()).await;
    assert!(server.contains("invalid peer certificate: UnknownIssuer"), "server: {server}");
    assert!(!client.is_empty());
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_cluster_ca_fails_to_connect() {
    let pki = Pki::new();
    let other = Pki::new();
    // A valid cluster certificate, but trusting another CA: the server's certificate fails.
    let confused = Bundle { ca: other.worker().ca, ..pki.worker() };
    let (server_ep, addr) = loopback_server(&pki.coordinator());
    let server = OwnedTask::spawn("test.server", serve_one(server_ep));
    let client_ep = endpoint::client(&confused, addr).expect("client endpoint");
    let err = within("connect", endpoint::connect(&client_ep, addr, "localhost"))
        .await
        .expect_err("the server's certificate is not from a trusted CA");
    assert!(matches!(err, TransportError::Connection(_)), "{err}");
    assert!(within("the server", server).await.expect("join").is_err());
}

#[tokio::test]
async fn a_client_speaking_another_alpn_is_refused() {
    let pki = Pki::new();
    let crypto = client_crypto_with_alpn(&pki.worker(), b"prova/0").expect("crypto");
    let config = quic_client_config(crypto).expect("config");
    let (client, server) = assert_refused(config, &pki.coordinator()).await;
    // TLS alert 120, no_application_protocol.
    assert!(client.contains("error 120"), "client: {client}");
    assert!(!server.is_empty());
}

#[tokio::test]
async fn a_worker_certificate_cannot_serve() {
    let pki = Pki::new();
    // A worker's certificate has no server-auth EKU and no DNS/IP names: no client accepts it.
    let (server_ep, addr) = loopback_server(&pki.worker());
    let server = OwnedTask::spawn("test.server", serve_one(server_ep));
    let client_ep = endpoint::client(&pki.coordinator(), addr).expect("client endpoint");
    let err = within("connect", endpoint::connect(&client_ep, addr, "localhost"))
        .await
        .expect_err("a worker certificate as a server");
    assert!(matches!(err, TransportError::Connection(_)), "{err}");
    assert!(within("the server", server).await.expect("join").is_err());
}

#[test]
fn configs_build_with_the_explicit_ring_provider_and_no_early_data() {
    let pki = Pki::new();
    let server = tls::server_crypto(&pki.coordinator()).expect("server crypto");
    assert_eq!(server.max_early_data_size, 0);
    assert_eq!(server.alpn_protocols, vec![tls::ALPN.to_vec()]);
    let client = tls::client_crypto(&pki.worker()).expect("client crypto");
    assert!(!client.enable_early_data);
    assert_eq!(client.alpn_protocols, vec![b"prova/1".to_vec()]);
    tls::server_config(&pki.coordinator()).expect("quinn server config");
    tls::client_config(&pki.worker()).expect("quinn client config");
    // Verifier builders accept the cluster CA alone.
    let mut roots = RootCertStore::empty();
    roots.add(pki.worker().ca).expect("root");
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), tls::provider())
        .build()
        .expect("verifier");
}
