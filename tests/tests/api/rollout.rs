//! Rolling deploys: after the shutdown signal `/ready` answers 503 `draining` while requests are
//! still served for `server.drain_delay_secs`; then new connections are refused, requests in
//! flight finish, and the server exits after `server.shutdown_grace_secs` at the latest.

use std::time::{Duration, Instant};

use mem0_http_tests::{local_embedder, own_local_embedder, test_settings, TestServer};
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
    // Long enough for the in-flight add while other tests load the machine.
    settings.server.shutdown_grace_secs = 4;
    let mut server = TestServer::start_with(settings, local_embedder().await).await;
    assert_eq!(server.get("/ready").await.status, 200);
    // Two requests in flight when the signal comes: one will finish, one never sends its body.
    let (mut finishing, rest) = half_sent_add(&server, "I started before the shutdown").await;
    let (mut stalled, _) = half_sent_add(&server, "I never finish my body").await;
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

    // The stalled one does not hold the process: it stops at delay + grace (1 + 4 s).
    tokio::time::timeout(Duration::from_secs(8), served).await.expect("stopped within the grace period").expect("task");
    let stopped = signalled.elapsed();
    assert!(stopped >= Duration::from_millis(4900), "stopped before delay + grace: {stopped:?}");
    // It was cut off with a clear answer, not left hanging.
    let mut response = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stalled.read_to_string(&mut response)).await;
    assert!(response.starts_with("HTTP/1.1 503"), "cut-off request: {response}");
    assert!(response.contains("draining"), "{response}");
}

#[tokio::test]
async fn shutdown_without_requests_in_flight_is_immediate() {
    let mut server = TestServer::start().await;
    let served = server.begin_shutdown();
    tokio::time::timeout(Duration::from_secs(2), served).await.expect("stopped at once").expect("task");
}

/// The shutdown signal while 32 searches and adds (1,500-character turns) are in flight: every
/// request either completes or is never acknowledged, every acknowledged add is stored with its
/// history (and in the audit trail), and nothing stored lacks its history.
#[tokio::test]
async fn shutdown_during_32_requests_loses_nothing_acknowledged() {
    let mut settings = test_settings();
    settings.server.shutdown_grace_secs = 30;
    let mut server = TestServer::start_with(settings, own_local_embedder().await).await;
    server.add_texts("u", &["The lighthouse keeper logs every ship"], json!({})).await;
    let turn = |index: usize| {
        let sentence =
            format!("Turn {index}: the harbour master of Tromsø recorded the cargo, the crew and the weather. ");
        sentence.repeat(1500 / sentence.len() + 1)
    };
    let requests = (0..32).map(|index| {
        let (client, base) = (server.client.clone(), server.base.clone());
        let text = turn(index);
        async move {
            let request = if index % 2 == 0 {
                let body =
                    json!({"messages": [{"role": "assistant", "content": text}], "user_id": "u", "infer": false});
                client.post(format!("{base}/memories")).json(&body)
            } else {
                client.post(format!("{base}/search")).json(&json!({"query": text, "user_id": "u"}))
            };
            let reply = request.send().await;
            match reply {
                Ok(response) => {
                    Some((index, response.status().as_u16(), response.json::<serde_json::Value>().await.ok()))
                }
                Err(_) => None,
            }
        }
    });
    let all = tokio::spawn(futures::future::join_all(requests));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let served = server.begin_shutdown();
    let replies = all.await.expect("requests");
    tokio::time::timeout(Duration::from_secs(40), served).await.expect("stopped").expect("task");

    let answered: Vec<_> = replies.into_iter().flatten().collect();
    // Done (200), or still running when the grace period ended on a loaded machine and cut off
    // with 503 `draining`: never acknowledged.
    assert!(
        answered.iter().all(|(_, status, body)| *status == 200
            || (*status == 503 && body.as_ref().is_some_and(|body| body["code"] == "draining"))),
        "answered requests completed or were cut off: {answered:?}"
    );
    let acknowledged: Vec<String> = answered
        .iter()
        .filter(|(index, status, _)| index % 2 == 0 && *status == 200)
        .filter_map(|(_, _, body)| body.as_ref()?["results"][0]["id"].as_str().map(str::to_owned))
        .collect();
    let memory = server.reopen().await;
    let caller = mem0_core::Caller::local_admin(server_tenant());
    let listed = memory
        .list(
            &caller,
            mem0_core::ListRequest {
                scope: mem0_core::Scope::new(Some("u"), None, None).expect("scope"),
                filter: None,
                page_size: 1000,
                cursor: None,
                show_expired: true,
                include_superseded: false,
            },
        )
        .await
        .expect("list")
        .items;
    for id in &acknowledged {
        assert!(listed.iter().any(|item| item.id.to_string() == *id), "acknowledged add {id} is stored");
    }
    for item in &listed {
        let history = memory.history(&caller, item.id).await.expect("history");
        assert_eq!(
            history.first().map(|entry| entry.event),
            Some(mem0_core::HistoryEvent::Add),
            "{} has its ADD",
            item.id
        );
    }
    // The audit trail was written before the server stopped (nobody flushed it here).
    let trail = server
        .reopen_history()
        .await
        .audit_log()
        .query(&mem0_core::history::AuditQuery {
            actions: Some(vec![mem0_core::history::AuditAction::Add]),
            limit: 500,
            ..mem0_core::history::AuditQuery::default()
        })
        .await
        .expect("audit trail");
    for id in &acknowledged {
        assert!(
            trail.iter().any(|entry| entry.memory_id.as_deref() == Some(id.as_str())),
            "acknowledged add {id} is in the audit trail after shutdown"
        );
    }
    println!(
        "{} of 32 answered, {} adds acknowledged, {} memories stored",
        answered.len(),
        acknowledged.len(),
        listed.len()
    );
}

fn server_tenant() -> String {
    test_settings().server.default_tenant
}
