//! Fact extraction with one LLM call: the prompt, and a tolerant reader of the model's reply.
//!
//! The prompt is ours (not Mem0's text). It is deliberately short: the rules a model needs to
//! write good memories, the context (earlier messages, the nearest existing memories with short
//! integer ids, the new messages, the observation date) and the JSON shape of the answer.

use std::fmt::Write as _;

use chrono::NaiveDate;
use regex::Regex;
use serde_json::Value;

use crate::scope::Scope;
use crate::text::strip_nul;

/// The system prompt of fact extraction.
pub const EXTRACTION_PROMPT: &str = r#"You maintain the long-term memory of an assistant. Read the New Messages and write down the facts worth remembering in later conversations.

Rules:
1. Evidence only: every fact must be stated or clearly implied by the New Messages. No guesses, no outside knowledge.
2. Both speakers count. Keep what the user says about themselves: identity, preferences, plans, people, possessions, health, work, history. From the assistant keep only what the user will want later, written as what the user was told or recommended ("User was recommended the night train to Vienna").
3. Self-contained: a fact must make sense alone. Replace pronouns and references ("she", "my boss", "that place") with who or what they are; call the user "User" unless their name is known. Keep names, numbers, amounts, units, places and qualifiers exactly as said.
4. Dates: rewrite relative times ("yesterday", "next Friday", "two years ago") as absolute dates using the Observation Date, and keep the date in the fact.
5. One fact per idea, one sentence each; join lines that describe the same event.
6. Skip greetings, thanks, small talk, unanswered questions and anything an Existing Memory already says. When a new fact changes or corrects an existing memory, so that the old one is no longer true, write the new fact in full and put that memory's id in replaces; when it only adds to one, put its id in linked_memory_ids.
7. Write every fact in the language of the conversation. Never translate.
8. entities: the specific people, places, organisations, products, projects, pets and other named things in the fact, spelled as in the fact. Not generic words such as "User", "friend" or "food".
9. Never write down secrets or identifying numbers: passwords, API keys, tokens, private keys, payment card numbers, government ids. At most note that the user has one ("User has a company credit card"), never its value.
10. state_key: when a fact is the current value of something that changes over time (where someone lives, their job, a preference, a project setting), give it a short dotted key such as "user.home_city", "user.employer" or "project.test_command". An Existing Memory shown as {key} text holds that key: reuse the key for a newer value of the same thing. Leave it out for events and other facts that do not replace each other.
11. event_date (YYYY-MM-DD): when the fact says when it happened or began ("moved in March" → the first of that month); leave it out otherwise.

Answer with one JSON object and nothing else:
{"facts": [{"text": "...", "attributed_to": "user", "linked_memory_ids": ["2"], "replaces": ["3"], "entities": ["..."], "confidence": 0.9, "state_key": "user.home_city", "event_date": "2026-03-01"}]}
attributed_to is "user" or "assistant": whose message the fact comes from. confidence (0 to 1): 0.9 for what was said plainly, lower for hedged, joking or uncertain statements. With nothing worth remembering, answer {"facts": []}.

Example. Observation Date 2026-05-04 (Monday), no existing memories, new messages:
user: My brother Tom starts at Google next week. I'm flying out to see him on Friday.
assistant: Exciting! Want hotel suggestions near his place?
Answer:
{"facts": [{"text": "User's brother Tom starts a job at Google in the week of 2026-05-11", "attributed_to": "user", "linked_memory_ids": [], "entities": ["Tom", "Google"], "confidence": 0.9, "state_key": "tom.employer", "event_date": "2026-05-11"}, {"text": "User is flying to visit their brother Tom on 2026-05-08", "attributed_to": "user", "linked_memory_ids": [], "entities": ["Tom"], "confidence": 0.9, "event_date": "2026-05-08"}]}"#;

/// Appended to the system prompt when the memories belong to an agent and no user.
pub const AGENT_SUFFIX: &str = "\n\nThese memories belong to the agent, not to a user: write each fact as what the agent learned, was told or decided (\"Agent was told the deploy window is Friday 18:00 UTC\").";

/// The system prompt of procedural memory: one summary of an agent's run.
pub const PROCEDURAL_PROMPT: &str = r"You write the procedural memory of an AI agent: a faithful record of what it did, so it can resume or repeat the work later.

Summarise the conversation below as:
Task: the goal, in one or two sentences.
Progress: what is done and what remains.
Steps: numbered, in order. For each step give the action, its key inputs, and the exact outcome (results, values, errors, file names, URLs, identifiers copied verbatim). Keep every number and name.
Write in the language of the conversation. Output only the summary.";

/// Longest message content quoted from the buffer of earlier messages, in characters.
const EARLIER_MESSAGE_CHARS: usize = 300;

/// One line of a conversation as shown to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptMessage {
    /// `user`, `assistant` or `system`.
    pub role: String,
    /// Speaker name, when known.
    pub name: Option<String>,
    /// Text.
    pub content: String,
}

/// Everything the user part of the extraction prompt is built from.
#[derive(Debug, Clone)]
pub struct ExtractionInput<'a> {
    /// Buffered messages of the same scope, oldest first.
    pub earlier: &'a [PromptMessage],
    /// The nearest existing memories, in the order their short ids (1, 2, …) are given.
    pub existing: &'a [String],
    /// The messages to extract from.
    pub new_messages: &'a [PromptMessage],
    /// The date relative times are resolved against.
    pub observation_date: NaiveDate,
    /// Extra instructions (per call, else from config).
    pub custom_instructions: Option<&'a str>,
}

/// The system prompt for `scope`.
pub fn system_prompt(scope: &Scope) -> String {
    let mut prompt = EXTRACTION_PROMPT.to_owned();
    if scope.agent_id.is_some() && scope.user_id.is_none() {
        prompt.push_str(AGENT_SUFFIX);
    }
    prompt
}

/// Builds the user message: earlier messages, existing memories, new messages, observation
/// date and custom instructions, in that order.
pub fn user_prompt(input: &ExtractionInput<'_>) -> String {
    let mut prompt = String::new();
    if !input.earlier.is_empty() {
        prompt.push_str("## Earlier Messages (context only; facts from them are already stored)\n");
        for message in input.earlier {
            let content: String = message.content.chars().take(EARLIER_MESSAGE_CHARS).collect();
            let ellipsis = if content.len() < message.content.len() { "..." } else { "" };
            let _ = writeln!(prompt, "{}: {content}{ellipsis}", speaker(message));
        }
        prompt.push('\n');
    }
    prompt.push_str("## Existing Memories\n");
    if input.existing.is_empty() {
        prompt.push_str("(none)\n");
    }
    for (index, text) in input.existing.iter().enumerate() {
        let _ = writeln!(prompt, "[{}] {}", index + 1, one_line(text));
    }
    prompt.push_str("\n## New Messages\n");
    for message in input.new_messages {
        let _ = writeln!(prompt, "{}: {}", speaker(message), message.content.trim());
    }
    let _ = write!(
        prompt,
        "\n## Observation Date\n{} ({})\n",
        input.observation_date.format("%Y-%m-%d"),
        input.observation_date.format("%A")
    );
    if let Some(instructions) = input.custom_instructions.map(str::trim).filter(|text| !text.is_empty()) {
        let _ = write!(prompt, "\n## Custom Instructions\n{instructions}\n");
    }
    prompt
}

fn speaker(message: &PromptMessage) -> String {
    match &message.name {
        Some(name) => format!("{} ({name})", message.role),
        None => message.role.clone(),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The conversation flattened to `role: content` lines (system, user and assistant messages).
pub fn flatten(messages: &[PromptMessage]) -> String {
    messages
        .iter()
        .map(|message| format!("{}: {}", message.role, message.content.trim()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One fact as the model returned it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtractedFact {
    /// The fact.
    pub text: String,
    /// `user` or `assistant`, when given and valid.
    pub attributed_to: Option<String>,
    /// Short ids (`"1"`, `"2"`, …) of related existing memories, as the model wrote them.
    pub linked_ids: Vec<String>,
    /// Short ids of existing memories the fact changes or corrects (no longer true).
    pub replaces: Vec<String>,
    /// Named things in the fact.
    pub entities: Vec<String>,
    /// How sure the model is that the fact is true and current (0–1), when given and valid.
    pub confidence: Option<f32>,
    /// The attribute the fact is a current value of (`user.home_city`), when given and valid.
    pub state_key: Option<String>,
    /// When what the fact says happened or began (`event_date`, `YYYY-MM-DD`), when given and
    /// valid.
    pub event_date: Option<chrono::NaiveDate>,
}

/// Reads the facts out of a model reply. Accepts `{"facts": [...]}`, `{"memory": [...]}`,
/// `{"memories": [...]}` or a bare array, of objects or strings; tolerates `<think>` blocks,
/// code fences, prose around the JSON and trailing commas.
///
/// # Errors
/// A short reason when no fact list can be read.
pub fn parse_facts(reply: &str) -> Result<Vec<ExtractedFact>, String> {
    let value = parse_json_lenient(reply)?;
    let list = match &value {
        Value::Array(items) => items,
        Value::Object(object) => ["facts", "memory", "memories", "results"]
            .iter()
            .find_map(|key| object.get(*key).and_then(Value::as_array))
            .ok_or_else(|| "the JSON object has no `facts` list".to_owned())?,
        _ => return Err("the reply is neither a JSON object nor a list".to_owned()),
    };
    Ok(list.iter().filter_map(fact_from).collect())
}

fn fact_from(item: &Value) -> Option<ExtractedFact> {
    let (text, object) = match item {
        Value::String(text) => (text.as_str(), None),
        Value::Object(object) => {
            let text = ["text", "fact", "memory", "content"].iter().find_map(|key| object.get(*key)?.as_str())?;
            (text, Some(object))
        }
        _ => return None,
    };
    // Model output is cleaned rather than refused: a stray U+0000 cannot be stored in Postgres.
    let text = one_line(&strip_nul(text));
    if text.is_empty() {
        return None;
    }
    let strings = |key: &str| -> Vec<String> {
        object
            .and_then(|object| object.get(key))
            .and_then(Value::as_array)
            .map(|values| {
                values
                    .iter()
                    .filter_map(|value| match value {
                        Value::String(text) => Some(strip_nul(text.trim())),
                        Value::Number(number) => Some(number.to_string()),
                        _ => None,
                    })
                    .filter(|text| !text.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    let attributed_to = object
        .and_then(|object| object.get("attributed_to"))
        .and_then(Value::as_str)
        .map(str::to_ascii_lowercase)
        .filter(|who| who == "user" || who == "assistant");
    let confidence = object
        .and_then(|object| object.get("confidence"))
        .and_then(Value::as_f64)
        .filter(|confidence| (0.0..=1.0).contains(confidence))
        .map(|confidence| confidence as f32);
    let state_key = object
        .and_then(|object| object.get("state_key"))
        .and_then(Value::as_str)
        .map(|key| key.trim().to_lowercase())
        .filter(|key| crate::state::check_key(key).is_ok());
    let event_date = object
        .and_then(|object| object.get("event_date"))
        .and_then(Value::as_str)
        .and_then(|date| chrono::NaiveDate::parse_from_str(date.trim(), "%Y-%m-%d").ok());
    Some(ExtractedFact {
        text,
        attributed_to,
        linked_ids: strings("linked_memory_ids"),
        replaces: strings("replaces"),
        entities: strings("entities"),
        confidence,
        state_key,
        event_date,
    })
}

/// Removes `<think>…</think>` blocks (and an unclosed leading one) and code fences.
pub fn strip_wrappers(reply: &str) -> String {
    let mut text = reply.to_owned();
    while let Some(start) = text.find("<think>") {
        match text[start..].find("</think>") {
            Some(end) => text.replace_range(start..start + end + "</think>".len(), ""),
            None => text.truncate(start),
        }
    }
    // A reply that opens mid-thought: drop everything up to a stray closing tag.
    if let Some(end) = text.find("</think>") {
        text.replace_range(..end + "</think>".len(), "");
    }
    let trimmed = text.trim();
    if let Some(inner) = fenced_block(trimmed) {
        return inner.trim().to_owned();
    }
    trimmed.to_owned()
}

fn fenced_block(text: &str) -> Option<&str> {
    let start = text.find("```")?;
    let after = &text[start + 3..];
    let body_start = after.find('\n').map_or(0, |newline| newline + 1);
    let body = &after[body_start..];
    let end = body.find("```").unwrap_or(body.len());
    Some(&body[..end])
}

/// Parses JSON out of a model reply, trying harder each step: as is, the outermost `{…}` or
/// `[…]`, then without trailing commas.
///
/// # Errors
/// A short reason when nothing parses.
pub fn parse_json_lenient(reply: &str) -> Result<Value, String> {
    let text = strip_wrappers(reply);
    if text.is_empty() {
        return Err("the reply is empty".to_owned());
    }
    if let Ok(value) = serde_json::from_str::<Value>(&text) {
        return Ok(value);
    }
    let candidate = outermost_json(&text).ok_or_else(|| "no JSON found in the reply".to_owned())?;
    if let Ok(value) = serde_json::from_str::<Value>(candidate) {
        return Ok(value);
    }
    let repaired = TRAILING_COMMAS.replace_all(candidate, "$1");
    serde_json::from_str::<Value>(&repaired).map_err(|error| format!("invalid JSON: {error}"))
}

/// A comma right before a closing bracket or brace (compiled once).
static TRAILING_COMMAS: std::sync::LazyLock<Regex> =
    std::sync::LazyLock::new(|| Regex::new(r",(\s*[}\]])").expect("valid trailing-comma pattern"));

fn outermost_json(text: &str) -> Option<&str> {
    let object = text.find('{').zip(text.rfind('}'));
    let array = text.find('[').zip(text.rfind(']'));
    let (start, end) = match (object, array) {
        (Some(object), Some(array)) => {
            if array.0 < object.0 {
                array
            } else {
                object
            }
        }
        (Some(span), None) | (None, Some(span)) => span,
        (None, None) => return None,
    };
    (start < end).then(|| &text[start..=end])
}

/// The session key of the message buffer: the present scope ids, sorted by key, `key=value`
/// joined by `&`, with `%`, `&` and `=` percent-escaped in values.
pub fn session_scope(scope: &Scope) -> String {
    let escape = |value: &str| value.replace('%', "%25").replace('&', "%26").replace('=', "%3D");
    [("agent_id", &scope.agent_id), ("run_id", &scope.run_id), ("user_id", &scope.user_id)]
        .iter()
        .filter_map(|(key, value)| value.as_deref().map(|value| format!("{key}={}", escape(value))))
        .collect::<Vec<_>>()
        .join("&")
}

/// Cleans a procedural summary: wrappers removed, whitespace trimmed.
pub fn clean_summary(reply: &str) -> String {
    strip_nul(strip_wrappers(reply).trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(role: &str, content: &str) -> PromptMessage {
        PromptMessage { role: role.into(), name: None, content: content.into() }
    }

    #[test]
    fn sections_come_in_order() {
        let earlier = [message("user", &"x".repeat(400))];
        let existing = ["User lives in Lyon".to_owned(), "User has a cat\nnamed Miso".to_owned()];
        let new_messages = [message("user", "I moved to Porto last month"), message("assistant", "Nice!")];
        let prompt = user_prompt(&ExtractionInput {
            earlier: &earlier,
            existing: &existing,
            new_messages: &new_messages,
            observation_date: NaiveDate::from_ymd_opt(2026, 3, 14).expect("date"),
            custom_instructions: Some("Only travel facts."),
        });
        let positions: Vec<usize> = [
            "## Earlier Messages",
            "## Existing Memories",
            "[1] User lives in Lyon",
            "[2] User has a cat named Miso",
            "## New Messages",
            "user: I moved to Porto last month",
            "## Observation Date\n2026-03-14 (Saturday)",
            "## Custom Instructions\nOnly travel facts.",
        ]
        .iter()
        .map(|needle| prompt.find(needle).unwrap_or_else(|| panic!("{needle} missing from {prompt}")))
        .collect();
        assert!(positions.windows(2).all(|pair| pair[0] < pair[1]), "{prompt}");
        assert!(prompt.contains(&format!("user: {}...", "x".repeat(300))));
    }

    #[test]
    fn agent_scopes_get_the_agent_suffix() {
        let agent = Scope { agent_id: Some("a".into()), ..Scope::default() };
        let both = Scope { agent_id: Some("a".into()), user_id: Some("u".into()), ..Scope::default() };
        assert!(system_prompt(&agent).ends_with(AGENT_SUFFIX));
        assert!(!system_prompt(&both).contains(AGENT_SUFFIX));
    }

    #[test]
    fn tolerant_parsing() {
        let cases = [
            r#"{"facts": [{"text": "User likes tea", "entities": ["tea"]}]}"#,
            "```json\n{\"facts\": [{\"text\": \"User likes tea\"}]}\n```",
            "<think>the user said they like tea, so...</think>\n{\"facts\": [{\"text\": \"User likes tea\"}]}",
            "Sure! Here is the JSON:\n{\"memory\": [{\"id\": \"0\", \"text\": \"User likes tea\"},]}\nHope it helps.",
            r#"[{"text": "User likes tea"}]"#,
            r#"{"facts": ["User likes tea"]}"#,
            "reasoning without an opening tag</think>{\"facts\": [{\"text\": \"User  likes\\ntea\"}]}",
        ];
        for reply in cases {
            let facts = parse_facts(reply).unwrap_or_else(|error| panic!("{reply}: {error}"));
            assert_eq!(facts.len(), 1, "{reply}");
            assert_eq!(facts[0].text, "User likes tea", "{reply}");
        }
        assert_eq!(parse_facts(r#"{"facts": []}"#), Ok(vec![]));
        for broken in ["", "I could not find anything.", "{\"facts\": [{\"text\": ", "<think>endless", "42"] {
            assert!(parse_facts(broken).is_err(), "{broken}");
        }
    }

    #[test]
    fn fact_fields_are_read_and_cleaned() {
        let reply = r#"{"facts": [
            {"text": "Maria works at Siemens", "attributed_to": "USER", "linked_memory_ids": ["2", 3, ""], "entities": ["Maria", " Siemens "], "confidence": 0.6},
            {"text": "  ", "attributed_to": "user"},
            {"text": "User was recommended Kyoto", "attributed_to": "robot", "confidence": 7},
            {"text": "User may move to Oslo", "confidence": "likely", "state_key": "User.Home_City", "event_date": "2026-02-30"},
            {"text": "User moved to Porto", "event_date": "2026-03-01", "replaces": ["1", 4]},
            {"text": "User likes tea", "state_key": "not a key"}
        ]}"#;
        let facts = parse_facts(reply).expect("parses");
        assert_eq!(facts.len(), 5);
        assert_eq!(facts[3].event_date, chrono::NaiveDate::from_ymd_opt(2026, 3, 1));
        assert_eq!(facts[2].event_date, None, "not a date");
        assert_eq!(facts[2].state_key.as_deref(), Some("user.home_city"), "keys are lower-cased");
        assert_eq!((&facts[0].state_key, &facts[4].state_key), (&None, &None), "absent or invalid");
        assert_eq!(facts[0].confidence, Some(0.6));
        assert_eq!((facts[1].confidence, facts[2].confidence), (None, None), "out of range or not a number");
        assert_eq!(facts[0].attributed_to.as_deref(), Some("user"));
        assert_eq!(facts[0].linked_ids, vec!["2", "3"]);
        assert_eq!(
            (facts[3].replaces.clone(), facts[0].replaces.clone()),
            (vec!["1".to_owned(), "4".to_owned()], vec![])
        );
        assert_eq!(facts[0].entities, vec!["Maria", "Siemens"]);
        assert_eq!(facts[1].attributed_to, None);
    }

    #[test]
    fn session_scope_is_sorted_and_escaped() {
        let scope = Scope { user_id: Some("u=1&2%".into()), agent_id: Some("a1".into()), run_id: Some("r1".into()) };
        assert_eq!(session_scope(&scope), "agent_id=a1&run_id=r1&user_id=u%3D1%262%25");
        assert_eq!(session_scope(&Scope { user_id: Some("bob".into()), ..Scope::default() }), "user_id=bob");
    }
}
