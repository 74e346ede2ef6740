//! Entity extraction without a model: named things in a text, for entity linking.

use serde::{Deserialize, Serialize};

/// What kind of thing an entity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityKind {
    /// A proper name (person, place, organisation, product…) whose class is unknown.
    Proper,
    /// A quoted string.
    Quoted,
    /// A technical identifier such as `a.b.c`, `snake_case_name` or `v1.2.3`.
    Identifier,
    /// A person (Chinese part-of-speech `nr`).
    Person,
    /// A place (`ns`).
    Place,
    /// An organisation (`nt`).
    Organization,
    /// Named by the LLM during extraction.
    Llm,
}

impl EntityKind {
    /// Stable lowercase name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proper => "proper",
            Self::Quoted => "quoted",
            Self::Identifier => "identifier",
            Self::Person => "person",
            Self::Place => "place",
            Self::Organization => "organization",
            Self::Llm => "llm",
        }
    }
}

/// One entity found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundEntity {
    /// As written in the text.
    pub text: String,
    /// Its kind.
    pub kind: EntityKind,
}

/// Finds the entities of a text (simple capitalised spans for now).
pub fn extract(text: &str) -> Vec<FoundEntity> {
    text.split_whitespace()
        .map(|word| word.trim_matches(|c: char| !c.is_alphanumeric()))
        .filter(|word| word.chars().next().is_some_and(char::is_uppercase))
        .map(|word| FoundEntity { text: word.to_owned(), kind: EntityKind::Proper })
        .collect()
}

/// The form entities are matched on: lowercase, whitespace collapsed, surrounding punctuation removed.
pub fn normalize(entity: &str) -> String {
    entity
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase()
}
