//! Current truth over an append-only history, through the API: memories of one state key form a
//! chain by event time whatever the arrival order; search and listing show the current value
//! unless asked for the chain; people pin and retire; deleting the current value brings back the
//! one before; the model proposes keys and sees them on existing memories. The rules themselves:
//! `mem0_core::state` unit tests; both stores: `store_conformance::*::state_chains`.

use std::collections::HashMap;

use mem0_http_tests::{local_embedder, settings_with_fake_llm, test_settings, texts, NotingEmbedder, TestServer};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn say(server: &TestServer, text: &str, event_time: &str) -> String {
    let reply = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": text}], "user_id": "ann", "infer": false,
                "state_key": "user.home_city", "event_time": event_time}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["results"][0]["id"].as_str().expect("id").to_owned()
}

/// `memory → (status, superseded_by memory)` of the whole chain.
async fn chain(server: &TestServer) -> HashMap<String, (String, Option<String>)> {
    let reply = server.get("/memories?user_id=ann&include_superseded=true").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let items = reply.body["results"].as_array().expect("results").clone();
    let text_of = |id: &Value| {
        items.iter().find(|item| &item["id"] == id).map(|item| item["memory"].as_str().unwrap().to_owned())
    };
    items
        .iter()
        .map(|item| {
            (
                item["memory"].as_str().unwrap().to_owned(),
                (item["status"].as_str().unwrap().to_owned(), text_of(&item["superseded_by"])),
            )
        })
        .collect()
}

fn entry(status: &str, by: Option<&str>) -> (String, Option<String>) {
    (status.to_owned(), by.map(str::to_owned))
}

#[tokio::test]
async fn the_newest_value_is_current_and_the_chain_stays_readable() {
    let server = TestServer::start().await;
    let new_york = say(&server, "I live in New York", "2026-01-05T00:00:00Z").await;
    let san_francisco = say(&server, "I live in San Francisco", "2026-03-01T00:00:00Z").await;
    // Told late, happened in between.
    let boston = say(&server, "I live in Boston", "2026-02-01T00:00:00Z").await;
    server.add_texts("ann", &["I like sourdough bread"], json!({})).await;

    let found =
        server.search_texts(json!({"query": "where does the user live", "user_id": "ann", "threshold": 0.0})).await;
    assert_eq!(found[0], "I live in San Francisco", "{found:?}");
    assert!(!found.iter().any(|text| text.contains("New York") || text.contains("Boston")), "{found:?}");
    for mode in ["dense", "keyword"] {
        let found = server
            .search_texts(
                json!({"query": "live York Boston Francisco", "user_id": "ann", "threshold": 0.0, "mode": mode}),
            )
            .await;
        assert!(found.contains(&"I live in San Francisco".to_owned()), "{mode}: {found:?}");
        assert!(!found.iter().any(|text| text.contains("New York") || text.contains("Boston")), "{mode}: {found:?}");
    }
    let mut listed = server.list_texts("user_id=ann").await;
    listed.sort();
    assert_eq!(listed, ["I like sourdough bread", "I live in San Francisco"]);

    let all = server
        .post(
            "/search",
            json!({"query": "where does the user live", "user_id": "ann", "threshold": 0.0, "include_superseded": true}),
        )
        .await;
    assert_eq!(texts(&all.body["results"]).len(), 4, "{}", all.body);
    assert_eq!(
        chain(&server).await,
        HashMap::from([
            ("I live in New York".to_owned(), entry("superseded", Some("I live in Boston"))),
            ("I live in Boston".to_owned(), entry("superseded", Some("I live in San Francisco"))),
            ("I live in San Francisco".to_owned(), entry("active", None)),
            ("I like sourdough bread".to_owned(), entry("active", None)),
        ])
    );
    let old = server.get(&format!("/memories/{new_york}")).await;
    assert_eq!(old.status, 200, "a superseded memory is still readable by id");
    assert_eq!(old.body["valid_to"], "2026-02-01T00:00:00Z", "{}", old.body);
    assert_eq!(old.body["event_time"], "2026-01-05T00:00:00Z");
    let history = server.get(&format!("/memories/{new_york}/history")).await;
    let events: Vec<&str> =
        history.body.as_array().expect("history").iter().map(|entry| entry["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["ADD"], "the history stays append-only");

    // People have the last word.
    let pinned = server.put(&format!("/memories/{boston}"), json!({"status": "pinned"})).await;
    assert_eq!(pinned.body["result"]["status"], "pinned", "{}", pinned.body);
    assert_eq!(chain(&server).await["I live in San Francisco"], entry("superseded", Some("I live in Boston")));
    assert_eq!(
        server.search_texts(json!({"query": "where does the user live", "user_id": "ann"})).await[0],
        "I live in Boston"
    );
    let retired = server.put(&format!("/memories/{boston}"), json!({"status": "retired"})).await;
    assert_eq!(retired.body["result"]["status"], "retired", "{}", retired.body);
    assert_eq!(chain(&server).await["I live in San Francisco"], entry("active", None));
    assert_eq!(chain(&server).await["I live in New York"], entry("superseded", Some("I live in San Francisco")));
    // Deleting the current value brings back the one before it.
    assert_eq!(server.delete(&format!("/memories/{san_francisco}")).await.status, 200);
    assert_eq!(chain(&server).await["I live in New York"], entry("active", None));
    // Taking a memory out of its chain.
    let unkeyed = server.put(&format!("/memories/{new_york}"), json!({"state_key": null})).await;
    assert!(unkeyed.body["result"].get("state_key").is_none(), "{}", unkeyed.body);

    for (body, field) in [
        (json!({"status": "superseded"}), "status"),
        (json!({"status": "gone"}), "status"),
        (json!({"state_key": "home city"}), "state_key"),
        (json!({"event_time": "last year"}), "event_time"),
    ] {
        let reply = server.put(&format!("/memories/{new_york}"), body.clone()).await;
        assert_eq!((reply.status, &reply.body["details"]["field"]), (400, &json!(field)), "{body}: {}", reply.body);
    }
    let reply = server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "x"}], "user_id": "ann", "infer": false, "state_key": ""}),
        )
        .await;
    assert_eq!((reply.status, &reply.body["details"]["field"]), (400, &json!("state_key")), "{}", reply.body);
}

#[tokio::test]
async fn the_model_proposes_keys_and_sees_them_on_existing_memories() {
    let llm = MockServer::start().await;
    let reply = |text: &str| {
        ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": json!({"facts": [
                {"text": text, "attributed_to": "user", "entities": [], "state_key": "user.employer"}
            ]}).to_string()}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}
        }))
    };
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(reply("User works at Siemens"))
        .up_to_n_times(1)
        .mount(&llm)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(reply("User works at Bosch"))
        .mount(&llm)
        .await;
    let settings = settings_with_fake_llm(&llm.uri());
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let turn = |text: &str, at: &str| json!({"messages": [{"role": "user", "content": text}], "user_id": "ann", "timestamp": at});
    assert_eq!(server.post("/memories", turn("I work at Siemens", "2026-01-10T09:00:00Z")).await.status, 200);
    assert_eq!(server.post("/memories", turn("I switched to Bosch", "2026-04-02T09:00:00Z")).await.status, 200);
    assert_eq!(
        chain_of(&server).await,
        [
            ("User works at Bosch".to_owned(), "active".to_owned()),
            ("User works at Siemens".to_owned(), "superseded".to_owned())
        ]
    );
    let requests = llm.received_requests().await.expect("recorded");
    let second = String::from_utf8_lossy(&requests[1].body).to_string();
    assert!(second.contains("{user.employer} User works at Siemens"), "the model sees the key: {second}");
}

async fn chain_of(server: &TestServer) -> Vec<(String, String)> {
    let reply = server.get("/memories?user_id=ann&include_superseded=true").await;
    let mut out: Vec<(String, String)> = reply.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|item| (item["memory"].as_str().unwrap().to_owned(), item["status"].as_str().unwrap().to_owned()))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn time_in_the_query_reaches_back_into_the_chain() {
    let server = TestServer::start().await;
    say(&server, "I live in New York", "2024-06-01T00:00:00Z").await;
    say(&server, "I live in San Francisco", "2026-03-01T00:00:00Z").await;
    let ask = |query: &str| {
        json!({"query": query, "user_id": "ann", "threshold": 0.0, "explain": true,
            "reference_time": "2026-12-01T10:00:00Z"})
    };
    // Last year (2025) New York was true: it ended in March 2026.
    let last_year = server.post("/search", ask("Where did I live last year?")).await;
    assert_eq!(last_year.status, 200, "{}", last_year.body);
    assert_eq!(texts(&last_year.body["results"]), ["I live in New York"], "{}", last_year.body);
    assert_eq!(last_year.body["temporal"]["cue"], "last year");
    assert_eq!(last_year.body["temporal"]["from"], "2025-01-01T00:00:00Z");
    let chinese = server.post("/search", ask("我去年住在哪里")).await;
    assert_eq!(texts(&chinese.body["results"]), ["I live in New York"], "{}", chinese.body);
    // This year both were true at some moment.
    let mut this_year = texts(&server.post("/search", ask("Where did I live this year?")).await.body["results"]);
    this_year.sort();
    assert_eq!(this_year, ["I live in New York", "I live in San Francisco"]);
    // Yesterday the current value was true.
    let yesterday = server.post("/search", ask("Where did I live yesterday?")).await;
    assert_eq!(texts(&yesterday.body["results"]), ["I live in San Francisco"], "{}", yesterday.body);
    // A range nothing matches: the search runs without it and says so.
    let empty = server.post("/search", ask("Where did I live in 2020?")).await;
    assert_eq!(texts(&empty.body["results"]), ["I live in San Francisco"], "{}", empty.body);
    assert!(empty.body["warnings"][0].as_str().is_some_and(|warning| warning.contains("in 2020")), "{}", empty.body);
    // A preference weighs by age and shows in explain; "the first time" looks at past values too.
    let now = server.post("/search", ask("Where do I live currently?")).await;
    assert_eq!(now.body["temporal"]["preference"], "recent", "{}", now.body);
    assert!(now.body["results"][0]["explain"]["time_factor"].as_f64().is_some(), "{}", now.body);
    let first = server.post("/search", ask("Where did I live at first?")).await;
    assert_eq!(texts(&first.body["results"])[0], "I live in New York", "{}", first.body);
    // Off on request.
    let off = server
        .post(
            "/search",
            json!({"query": "Where did I live last year?", "user_id": "ann", "threshold": 0.0, "temporal": false}),
        )
        .await;
    assert_eq!(texts(&off.body["results"]), ["I live in San Francisco"], "{}", off.body);
    assert!(off.body.get("temporal").is_none());
    let bad = server.post("/search", json!({"query": "x", "user_id": "ann", "reference_time": "tomorrow"})).await;
    assert_eq!((bad.status, &bad.body["details"]["field"]), (400, &json!("reference_time")), "{}", bad.body);
}

/// Two values of one key at the same event time from different sources cannot be ordered by
/// time: both stay visible as `conflict`, and search puts the more trusted one first even when
/// the other matches the query's words better.
#[tokio::test]
async fn conflicting_values_are_both_shown_the_more_trusted_first() {
    let server = TestServer::start().await;
    let value = |text: &str, source_type: &str, confidence: f64| {
        json!({"messages": [{"role": "user", "content": text}], "user_id": "ann", "infer": false,
            "state_key": "user.home_city", "event_time": "2026-04-01T00:00:00Z",
            "source_type": source_type, "confidence": confidence})
    };
    let guess = server.post("/memories", value("The user lives in Cambridge", "agent_inferred", 0.55)).await;
    assert_eq!(guess.status, 200, "{}", guess.body);
    let said = server.post("/memories", value("I moved to Boston", "user_stated", 0.9)).await;
    assert_eq!(said.status, 200, "{}", said.body);
    server.add_texts("ann", &["I like sourdough bread"], json!({})).await;

    let reply = server
        .post(
            "/search",
            json!({"query": "where does the user live", "user_id": "ann", "threshold": 0.0, "explain": true}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let results = reply.body["results"].as_array().expect("results");
    let conflicting: Vec<(&str, &str)> = results
        .iter()
        .filter(|item| item["state_key"] == "user.home_city")
        .map(|item| (item["memory"].as_str().unwrap(), item["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        conflicting,
        [("I moved to Boston", "conflict"), ("The user lives in Cambridge", "conflict")],
        "{}",
        reply.body
    );
    // The trusted value took the better place: the guess matched the query's words better.
    let score_of = |text: &str| {
        results.iter().find(|item| item["memory"] == text).and_then(|item| item["score"].as_f64()).expect("score")
    };
    assert!(score_of("The user lives in Cambridge") > score_of("I moved to Boston"), "{}", reply.body);
    // A person settles it: the pinned value is current, the others superseded by it.
    let settled = server
        .put(&format!("/memories/{}", said.body["results"][0]["id"].as_str().expect("id")), json!({"status": "pinned"}))
        .await;
    assert_eq!(settled.status, 200, "{}", settled.body);
    assert_eq!(
        server.search_texts(json!({"query": "where does the user live", "user_id": "ann", "threshold": 0.0})).await,
        ["I moved to Boston", "I like sourdough bread"]
    );
}

/// Sixteen writers of one key at once (arrival order unrelated to event order): one current
/// value, the newest by event time, and every other value superseded by its successor in time.
#[tokio::test]
async fn concurrent_writers_of_one_key_leave_one_consistent_chain() {
    let server = TestServer::start().await;
    let writes = (0..16_u32).map(|index| {
        // Event days in a scrambled order: 7, 14, 5, 12, 3, ...
        let day = 1 + (index * 7) % 16;
        let body = json!({"messages": [{"role": "user", "content": format!("I live in city number {day}")}],
            "user_id": "ann", "infer": false, "state_key": "user.home_city",
            "event_time": format!("2026-03-{day:02}T00:00:00Z")});
        let (client, base) = (server.client.clone(), server.base.clone());
        async move {
            let reply = client.post(format!("{base}/memories")).json(&body).send().await.expect("send");
            assert_eq!(reply.status(), 200);
        }
    });
    futures::future::join_all(writes).await;

    let reply = server.get("/memories?user_id=ann&include_superseded=true&page_size=100").await;
    let items = reply.body["results"].as_array().expect("results").clone();
    assert_eq!(items.len(), 16, "{}", reply.body);
    let day_of = |item: &Value| item["event_time"].as_str().expect("event time")[8..10].parse::<u32>().expect("day");
    let by_id: HashMap<&str, &Value> = items.iter().map(|item| (item["id"].as_str().unwrap(), item)).collect();
    let active: Vec<u32> = items.iter().filter(|item| item["status"] == "active").map(day_of).collect();
    assert_eq!(active, [16], "one current value, the newest event: {}", reply.body);
    for item in &items {
        let day = day_of(item);
        if day == 16 {
            continue;
        }
        assert_eq!(item["status"], "superseded", "{item}");
        let successor = by_id[item["superseded_by"].as_str().expect("successor")];
        assert_eq!(day_of(successor), day + 1, "superseded by the next value in time: {item}");
        assert_eq!(item["valid_to"], successor["event_time"], "{item}");
    }
    assert_eq!(
        server.search_texts(json!({"query": "where does the user live", "user_id": "ann", "threshold": 0.0})).await,
        ["I live in city number 16"]
    );
}

/// A fact the model says replaces an existing memory (`replaces`) supersedes it, although
/// neither has a state key: the old memory joins the new one's chain (`chain.<its id>`), leaves
/// default search and listing, and stays readable with its history.
#[tokio::test]
async fn a_fact_that_replaces_a_memory_supersedes_it_without_a_key() {
    let llm = MockServer::start().await;
    let reply = |fact: Value| {
        ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": json!({"facts": [fact]}).to_string()},
                "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}
        }))
    };
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(reply(json!({"text": "User's favourite band is Low", "attributed_to": "user"})))
        .up_to_n_times(1)
        .mount(&llm)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(reply(
            json!({"text": "User's favourite band is now Wilco", "attributed_to": "user", "replaces": ["1"]}),
        ))
        .mount(&llm)
        .await;
    let server = TestServer::start_with(settings_with_fake_llm(&llm.uri()), local_embedder().await).await;
    let turn = |text: &str| json!({"messages": [{"role": "user", "content": text}], "user_id": "ann"});
    let first = server.post("/memories", turn("My favourite band is Low")).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let low = first.body["results"][0]["id"].as_str().expect("id").to_owned();
    let second = server.post("/memories", turn("These days it's Wilco, actually")).await;
    assert_eq!(second.status, 200, "{}", second.body);
    let wilco = second.body["results"][0]["id"].as_str().expect("id").to_owned();

    assert_eq!(
        chain_of(&server).await,
        [
            ("User's favourite band is Low".to_owned(), "superseded".to_owned()),
            ("User's favourite band is now Wilco".to_owned(), "active".to_owned())
        ]
    );
    let old = server.get(&format!("/memories/{low}")).await;
    assert_eq!(old.body["superseded_by"], wilco.as_str(), "{}", old.body);
    let key = old.body["state_key"].as_str().expect("joined a chain");
    assert!(key.starts_with("chain."), "{key}");
    let new = server.get(&format!("/memories/{wilco}")).await;
    assert_eq!(new.body["state_key"], key, "{}", new.body);
    assert_eq!(new.body["linked_memory_ids"], json!([low]), "{}", new.body);
    assert_eq!(
        server.search_texts(json!({"query": "favourite band", "user_id": "ann", "threshold": 0.0})).await,
        ["User's favourite band is now Wilco"]
    );
    let history = server.get(&format!("/memories/{low}/history")).await;
    let events: Vec<&str> =
        history.body.as_array().expect("history").iter().map(|entry| entry["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["ADD"], "joining a chain is not an edit of the text");
}

/// A question about an attribute finds its current value by the key's meaning, even when the
/// value's words do not match: "where does the user work?" → the `user.employer` value, not "I
/// volunteer at the food bank"; shown as `explain.key_match`. Questions about nothing keyed
/// are untouched.
#[tokio::test]
async fn a_question_about_an_attribute_finds_the_value_of_its_key() {
    let server = TestServer::start().await;
    let keyed = |text: &str, key: &str| json!({"messages": [{"role": "user", "content": text}], "user_id": "ann", "infer": false, "state_key": key});
    for (text, key) in [("My employer is Wayne Foods", "user.employer"), ("I drive a Volvo V60", "user.car")] {
        assert_eq!(server.post("/memories", keyed(text, key)).await.status, 200);
    }
    server.add_texts("ann", &["I volunteer at the food bank", "My favourite film is Spirited Away"], json!({})).await;
    let ask = |query: &str| json!({"query": query, "user_id": "ann", "threshold": 0.0, "explain": true});
    let reply = server.post("/search", ask("Where does the user work?")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let top = &reply.body["results"][0];
    assert_eq!(top["memory"], "My employer is Wayne Foods", "{}", reply.body);
    let similarity = top["explain"]["key_match"].as_f64().expect("key_match");
    assert!(top["explain"]["semantic"].as_f64().expect("semantic") >= similarity - 1e-6, "{top}");
    let others = reply.body["results"].as_array().expect("results");
    assert!(others[1..].iter().all(|item| item["explain"].get("key_match").is_none()), "{}", reply.body);
    // Nothing keyed is asked for: no key match anywhere.
    let films = server.post("/search", ask("Which films does the user like?")).await;
    assert_eq!(films.body["results"][0]["memory"], "My favourite film is Spirited Away", "{}", films.body);
    let results = films.body["results"].as_array().expect("results");
    assert!(results.iter().all(|item| item["explain"].get("key_match").is_none()), "{}", films.body);
}

/// A time range that matches nothing: the search runs again without it, on the query's one
/// embedding, in both modes that embed.
#[tokio::test]
async fn the_fallback_after_an_empty_time_range_embeds_the_query_once() {
    let embedder = NotingEmbedder::new().await;
    let server = TestServer::start_with(test_settings(), embedder.clone()).await;
    say(&server, "I live in San Francisco", "2026-03-01T00:00:00Z").await;
    for mode in ["hybrid", "dense"] {
        let query = format!("where did the user live in 2020, {mode}?");
        let reply = server
            .post(
                "/search",
                json!({"query": query, "user_id": "ann", "threshold": 0.0, "mode": mode,
                    "reference_time": "2026-12-01T10:00:00Z"}),
            )
            .await;
        assert_eq!(texts(&reply.body["results"]), ["I live in San Francisco"], "{}", reply.body);
        assert!(
            reply.body["warnings"][0].as_str().is_some_and(|warning| warning.contains("in 2020")),
            "{}",
            reply.body
        );
        assert_eq!(embedder.times(&query), 1, "{mode}");
    }
}

/// "Before the move" / "after the move": the event is the memory that best matches "the move",
/// and its event time bounds the range; the response names the memory found. An event nothing
/// matches leaves the search unlimited, with a warning.
#[tokio::test]
async fn time_relative_to_an_event_in_the_query() {
    let server = TestServer::start().await;
    say(&server, "I live in New York", "2024-06-01T00:00:00Z").await;
    say(&server, "I live in Boston", "2025-01-01T00:00:00Z").await;
    let moved = say(&server, "I moved to San Francisco", "2026-03-01T00:00:00Z").await;
    server.add_texts("ann", &["I like sourdough bread"], json!({})).await;
    let ask = |query: &str| json!({"query": query, "user_id": "ann", "threshold": 0.0, "explain": true});

    // The value just before, not every earlier one (memories without a key are not limited).
    let before = server.post("/search", ask("Where did the user live before the move?")).await;
    assert_eq!(before.status, 200, "{}", before.body);
    let found = texts(&before.body["results"]);
    assert_eq!(found[0], "I live in Boston", "{}", before.body);
    assert!(!found.iter().any(|text| text.contains("New York") || text.contains("San Francisco")), "{}", before.body);
    assert!(found.contains(&"I like sourdough bread".to_owned()), "{}", before.body);
    assert_eq!(before.body["temporal"]["anchor"]["side"], "before", "{}", before.body);
    assert_eq!(before.body["temporal"]["anchor"]["memory_id"], moved.as_str(), "{}", before.body);
    assert_eq!(before.body["temporal"]["to"], "2026-03-01T00:00:00Z", "{}", before.body);

    let after = server.post("/search", ask("Where did the user live after the move?")).await;
    assert_eq!(texts(&after.body["results"])[0], "I moved to San Francisco", "{}", after.body);
    assert!(
        !texts(&after.body["results"]).iter().any(|text| text.contains("New York") || text.contains("Boston")),
        "{}",
        after.body
    );

    let unknown = server.post("/search", ask("What did the user eat before the quantum chromodynamics exam?")).await;
    assert_eq!(unknown.status, 200, "{}", unknown.body);
    assert!(
        unknown.body["warnings"][0].as_str().is_some_and(|warning| warning.contains("quantum chromodynamics")),
        "{}",
        unknown.body
    );
    assert!(unknown.body["temporal"].get("to").is_none(), "{}", unknown.body);
}

/// Relative to an event, earlier values of a key are left out by the stores, not after the
/// ranking: a search still returns `top_k` results when many values of the key match the query
/// better than anything else.
#[tokio::test]
async fn a_search_relative_to_an_event_still_returns_top_k() {
    let server = TestServer::start().await;
    let cities = ["Oslo", "Rome", "Paris", "Madrid", "Vienna", "Prague", "Dublin", "Lisbon", "Boston"];
    for (index, city) in cities.iter().enumerate() {
        say(&server, &format!("I live in {city}"), &format!("{}-01-01T00:00:00Z", 2010 + index)).await;
    }
    say(&server, "I moved to San Francisco", "2026-03-01T00:00:00Z").await;
    server.add_texts("ann", &["I like sourdough bread", "I play chess", "My dog is called Rex"], json!({})).await;
    // Dense search asks the store for exactly `top_k`; hybrid for a pool of candidates.
    for mode in ["dense", "hybrid"] {
        let reply = server
            .post(
                "/search",
                json!({"query": "Where did the user live before the move?", "user_id": "ann", "threshold": 0.0,
                       "top_k": 4, "mode": mode}),
            )
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let found = texts(&reply.body["results"]);
        assert_eq!(found.len(), 4, "{mode}: {found:?}");
        assert!(found.contains(&"I live in Boston".to_owned()), "{mode}: {found:?}");
        assert!(
            !found.iter().any(|text| text.contains("Lisbon") || text.contains("San Francisco")),
            "{mode}: {found:?}"
        );
        for other in ["I like sourdough bread", "I play chess", "My dog is called Rex"] {
            assert!(found.contains(&other.to_owned()), "{mode}: {found:?}");
        }
    }
}
