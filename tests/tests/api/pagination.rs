//! Listing: deterministic order, bounded page sizes, cursors that neither skip nor repeat rows while
//! rows are being added.

use std::collections::HashSet;

use mem0_http_tests::TestServer;
use serde_json::json;

async fn page(server: &TestServer, query: &str) -> (Vec<String>, Option<String>) {
    let reply = server.get(&format!("/memories?{query}")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let ids = reply.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|item| item["id"].as_str().expect("id").to_owned())
        .collect();
    (ids, reply.body["next"].as_str().map(str::to_owned))
}

#[tokio::test]
async fn pages_cover_every_row_once_while_rows_are_added() {
    let server = TestServer::start().await;
    let texts: Vec<String> = (0..45).map(|i| format!("memory number {i}")).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let original: HashSet<String> = server.add_texts("u", &refs, json!({})).await.into_iter().collect();
    assert_eq!(original.len(), 45);

    let mut seen = Vec::new();
    let (ids, mut next) = page(&server, "user_id=u&page_size=10").await;
    seen.extend(ids);
    let mut added_during = 0;
    while let Some(cursor) = next {
        // Concurrent writers add newer rows; they belong before the cursor, never inside later pages.
        server.add_texts("u", &[&format!("added while paging {added_during}")], json!({})).await;
        added_during += 1;
        let (ids, following) = page(&server, &format!("user_id=u&page_size=10&cursor={cursor}")).await;
        seen.extend(ids);
        next = following;
    }
    let unique: HashSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no row appears twice");
    assert_eq!(unique, original, "every original row appears, none added during paging");
    assert_eq!(added_during, 4);
}

#[tokio::test]
async fn order_is_newest_first_and_stable() {
    let server = TestServer::start().await;
    for (text, at) in
        [("first", "2024-01-01T00:00:00Z"), ("second", "2024-01-02T00:00:00Z"), ("third", "2024-01-03T00:00:00Z")]
    {
        let reply = server
            .post("/memories", json!({"messages": [{"role": "user", "content": text}], "user_id": "u", "infer": false, "timestamp": at}))
            .await;
        assert_eq!(reply.status, 200);
    }
    // Same created_at: tie broken by id, still deterministic across calls.
    server.add_texts("u", &["tie a", "tie b", "tie c"], json!({})).await;
    let first = server.list_texts("user_id=u").await;
    assert_eq!(&first[3..], ["third", "second", "first"]);
    assert_eq!(first, server.list_texts("user_id=u").await);
    let (ids, _) = page(&server, "user_id=u&page_size=6").await;
    let (one, next) = page(&server, "user_id=u&page_size=4").await;
    let (two, last) = page(&server, &format!("user_id=u&page_size=4&cursor={}", next.expect("next"))).await;
    assert!(last.is_none());
    assert_eq!([one, two].concat(), ids);
}

#[tokio::test]
async fn page_size_and_cursor_are_validated() {
    let server = TestServer::start().await;
    server.add_texts("u", &["a"], json!({})).await;
    for bad in ["page_size=0", "page_size=1001", "top_k=0", "page_size=-1", "page_size=ten", "show_expired=maybe"] {
        let reply = server.get(&format!("/memories?user_id=u&{bad}")).await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.body);
    }
    server.get("/memories?user_id=u&cursor=garbage").await.assert_error(400, "validation_failed");
    let (ids, next) = page(&server, "user_id=u&page_size=1000").await;
    assert_eq!((ids.len(), next), (1, None));
    let (ids, _) = page(&server, "user_id=u&top_k=1").await;
    assert_eq!(ids.len(), 1, "top_k is accepted as page_size for Mem0 clients");
}

#[tokio::test]
async fn unscoped_listing_lists_the_tenant_for_admins() {
    let server = TestServer::start().await;
    server.add_texts("a", &["from a"], json!({})).await;
    server.add_texts("b", &["from b"], json!({})).await;
    let mut all = server.list_texts("").await;
    all.sort();
    assert_eq!(all, ["from a", "from b"]);
}
