//! Prompt size of one extraction call, in tokens (OpenAI's o200k_base and cl100k_base
//! tokenizers), for a typical add: a 4-message exchange, 10 buffered earlier messages and the 10
//! nearest existing memories. Run: `cargo bench -p mem0-core --bench prompt_tokens`.

use chrono::NaiveDate;
use mem0_core::extraction::{system_prompt, user_prompt, ExtractionInput, PromptMessage};
use mem0_core::Scope;

fn message(role: &str, content: &str) -> PromptMessage {
    PromptMessage { role: role.to_owned(), name: None, content: content.to_owned() }
}

fn main() {
    let earlier: Vec<PromptMessage> = [
        ("user", "Morning! Back from the weekend in the mountains."),
        ("assistant", "Welcome back! How was the hike?"),
        ("user", "Long. We did the ridge trail above Chamonix, about 18 km, and my knee started hurting near the end."),
        ("assistant", "Sorry about the knee. Did you rest it properly afterwards?"),
        ("user", "Ice and ibuprofen, it's fine now. Anyway, I need to plan my sister's birthday."),
        ("assistant", "Happy to help. When is it and what does she like?"),
        ("user", "March 14th. Lena loves Japanese food and jazz, and she just moved to Lyon."),
        ("assistant", "A jazz brunch or an omakase dinner in Lyon could work. Budget?"),
        ("user", "Around 200 euros for the two of us."),
        ("assistant", "Got it, I'll keep that in mind."),
    ]
    .iter()
    .map(|(role, content)| message(role, content))
    .collect();
    let existing: Vec<String> = [
        "User's sister Lena lives in Lyon since February 2026",
        "Lena's birthday is on March 14",
        "Lena loves Japanese food and jazz",
        "User hiked the ridge trail above Chamonix (about 18 km) on 2026-02-28",
        "User's knee hurt at the end of the Chamonix hike",
        "User's budget for Lena's birthday outing is around 200 euros for two people",
        "User works as a product designer at a fintech in Geneva",
        "User is vegetarian",
        "User prefers trains over flights for trips under 6 hours",
        "User was recommended a jazz brunch or an omakase dinner in Lyon for Lena's birthday",
    ]
    .iter()
    .map(|text| (*text).to_owned())
    .collect();
    let new_messages = vec![
        message("user", "I booked the omakase place, Sushi Kanpai near Bellecour, for Saturday the 14th at 8pm."),
        message("assistant", "Great choice! Want me to find a jazz bar nearby for afterwards?"),
        message("user", "Yes please, something quiet. Also remind me that Lena is allergic to shellfish."),
        message("assistant", "Noted: no shellfish for Lena. I'll look for quiet jazz bars near Bellecour."),
    ];
    let scope = Scope { user_id: Some("alice".to_owned()), ..Scope::default() };
    let system = system_prompt(&scope);
    let user = user_prompt(&ExtractionInput {
        earlier: &earlier,
        existing: &existing,
        new_messages: &new_messages,
        observation_date: NaiveDate::from_ymd_opt(2026, 3, 2).expect("date"),
        custom_instructions: None,
    });
    let o200k = tiktoken_rs::o200k_base().expect("o200k_base");
    let cl100k = tiktoken_rs::cl100k_base().expect("cl100k_base");
    let count = |bpe: &tiktoken_rs::CoreBPE, text: &str| bpe.encode_with_special_tokens(text).len();
    println!("extraction prompt of a typical add (4 new messages, 10 earlier, 10 existing memories)");
    println!("| part | chars | o200k tokens | cl100k tokens |");
    println!("|---|---|---|---|");
    for (name, text) in [("system (rules)", system.as_str()), ("user (context)", user.as_str())] {
        println!("| {name} | {} | {} | {} |", text.chars().count(), count(&o200k, text), count(&cl100k, text));
    }
    // Chat formatting adds a few tokens per message (about 4 each, plus 3 for the reply).
    let total_o200k = count(&o200k, &system) + count(&o200k, &user) + 2 * 4 + 3;
    let total_cl100k = count(&cl100k, &system) + count(&cl100k, &user) + 2 * 4 + 3;
    println!(
        "| total with message framing | {} | {total_o200k} | {total_cl100k} |",
        system.chars().count() + user.chars().count()
    );
}
