//! Decay by use: a memory read by id or returned by a search grows stronger in later searches that
//! ask for decay, one nobody read for long fades; listing is not a read; decay changes nothing
//! unless a request or the tenant's configuration asks for it. Both stores' read log:
//! `store_conformance::*::reads`.

use mem0_http_tests::{local_embedder, test_settings, TestServer};
use serde_json::{json, Value};

async fn add_old(server: &TestServer, text: &str) -> String {
    let reply = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": text}], "user_id": "ann", "infer": false,
                "timestamp": "2025-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["results"][0]["id"].as_str().expect("id").to_owned()
}

/// (memory, decay factor) of a search for tea, best first.
async fn tea(server: &TestServer, decay: Option<bool>) -> Vec<(String, Option<f64>)> {
    let mut body = json!({"query": "which tea does Ann like", "user_id": "ann", "threshold": 0.0, "explain": true});
    if let Some(decay) = decay {
        body["decay"] = json!(decay);
    }
    let reply = server.post("/search", body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|item: &Value| (item["memory"].as_str().unwrap().to_owned(), item["explain"]["decay_factor"].as_f64()))
        .collect()
}

#[tokio::test]
async fn reads_keep_memories_strong_and_idle_ones_fade() {
    let server = TestServer::start().await;
    let green = add_old(&server, "Ann likes green tea").await;
    add_old(&server, "Ann likes black tea").await;
    // A listing is not a read.
    assert_eq!(server.get("/memories?user_id=ann").await.status, 200);
    assert_eq!(server.get(&format!("/memories/{green}")).await.status, 200);
    server.flush_reads().await;

    let decayed = tea(&server, Some(true)).await;
    assert_eq!(decayed[0].0, "Ann likes green tea", "{decayed:?}");
    let green_factor = decayed[0].1.expect("factor");
    let black_factor = decayed[1].1.expect("factor");
    assert!(green_factor > 1.45, "read just now: {decayed:?}");
    assert!(black_factor < 0.35, "stored almost two years ago, never read: {decayed:?}");

    // That search read both: now both are strong.
    server.flush_reads().await;
    let after = tea(&server, Some(true)).await;
    assert!(after.iter().all(|(_, factor)| factor.is_some_and(|factor| factor > 1.45)), "{after:?}");
    // Off unless asked for.
    let plain = tea(&server, None).await;
    assert!(plain.iter().all(|(_, factor)| factor.is_none()), "{plain:?}");
}

#[tokio::test]
async fn a_tenant_can_have_decay_by_default() {
    let mut settings = test_settings();
    settings.memory.decay.tenants = vec!["default".to_owned()];
    let server = TestServer::start_with(settings, local_embedder().await).await;
    add_old(&server, "Ann likes green tea").await;
    assert!(tea(&server, None).await.iter().all(|(_, factor)| factor.is_some()), "on for the tenant");
    assert!(tea(&server, Some(false)).await.iter().all(|(_, factor)| factor.is_none()), "a request says no");
}
