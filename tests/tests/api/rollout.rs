//! Rolling deploys: after the shutdown signal `/ready` answers 503 `draining` while requests are
//! still served for `server.drain_delay_secs`; then new connections are refused, requests in
//! flight finish, and the server exits after `server.shutdown_grace_secs` at the latest.

use std::time::{Duration, Instant};

use mem0_http_tests::{local_embedder, test_settings, TestServer};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends the head of `POST /memories` and the first half of its body; returns the connection and
/// the rest of the body.
async fn half_sent_add(server: &TestServer, text: &str) -> (TcpStream, Vec<u8>) {
    let address = server.base.trim_start_matches("http://").to_owned();
    let body = json!({"messages": [{"role": "user", "content": text}], "user_id": "u", "infer": false}).to_string();
    let mut stream = TcpStream::connect(&address).await.expect("connect");
    let head = format!(
        "POST /memories HTTP/1.1\r\nHost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let (first, rest) = body.as_bytes().split_at(body.len() / 2);
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(first).await.expect("first half");
    (stream, rest.to_vec())
}

#[tokio::test]
async fn shutdown_drains_then_stops_within_the_grace_period() {
    let mut settings = test_settings();
    settings.server.drain_delay_secs = 1;
    settings.server.shutdown_grace_secs = 2;
    let mut server = TestServer::start_with(settings, local_embedder().await).await;
    assert_eq!(server.get("/ready").await.status, 200);
    // Two requests in flight when the signal comes: one will finish, one never sends its body.
    let (mut finishing, rest) = half_sent_add(&server, "I started before the shutdown").await;
    let (_stalled, _) = half_sent_add(&server, "I never finish my body").await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let signalled = Instant::now();
    let served = server.begin_shutdown();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Draining: not ready, but alive and still serving.
    server.get("/ready").await.assert_error(503, "draining");
    assert_eq!(server.get("/health").await.status, 200);
    assert_eq!(server.get("/memories?user_id=u").await.status, 200, "requests are still served during the delay");

    // After the delay the listener is closed: new connections are refused.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let address = server.base.trim_start_matches("http://").to_owned();
    assert!(TcpStream::connect(&address).await.is_err(), "a connection was accepted after the drain delay");

    // The request in flight still completes, with its memory written.
    finishing.write_all(&rest).await.expect("rest of the body");
    let mut response = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), finishing.read_to_string(&mut response)).await;
    assert!(response.starts_with("HTTP/1.1 200"), "in-flight add: {response}");
    assert!(response.contains("I started before the shutdown"), "{response}");

    // The stalled one does not hold the process: it stops at delay + grace (1 + 2 s).
    tokio::time::timeout(Duration::from_secs(6), served).await.expect("stopped within the grace period").expect("task");
    let stopped = signalled.elapsed();
    assert!(stopped >= Duration::from_millis(2900), "stopped before delay + grace: {stopped:?}");
}

#[tokio::test]
async fn shutdown_without_requests_in_flight_is_immediate() {
    let mut server = TestServer::start().await;
    let served = server.begin_shutdown();
    tokio::time::timeout(Duration::from_secs(2), served).await.expect("stopped at once").expect("task");
}
