//! Text analysis for keyword retrieval: the same function turns memory texts into stored index
//! terms (`text_lemmatized`) and queries into query terms.

/// Analyses text into index terms, in order of appearance (repeats kept: they are term
/// frequencies).
pub fn terms(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).map(str::to_lowercase).collect()
}

/// The analysed form stored with each memory: its terms joined by single spaces.
pub fn lemmatize(text: &str) -> String {
    terms(text).join(" ")
}
