//! Queued adds (`async_mode`, `Prefer: respond-async`) through the real server and stores: the
//! 202 and the job's life, per-scope order and retries through a slow LLM (a wiremock fake) that
//! fails a fifth of the adds, the queue bound, who may see a job, and a job whose run was cut off
//! after it stored its memories (a server killed mid-run) finishing exactly once after a restart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mem0_http_tests::{local_embedder, settings_with_fake_llm, test_settings, texts, TestServer};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Polls `GET /jobs/{id}` until the job is finished.
async fn finished(server: &TestServer, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let reply = server.get(&format!("/jobs/{id}")).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        if matches!(reply.body["status"].as_str(), Some("succeeded" | "failed")) {
            return reply.body;
        }
        assert!(Instant::now() < deadline, "job {id} still {} after 60 s", reply.body["status"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn queued_add(user: &str, texts: &[&str]) -> Value {
    let messages: Vec<Value> = texts.iter().map(|text| json!({"role": "user", "content": text})).collect();
    json!({"messages": messages, "user_id": user, "infer": false, "async_mode": true})
}

#[tokio::test]
async fn a_queued_add_is_answered_202_and_followed_to_its_result() {
    let server = TestServer::start().await;
    let long_reply = "The train to Porto leaves from Santa Apolónia at 09:00; ".repeat(30);
    let reply =
        server.post("/memories", queued_add("ana", &["Ana rides the 9 o'clock train", long_reply.trim()])).await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert_eq!(reply.body["status"], "queued");
    let id = reply.body["job_id"].as_str().expect("job id").to_owned();
    assert_eq!(reply.body["status_url"], format!("/jobs/{id}"));
    let job = finished(&server, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(texts(&job["result"]["results"]), ["Ana rides the 9 o'clock train", long_reply.trim()]);
    assert_eq!(job["attempts"], 1);
    assert_eq!(server.list_texts("user_id=ana").await.len(), 2);

    // `Prefer: respond-async` queues a plain add too.
    let response = server
        .client
        .post(format!("{}/memories", server.base))
        .header("prefer", "return=minimal, respond-async")
        .json(&json!({"messages": [{"role": "user", "content": "Ana reads on trains"}], "user_id": "ana", "infer": false}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.expect("json");
    assert_eq!(finished(&server, body["job_id"].as_str().expect("id")).await["status"], "succeeded");

    // What a synchronous add would refuse is refused before anything is queued.
    server
        .post("/memories", json!({"messages": [{"role": "user", "content": "x"}], "async_mode": true}))
        .await
        .assert_error(400, "validation_failed");
    server
        .post(
            "/memories",
            json!({"messages": [{"role": "user", "content": "x"}], "user_id": "ana", "async_mode": true}),
        )
        .await
        .assert_error(400, "llm_not_configured");
    server.get(&format!("/jobs/{}", uuid::Uuid::now_v7())).await.assert_error(404, "job_not_found");
    server.get("/jobs/not-a-uuid").await.assert_error(400, "validation_failed");

    // Mem0's dialect: queued as an event, followed at /v1/event/{id}/.
    let queued = server
        .post(
            "/v3/memories/add/",
            json!({"messages": "Ana likes window seats", "user_id": "ana", "infer": false, "async_mode": true}),
        )
        .await;
    assert_eq!(queued.body["status"], "PENDING", "{}", queued.body);
    let event_id = queued.body["event_id"].as_str().expect("event id").to_owned();
    finished(&server, &event_id).await;
    let event = server.get(&format!("/v1/event/{event_id}/")).await;
    assert_eq!(event.body["status"], "SUCCEEDED", "{}", event.body);
    assert_eq!(event.body["results"][0]["data"]["memory"], "Ana likes window seats");
}

/// A fake LLM that extracts "User reached checkpoint N" from "Checkpoint N reached by U", takes
/// 30 ms per call, answers 503 to the first call of every fifth checkpoint, and notes when each
/// call for each user arrived.
#[derive(Clone, Default)]
struct SlowFlakyLlm {
    calls: Arc<Mutex<CallsByUser>>,
}

/// Per user: when each call arrived and for which checkpoint.
type CallsByUser = HashMap<String, Vec<(Instant, u32)>>;

impl SlowFlakyLlm {
    fn checkpoint(request: &Request) -> (String, u32) {
        let body: Value = serde_json::from_slice(&request.body).expect("json");
        let prompt = body["messages"][1]["content"].as_str().expect("prompt").to_owned();
        let new = prompt.split("## New Messages\n").nth(1).expect("new messages");
        let line = new.lines().next().expect("a message");
        let words: Vec<&str> = line.split_whitespace().collect();
        // "user: Checkpoint N reached by U"
        (words[5].to_owned(), words[2].parse().expect("checkpoint number"))
    }
}

const LLM_DELAY: Duration = Duration::from_millis(30);

impl Respond for SlowFlakyLlm {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let (user, step) = Self::checkpoint(request);
        let first_call = {
            let mut calls = self.calls.lock().expect("lock");
            let of_user = calls.entry(user).or_default();
            let first = !of_user.iter().any(|(_, earlier)| *earlier == step);
            of_user.push((Instant::now(), step));
            first
        };
        if first_call && step % 5 == 0 {
            return ResponseTemplate::new(503)
                .set_body_json(json!({"error": {"message": "overloaded"}}))
                .set_delay(LLM_DELAY);
        }
        let facts = json!({"facts": [{"text": format!("User reached checkpoint {step}"), "attributed_to": "user"}]});
        ResponseTemplate::new(200)
            .set_body_json(json!({
                "choices": [{"index": 0, "message": {"role": "assistant", "content": facts.to_string()}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5}
            }))
            .set_delay(LLM_DELAY)
    }
}

#[tokio::test]
async fn fifty_queued_adds_keep_their_order_per_scope_through_a_slow_flaky_llm() {
    let llm = MockServer::start().await;
    let fake = SlowFlakyLlm::default();
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(fake.clone()).mount(&llm).await;
    let mut settings = settings_with_fake_llm(&llm.uri());
    // One attempt per run, so the 503 reaches the job, which is retried later.
    settings.memory.llm.openai.retry.max_attempts = 1;
    settings.jobs.workers = 3;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let users: Vec<String> = (0..5).map(|user| format!("walker{user}")).collect();
    let mut jobs = Vec::new();
    for step in 0..10 {
        for user in &users {
            let body = json!({
                "messages": [{"role": "user", "content": format!("Checkpoint {step} reached by {user}")}],
                "user_id": user,
                "async_mode": true,
            });
            let reply = server.post("/memories", body).await;
            assert_eq!(reply.status, 202, "{}", reply.body);
            jobs.push(reply.body["job_id"].as_str().expect("id").to_owned());
        }
    }
    let mut retried = 0;
    for id in &jobs {
        let job = finished(&server, id).await;
        assert_eq!(job["status"], "succeeded", "{job}");
        assert_eq!(job["result"]["results"].as_array().map(Vec::len), Some(1), "{job}");
        if job["attempts"].as_u64() == Some(2) {
            retried += 1;
            assert_eq!(job["error"]["code"], "provider_unavailable", "the last failure is kept: {job}");
        }
    }
    assert_eq!(retried, 10, "every fifth checkpoint failed once and was retried");
    for user in &users {
        let listed = server.get(&format!("/memories?user_id={user}")).await;
        let mut stored: Vec<(String, String)> = listed.body["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|item| {
                (
                    item["created_at"].as_str().expect("time").to_owned(),
                    item["memory"].as_str().expect("text").to_owned(),
                )
            })
            .collect();
        stored.sort();
        let in_order: Vec<String> = stored.into_iter().map(|(_, text)| text).collect();
        let expected: Vec<String> = (0..10).map(|step| format!("User reached checkpoint {step}")).collect();
        assert_eq!(in_order, expected, "{user}'s adds ran in the order they arrived, each once");
    }
    // The model saw each user's adds one at a time (a call only after the previous one was
    // answered) and in order (a retry repeats its step before the next one starts).
    for (user, calls) in fake.calls.lock().expect("lock").iter() {
        for pair in calls.windows(2) {
            let ((earlier, step), (later, next)) = (pair[0], pair[1]);
            assert!(later - earlier >= LLM_DELAY, "{user}: calls for checkpoints {step} and {next} overlapped");
            assert!(next == step || next == step + 1, "{user}: checkpoint {next} came after {step}");
        }
    }
}

#[tokio::test]
async fn the_queue_is_bounded_per_tenant() {
    let mut settings = test_settings();
    settings.jobs.workers = 0;
    settings.jobs.max_open_per_tenant = 3;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    for index in 0..3 {
        let reply = server.post("/memories", queued_add("bo", &[&format!("note {index}")])).await;
        assert_eq!(reply.status, 202, "{}", reply.body);
    }
    let full = server.post("/memories", queued_add("bo", &["one too many"])).await;
    full.assert_error(429, "rate_limited");
    assert!(full.headers.contains_key("retry-after"));
}

#[tokio::test]
async fn deleting_a_scope_cancels_its_queued_adds() {
    let mut settings = test_settings();
    settings.jobs.workers = 0;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let doomed = server.post("/memories", queued_add("dee", &["Dee's old address"])).await;
    let kept = server.post("/memories", queued_add("eli", &["Eli's note"])).await;
    let deleted = server.delete("/memories?user_id=dee").await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    let job = server.get(&format!("/jobs/{}", doomed.body["job_id"].as_str().expect("id"))).await;
    assert_eq!((job.body["status"].clone(), job.body["error"]["code"].clone()), (json!("failed"), json!("cancelled")));
    let other = server.get(&format!("/jobs/{}", kept.body["job_id"].as_str().expect("id"))).await;
    assert_eq!(other.body["status"], "queued", "other scopes keep theirs");
}

#[tokio::test]
async fn a_job_cut_off_after_storing_its_memories_finishes_exactly_once_after_a_restart() {
    let mut settings = test_settings();
    settings.jobs.workers = 0;
    let server = TestServer::start_with(settings, local_embedder().await).await;
    let reply = server.post("/memories", queued_add("cy", &["Cy keeps a cat", "Cy works nights"])).await;
    let id: uuid::Uuid = reply.body["job_id"].as_str().expect("id").parse().expect("uuid");
    // A worker claims it (with a lease that has already run out, as when its server died) and
    // stores its memories, then dies before recording the success.
    let history = server.reopen_history().await;
    let now = chrono::Utc::now();
    let claimed = history.jobs().claim(now, now - chrono::Duration::seconds(1)).await.expect("claim").expect("a job");
    assert_eq!(claimed.id, id);
    let memory = server.reopen().await;
    let caller = mem0_core::Caller::local_admin(test_settings().server.default_tenant);
    let body: mem0_server::routes::memories::AddMemoriesRequest =
        serde_json::from_str(&claimed.request).expect("stored request");
    let messages = body
        .messages
        .into_iter()
        .map(|message| mem0_core::Message {
            role: message.role,
            content: match message.content.expect("content") {
                mem0_server::routes::memories::MessageContent::Text(text) => text,
                mem0_server::routes::memories::MessageContent::Parts(_) => unreachable!(),
            },
            name: None,
        })
        .collect();
    let request = mem0_core::AddRequest {
        scope: mem0_core::Scope::new(Some("cy"), None, None).expect("scope"),
        messages,
        infer: false,
        ids_from: Some(id),
        ..mem0_core::AddRequest::default()
    };
    let first_run = memory.add(&caller, request).await.expect("the cut-off run");
    drop(memory);

    // The restarted server runs it again: it finds what the first run stored, stores nothing.
    let mut settings = server.restart_settings();
    settings.jobs.workers = 1;
    let server = server.restarted(settings, local_embedder().await).await;
    let job = finished(&server, &id.to_string()).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["attempts"], 2);
    let ids: Vec<String> = first_run.results.iter().map(|added| added.id.to_string()).collect();
    let answered: Vec<String> = job["result"]["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|item| item["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(answered, ids, "the job answers with the memories the first run stored");
    assert_eq!(server.list_texts("user_id=cy").await.len(), 2, "stored once");
}
