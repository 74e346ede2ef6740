//! Fact extraction (`infer=true`) and procedural memory through the real server, the real LLM
//! clients and the real local embedder; only the LLM APIs are fakes (wiremock speaking the
//! OpenAI chat-completions and Anthropic Messages wire formats).

use std::time::{Duration, Instant};

use mem0_core::providers::llm::LlmProvider;
use mem0_http_tests::{local_embedder, test_settings, TestServer};
use mem0_server::config::Settings;
use serde_json::{json, Value};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const LLM_KEY: &str = "sk-llm-secret-key-123";

fn openai_settings(llm: &MockServer) -> Settings {
    let mut settings = test_settings();
    let config = &mut settings.memory.llm;
    config.provider = LlmProvider::Openai;
    config.openai.base_url = Some(format!("{}/v1", llm.uri()));
    config.openai.api_key = Some(LLM_KEY.to_owned().into());
    config.openai.model = "fake-chat".to_owned();
    config.openai.timeout_secs = 2;
    config.openai.retry.base_delay_ms = 10;
    config.openai.retry.max_delay_ms = 2000;
    settings
}

fn chat_reply(content: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "fake-chat",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 812, "completion_tokens": 64, "total_tokens": 876}
    }))
}

fn facts(items: Value) -> String {
    json!({"facts": items}).to_string()
}

async fn start(reply: ResponseTemplate) -> (TestServer, MockServer) {
    let llm = MockServer::start().await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(reply).mount(&llm).await;
    let server = TestServer::start_with(openai_settings(&llm), local_embedder().await).await;
    (server, llm)
}

/// The bodies of the chat requests the fake received, in order.
async fn chat_requests(llm: &MockServer) -> Vec<Value> {
    llm.received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|request| serde_json::from_slice(&request.body).expect("json body"))
        .collect()
}

fn user_prompt(request: &Value) -> String {
    request["messages"][1]["content"].as_str().expect("user prompt").to_owned()
}

fn conversation(user: &str) -> Value {
    json!({
        "messages": [
            {"role": "user", "content": "I just adopted a beagle called Biscuit. Also, I'm allergic to penicillin."},
            {"role": "assistant", "content": "Congratulations on Biscuit! Noted about the penicillin allergy."}
        ],
        "user_id": user,
        "metadata": {"source": "chat"}
    })
}

async fn list(server: &TestServer, user: &str) -> Vec<Value> {
    let reply = server.get(&format!("/memories?user_id={user}")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["results"].as_array().expect("results").clone()
}

#[tokio::test]
async fn extracted_facts_are_stored_with_history_entities_and_found_by_search() {
    let reply = facts(json!([
        {"text": "User adopted a beagle named Biscuit", "attributed_to": "user", "entities": ["Biscuit", "beagle"]},
        {"text": "User is allergic to penicillin", "attributed_to": "user", "linked_memory_ids": [], "entities": ["penicillin"]}
    ]));
    let (server, llm) = start(chat_reply(&reply)).await;
    let added = server.post("/memories", conversation("alice")).await;
    assert_eq!(added.status, 200, "{}", added.body);
    let results = added.body["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "{}", added.body);
    assert!(results.iter().all(|result| result["event"] == "ADD"));
    assert!(added.body.get("warnings").is_none(), "no warnings on success: {}", added.body);

    // Exactly the extracted facts, nothing verbatim.
    let stored = list(&server, "alice").await;
    let mut texts: Vec<&str> = stored.iter().map(|memory| memory["memory"].as_str().expect("text")).collect();
    texts.sort_unstable();
    assert_eq!(texts, ["User adopted a beagle named Biscuit", "User is allergic to penicillin"]);
    let biscuit = stored.iter().find(|memory| memory["memory"] == "User adopted a beagle named Biscuit").expect("fact");
    assert_eq!(biscuit["entities"], json!(["Biscuit", "beagle"]));
    assert_eq!(biscuit["attributed_to"], "user");
    assert_eq!(biscuit["metadata"], json!({"source": "chat"}));
    assert!(biscuit.get("role").is_none(), "extracted facts have no message role");

    let id = biscuit["id"].as_str().expect("id");
    let history = server.get(&format!("/memories/{id}/history")).await;
    assert_eq!(history.body.as_array().map(Vec::len), Some(1), "{}", history.body);
    assert_eq!(history.body[0]["event"], "ADD");
    assert_eq!(history.body[0]["new_memory"], "User adopted a beagle named Biscuit");

    let found = server
        .search_texts(json!({"query": "which medicine must the user avoid?", "user_id": "alice", "top_k": 1}))
        .await;
    assert_eq!(found, ["User is allergic to penicillin"]);

    // What the model was sent: system prompt, then the sections in order; JSON mode; the key.
    let requests = llm.received_requests().await.unwrap_or_default();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].headers.get("authorization").and_then(|value| value.to_str().ok()),
        Some(format!("Bearer {LLM_KEY}").as_str())
    );
    let body: Value = serde_json::from_slice(&requests[0].body).expect("json");
    assert_eq!(body["model"], "fake-chat");
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    assert_eq!(body["messages"][0]["role"], "system");
    assert!(body["messages"][0]["content"].as_str().is_some_and(|text| text.contains("Never translate")));
    let prompt = user_prompt(&body);
    let order = [
        "## Existing Memories",
        "## New Messages",
        "user: I just adopted a beagle",
        "assistant: Congratulations",
        "## Observation Date",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|needle| prompt.find(needle).unwrap_or_else(|| panic!("{needle} missing: {prompt}")))
        .collect();
    assert!(positions.windows(2).all(|pair| pair[0] < pair[1]), "{prompt}");
    assert!(!prompt.contains("## Earlier Messages"), "first call has no buffered messages");
}

#[tokio::test]
async fn the_message_buffer_belongs_to_one_scope() {
    let (server, llm) = start(chat_reply(&facts(json!([])))).await;
    for body in [
        conversation("alice"),
        json!({"messages": [{"role": "user", "content": "Second message from Alice"}], "user_id": "alice"}),
        json!({"messages": [{"role": "user", "content": "Bob speaking"}], "user_id": "bob"}),
        json!({"messages": [{"role": "user", "content": "Alice in a run"}], "user_id": "alice", "run_id": "r1"}),
    ] {
        let reply = server.post("/memories", body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.body["results"], json!([]), "nothing extracted, nothing stored");
    }
    let prompts: Vec<String> = chat_requests(&llm).await.iter().map(user_prompt).collect();
    assert_eq!(prompts.len(), 4);
    // Alice's second call sees her first exchange (both turns), in order.
    let earlier = prompts[1].split("## Existing Memories").next().expect("head");
    assert!(earlier.contains("## Earlier Messages"), "{}", prompts[1]);
    let user_turn = earlier.find("user: I just adopted a beagle").expect("user turn buffered");
    let assistant_turn = earlier.find("assistant: Congratulations on Biscuit").expect("assistant turn buffered");
    assert!(user_turn < assistant_turn);
    // Bob and Alice's run are other sessions: they see nothing of Alice's.
    for prompt in &prompts[2..] {
        assert!(!prompt.contains("## Earlier Messages"), "{prompt}");
        assert!(!prompt.contains("Biscuit"), "{prompt}");
    }
}

#[tokio::test]
async fn duplicates_are_dropped_within_the_batch_and_against_the_scope() {
    let reply = facts(json!([
        {"text": "User lives in Porto"},
        {"text": "User lives in Porto"},
        {"text": "User is vegetarian"},
        {"text": "User works as a nurse"}
    ]));
    let (server, _llm) = start(chat_reply(&reply)).await;
    // Already known, stored verbatim.
    server.add_texts("carol", &["User is vegetarian"], json!({})).await;
    let first = server.post("/memories", conversation("carol")).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let mut added: Vec<&str> = first.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["memory"].as_str().expect("text"))
        .collect();
    added.sort_unstable();
    assert_eq!(added, ["User lives in Porto", "User works as a nurse"]);
    // The same reply again adds nothing: every fact is known.
    let second = server.post("/memories", conversation("carol")).await;
    assert_eq!(second.body["results"], json!([]), "{}", second.body);
    assert_eq!(list(&server, "carol").await.len(), 3);
    // Another user's identical fact is not a duplicate.
    let other = server.post("/memories", conversation("dave")).await;
    assert_eq!(other.body["results"].as_array().map(Vec::len), Some(3), "{}", other.body);
}

#[tokio::test]
async fn wrapped_and_sloppy_replies_are_read() {
    for reply in [
        "```json\n{\"facts\": [{\"text\": \"User plays the cello\"}]}\n```".to_owned(),
        "<think>The user mentions an instrument.</think>\n{\"facts\": [{\"text\": \"User plays the cello\"}]}"
            .to_owned(),
        "Here you go:\n{\"facts\": [{\"text\": \"User plays the cello\", \"entities\": [\"cello\"],},]}\nDone."
            .to_owned(),
        "{\"memory\": [{\"id\": \"0\", \"text\": \"User plays the cello\"}]}".to_owned(),
    ] {
        let (server, _llm) = start(chat_reply(&reply)).await;
        let added = server.post("/memories", conversation("erin")).await;
        assert_eq!(added.status, 200, "{}", added.body);
        assert_eq!(added.body["results"][0]["memory"], "User plays the cello", "reply {reply}: {}", added.body);
    }
}

#[tokio::test]
async fn an_unreadable_reply_stores_nothing_and_says_so() {
    let (server, llm) = start(chat_reply("I'm sorry, I can't help with that.")).await;
    let added = server.post("/memories", conversation("frank")).await;
    assert_eq!(added.status, 200, "{}", added.body);
    assert_eq!(added.body["results"], json!([]));
    let warning = added.body["warnings"][0].as_str().expect("a warning");
    assert!(warning.contains("nothing was stored"), "{warning}");
    assert!(list(&server, "frank").await.is_empty());
    // Not even the message buffer was written: the next call sees no earlier messages.
    llm.reset().await;
    Mock::given(method("POST")).respond_with(chat_reply(&facts(json!([])))).mount(&llm).await;
    server.post("/memories", conversation("frank")).await;
    let prompt = user_prompt(&chat_requests(&llm).await[0]);
    assert!(!prompt.contains("## Earlier Messages"), "{prompt}");
}

#[tokio::test]
async fn linked_ids_map_to_existing_memories_and_invented_ones_are_ignored() {
    let (server, llm) = start(chat_reply(&facts(json!([])))).await;
    let known = server.add_texts("gina", &["User's sister Ana lives in Madrid"], json!({})).await;
    llm.reset().await;
    let reply = facts(json!([
        {"text": "User's sister Ana moved from Madrid to Seville in March 2026", "linked_memory_ids": ["1", "7", "abc", 1]}
    ]));
    Mock::given(method("POST")).respond_with(chat_reply(&reply)).mount(&llm).await;
    let added = server.post(
        "/memories",
        json!({"messages": [{"role": "user", "content": "My sister Ana moved to Seville this month"}], "user_id": "gina"}),
    )
    .await;
    assert_eq!(added.status, 200, "{}", added.body);
    let id = added.body["results"][0]["id"].as_str().expect("id");
    let memory = server.get(&format!("/memories/{id}")).await;
    assert_eq!(memory.body["linked_memory_ids"], json!([known[0]]), "{}", memory.body);
    // The model saw the existing memory under a short id, never its UUID.
    let prompt = user_prompt(&chat_requests(&llm).await[0]);
    assert!(prompt.contains("[1] User's sister Ana lives in Madrid"), "{prompt}");
    assert!(!prompt.contains(&known[0]), "{prompt}");
}

#[tokio::test]
async fn non_english_conversations_stay_in_their_language() {
    let reply = facts(json!([
        {"text": "用户下个月要去成都出差", "attributed_to": "user", "entities": ["成都"]},
        {"text": "Der Nutzer trinkt keinen Kaffee", "attributed_to": "user"}
    ]));
    let (server, llm) = start(chat_reply(&reply)).await;
    let added = server
        .post(
            "/memories",
            json!({"messages": [
                {"role": "user", "content": "我下个月要去成都出差。"},
                {"role": "user", "content": "Ich trinke übrigens keinen Kaffee."}
            ], "user_id": "hui"}),
        )
        .await;
    assert_eq!(added.status, 200, "{}", added.body);
    let mut texts: Vec<&str> = added.body["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["memory"].as_str().expect("text"))
        .collect();
    texts.sort_unstable();
    assert_eq!(texts, ["Der Nutzer trinkt keinen Kaffee", "用户下个月要去成都出差"]);
    let stored = list(&server, "hui").await;
    let chinese = stored.iter().find(|memory| memory["memory"] == "用户下个月要去成都出差").expect("stored as written");
    assert_eq!(chinese["entities"], json!(["成都"]));
    let prompt = user_prompt(&chat_requests(&llm).await[0]);
    assert!(prompt.contains("user: 我下个月要去成都出差。"), "messages reach the model untranslated: {prompt}");
}

#[tokio::test]
async fn timestamp_sets_the_observation_date_and_created_at() {
    let (server, llm) =
        start(chat_reply(&facts(json!([{"text": "User ran the Berlin marathon on 2023-09-24"}])))).await;
    let mut body = conversation("ivan");
    body["timestamp"] = json!("2023-09-25T08:30:00Z");
    let added = server.post("/memories", body).await;
    assert_eq!(added.status, 200, "{}", added.body);
    let stored = list(&server, "ivan").await;
    assert_eq!(stored[0]["created_at"], "2023-09-25T08:30:00Z");
    let prompt = user_prompt(&chat_requests(&llm).await[0]);
    assert!(prompt.contains("## Observation Date\n2023-09-25 (Monday)"), "{prompt}");
}

#[tokio::test]
async fn custom_instructions_come_from_the_call_or_the_config() {
    let llm = MockServer::start().await;
    Mock::given(method("POST")).respond_with(chat_reply(&facts(json!([])))).mount(&llm).await;
    let mut settings = openai_settings(&llm);
    settings.memory.extraction.custom_instructions = Some("Keep only food preferences.".to_owned());
    let server = TestServer::start_with(settings, local_embedder().await).await;
    server.post("/memories", conversation("judy")).await;
    let mut with_prompt = conversation("judy");
    with_prompt["prompt"] = json!("Keep only pets.");
    server.post("/memories", with_prompt).await;
    let prompts: Vec<String> = chat_requests(&llm).await.iter().map(user_prompt).collect();
    assert!(prompts[0].ends_with("## Custom Instructions\nKeep only food preferences.\n"), "{}", prompts[0]);
    assert!(prompts[1].ends_with("## Custom Instructions\nKeep only pets.\n"), "{}", prompts[1]);
}

#[tokio::test]
async fn provider_failures_are_classified_and_leave_nothing_behind() {
    let cases: [(ResponseTemplate, u16, &str, usize); 4] = [
        (
            ResponseTemplate::new(401)
                .set_body_json(json!({"error": {"message": format!("Incorrect API key provided: {LLM_KEY}")}})),
            502,
            "provider_auth_failed",
            1,
        ),
        (ResponseTemplate::new(429).insert_header("retry-after", "0"), 503, "provider_rate_limited", 3),
        (ResponseTemplate::new(500), 503, "provider_unavailable", 3),
        (chat_reply(&facts(json!([]))).set_delay(Duration::from_secs(4)), 504, "provider_timeout", 3),
    ];
    for (response, status, code, attempts) in cases {
        let (server, llm) = start(response).await;
        let reply = server.post("/memories", conversation("kim")).await;
        let message = reply.assert_error(status, code);
        assert!(!message.contains(LLM_KEY) && !reply.body.to_string().contains(LLM_KEY), "{}", reply.body);
        assert_eq!(llm.received_requests().await.unwrap_or_default().len(), attempts, "{code}");
        assert!(list(&server, "kim").await.is_empty(), "{code}: nothing stored");
        // Nor was the conversation buffered.
        llm.reset().await;
        Mock::given(method("POST")).respond_with(chat_reply(&facts(json!([])))).mount(&llm).await;
        let next = server.post("/memories", conversation("kim")).await;
        assert_eq!(next.status, 200, "{}", next.body);
        assert!(!user_prompt(&chat_requests(&llm).await[0]).contains("## Earlier Messages"), "{code}");
    }
}

#[tokio::test]
async fn retries_wait_as_long_as_retry_after_says() {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "1"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&llm)
        .await;
    Mock::given(method("POST"))
        .respond_with(chat_reply(&facts(json!([{"text": "User speaks Portuguese"}]))))
        .with_priority(2)
        .mount(&llm)
        .await;
    let server = TestServer::start_with(openai_settings(&llm), local_embedder().await).await;
    let started = Instant::now();
    let added = server.post("/memories", conversation("lea")).await;
    assert_eq!(added.status, 200, "{}", added.body);
    assert!(started.elapsed() >= Duration::from_secs(1), "waited {:?}", started.elapsed());
    assert_eq!(llm.received_requests().await.unwrap_or_default().len(), 2);
    assert_eq!(added.body["results"][0]["memory"], "User speaks Portuguese");
}

#[tokio::test]
async fn servers_without_json_mode_get_the_prompt_alone() {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(wiremock::matchers::body_string_contains("response_format"))
        .respond_with(
            ResponseTemplate::new(400)
                .set_body_json(json!({"error": {"message": "response_format json_object is not supported"}})),
        )
        .mount(&llm)
        .await;
    Mock::given(method("POST"))
        .respond_with(chat_reply(&facts(json!([{"text": "User owns a Raspberry Pi 5"}]))))
        .mount(&llm)
        .await;
    let server = TestServer::start_with(openai_settings(&llm), local_embedder().await).await;
    for user in ["max", "nia"] {
        let added = server.post("/memories", conversation(user)).await;
        assert_eq!(added.body["results"][0]["memory"], "User owns a Raspberry Pi 5", "{}", added.body);
    }
    let sent = chat_requests(&llm).await;
    // First call: refused with JSON mode, retried without; second call: straight without.
    assert_eq!(sent.len(), 3);
    assert!(sent[0].get("response_format").is_some());
    assert!(sent[1].get("response_format").is_none() && sent[2].get("response_format").is_none());
}

#[tokio::test]
async fn procedural_memory_is_one_summary_of_the_agent_run() {
    let summary = "Task: book a table.\nSteps:\n1. Searched restaurants near Alfama -> 3 results.";
    let (server, llm) = start(chat_reply(&format!("<think>plan</think>\n{summary}"))).await;
    let body = json!({
        "messages": [
            {"role": "user", "content": "Book a table in Alfama for Friday"},
            {"role": "assistant", "content": "Searching restaurants near Alfama... found 3."}
        ],
        "agent_id": "booker",
        "memory_type": "procedural_memory"
    });
    let added = server.post("/memories", body.clone()).await;
    assert_eq!(added.status, 200, "{}", added.body);
    assert_eq!(added.body["results"].as_array().map(Vec::len), Some(1));
    let id = added.body["results"][0]["id"].as_str().expect("id");
    let memory = server.get(&format!("/memories/{id}")).await;
    assert_eq!(memory.body["memory"], summary);
    assert_eq!(memory.body["memory_type"], "procedural_memory");
    assert_eq!(memory.body["agent_id"], "booker");
    let sent = chat_requests(&llm).await;
    assert!(sent[0].get("response_format").is_none(), "no JSON mode for summaries");
    assert!(user_prompt(&sent[0]).contains("user: Book a table in Alfama for Friday"));

    let mut without_agent = body;
    without_agent.as_object_mut().expect("object").remove("agent_id");
    without_agent["user_id"] = json!("olga");
    server.post("/memories", without_agent).await.assert_error(400, "validation_failed");
}

#[tokio::test]
async fn no_llm_configured_is_a_clear_400_and_verbatim_still_works() {
    let mut settings = test_settings();
    settings.memory.llm.provider = LlmProvider::None;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let message = server.post("/memories", conversation("pat")).await.assert_error(400, "llm_not_configured");
    assert!(message.contains("infer=false") && message.contains("OPENAI_API_KEY"), "{message}");
    assert_eq!(server.add_texts("pat", &["User likes jazz"], json!({})).await.len(), 1);
}

fn anthropic_reply(text: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 700, "output_tokens": 40}
    }))
}

fn anthropic_settings(llm: &MockServer) -> Settings {
    let mut settings = test_settings();
    let config = &mut settings.memory.llm;
    config.provider = LlmProvider::Anthropic;
    config.anthropic.base_url = Some(llm.uri());
    config.anthropic.api_key = Some(LLM_KEY.to_owned().into());
    config.anthropic.model = "claude-fake".to_owned();
    config.anthropic.retry.base_delay_ms = 10;
    settings
}

#[tokio::test]
async fn anthropic_messages_api_extracts_facts() {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", LLM_KEY))
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(anthropic_reply(&facts(
            json!([{"text": "User's dog Biscuit is a beagle", "entities": ["Biscuit"]}]),
        )))
        .mount(&llm)
        .await;
    let server = TestServer::start_with(anthropic_settings(&llm), local_embedder().await).await;
    let added = server.post("/memories", conversation("quinn")).await;
    assert_eq!(added.status, 200, "{}", added.body);
    assert_eq!(added.body["results"][0]["memory"], "User's dog Biscuit is a beagle");
    let sent = chat_requests(&llm).await;
    assert!(sent[0]["system"].as_str().is_some_and(|system| system.contains("Never translate")));
    assert_eq!(sent[0]["messages"][0]["role"], "user");
    assert!(sent[0]["messages"][0]["content"].as_str().is_some_and(|text| text.contains("## New Messages")));
    assert_eq!(sent[0]["model"], "claude-fake");
}

#[tokio::test]
async fn anthropic_failures_are_classified() {
    for (status, code) in [(401, "provider_auth_failed"), (529, "provider_unavailable"), (400, "provider_bad_request")]
    {
        let llm = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(status).set_body_json(
                json!({"type": "error", "error": {"type": "x", "message": format!("bad key {LLM_KEY}")}}),
            ))
            .mount(&llm)
            .await;
        let server = TestServer::start_with(anthropic_settings(&llm), local_embedder().await).await;
        let reply = server.post("/memories", conversation("ravi")).await;
        reply.assert_error(status_for(code), code);
        assert!(!reply.body.to_string().contains(LLM_KEY), "{}", reply.body);
        assert!(list(&server, "ravi").await.is_empty());
    }
}

fn status_for(code: &str) -> u16 {
    match code {
        "provider_unavailable" | "provider_rate_limited" => 503,
        "provider_timeout" => 504,
        _ => 502,
    }
}

/// Against a real OpenAI-compatible server (e.g. a local Ollama), run explicitly:
/// `MEM0_E2E_LLM_BASE_URL=http://localhost:11434/v1 MEM0_E2E_LLM_MODEL=qwen3:4b cargo test -p
/// mem0-http-tests --test api -- --ignored extraction::end_to_end`.
#[tokio::test]
#[ignore = "needs a real model: set MEM0_E2E_LLM_BASE_URL (and MEM0_E2E_LLM_MODEL, MEM0_E2E_LLM_API_KEY), run with --ignored"]
async fn end_to_end_against_a_real_model() {
    let base_url = std::env::var("MEM0_E2E_LLM_BASE_URL")
        .expect("MEM0_E2E_LLM_BASE_URL must name an OpenAI-compatible server for this test");
    let mut settings = test_settings();
    let config = &mut settings.memory.llm;
    config.provider = LlmProvider::Openai;
    config.openai.base_url = Some(base_url);
    config.openai.api_key = std::env::var("MEM0_E2E_LLM_API_KEY").ok().map(Into::into);
    config.openai.model = std::env::var("MEM0_E2E_LLM_MODEL").unwrap_or_else(|_| "gpt-5-mini".to_owned());
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let added = server.post("/memories", conversation("e2e")).await;
    assert_eq!(added.status, 200, "{}", added.body);
    let results = added.body["results"].as_array().expect("results");
    assert!(!results.is_empty(), "a real model finds facts in this exchange: {}", added.body);
    let found = server.search_texts(json!({"query": "penicillin allergy", "user_id": "e2e", "top_k": 3})).await;
    assert!(found.iter().any(|text| text.to_lowercase().contains("penicillin")), "{found:?}");
}

/// A history volume that fails after the memory rows are written: the call fails and leaves no
/// memory, no history and no buffered message behind.
#[tokio::test]
async fn a_failing_history_write_undoes_the_whole_add() {
    let (server, llm) = start(chat_reply(&facts(json!([{"text": "User collects vinyl records"}])))).await;
    // Every history insert now fails, after the messages were read and the facts embedded.
    server
        .history_sql(
            "create trigger refuse before insert on history begin select raise(abort, 'disk says no'); end",
            "create function refuse() returns trigger language plpgsql as $$ begin raise exception 'disk says no'; end $$; \
             create trigger refuse before insert on history for each row execute function refuse()",
        )
        .await;
    server.post("/memories", conversation("sam")).await.assert_error(500, "internal_error");
    assert!(list(&server, "sam").await.is_empty(), "the memory rows were removed again");
    let buffered =
        server.history_sql("select cast(count(*) as text) from messages", "select count(*)::text from messages").await;
    assert_eq!(buffered.as_deref(), Some("0"), "the message buffer was rolled back with the history rows");
    server.history_sql("drop trigger refuse", "drop trigger refuse on history").await;
    let added = server.post("/memories", conversation("sam")).await;
    assert_eq!(added.status, 200, "works again once the volume does: {}", added.body);
    assert_eq!(llm.received_requests().await.unwrap_or_default().len(), 2);
}

/// Deleting a user's memories forgets their buffered conversation too (it is raw user text);
/// other users' buffers stay.
#[tokio::test]
async fn deleting_a_scope_forgets_its_conversation_buffer() {
    let (server, llm) = start(chat_reply(&facts(json!([{"text": "User likes chess"}])))).await;
    for user in ["tom", "tom_b"] {
        assert_eq!(server.post("/memories", conversation(user)).await.status, 200);
    }
    let mut in_run = conversation("tom");
    in_run["run_id"] = json!("r1");
    assert_eq!(server.post("/memories", in_run).await.status, 200);
    let reply = server.delete("/memories?user_id=tom").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    llm.reset().await;
    Mock::given(method("POST")).respond_with(chat_reply(&facts(json!([])))).mount(&llm).await;
    let mut again_run = conversation("tom");
    again_run["run_id"] = json!("r1");
    for body in [conversation("tom"), again_run, conversation("tom_b")] {
        assert_eq!(server.post("/memories", body).await.status, 200);
    }
    let prompts: Vec<String> = chat_requests(&llm).await.iter().map(user_prompt).collect();
    assert!(!prompts[0].contains("## Earlier Messages"), "tom's session was forgotten: {}", prompts[0]);
    assert!(!prompts[1].contains("## Earlier Messages"), "and tom's run session: {}", prompts[1]);
    assert!(prompts[2].contains("## Earlier Messages"), "tom_b (a `_` in the id) keeps hers: {}", prompts[2]);
}
