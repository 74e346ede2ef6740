//! Entity extraction without a model: named things in a text, for entity linking.
//!
//! Four rule-based passes run over the text; their candidates are ordered by position and
//! deduplicated by [`normalize`], keeping the first one seen:
//!
//! * **Quoted strings** (`"…"`, `“…”`, `'…'`, `‘…’`, `«…»`, `「…」`, `『…』`) of one to six words
//!   and more than two characters → [`EntityKind::Quoted`]. A single quote counts only when it
//!   stands apart from words, so apostrophes (`Tom's`, `don't`) never open a quote.
//! * **Technical identifiers** → [`EntityKind::Identifier`]: dotted names
//!   (`person.properties.email`, `Node.js`; not `e.g.` or `U.S.`), `snake_case`/`SCREAMING_CASE`,
//!   lowerCamelCase (`getUserId`, `iPhone`), versions with a `v` (`v1.2.3`), `::` paths
//!   (`std::sync::Arc`), file paths (`src/main.rs`, `/etc/hosts`, `a/b/c`; not `and/or` or
//!   `24/7`), URLs and e-mail addresses. Bare numbers and dates are never entities.
//! * **English proper names** → [`EntityKind::Proper`]: maximal runs of capitalised words, which
//!   may contain the connectors `of`, `for`, `de`, `da`, `di`, `del`, `della`, `der`, `den`, `du`,
//!   `van`, `von`, `&` (and `the` after another connector) between two capitalised words: `Bank
//!   of America`, `Lord of the Rings`, `Johnson & Johnson`. Any punctuation, a number or a
//!   lowercase word ends a run, so list items stay apart (`Claude Code 8,916, Codex` → `Claude
//!   Code`, `Codex`) and `and` always splits (`Cartesia and Deepgram`). Rejected:
//!   - stop words written with a capital (`The`, `I`, `To`), honorifics (`Mr`, `Dr`: `Dr. Smith` →
//!     `Smith`), month and weekday names;
//!   - the first word of a sentence when it is a common sentence starter (`Yesterday`, `Hey`,
//!     `Please`, `Remember`, …): other capitalised first words are kept, as names often start
//!     facts (`Tom starts a job at Google`);
//!   - runs made only of generic role or family words (`User`, `Assistant`, `Agent`, `AI`, `OK`,
//!     `Mom`, `Dad`, `Tips`, …);
//!   - all-caps words in a text that is mostly written in capitals (shouting).
//!
//!   UpperCamelCase words (`OpenClaw`, `YouTube`, `PostgreSQL`) are treated as names, which is
//!   what they almost always are in prose; a possessive `'s` is stripped (`Google's` → `Google`).
//! * **Chinese** (when the text has Han characters): jieba part-of-speech tags; words of two or
//!   more characters tagged `nr`/`nrfg` → [`EntityKind::Person`], `ns*` → [`EntityKind::Place`],
//!   `nt*` → [`EntityKind::Organization`], `nz` and `nrt` (transliterated foreign names, which
//!   in jieba's dictionary are as often brands such as `阿里巴巴` as people) →
//!   [`EntityKind::Proper`]. Latin words inside Chinese
//!   text (jieba's `eng` tag) are covered by the English pass, where CJK characters separate
//!   words, so `我在Google工作` yields `Google` with the same capitalisation rules.
//!
//! Multi-word topic phrases (`machine learning`) are not produced: without a parser they cannot
//! be told from generic noun phrases reliably.

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use unicode_normalization::UnicodeNormalization;

use crate::analysis::{is_cjk, is_english_stop_word, is_han, jieba, strip_clitics};

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

/// Longest entity kept, in characters.
const MAX_ENTITY_CHARS: usize = 100;

/// Most words in a quoted entity.
const MAX_QUOTED_WORDS: usize = 6;

/// Words that are never entities on their own, even capitalised: roles, family words, chat
/// filler and generic nouns. A proper-name run made only of these is rejected. Sorted.
#[rustfmt::skip]
const GENERIC_WORDS: &[&str] = &[
    "admin", "afternoon", "agent", "agents", "ai", "am", "answer", "answers", "asap", "assistant", "aunt", "boss",
    "bot", "brother", "btw", "chat", "chatbot", "client", "clients", "conversation", "cousin", "customer", "customers",
    "dad", "daddy", "data", "daughter", "day", "evening", "everybody", "everyone", "example", "examples", "faq",
    "father", "feature", "features", "friend", "friends", "fyi", "goal", "goals", "grandfather", "grandma",
    "grandmother", "grandpa", "granny", "hello", "hey", "hi", "human", "humans", "husband", "idea", "ideas", "info",
    "information", "issue", "issues", "item", "items", "lol", "memories", "memory", "message", "messages", "mom",
    "mommy", "month", "morning", "mother", "mum", "mummy", "night", "note", "notes", "ok", "okay", "omg", "parent",
    "parents", "people", "person", "pm", "problem", "problems", "question", "questions", "sister", "somebody",
    "someone", "son", "step", "steps", "stuff", "summary", "system", "task", "tasks", "team", "thanks", "thing",
    "things", "tip", "tips", "today", "todo", "tomorrow", "tonight", "top", "uncle", "update", "updates", "user",
    "users", "week", "weekend", "wife", "year", "yesterday",
];

/// Common first words of a sentence that are not names (besides stop words and generic words).
/// Sorted.
#[rustfmt::skip]
const SENTENCE_STARTERS: &[&str] = &[
    "according", "actually", "add", "again", "ah", "always", "another", "anyway", "apparently", "ask", "basically",
    "book", "bring", "buy", "call", "check", "come", "cool", "create", "currently", "dear", "definitely", "email",
    "enjoys", "every", "everything", "few", "finally", "find", "first", "fortunately", "generally", "get", "give", "go",
    "good", "got", "great", "has", "hate", "hates", "help", "honestly", "hopefully", "however", "important", "instead",
    "keep", "know", "last", "later", "let", "lets", "like", "likes", "lives", "look", "love", "loves", "make", "many",
    "maybe", "meanwhile", "meet", "most", "moved", "need", "needs", "never", "new", "next", "nice", "nobody", "none",
    "nope", "nothing", "now", "obviously", "often", "oh", "old", "once", "one", "only", "open", "order", "otherwise",
    "overall", "perhaps", "pick", "ping", "plans", "play", "please", "prefers", "probably", "put", "read", "really",
    "recently", "regarding", "remember", "run", "schedule", "second", "see", "send", "set", "several", "show",
    "something", "sometimes", "soon", "sorry", "start", "still", "stop", "sure", "take", "tell", "text", "thank",
    "think", "third", "try", "turn", "unfortunately", "use", "usually", "visit", "want", "wants", "watch", "well",
    "went", "works", "wow", "write", "yeah", "yep", "yes",
];

/// Month and weekday names (and unambiguous abbreviations): dates, not entities. Sorted.
#[rustfmt::skip]
const CALENDAR_WORDS: &[&str] = &[
    "april", "aug", "august", "dec", "december", "feb", "february", "fri", "friday", "january", "july", "june", "march",
    "may", "monday", "nov", "november", "oct", "october", "saturday", "sep", "sept", "september", "sunday", "thu",
    "thurs", "thursday", "tue", "tues", "tuesday", "wednesday",
];

/// Titles dropped from the front of a name (`Dr. Smith` → `Smith`). Sorted.
#[rustfmt::skip]
const HONORIFICS: &[&str] = &[
    "dr", "madam", "miss", "mr", "mrs", "ms", "mx", "prof", "sir",
];

/// Lowercase words allowed inside a proper-name run between capitalised words. Sorted.
#[rustfmt::skip]
const CONNECTORS: &[&str] = &[
    "da", "de", "del", "della", "den", "der", "di", "du", "for", "of", "the", "van", "von",
];

fn listed(list: &[&str], word: &str) -> bool {
    list.binary_search(&word).is_ok()
}

/// Finds the entities of a text, in order of first appearance, deduplicated by [`normalize`].
pub fn extract(text: &str) -> Vec<FoundEntity> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    let mut candidates: Vec<(usize, FoundEntity)> = Vec::new();
    quoted(text, &mut candidates);
    let tokens = tokenize(text);
    for token in &tokens {
        if token.identifier {
            candidates.push((token.start, FoundEntity { text: token.text.to_owned(), kind: EntityKind::Identifier }));
        }
    }
    proper_names(&tokens, &mut candidates);
    if text.chars().any(is_han) {
        chinese(text, &mut candidates);
    }
    candidates.sort_by_key(|(start, _)| *start);
    let mut seen = std::collections::HashSet::new();
    candidates
        .into_iter()
        .map(|(_, entity)| entity)
        .filter(|entity| entity.text.chars().count() <= MAX_ENTITY_CHARS)
        .filter(|entity| {
            let key = normalize(&entity.text);
            !key.is_empty() && seen.insert(key)
        })
        .collect()
}

/// The form entities are matched on: NFKC-folded, lowercase, whitespace collapsed, surrounding
/// punctuation removed (a trailing `+`/`#` after a letter stays: `C++`, `C#`; so does a leading
/// `.` before a letter: `.NET`), and a leading `the ` removed (`The Beatles` ≡ `Beatles`).
pub fn normalize(entity: &str) -> String {
    let folded: String = entity.nfkc().collect();
    let collapsed = folded.split_whitespace().collect::<Vec<_>>().join(" ");
    let lower = trim_punctuation(&collapsed).to_lowercase();
    let without_article = lower.strip_prefix("the ").unwrap_or(&lower);
    trim_punctuation(without_article).to_owned()
}

/// Trims non-alphanumeric characters from both ends, keeping `+`/`#` right after an
/// alphanumeric character at the end and a `.` right before a letter at the start.
fn trim_punctuation(text: &str) -> &str {
    let mut end = text.len();
    while let Some(last) = text[..end].chars().next_back() {
        if last.is_alphanumeric() {
            break;
        }
        if matches!(last, '+' | '#') {
            let body = text[..end].trim_end_matches(['+', '#']);
            if body.chars().next_back().is_some_and(char::is_alphanumeric) {
                break;
            }
        }
        end -= last.len_utf8();
    }
    let head = &text[..end];
    let mut start = 0;
    for (index, c) in head.char_indices() {
        if c.is_alphanumeric() || (c == '.' && head[index + 1..].chars().next().is_some_and(char::is_alphabetic)) {
            break;
        }
        start = index + c.len_utf8();
    }
    &head[start..]
}

// ---------------------------------------------------------------------------------------------
// Quoted strings

static DOUBLE_QUOTED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#""([^"\n]+)"|“([^”\n]+)”|„([^“”\n]+)[“”]|«([^»\n]+)»|《([^》\n]+)》|「([^」\n]+)」|『([^』\n]+)』"#)
        .expect("valid quote pattern")
});

fn quoted(text: &str, out: &mut Vec<(usize, FoundEntity)>) {
    for captures in DOUBLE_QUOTED.captures_iter(text) {
        if let (Some(whole), Some(inner)) = (captures.get(0), captures.iter().skip(1).flatten().next()) {
            push_quoted(whole.start(), inner.as_str(), out);
        }
    }
    // Single quotes: an opening one stands after a space, a bracket or the start, before a
    // non-space; a closing one stands after a non-space, before a non-alphanumeric or the end.
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut index = 0;
    while index < chars.len() {
        let (start, c) = chars[index];
        let before = index.checked_sub(1).map(|i| chars[i].1);
        let after = chars.get(index + 1).map(|&(_, c)| c);
        let opens = matches!(c, '\'' | '‘')
            && before.is_none_or(|b| b.is_whitespace() || "([{".contains(b))
            && after.is_some_and(|a| !a.is_whitespace());
        if !opens {
            index += 1;
            continue;
        }
        let mut close = None;
        for j in index + 1..chars.len() {
            let (offset, d) = chars[j];
            // A quote is short and on one line; bounding the search keeps long texts linear.
            if d == '\n' || offset - start > 4 * MAX_ENTITY_CHARS {
                break;
            }
            let closes = matches!(d, '\'' | '’')
                && !chars[j - 1].1.is_whitespace()
                && j - 1 > index
                && chars.get(j + 1).is_none_or(|&(_, n)| !n.is_alphanumeric());
            if closes {
                close = Some(j);
                break;
            }
        }
        match close {
            Some(j) => {
                let inner = &text[start + c.len_utf8()..chars[j].0];
                push_quoted(start, inner, out);
                index = j + 1;
            }
            None => index += 1,
        }
    }
}

fn push_quoted(start: usize, inner: &str, out: &mut Vec<(usize, FoundEntity)>) {
    let inner = inner.trim().trim_end_matches(['.', ',', ';', ':', '!', '?', '。', '，', '！', '？']).trim();
    let words: Vec<&str> = inner.split_whitespace().collect();
    let chars = inner.chars().count();
    let cjk = inner.chars().any(is_cjk);
    let (long_enough, word_count_ok) =
        if cjk { (chars >= 2, chars <= 20) } else { (chars > 2, (1..=MAX_QUOTED_WORDS).contains(&words.len())) };
    let all_stop = words.iter().all(|word| is_english_stop_word(&strip_clitics(&word.to_lowercase())));
    if long_enough && word_count_ok && !all_stop && inner.chars().any(char::is_alphanumeric) {
        out.push((start, FoundEntity { text: words.join(" "), kind: EntityKind::Quoted }));
    }
}

// ---------------------------------------------------------------------------------------------
// Tokens (for identifiers and proper names)

/// A whitespace- or CJK-separated word of the text with its surrounding punctuation removed.
#[derive(Debug)]
struct Token<'a> {
    /// Byte offset of `text` in the analysed text.
    start: usize,
    /// The word as written, without surrounding punctuation or a possessive `'s`.
    text: &'a str,
    /// Display form: `text`, plus an abbreviation dot (`F.`, `U.S.`).
    display: String,
    /// A technical identifier (never part of a name).
    identifier: bool,
    /// A contraction such as `I'm`, `we'll`, `don't`: never part of a name.
    contraction: bool,
    /// The word begins a sentence (first word, after `.`/`!`/`?`/`:`, a line break or opening
    /// punctuation).
    sentence_start: bool,
    /// Something (punctuation, a line break, CJK text) separates it from the previous word.
    break_before: bool,
    /// Punctuation or a possessive follows it: no name continues past it.
    break_after: bool,
}

static URL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$").expect("valid url pattern"));
static EMAIL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+$").expect("valid email pattern")
});
static DOTTED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$").expect("valid dotted pattern")
});
static VERSION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[vV][0-9]+(?:\.[0-9]+)+(?:[-+][0-9A-Za-z.-]+)?$").expect("valid version pattern"));
static SNAKE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^_*[A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)+_*$").expect("valid snake_case pattern"));
static LOWER_CAMEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*$").expect("valid camelCase pattern"));
static RUST_PATH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)+$").expect("valid path pattern"));
static FILE_PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:~|\.{1,2})?/?[A-Za-z0-9._@~-]+(?:/[A-Za-z0-9._@~-]+)+/?$").expect("valid file path pattern")
});

/// Whether `word` (surrounding quotes/brackets/sentence punctuation removed) is a technical
/// identifier.
fn is_identifier(word: &str) -> bool {
    if URL.is_match(word) || EMAIL.is_match(word) || VERSION.is_match(word) || RUST_PATH.is_match(word) {
        return true;
    }
    if DOTTED.is_match(word) {
        // `e.g`, `i.e`, `U.S`, `a.m` are abbreviations, not names.
        return word.split('.').any(|segment| segment.chars().count() > 1);
    }
    if SNAKE.is_match(word) || LOWER_CAMEL.is_match(word) {
        return true;
    }
    if FILE_PATH.is_match(word) && word.chars().any(|c| c.is_ascii_alphabetic()) {
        let rooted = word.starts_with(['/', '~', '.']);
        let deep = word.trim_end_matches('/').matches('/').count() >= 2;
        let filelike = word.split('/').any(|segment| segment.contains(['.', '_']));
        return rooted || deep || filelike;
    }
    false
}

/// Punctuation removed around a word before testing it as an identifier.
fn is_wrapping_punctuation(c: char) -> bool {
    "\"'`“”‘’«»()[]{}<>.,;:!?。，！？、；：…".contains(c)
}

/// Characters after a word that end a sentence.
fn ends_sentence(trail: &str) -> bool {
    trail.contains(['.', '!', '?', ':', ';', '。', '！', '？', '…', '：', '；'])
}

fn has_possessive(word: &str) -> Option<&str> {
    word.strip_suffix("'s").or_else(|| word.strip_suffix("’s")).or_else(|| word.strip_suffix("ʼs"))
}

fn is_contraction(word: &str) -> bool {
    let lower = word.to_lowercase().replace(['’', 'ʼ'], "'");
    ["'m", "'ll", "'d", "'ve", "'re", "n't"].iter().any(|clitic| lower.ends_with(clitic))
}

/// Single letters joined by dots (`U.S`, `F`), written before a dot: an abbreviation.
fn is_dotted_abbreviation(word: &str) -> bool {
    word.split('.').all(|segment| segment.chars().count() == 1 && segment.chars().all(char::is_alphabetic))
}

fn tokenize(text: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut previous_ended_sentence = true;
    let mut pending_break = false;
    let mut newline = false;
    let mut cjk_gap = false;
    let mut chunk_start: Option<usize> = None;
    let boundary = |c: char| c.is_whitespace() || is_cjk(c);
    let mut index = 0;
    let bytes_len = text.len();
    while index <= bytes_len {
        let c = text[index..].chars().next();
        let is_boundary = c.is_none_or(boundary);
        match (chunk_start, is_boundary) {
            (None, true) => {
                if let Some(c) = c {
                    newline |= c == '\n';
                    cjk_gap |= is_cjk(c);
                }
            }
            (None, false) => chunk_start = Some(index),
            (Some(start), true) => {
                let chunk = &text[start..index];
                let gap = Gap { newline, cjk: cjk_gap };
                match chunk_token(chunk, start, gap, previous_ended_sentence, pending_break) {
                    ChunkOutcome::Token(token, ended) => {
                        previous_ended_sentence = ended;
                        pending_break = false;
                        tokens.push(token);
                    }
                    ChunkOutcome::Punctuation { ends_sentence } => {
                        previous_ended_sentence |= ends_sentence;
                        pending_break = true;
                    }
                }
                chunk_start = None;
                newline = c == Some('\n');
                cjk_gap = c.is_some_and(is_cjk);
            }
            (Some(_), false) => {}
        }
        index += c.map_or(1, char::len_utf8);
    }
    tokens
}

#[derive(Clone, Copy)]
struct Gap {
    newline: bool,
    cjk: bool,
}

enum ChunkOutcome<'a> {
    /// A word, and whether it ends a sentence.
    Token(Token<'a>, bool),
    /// Punctuation only (`-`, `—`, `:`): separates words.
    Punctuation { ends_sentence: bool },
}

fn chunk_token(chunk: &str, start: usize, gap: Gap, after_sentence_end: bool, pending: bool) -> ChunkOutcome<'_> {
    let break_before = gap.newline || gap.cjk || pending;
    if chunk == "&" {
        let token = Token {
            start,
            text: chunk,
            display: chunk.to_owned(),
            identifier: false,
            contraction: false,
            sentence_start: false,
            break_before,
            break_after: false,
        };
        return ChunkOutcome::Token(token, false);
    }
    // Identifier view: only wrapping punctuation removed.
    let ident = chunk.trim_matches(is_wrapping_punctuation);
    let ident_start = start + (chunk.len() - chunk.trim_start_matches(is_wrapping_punctuation).len());
    // Word view: every non-alphanumeric character removed at the front; at the back too,
    // except `+`/`#` right after the word (`C++`, `C#`).
    let rest = chunk.trim_start_matches(|c: char| !c.is_alphanumeric());
    let lead = &chunk[..chunk.len() - rest.len()];
    if rest.is_empty() {
        return ChunkOutcome::Punctuation { ends_sentence: ends_sentence(chunk) || gap.newline };
    }
    let body = rest.trim_end_matches(|c: char| !c.is_alphanumeric());
    let symbols = rest[body.len()..].len() - rest[body.len()..].trim_start_matches(['+', '#']).len();
    let mut word = &rest[..body.len() + symbols];
    let trail = &rest[word.len()..];
    let word_start = start + lead.len();
    let possessive = has_possessive(word);
    if let Some(stripped) = possessive {
        word = stripped;
    }
    let lower = word.to_lowercase();
    let abbreviation = trail.starts_with('.') && (listed(HONORIFICS, &lower) || is_dotted_abbreviation(word));
    let ended = !abbreviation && ends_sentence(trail);
    let identifier = !ident.is_empty() && is_identifier(ident);
    let display = if abbreviation && !listed(HONORIFICS, &lower) { format!("{word}.") } else { word.to_owned() };
    let token = Token {
        start: if identifier { ident_start } else { word_start },
        text: if identifier { ident } else { word },
        display,
        identifier,
        contraction: is_contraction(word),
        sentence_start: after_sentence_end || gap.newline || !lead.is_empty(),
        break_before: break_before || !lead.is_empty(),
        break_after: (!trail.is_empty() && !abbreviation) || possessive.is_some() || ended,
    };
    ChunkOutcome::Token(token, ended)
}

// ---------------------------------------------------------------------------------------------
// Proper names

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Name,
    Connector,
    Other,
}

fn role(token: &Token<'_>, span_open: bool, shouting: bool) -> Role {
    let word = token.text;
    if token.identifier || token.contraction {
        return Role::Other;
    }
    if word == "&" {
        return Role::Connector;
    }
    let lower = word.to_lowercase();
    // A connector continues an open name; a capitalised one (`Of` in title case) too.
    if span_open && listed(CONNECTORS, &lower) && !token.break_after && !token.break_before {
        return Role::Connector;
    }
    let Some(first) = word.chars().next() else { return Role::Other };
    if !first.is_uppercase()
        || !word.chars().any(char::is_alphabetic)
        || !word.chars().all(|c| c.is_alphanumeric() || "-'’&.+#".contains(c))
    {
        return Role::Other;
    }
    let letters = word.chars().filter(|c| c.is_alphabetic()).count();
    let all_caps = letters >= 2 && !word.chars().any(char::is_lowercase);
    if shouting && all_caps {
        return Role::Other;
    }
    if listed(HONORIFICS, &lower) || listed(CALENDAR_WORDS, &lower) {
        return Role::Other;
    }
    let plain = strip_clitics(&lower.replace('’', "'"));
    if (!all_caps || token.sentence_start) && is_english_stop_word(&plain) {
        return Role::Other;
    }
    if token.sentence_start && (listed(SENTENCE_STARTERS, &plain) || listed(GENERIC_WORDS, &plain)) {
        return Role::Other;
    }
    Role::Name
}

/// Whether most words of the text are written in capitals (then capitals mean nothing).
fn is_shouting(tokens: &[Token<'_>]) -> bool {
    let words: Vec<&Token<'_>> =
        tokens.iter().filter(|t| t.text.chars().filter(|c| c.is_alphabetic()).count() >= 2).collect();
    let caps = words.iter().filter(|t| !t.text.chars().any(char::is_lowercase)).count();
    words.len() >= 3 && caps * 5 >= words.len() * 3
}

fn proper_names(tokens: &[Token<'_>], out: &mut Vec<(usize, FoundEntity)>) {
    let shouting = is_shouting(tokens);
    let mut span: Vec<usize> = Vec::new();
    let mut connectors: Vec<usize> = Vec::new();
    for (index, token) in tokens.iter().enumerate() {
        if token.break_before {
            flush_name(tokens, &mut span, out);
            connectors.clear();
        }
        match role(token, !span.is_empty(), shouting) {
            Role::Name => {
                if span.is_empty() {
                    connectors.clear();
                }
                span.append(&mut connectors);
                span.push(index);
                if token.break_after {
                    flush_name(tokens, &mut span, out);
                }
            }
            Role::Connector
                if !span.is_empty()
                    && connectors.len() < 2
                    && (!token.text.eq_ignore_ascii_case("the") || !connectors.is_empty()) =>
            {
                connectors.push(index);
                if token.break_after {
                    flush_name(tokens, &mut span, out);
                    connectors.clear();
                }
            }
            Role::Connector | Role::Other => {
                flush_name(tokens, &mut span, out);
                connectors.clear();
            }
        }
    }
    flush_name(tokens, &mut span, out);
}

fn flush_name(tokens: &[Token<'_>], span: &mut Vec<usize>, out: &mut Vec<(usize, FoundEntity)>) {
    let indices = std::mem::take(span);
    let Some(&first) = indices.first() else { return };
    let words: Vec<&Token<'_>> = indices.iter().map(|&i| &tokens[i]).collect();
    let generic = words.iter().all(|t| {
        let lower = strip_clitics(&t.text.to_lowercase().replace('’', "'"));
        listed(GENERIC_WORDS, &lower) || t.text == "&"
    });
    if generic {
        return;
    }
    let mut text = words.iter().map(|t| t.display.as_str()).collect::<Vec<_>>().join(" ");
    // A lone initial at the end keeps no dot (`Plan B.` → `Plan B`).
    if words.len() > 1 && text.ends_with('.') && words.last().is_some_and(|t| t.text.chars().count() == 1) {
        text.pop();
    }
    if text.chars().count() < 2 {
        return;
    }
    out.push((tokens[first].start, FoundEntity { text, kind: EntityKind::Proper }));
}

// ---------------------------------------------------------------------------------------------
// Chinese

fn chinese(text: &str, out: &mut Vec<(usize, FoundEntity)>) {
    for tag in jieba().tag(text, true) {
        let kind = if tag.tag == "nrt" {
            // Transliterated foreign names: people, but as often brands and companies (阿里巴巴).
            EntityKind::Proper
        } else if tag.tag.starts_with("nr") {
            EntityKind::Person
        } else if tag.tag.starts_with("ns") {
            EntityKind::Place
        } else if tag.tag.starts_with("nt") {
            EntityKind::Organization
        } else if tag.tag == "nz" {
            EntityKind::Proper
        } else {
            continue;
        };
        if tag.word.chars().count() >= 2 && tag.word.chars().all(is_han) {
            out.push((tag.byte_start, FoundEntity { text: tag.word.to_owned(), kind }));
        }
    }
}

/// Most entities kept per fact (their longest length is [`MAX_ENTITY_CHARS`]).
const MAX_ENTITIES_PER_FACT: usize = 20;

/// Named things in a memory text, found without a model (rule-based English, tagged Chinese).
pub(crate) fn names_in(text: &str) -> Vec<String> {
    clean(extract(text).into_iter().map(|entity| entity.text).collect())
}

/// Trims, drops empty, over-long and repeated (case-insensitively) entity names; bounds the count.
pub(crate) fn clean(entities: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    entities
        .into_iter()
        .map(|entity| entity.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|entity| !entity.is_empty() && entity.chars().count() <= MAX_ENTITY_CHARS)
        .filter(|entity| seen.insert(entity.to_lowercase()))
        .take(MAX_ENTITIES_PER_FACT)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(text: &str) -> Vec<String> {
        extract(text).into_iter().map(|entity| entity.text).collect()
    }

    fn found(text: &str) -> Vec<(String, EntityKind)> {
        extract(text).into_iter().map(|entity| (entity.text, entity.kind)).collect()
    }

    fn proper(text: &str) -> (String, EntityKind) {
        (text.to_owned(), EntityKind::Proper)
    }

    #[test]
    fn word_lists_are_sorted() {
        for list in [GENERIC_WORDS, SENTENCE_STARTERS, CALENDAR_WORDS, HONORIFICS, CONNECTORS] {
            assert!(list.windows(2).all(|pair| pair[0] < pair[1]), "{list:?}");
        }
    }

    #[test]
    fn people_and_organisations() {
        assert_eq!(
            found("John Smith works at Google on machine learning projects"),
            [proper("John Smith"), proper("Google")]
        );
        assert_eq!(texts("User's brother Tom starts a job at Google in the week of 2026-05-11"), ["Tom", "Google"]);
        assert_eq!(texts("Maria works at Siemens in Munich"), ["Maria", "Siemens", "Munich"]);
    }

    #[test]
    fn connectors_inside_names() {
        assert_eq!(texts("She works at Bank of America"), ["Bank of America"]);
        assert_eq!(texts("He studied at the University of Oslo last year"), ["University of Oslo"]);
        assert_eq!(texts("We invested in Johnson & Johnson"), ["Johnson & Johnson"]);
        assert_eq!(texts("I listen to Ludwig van Beethoven"), ["Ludwig van Beethoven"]);
        assert_eq!(texts("We watched Lord of the Rings twice"), ["Lord of the Rings"]);
        assert_eq!(texts("They visited the Center for Disease Control"), ["Center for Disease Control"]);
        assert_eq!(texts("Visit the Museum of Modern Art"), ["Museum of Modern Art"]);
        // A connector needs a capitalised word on both sides; `and` always splits.
        assert_eq!(texts("Ask Bob of course"), ["Bob"]);
        assert_eq!(texts("We compared Cartesia and Deepgram"), ["Cartesia", "Deepgram"]);
    }

    #[test]
    fn sentence_starters_and_stop_words() {
        assert_eq!(texts("Yesterday John called me"), ["John"]);
        assert_eq!(texts("The weather is nice"), Vec::<String>::new());
        assert_eq!(texts("My sister lives in Paris"), ["Paris"]);
        assert_eq!(texts("Hey, please remind me. Remember to call Anna."), ["Anna"]);
        assert!(extract("I think We Should go").is_empty());
        // A capitalised first word that is not a common starter is kept.
        assert_eq!(texts("Tom likes hiking"), ["Tom"]);
    }

    #[test]
    fn months_and_weekdays_are_not_entities() {
        assert_eq!(texts("We met Anna on Monday in March"), ["Anna"]);
        assert_eq!(texts("In May we fly to Lisbon on Friday"), ["Lisbon"]);
    }

    #[test]
    fn possessives_are_stripped() {
        assert_eq!(texts("I visited Google's new office"), ["Google"]);
        assert_eq!(texts("That is Tom’s car and James' bike"), ["Tom", "James"]);
    }

    #[test]
    fn honorifics_and_initials() {
        assert_eq!(texts("Dr. Smith met Mr. John Brown"), ["Smith", "John Brown"]);
        assert_eq!(texts("She admires John F. Kennedy"), ["John F. Kennedy"]);
        assert_eq!(texts("He moved to the U.S. in 2019"), ["U.S."]);
    }

    #[test]
    fn generic_words_are_rejected() {
        assert!(extract("User likes tea").is_empty());
        assert!(extract("The Assistant said OK").is_empty());
        assert!(extract("Mom and Dad visited").is_empty());
        assert!(extract("I think AI is the Future").iter().all(|e| e.text != "AI"));
        assert!(extract("I like things and stuff").is_empty());
        assert!(extract("Top Tips").is_empty());
        assert!(extract("The Agent asked the User").is_empty());
    }

    #[test]
    fn deduplicated_in_first_seen_order() {
        assert_eq!(texts("Google is great. I love working at Google."), ["Google"]);
        assert_eq!(texts("At Samsung, Sam leads design."), ["Samsung", "Sam"]);
        assert_eq!(texts("Rust and Go. I prefer Rust over Go, and Zig."), ["Rust", "Go", "Zig"]);
    }

    #[test]
    fn quoted_strings() {
        let got = found(r#"She is reading "The Great Gatsby" this week"#);
        assert_eq!(got, [("The Great Gatsby".to_owned(), EntityKind::Quoted)]);
        assert_eq!(normalize(&got[0].0), "great gatsby");
        assert_eq!(found("He said ‘hello world’ to me"), [("hello world".to_owned(), EntityKind::Quoted)]);
        assert_eq!(found("the motto 'move fast' stuck"), [("move fast".to_owned(), EntityKind::Quoted)]);
        assert_eq!(found("they call it “deep work”."), [("deep work".to_owned(), EntityKind::Quoted)]);
        // Apostrophes are not quotes; quotes of stop words, of ≤ 2 characters or > 6 words are not kept.
        assert!(extract("don't touch Tom's 'em").iter().all(|e| e.kind != EntityKind::Quoted));
        assert!(extract(r#"he said "it" and "ok""#).is_empty());
        assert!(extract(r#"she wrote "one two three four five six seven" once"#).is_empty());
        let quoted = |text: &str| (text.to_owned(), EntityKind::Quoted);
        assert_eq!(found("书名是《三体》和「流浪地球」"), [quoted("三体"), quoted("流浪地球")]);
    }

    #[test]
    fn technical_identifiers() {
        let identifier = |text: &str| (text.to_owned(), EntityKind::Identifier);
        assert_eq!(found("Set person.properties.email first"), [identifier("person.properties.email")]);
        assert_eq!(found("the user_id and MAX_RETRIES values"), [identifier("user_id"), identifier("MAX_RETRIES")]);
        assert_eq!(found("call getUserId() now"), [identifier("getUserId")]);
        assert_eq!(found("we upgraded to v1.2.3."), [identifier("v1.2.3")]);
        assert_eq!(found("use std::sync::Arc here"), [identifier("std::sync::Arc")]);
        assert_eq!(found("edit src/main.rs and /etc/hosts"), [identifier("src/main.rs"), identifier("/etc/hosts")]);
        assert_eq!(found("see (https://example.com/a?b=1)"), [identifier("https://example.com/a?b=1")]);
        assert_eq!(found("mail ann@example.org today"), [identifier("ann@example.org")]);
        assert_eq!(found("we deploy with `config.toml`"), [identifier("config.toml")]);
        // Not identifiers: abbreviations, numbers, dates, word pairs.
        for text in ["e.g. this, i.e. that", "pi is 3.14", "on 27/05/2026 or 2026-05-27", "and/or 24/7 km/h", "1.2.3"] {
            assert!(extract(text).is_empty(), "{text}: {:?}", extract(text));
        }
    }

    #[test]
    fn rich_list_of_products() {
        let text = "Top downloads: OpenClaw 25,443, Claude Code 8,916, Codex 2,573, Dify 656. \
                    For voice we tried Cartesia and Deepgram, and Mem0 stores person.properties.email \
                    for Johnson & Johnson on 2026-05-27 at 90 percent.";
        let got = texts(text);
        for expected in [
            "OpenClaw",
            "Claude Code",
            "Codex",
            "Dify",
            "Cartesia",
            "Deepgram",
            "Mem0",
            "person.properties.email",
            "Johnson & Johnson",
        ] {
            assert!(got.iter().any(|t| t == expected), "{expected} missing from {got:?}");
        }
        for unwanted in
            ["Top", "Cartesia and Deepgram", "Claude Code 8,916", "8,916", "2,573", "656", "2026-05-27", "90"]
        {
            assert!(got.iter().all(|t| t != unwanted), "{unwanted} in {got:?}");
        }
    }

    #[test]
    fn names_in_everyday_facts() {
        assert_eq!(
            texts("I had lunch with Sarah at McDonald's in New York City on Tuesday."),
            ["Sarah", "McDonald", "New York City"]
        );
        assert_eq!(
            texts("Note: Alice prefers Python over JavaScript and uses VS Code."),
            ["Alice", "Python", "JavaScript", "VS Code"]
        );
        assert_eq!(
            texts("- Tom's birthday is on 12 March\n- Lisa works at Deutsche Bank AG"),
            ["Tom", "Lisa", "Deutsche Bank AG"]
        );
        assert_eq!(
            texts("He is a big fan of the Los Angeles Lakers and LeBron James!"),
            ["Los Angeles Lakers", "LeBron James"]
        );
        assert_eq!(texts("Amazon Web Services (AWS) is used by Netflix."), ["Amazon Web Services", "AWS", "Netflix"]);
        // Queries: the question words are not names, the names are.
        assert!(extract("What allergies does she have?").is_empty());
        assert_eq!(texts("Where does John live?"), ["John"]);
    }

    #[test]
    fn shouting_is_not_names() {
        assert!(extract("I AM SO HAPPY TODAY").is_empty());
        assert_eq!(texts("I work at NASA with IBM people"), ["NASA", "IBM"]);
    }

    #[test]
    fn empty_input() {
        assert!(extract("").is_empty());
        assert!(extract("   \n ").is_empty());
        assert!(extract("... !!! ---").is_empty());
        assert!(extract("just lowercase words here").is_empty());
    }

    #[test]
    fn chinese_entities() {
        let got = found("张伟在北京的清华大学工作");
        assert!(got.contains(&("张伟".to_owned(), EntityKind::Person)), "{got:?}");
        assert!(got.contains(&("北京".to_owned(), EntityKind::Place)), "{got:?}");
        assert!(
            got.contains(&("清华大学".to_owned(), EntityKind::Organization))
                || got.contains(&("清华大学".to_owned(), EntityKind::Proper)),
            "{got:?}"
        );
        assert_eq!(got.len(), 3, "{got:?}");
        let got = texts("我下个月要去成都出差");
        assert_eq!(got, ["成都"]);
        assert!(extract("我今天很开心").is_empty());
        let got = found("王芳是阿里巴巴的工程师，住在杭州。");
        assert_eq!(
            got,
            [
                ("王芳".to_owned(), EntityKind::Person),
                ("阿里巴巴".to_owned(), EntityKind::Proper),
                ("杭州".to_owned(), EntityKind::Place)
            ]
        );
        assert_eq!(texts("我和小明昨天去了故宫博物院"), ["小明", "故宫博物院"]);
    }

    #[test]
    fn mixed_scripts() {
        let got = texts("我在Google工作, I love Rust");
        assert_eq!(got, ["Google", "Rust"]);
        let got = texts("李娜住在上海，她在Apple上班。Microsoft也不错");
        for expected in ["李娜", "上海", "Apple", "Microsoft"] {
            assert!(got.iter().any(|t| t == expected), "{expected} missing from {got:?}");
        }
    }

    #[test]
    fn normalization() {
        assert_eq!(normalize("  The   Great Gatsby! "), "great gatsby");
        assert_eq!(normalize("\"Google\""), "google");
        assert_eq!(normalize("Bank of\nAmerica"), "bank of america");
        assert_eq!(normalize("C++"), "c++");
        assert_eq!(normalize("C#."), "c#");
        assert_eq!(normalize(".NET"), ".net");
        assert_eq!(normalize("Ｇｏｏｇｌｅ"), "google");
        assert_eq!(normalize("Theodore"), "theodore");
        assert_eq!(normalize("--"), "");
        assert_eq!(normalize("北京。"), "北京");
    }
}
