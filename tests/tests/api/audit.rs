//! The audit trail: every read path (get, listing, search hit, history) and every change (add,
//! update, delete, delete of a scope, reset) leaves one entry per memory with the credential and
//! the request id; write-policy decisions are entries too; `GET /audit` filters by memory,
//! principal, action and time and pages; nothing of a memory's text is in it; it can be switched
//! off. Credentials and tenants: `security::audit_trail_names_the_credential_and_stays_in_its_tenant`.

use std::collections::HashMap;

use mem0_core::policy::{Action, PolicyConfig, RuleConfig};
use mem0_http_tests::{local_embedder, test_settings, TestServer};
use serde_json::{json, Value};

/// The whole audit trail, newest first (at most 500 entries).
async fn audit(server: &TestServer, query: &str) -> Vec<Value> {
    server.flush_audit().await;
    let reply = server.get(&format!("/audit?limit=500&{query}")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["results"].as_array().expect("results").clone()
}

/// How many entries of each action.
fn counts(entries: &[Value]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for entry in entries {
        *counts.entry(entry["action"].as_str().expect("action").to_owned()).or_default() += 1;
    }
    counts
}

fn about<'a>(entries: &'a [Value], memory_id: &str) -> Vec<&'a str> {
    entries
        .iter()
        .filter(|entry| entry["memory_id"] == memory_id)
        .map(|entry| entry["action"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn every_read_and_change_leaves_an_entry_per_memory() {
    let server = TestServer::start().await;
    let before_anything = chrono::Utc::now();
    let ids = server.add_texts("alice", &["Alice drinks oolong tea", "Alice keeps bees in Lyon"], json!({})).await;
    let (tea, bees) = (&ids[0], &ids[1]);

    let got = server.get(&format!("/memories/{tea}")).await;
    assert_eq!(got.status, 200, "{}", got.body);
    let get_request_id = got.headers["x-request-id"].to_str().expect("request id").to_owned();
    assert_eq!(server.get("/memories?user_id=alice").await.status, 200);
    let found = server.post("/search", json!({"query": "tea", "user_id": "alice", "threshold": 0.0})).await;
    assert_eq!(found.status, 200, "{}", found.body);
    let hits = found.body["results"].as_array().expect("hits").len();
    assert_eq!(hits, 2, "both memories are hits at threshold 0: {}", found.body);
    assert_eq!(server.get(&format!("/memories/{bees}/history")).await.status, 200);
    assert_eq!(server.put(&format!("/memories/{tea}"), json!({"text": "Alice drinks green tea"})).await.status, 200);
    assert_eq!(server.delete(&format!("/memories/{bees}")).await.status, 200);
    let bob = server.add_texts("bob", &["Bob plays the oboe"], json!({})).await;
    assert_eq!(server.delete("/memories?user_id=bob").await.status, 200);
    // Reads that find nothing the caller may see record nothing.
    assert_eq!(server.get(&format!("/memories/{bees}")).await.status, 404);

    let entries = audit(&server, "").await;
    let by_action = counts(&entries);
    let expected: HashMap<String, usize> =
        [("add", 3), ("get", 1), ("list", 2), ("search_hit", 2), ("history", 1), ("update", 1), ("delete", 2)]
            .into_iter()
            .map(|(action, count)| (action.to_owned(), count))
            .collect();
    assert_eq!(by_action, expected, "{entries:#?}");
    assert_eq!(about(&entries, tea), ["update", "search_hit", "list", "get", "add"], "newest first");
    assert_eq!(about(&entries, bees), ["delete", "history", "search_hit", "list", "add"]);
    assert_eq!(about(&entries, &bob[0]), ["delete", "add"]);
    for entry in &entries {
        assert_eq!(entry["principal_id"], "local", "{entry}");
        assert_eq!(entry["tenant"], "default", "{entry}");
        assert!(entry["request_id"].as_str().is_some_and(|id| !id.is_empty()), "{entry}");
    }
    let get_entry = entries.iter().find(|entry| entry["action"] == "get").expect("get entry");
    assert_eq!(get_entry["request_id"], get_request_id.as_str(), "the entry names its request");
    let ids: Vec<i64> = entries.iter().map(|entry| entry["id"].as_i64().expect("id")).collect();
    assert!(ids.windows(2).all(|pair| pair[0] > pair[1]), "newest first: {ids:?}");
    let text = serde_json::to_string(&entries).expect("json");
    for secret in ["oolong", "bees", "oboe", "tea"] {
        assert!(!text.contains(secret), "no memory text or query in the audit: {secret}");
    }

    // Filters: memory, actions, time, and pages.
    let only_tea = audit(&server, &format!("memory_id={tea}")).await;
    assert_eq!(only_tea.len(), 5, "{only_tea:#?}");
    let reads = audit(&server, "action=get,search_hit").await;
    assert_eq!(counts(&reads), HashMap::from([("get".to_owned(), 1), ("search_hit".to_owned(), 2)]));
    let since = (before_anything - chrono::Duration::hours(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    assert!(audit(&server, &format!("until={since}")).await.is_empty(), "nothing before the test began");
    assert_eq!(audit(&server, &format!("since={since}")).await.len(), entries.len());
    let mut paged = Vec::new();
    let mut query = "/audit?limit=4".to_owned();
    loop {
        let page = server.get(&query).await;
        assert_eq!(page.status, 200, "{}", page.body);
        paged.extend(page.body["results"].as_array().expect("results").iter().map(|entry| entry["id"].clone()));
        match page.body["next"].as_i64() {
            Some(next) => query = format!("/audit?limit=4&before={next}"),
            None => break,
        }
    }
    let all_ids: Vec<Value> = entries.iter().map(|entry| entry["id"].clone()).collect();
    assert_eq!(paged, all_ids, "pages cover the trail once, in order");

    // A reset is an entry of its own, and the trail survives it.
    assert_eq!(server.post("/reset", json!({})).await.status, 200);
    let after = audit(&server, "").await;
    assert_eq!(after[0]["action"], "reset", "{:#?}", after[0]);
    assert!(after[0]["memory_id"].is_null());
    assert_eq!(after.len(), entries.len() + 1);

    for (query, field) in [
        ("action=read", "action"),
        ("memory_id=nope", "memory_id"),
        ("since=yesterday", "since"),
        ("until=2026-13-01", "until"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
    ] {
        let reply = server.get(&format!("/audit?{query}")).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.body);
        assert_eq!(reply.body["details"]["field"], field, "{query}: {}", reply.body);
    }
}

#[tokio::test]
async fn write_policy_decisions_are_entries_naming_rule_and_field() {
    let mut settings = test_settings();
    settings.memory.policy = PolicyConfig {
        rules: vec![RuleConfig {
            name: "codenames".into(),
            pattern: None,
            terms: vec!["Project Falcon".into()],
            action: Action::Reject,
        }],
        ..PolicyConfig::default()
    };
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let redacted = server
        .post(
            "/memories",
            json!({"messages": [
                {"role": "user", "content": "I like hiking"},
                {"role": "user", "content": "The router password is Tr0ub4dor&3"}
            ], "user_id": "pat", "infer": false}),
        )
        .await;
    assert_eq!(redacted.status, 200, "{}", redacted.body);
    let refused = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "Project Falcon ships in May"}], "user_id": "pat", "infer": false}),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    let update = server
        .put(
            &format!("/memories/{}", redacted.body["results"][0]["id"].as_str().expect("id")),
            json!({"text": "Project Falcon is secret"}),
        )
        .await;
    assert_eq!(update.status, 400, "{}", update.body);

    let entries = audit(&server, "action=policy_redact,policy_reject").await;
    let details: Vec<(&str, &str)> = entries
        .iter()
        .map(|entry| (entry["action"].as_str().unwrap(), entry["detail"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(
        details,
        [
            ("policy_reject", "codenames in text"),
            ("policy_reject", "codenames in messages[0].content"),
            ("policy_redact", "secret in messages[1].content"),
        ],
        "{entries:#?}"
    );
    assert!(entries.iter().all(|entry| entry["memory_id"].is_null()));
    let text = serde_json::to_string(&entries).expect("json");
    assert!(!text.contains("Tr0ub4dor") && !text.contains("Falcon"), "{text}");
    // The refused call stored nothing, so it added nothing to the trail either.
    assert_eq!(counts(&audit(&server, "action=add").await), HashMap::from([("add".to_owned(), 2)]));
}

#[tokio::test]
async fn a_disabled_trail_records_nothing() {
    let mut settings = test_settings();
    settings.audit.enabled = false;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let ids = server.add_texts("alice", &["Alice drinks oolong tea"], json!({})).await;
    assert_eq!(server.get(&format!("/memories/{}", ids[0])).await.status, 200);
    assert!(audit(&server, "").await.is_empty());
}
