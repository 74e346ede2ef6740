//! Export and import: a round trip SQLite → Postgres → SQLite gives the same memories and
//! histories; an import is idempotent by id, re-embeds when the file's model differs, reports
//! refused lines and refuses malformed files; a 10,000-memory export streams page by page.

use std::time::Duration;

use mem0_http_tests::{local_embedder, test_settings, Reply, StoreKind, TestServer};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// `GET path`, the body as JSON lines.
async fn export(server: &TestServer, query: &str) -> Vec<Value> {
    let response = server.client.get(format!("{}/export?{query}", server.base)).send().await.expect("export");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let text = response.text().await.expect("body");
    assert!(text.ends_with('\n'), "every line ends with a newline");
    text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect()
}

async fn import(server: &TestServer, lines: &[Value]) -> Reply {
    let body: String = lines.iter().map(|line| format!("{line}\n")).collect();
    import_raw(server, body, "application/x-ndjson").await
}

async fn import_raw(server: &TestServer, body: String, content_type: &str) -> Reply {
    let response = server
        .client
        .post(format!("{}/import", server.base))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("import");
    Reply::read_public(response).await
}

/// The memory lines of an export (the header carries the export's time).
fn memories(lines: &[Value]) -> Vec<Value> {
    assert_eq!(lines[0]["type"], "header");
    let last = lines.last().expect("lines");
    assert_eq!(last["type"], "end");
    assert_eq!(last["count"], json!(lines.len() - 2));
    lines[1..lines.len() - 1].to_vec()
}

async fn fill(server: &TestServer) {
    for (text, time) in [("I live in Paris", "2025-01-01T00:00:00Z"), ("I moved to Berlin", "2026-01-01T00:00:00Z")] {
        let reply = server
            .post(
                "/memories",
                json!({"messages": [{"role": "user", "content": text}], "user_id": "alice", "infer": false,
                       "state_key": "user.home_city", "event_time": time}),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let long_turn = format!(
        "Here is the plan for the trip to Lisbon with Maria. {}",
        "We will walk along the river, visit the old town and eat pasteis de nata every morning. ".repeat(30)
    );
    let ids = server
        .add_texts(
            "alice",
            &["Likes green tea", "Meeting Dr. Smith in Boston on Friday", &long_turn],
            json!({"topic": "life"}),
        )
        .await;
    let updated = server.put(&format!("/memories/{}", ids[0]), json!({"text": "Likes oolong tea"})).await;
    assert_eq!(updated.status, 200, "{}", updated.body);
    let expiring = server
        .post(
            "/memories",
            json!({"messages": [{"role": "assistant", "content": "Offer valid until March", "name": "shop-bot"}],
                   "user_id": "alice", "agent_id": "shop", "infer": false, "expiration_date": "2099-03-31"}),
        )
        .await;
    assert_eq!(expiring.status, 200, "{}", expiring.body);
    server.add_texts("bob", &["Bob plays the cello"], json!({})).await;
}

#[tokio::test]
async fn round_trip_sqlite_postgres_sqlite_keeps_memories_and_histories() {
    let source = TestServer::start_on(StoreKind::Sqlite, test_settings(), local_embedder().await).await;
    fill(&source).await;
    let exported = export(&source, "user_id=alice&embeddings=true").await;
    let original = memories(&exported);
    assert_eq!(original.len(), 6, "alice's memories, the superseded one included: {original:#?}");
    assert_eq!(exported[0]["embeddings"], true);
    assert_eq!(exported[0]["user_id"], "alice");
    let paris = original.iter().find(|line| line["memory"] == "I live in Paris").expect("superseded one exported");
    assert_eq!(paris["status"], "superseded");
    let tea = original.iter().find(|line| line["memory"] == "Likes oolong tea").expect("updated one");
    let events: Vec<&Value> = tea["history"].as_array().expect("history").iter().map(|entry| &entry["event"]).collect();
    assert_eq!(events, [&json!("ADD"), &json!("UPDATE")]);
    assert!(original.iter().all(|line| line["embedding"].as_array().is_some_and(|vector| vector.len() == 384)));

    let middle = TestServer::start_on(StoreKind::Postgres, test_settings(), local_embedder().await).await;
    let report = import(&middle, &exported).await;
    assert_eq!(report.status, 200, "{}", report.body);
    assert_eq!(
        (report.body["imported"].clone(), report.body["failed"].clone()),
        (json!(6), json!(0)),
        "{}",
        report.body
    );
    assert_eq!(report.body["embeddings"], "reused");
    let copied = export(&middle, "user_id=alice&embeddings=true").await;
    assert_eq!(memories(&copied), original, "Postgres holds what SQLite exported");

    // Back to a fresh SQLite store, from the Postgres export.
    let back = TestServer::start_on(StoreKind::Sqlite, test_settings(), local_embedder().await).await;
    let report = import(&back, &copied).await;
    assert_eq!(report.body["imported"], 6, "{}", report.body);
    assert_eq!(memories(&export(&back, "user_id=alice&embeddings=true").await), original);

    // What was imported is searchable, by meaning and by keyword, and has its history.
    let hits = back.search_texts(json!({"query": "Which city does the user live in?", "user_id": "alice"})).await;
    assert_eq!(hits.first().map(String::as_str), Some("I moved to Berlin"), "{hits:?}");
    let hits = back.search_texts(json!({"query": "oolong", "user_id": "alice", "mode": "keyword"})).await;
    assert_eq!(hits, ["Likes oolong tea"]);
    let id = tea["id"].as_str().expect("id");
    let history = back.get(&format!("/memories/{id}/history")).await;
    assert_eq!(history.body.as_array().map(Vec::len), Some(2), "{}", history.body);
    assert_eq!(history.body[1]["old_memory"], "Likes green tea");

    // Again: nothing is stored twice.
    let again = import(&back, &copied).await;
    assert_eq!(
        (again.body["imported"].clone(), again.body["existing"].clone()),
        (json!(0), json!(6)),
        "{}",
        again.body
    );
    let listed = back.get("/memories?user_id=alice&include_superseded=true").await;
    assert_eq!(listed.body["results"].as_array().map(Vec::len), Some(6), "{}", listed.body);
}

#[tokio::test]
async fn another_model_means_every_text_is_embedded_again() {
    let source = TestServer::start().await;
    let ids = source.add_texts("carol", &["Carol grows tomatoes on her balcony"], json!({})).await;
    let mut lines = export(&source, "user_id=carol&embeddings=true").await;
    let original = lines[1]["embedding"].clone();
    lines[0]["embedding_model"] = json!("some-other-model");
    // The vector of another model is not stored even if it has the right length.
    lines[1]["embedding"] = json!(vec![0.05f32; 384]);
    let target = TestServer::start().await;
    let report = import(&target, &lines).await;
    assert_eq!((report.body["imported"].clone(), report.body["embeddings"].clone()), (json!(1), json!("recomputed")));
    let copied = export(&target, "user_id=carol&embeddings=true").await;
    let (a, b) = (original.as_array().expect("vector"), copied[1]["embedding"].as_array().expect("vector"));
    let cosine: f64 = a.iter().zip(b).map(|(x, y)| x.as_f64().unwrap_or(0.0) * y.as_f64().unwrap_or(0.0)).sum();
    assert!(cosine > 0.999, "embedded again by this server's model: cosine {cosine}");
    assert_eq!(copied[1]["id"], json!(ids[0]));
    // An export without embeddings is embedded on import too.
    let plain = export(&source, "user_id=carol").await;
    assert!(plain[1].get("embedding").is_none());
    assert_eq!(plain[0]["embeddings"], false);
    let third = TestServer::start().await;
    assert_eq!(import(&third, &plain).await.body["embeddings"], "recomputed");
    let hits = third.search_texts(json!({"query": "vegetable gardening", "user_id": "carol"})).await;
    assert_eq!(hits, ["Carol grows tomatoes on her balcony"]);
}

#[tokio::test]
async fn bad_lines_are_reported_and_bad_files_refused() {
    let source = TestServer::start().await;
    source.add_texts("dave", &["Dave likes jazz", "Dave owns a red bike", "Dave reads Borges"], json!({})).await;
    let lines = export(&source, "user_id=dave").await;
    let target = TestServer::start().await;

    // A changed text (its hash no longer matches) and a line without any scope id: refused,
    // reported with their line numbers; the other line is stored.
    let mut edited = lines.clone();
    edited[1]["memory"] = json!("Dave likes polka");
    edited[2]["user_id"] = Value::Null;
    let report = import(&target, &edited).await;
    assert_eq!(report.status, 200, "{}", report.body);
    assert_eq!((report.body["imported"].clone(), report.body["failed"].clone()), (json!(1), json!(2)));
    let errors = report.body["errors"].as_array().expect("errors");
    assert_eq!((errors[0]["line"].clone(), errors[0]["code"].clone()), (json!(2), json!("validation_failed")));
    assert!(errors[0]["message"].as_str().is_some_and(|message| message.contains("hash")), "{errors:?}");
    assert_eq!(errors[1]["line"], 3);

    // Cut short (no end line): what came is stored, and the answer says the file is incomplete.
    let cut = &lines[..lines.len() - 1];
    let refused = import(&target, cut).await;
    refused.assert_error(400, "invalid_import");
    assert_eq!(refused.body["details"]["line"], 5, "{}", refused.body);
    assert_eq!(refused.body["details"]["imported"], 2, "{}", refused.body);
    // The whole file then finishes it.
    let finished = import(&target, &lines).await;
    assert_eq!((finished.body["imported"].clone(), finished.body["existing"].clone()), (json!(0), json!(3)));

    // A line that is not JSON, a wrong count, a file that does not start with a header, a second
    // header, a line after the end, a future version: 400 naming the line.
    let mut body: String = lines.iter().map(|line| format!("{line}\n")).collect();
    body.insert_str(body.find('\n').expect("newline") + 1, "{not json\n");
    let reply = import_raw(&target, body, "application/x-ndjson").await;
    reply.assert_error(400, "invalid_import");
    assert_eq!(reply.body["details"]["line"], 2);
    let mut wrong_count = lines.clone();
    *wrong_count.last_mut().expect("end") = json!({"type": "end", "count": 7});
    assert!(import(&target, &wrong_count).await.assert_error(400, "invalid_import").contains("counts 7"));
    import(&target, &lines[1..]).await.assert_error(400, "invalid_import");
    let mut twice = lines.clone();
    twice.insert(2, lines[0].clone());
    import(&target, &twice).await.assert_error(400, "invalid_import");
    let mut after_end = lines.clone();
    after_end.push(lines[1].clone());
    import(&target, &after_end).await.assert_error(400, "invalid_import");
    let mut future = lines.clone();
    future[0]["version"] = json!(99);
    let message = import(&target, &future).await.assert_error(400, "validation_failed");
    assert!(message.contains("version"), "{message}");
    import_raw(&target, String::new(), "application/x-ndjson").await.assert_error(400, "invalid_import");

    // Not the format's media type; an Idempotency-Key (an import is idempotent by id already).
    import_raw(&target, "{}".into(), "application/json").await.assert_error(415, "unsupported_media_type");
    let keyed = target
        .client
        .post(format!("{}/import", target.base))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", "once")
        .body("")
        .send()
        .await
        .expect("send");
    Reply::read_public(keyed).await.assert_error(400, "validation_failed");
}

#[tokio::test]
async fn a_slow_import_body_times_out_and_a_long_line_is_refused() {
    let mut settings = test_settings();
    settings.server.body_read_timeout_secs = 1;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    // Headers and the start of a chunked body, then silence.
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut socket = tokio::net::TcpStream::connect(&address).await.expect("connect");
    let head = format!(
        "POST /import HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/x-ndjson\r\n\
         Transfer-Encoding: chunked\r\n\r\n8\r\n{{\"type\":\r\n"
    );
    socket.write_all(head.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buffer = [0u8; 4096];
        while !String::from_utf8_lossy(&answer).contains("request_body_timeout") {
            let n = socket.read(&mut buffer).await.expect("read");
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buffer[..n]);
        }
    })
    .await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(read.is_ok() && answer.starts_with("HTTP/1.1 408"), "{answer}");

    let long = format!("{}\n", "x".repeat(9 * 1024 * 1024));
    import_raw(&server, long, "application/x-ndjson").await.assert_error(413, "payload_too_large");
}

/// One memory line with a given embedding, of the shape `GET /export` writes.
fn memory_line(index: usize, embedding: &[f32]) -> Value {
    let text = format!("Fact number {index} about the user's collection of {} stamps", index % 97);
    json!({
        "type": "memory", "id": uuid::Uuid::now_v7(), "user_id": "erin", "agent_id": null, "run_id": null,
        "memory": text, "hash": mem0_core::types::memory_hash(&text), "metadata": {"n": index},
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z", "source_type": "imported",
        "confidence": 0.7, "embedding": embedding,
    })
}

#[tokio::test]
async fn ten_thousand_memories_go_out_and_back_in_pages() {
    const COUNT: usize = 10_000;
    let server = TestServer::start().await;
    let header = export(&server, "user_id=erin&embeddings=true").await[0].clone();
    let dimension = header["dimension"].as_u64().expect("dimension") as usize;
    let mut embedding = vec![0.0f32; dimension];
    embedding[0] = 1.0;
    let mut lines = vec![header];
    lines.extend((0..COUNT).map(|index| memory_line(index, &embedding)));
    lines.push(json!({"type": "end", "count": COUNT}));
    let report = import(&server, &lines).await;
    assert_eq!((report.body["imported"].clone(), report.body["failed"].clone()), (json!(COUNT), json!(0)));

    // The export arrives in parts (a page per part), not as one buffered body.
    let response =
        server.client.get(format!("{}/export?user_id=erin&embeddings=true", server.base)).send().await.expect("export");
    let mut response = response;
    let mut parts = 0usize;
    let mut body = Vec::new();
    while let Some(part) = response.chunk().await.expect("part") {
        parts += 1;
        body.extend_from_slice(&part);
    }
    let text = String::from_utf8(body).expect("utf-8");
    let exported: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).expect("line")).collect();
    assert_eq!(memories(&exported).len(), COUNT);
    assert!(parts >= COUNT / 200, "{parts} parts for {COUNT} memories");
    let ids: std::collections::HashSet<&str> =
        exported[1..=COUNT].iter().filter_map(|line| line["id"].as_str()).collect();
    assert_eq!(ids.len(), COUNT, "every memory once");
}

/// Two clients sending one file at once (a retry while the first is still running): each memory
/// is stored once, and neither import fails.
#[tokio::test]
async fn concurrent_imports_of_one_file_store_each_memory_once() {
    for kind in [StoreKind::Sqlite, StoreKind::Postgres] {
        let server = TestServer::start_on(kind, test_settings(), local_embedder().await).await;
        let header = export(&server, "user_id=erin&embeddings=true").await[0].clone();
        let dimension = header["dimension"].as_u64().expect("dimension") as usize;
        let mut embedding = vec![0.0f32; dimension];
        embedding[1] = 1.0;
        let mut lines = vec![header];
        lines.extend((0..1_000).map(|index| memory_line(index, &embedding)));
        lines.push(json!({"type": "end", "count": 1_000}));
        let (first, second) = tokio::join!(import(&server, &lines), import(&server, &lines));
        for reply in [&first, &second] {
            assert_eq!(reply.status, 200, "{kind:?}: {}", reply.body);
        }
        let imported = first.body["imported"].as_u64().unwrap_or(0) + second.body["imported"].as_u64().unwrap_or(0);
        let failed = first.body["failed"].as_u64().unwrap_or(0) + second.body["failed"].as_u64().unwrap_or(0);
        assert_eq!((imported, failed), (1_000, 0), "{kind:?}: {} / {}", first.body, second.body);
        assert_eq!(memories(&export(&server, "user_id=erin").await).len(), 1_000);
    }
}
