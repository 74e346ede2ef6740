//! The write policy: secrets and card numbers never reach storage (redacted by default, the
//! call says so), a `reject` rule refuses the call naming the rule with nothing stored, the model
//! is sent and the buffer keeps only redacted text, facts the model returns are checked too, and
//! updates pass the same policy.

use mem0_core::policy::{Action, PolicyConfig, RuleConfig};
use mem0_http_tests::{chat_completion, local_embedder, settings_with_fake_llm, test_settings, TestServer};
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

fn policy() -> PolicyConfig {
    PolicyConfig {
        rules: vec![RuleConfig {
            name: "codenames".into(),
            pattern: None,
            terms: vec!["Project Falcon".into()],
            action: Action::Reject,
        }],
        ..PolicyConfig::default()
    }
}

async fn start(llm: Option<&MockServer>) -> TestServer {
    let mut settings = match llm {
        Some(llm) => settings_with_fake_llm(&llm.uri()),
        None => test_settings(),
    };
    settings.memory.policy = policy();
    TestServer::start_with(settings, local_embedder().await).await
}

fn verbatim(texts: &[&str]) -> Value {
    let messages: Vec<Value> = texts.iter().map(|text| json!({"role": "user", "content": text})).collect();
    json!({"messages": messages, "user_id": "pat", "infer": false})
}

#[tokio::test]
async fn secrets_are_redacted_and_reject_rules_refuse_the_call() {
    let server = start(None).await;
    let reply = server
        .post(
            "/memories",
            verbatim(&["The office wifi password is Tr0ub4dor&3", "Card 4111 1111 1111 1111 for travel"]),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let mut stored = server.list_texts("user_id=pat").await;
    stored.sort();
    assert_eq!(stored, ["Card [REDACTED:payment_card] for travel", "The office wifi password is [REDACTED:secret]"]);
    let warnings = reply.body["warnings"].to_string();
    assert!(warnings.contains("secret") && warnings.contains("payment_card"), "{warnings}");
    assert!(!reply.body.to_string().contains("Tr0ub4dor"), "the secret is not echoed: {}", reply.body);
    let id = reply.body["results"][0]["id"].as_str().expect("id").to_owned();
    let history = server.get(&format!("/memories/{id}/history")).await;
    assert!(
        // The card number as written ("4111" alone also turns up inside random ids).
        !history.body.to_string().contains("Tr0ub4dor") && !history.body.to_string().contains("4111 1111"),
        "{}",
        history.body
    );

    // A reject rule: 400 naming the rule and the field, and nothing of the call stored.
    let reply = server.post("/memories", verbatim(&["fine text", "The launch of project falcon slipped"])).await;
    let message = reply.assert_error(400, "policy_rejected");
    assert!(message.contains("codenames"), "{message}");
    assert_eq!(reply.body["details"], json!({"field": "messages[1].content", "rule": "codenames"}));
    assert_eq!(server.list_texts("user_id=pat").await.len(), 2, "nothing of the refused call");
    // Updates pass the same policy.
    let reply = server.put(&format!("/memories/{id}"), json!({"text": "Now about Project Falcon"})).await;
    reply.assert_error(400, "policy_rejected");
    let reply =
        server.put(&format!("/memories/{id}"), json!({"text": "New key sk-live-abcdefghijklmnopqrstuvwxyz"})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["result"]["memory"], "New key [REDACTED:secret]");
}

#[tokio::test]
async fn the_model_sees_and_the_buffer_keeps_only_redacted_text_and_its_facts_are_checked() {
    let llm = MockServer::start().await;
    let facts = json!({"facts": [
        {"text": "User pays with card 5555 5555 5555 4444"},
        {"text": "User works on Project Falcon"},
        {"text": "User likes jazz"}
    ]})
    .to_string();
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(chat_completion(&facts))
        .mount(&llm)
        .await;
    let server = start(Some(&llm)).await;
    let turn = |text: &str| json!({"messages": [{"role": "user", "content": text}], "user_id": "pat"});
    let reply = server
        .post("/memories", turn("my github token is ghp_0123456789abcdefghijklmnopqrstuvwxyz, I like jazz"))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let mut stored = server.list_texts("user_id=pat").await;
    stored.sort();
    assert_eq!(
        stored,
        ["User likes jazz", "User pays with card [REDACTED:payment_card]"],
        "the rejected fact is left out"
    );
    let warnings = reply.body["warnings"].to_string();
    assert!(warnings.contains("codenames"), "{warnings}");
    // A second turn: its prompt carries the first turn from the buffer, redacted.
    assert_eq!(server.post("/memories", turn("and I play the piano")).await.status, 200);
    let prompts: Vec<String> = llm
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|request| String::from_utf8_lossy(&request.body).into_owned())
        .collect();
    assert_eq!(prompts.len(), 2);
    for prompt in &prompts {
        assert!(!prompt.contains("ghp_0123"), "the token never reaches the model: {prompt}");
    }
    assert!(prompts[0].contains("[REDACTED:secret]") && prompts[1].contains("[REDACTED:secret]"), "{}", prompts[1]);
    assert!(prompts[0].contains("Never write down secrets"), "the prompt asks the model not to");
}
