//! Text analysis for keyword retrieval: the same function turns memory texts into stored index
//! terms (`text_lemmatized`) and queries into query terms, so the two sides always agree.
//!
//! The analysis is a pure, deterministic function of the text:
//!
//! 1. The text is NFKC-normalised (full-width `Ｇｏｏｇｌｅ１２` becomes `Google12`, ligatures and
//!    compatibility forms fold, accents compose).
//! 2. It is cut into runs by script:
//!    * **Han** runs (Chinese characters) are segmented with jieba in *search mode*, see
//!      [`han_terms`]; Chinese stop words are dropped.
//!    * **Kana** (Japanese hiragana/katakana) and **Hangul** (Korean) runs, which jieba cannot
//!      segment, become overlapping character bigrams (`ありがとう` → `あり りが がと とう`); a
//!      one-character run is kept as that character. Thai, Lao, Khmer and Myanmar letters, also
//!      written without spaces between words, are treated the same way.
//!    * **Word** runs: letters and digits of any other script (Latin, Cyrillic, Greek, …).
//!      Everything else (spaces, punctuation, symbols, emoji) separates terms.
//! 3. Word runs are lowercased. English stop words (function words only: articles, pronouns,
//!    auxiliaries, prepositions, conjunctions) are dropped, and Latin-script words are reduced
//!    with the Snowball English stemmer (`running`, `runs` → `run`; `allergies`, `allergy` →
//!    `allergi`). Words in other scripts are kept lowercased, unstemmed.
//!
//! Details worth knowing:
//! * **Punctuation always splits**, so every term is purely alphanumeric and survives any
//!   downstream whitespace or "simple" tokenizer unchanged. Technical identifiers therefore
//!   yield their parts: `person.properties.email` → `person properti email`, `user_id` →
//!   `user id`, `std::sync::Arc` → `std sync arc`, `v1.2.3` → `v1 1 2 3`. A query for any part
//!   finds the identifier, and the whole identifier as a query matches all of its parts.
//!   CamelCase is not split (`OpenClaw` → `openclaw`).
//! * **Numbers** are kept: `2023` → `2023`; a thousands separator joins (`25,443` → `25443`);
//!   decimals and dates split at their punctuation (`3.14` → `3 14`, `2026-05-27` → `2026 05 27`).
//!   A token mixing letters and digits is kept whole and also split at the letter/digit
//!   boundaries, so `18km` → `18km 18 km` matches both `18km` and `18 km`, and `gpt4` matches
//!   `GPT-4`.
//! * **Apostrophes** inside a word: English clitics are removed (`user's` → `user`, `she'll` →
//!   `she`, `don't` → `do`), other apostrophes are dropped (`O'Neil` → `oneil`).
//! * A word written **all in capitals** (two letters or more) is never a stop word, so `US`,
//!   `IT`, `WHO` survive as acronyms while `us`, `it`, `who` are dropped.
//! * Words longer than [`MAX_TERM_CHARS`] characters (hashes, base64 blobs) are skipped.

use std::sync::LazyLock;

use jieba_rs::Jieba;
use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::UnicodeNormalization;

/// Longest word (in characters) kept as a term; longer runs are almost always opaque data.
pub const MAX_TERM_CHARS: usize = 64;

/// The jieba dictionary: loading it takes a noticeable fraction of a second, so once per process.
static JIEBA: LazyLock<Jieba> = LazyLock::new(Jieba::new);

/// The Snowball English stemmer, created once.
static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// The shared jieba instance (also used by entity extraction for part-of-speech tagging).
pub(crate) fn jieba() -> &'static Jieba {
    &JIEBA
}

/// English stop words: function words only (no content words), matched on the lowercased word
/// after clitics are removed. Sorted for binary search.
///
/// `may` is deliberately absent (it is also a month, a frequent memory subject), and so is every
/// word that carries meaning on its own in a memory (`like`, `want`, `good`, numbers…).
#[rustfmt::skip]
pub(crate) const ENGLISH_STOP_WORDS: &[&str] = &[
    "a", "about", "above", "across", "after", "against", "all", "along", "also", "although", "am", "among", "an", "and",
    "any", "are", "around", "as", "at", "be", "because", "been", "before", "being", "below", "beneath", "beside",
    "besides", "between", "beyond", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during",
    "each", "either", "else", "even", "ever", "every", "for", "from", "had", "has", "have", "having", "he", "her",
    "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "inside", "into", "is", "it", "its",
    "itself", "just", "me", "might", "mine", "must", "my", "myself", "neither", "no", "nor", "not", "of", "off", "on",
    "onto", "or", "other", "ought", "our", "ours", "ourselves", "out", "over", "own", "same", "shall", "she", "should",
    "since", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there",
    "these", "they", "this", "those", "though", "through", "throughout", "till", "to", "too", "toward", "towards",
    "under", "unless", "until", "up", "upon", "us", "very", "via", "was", "we", "were", "what", "whatever", "when",
    "whenever", "where", "whereas", "whether", "which", "while", "who", "whoever", "whom", "whose", "why", "will",
    "with", "within", "without", "would", "yet", "you", "your", "yours", "yourself", "yourselves",
];

/// Chinese stop words: particles, pronouns, copulas and conjunctions that carry no keyword
/// value. Matched on whole jieba words. Sorted for binary search (by code point).
#[rustfmt::skip]
const CHINESE_STOP_WORDS: &[&str] = &[
    "一个", "上", "与", "之", "也", "了", "于", "他", "他们", "们", "但", "但是", "你", "你们", "其", "则",
    "却", "又", "及", "吗", "吧", "呀", "呢", "和", "哦", "啊", "嗯", "因为", "在", "地", "她", "她们",
    "如果", "它", "它们", "对", "就", "并", "很", "得", "我", "我们", "或", "或者", "所以", "把", "是", "的",
    "着", "等", "给", "而", "自己", "被", "让", "过", "还", "这", "这个", "这些", "那", "那个", "那些", "都",
];

/// Whether `word` (already lowercased, clitics removed) is an English stop word.
pub(crate) fn is_english_stop_word(word: &str) -> bool {
    ENGLISH_STOP_WORDS.binary_search(&word).is_ok()
}

fn is_chinese_stop_word(word: &str) -> bool {
    CHINESE_STOP_WORDS.binary_search(&word).is_ok()
}

/// Script class of a character, as far as tokenisation cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Han,
    Kana,
    Hangul,
    /// Thai, Lao, Khmer, Myanmar: written without spaces between words, like kana.
    Unspaced,
    Word,
    Other,
}

/// Whether `c` is a Han ideograph (CJK unified ideographs, extensions, compatibility ideographs).
pub(crate) fn is_han(c: char) -> bool {
    matches!(c,
        '\u{3400}'..='\u{4DBF}'
        | '\u{4E00}'..='\u{9FFF}'
        | '\u{F900}'..='\u{FAFF}'
        | '\u{20000}'..='\u{2EBEF}'
        | '\u{2F800}'..='\u{2FA1F}'
        | '\u{30000}'..='\u{323AF}')
}

/// Whether `c` is Japanese kana (including the prolonged sound mark and small/half-width forms).
pub(crate) fn is_kana(c: char) -> bool {
    matches!(c,
        '\u{3041}'..='\u{309F}'
        | '\u{30A0}'..='\u{30FF}'
        | '\u{31F0}'..='\u{31FF}'
        | '\u{FF66}'..='\u{FF9F}'
        | '\u{1B000}'..='\u{1B16F}')
}

/// Whether `c` is Korean Hangul (syllables or jamo).
pub(crate) fn is_hangul(c: char) -> bool {
    matches!(c,
        '\u{1100}'..='\u{11FF}'
        | '\u{3130}'..='\u{318F}'
        | '\u{A960}'..='\u{A97F}'
        | '\u{AC00}'..='\u{D7AF}'
        | '\u{D7B0}'..='\u{D7FF}')
}

/// Whether `c` belongs to a script that is written without spaces between words (CJK).
pub(crate) fn is_cjk(c: char) -> bool {
    is_han(c) || is_kana(c) || is_hangul(c)
}

/// Whether `c` belongs to a Southeast Asian script written without spaces between words. The
/// whole block counts (vowel and tone marks included), so marks never split a run; bigrams are
/// then taken over code points.
fn is_unspaced(c: char) -> bool {
    matches!(c, '\u{0E00}'..='\u{0EFF}' | '\u{1000}'..='\u{109F}' | '\u{1780}'..='\u{17FF}')
}

fn class(c: char) -> Class {
    if is_han(c) {
        Class::Han
    } else if is_kana(c) {
        Class::Kana
    } else if is_hangul(c) {
        Class::Hangul
    } else if is_unspaced(c) {
        Class::Unspaced
    } else if c.is_alphanumeric() {
        Class::Word
    } else {
        Class::Other
    }
}

fn is_apostrophe(c: char) -> bool {
    matches!(c, '\'' | '\u{2019}' | '\u{02BC}')
}

/// Analyses text into index terms, in order of appearance (repeats kept: they are term
/// frequencies). See the module documentation for the rules.
pub fn terms(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.nfkc().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let kind = class(chars[i]);
        let start = i;
        match kind {
            Class::Other => {
                i += 1;
                continue;
            }
            Class::Han | Class::Kana | Class::Hangul | Class::Unspaced => {
                while i < chars.len() && class(chars[i]) == kind {
                    i += 1;
                }
                let run: String = chars[start..i].iter().collect();
                if kind == Class::Han {
                    han_terms(&run, &mut out);
                } else {
                    bigram_terms(&chars[start..i], &mut out);
                }
            }
            Class::Word => {
                let mut word = String::new();
                while i < chars.len() {
                    let c = chars[i];
                    if class(c) == Class::Word {
                        word.push(c);
                        i += 1;
                    } else if is_apostrophe(c)
                        && chars[i - 1].is_alphabetic()
                        && chars.get(i + 1).is_some_and(|next| class(*next) == Class::Word && next.is_alphabetic())
                    {
                        word.push('\'');
                        i += 1;
                    } else if c == ',' && is_thousands_separator(&chars, i) {
                        i += 1;
                    } else {
                        break;
                    }
                }
                word_terms(&word, &mut out);
            }
        }
    }
    out
}

/// Whether the comma at `i` separates thousands: a digit before, exactly three digits after.
fn is_thousands_separator(chars: &[char], i: usize) -> bool {
    i > 0
        && chars[i - 1].is_ascii_digit()
        && chars.len() >= i + 4
        && chars[i + 1..i + 4].iter().all(char::is_ascii_digit)
        && !chars.get(i + 4).is_some_and(|c| c.is_alphanumeric())
}

/// The analysed form stored with each memory: its terms joined by single spaces.
pub fn lemmatize(text: &str) -> String {
    terms(text).join(" ")
}

/// Chinese: jieba **search mode** with HMM for unknown words (names).
///
/// Search mode emits each dictionary word and, for words longer than two characters, also the
/// dictionary words inside it (`清华大学` → `清华 华大 大学 清华大学`). For keyword search that
/// is the better choice: a query for `清华` or `大学` then finds a memory that says `清华大学`,
/// which the plain (precise) cut would index only as the whole word. Both documents and queries
/// are cut the same way, so a query for the whole word still matches it. The extra sub-word
/// terms lengthen documents a little, which BM25's length normalisation absorbs.
fn han_terms(run: &str, out: &mut Vec<String>) {
    for token in jieba().cut_for_search(run, true) {
        let word = token.word;
        if !word.is_empty() && !is_chinese_stop_word(word) && word.chars().any(is_han) {
            out.push(word.to_owned());
        }
    }
}

/// Kana, Hangul and the unspaced Southeast Asian scripts: overlapping character bigrams; a
/// one-character run is kept as it is.
fn bigram_terms(run: &[char], out: &mut Vec<String>) {
    if run.len() == 1 {
        out.push(run[0].to_string());
        return;
    }
    out.extend(run.windows(2).map(|pair| pair.iter().collect::<String>()));
}

/// One run of letters/digits (possibly with inner apostrophes): lowercase, clitics, stop words,
/// stemming, letter/digit splitting.
fn word_terms(raw: &str, out: &mut Vec<String>) {
    if raw.chars().count() > MAX_TERM_CHARS {
        return;
    }
    let acronym = raw.chars().filter(|c| c.is_alphabetic()).count() >= 2 && !raw.chars().any(char::is_lowercase);
    let lower = raw.to_lowercase();
    let word = strip_clitics(&lower);
    if word.is_empty() {
        return;
    }
    let has_digit = word.chars().any(|c| c.is_numeric());
    let has_letter = word.chars().any(|c| c.is_alphabetic());
    if has_digit && has_letter {
        // Whole token first (`18km`), then its letter and digit parts (`18`, `km`).
        out.push(word.clone());
        for part in split_letters_digits(&word) {
            if part.chars().all(|c| c.is_numeric()) {
                out.push(part.to_owned());
            } else if part.chars().count() >= 2 {
                letter_term(part, acronym, out);
            }
        }
    } else if has_letter {
        letter_term(&word, acronym, out);
    } else {
        out.push(word);
    }
}

/// A purely alphabetic word: dropped if a stop word (unless written as an acronym), stemmed if
/// Latin-script.
fn letter_term(word: &str, acronym: bool, out: &mut Vec<String>) {
    if !acronym && is_english_stop_word(word) {
        return;
    }
    if word.chars().all(is_latin_letter) {
        out.push(STEMMER.stem(word).into_owned());
    } else {
        out.push(word.to_owned());
    }
}

/// A Latin-script letter (ASCII, Latin-1 supplement, Latin Extended-A/B).
fn is_latin_letter(c: char) -> bool {
    c.is_ascii_alphabetic() || (c.is_alphabetic() && ('\u{00C0}'..='\u{024F}').contains(&c))
}

/// Splits `word` where letters and digits meet: `18km` → `18`, `km`.
fn split_letters_digits(word: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut previous: Option<bool> = None;
    for (index, c) in word.char_indices() {
        let digit = c.is_numeric();
        if previous.is_some_and(|was_digit| was_digit != digit) {
            parts.push(&word[start..index]);
            start = index;
        }
        previous = Some(digit);
    }
    parts.push(&word[start..]);
    parts
}

/// Removes English clitics from a lowercased word and drops any other apostrophes:
/// `user's` → `user`, `we're` → `we`, `don't` → `do`, `can't` → `can`, `o'neil` → `oneil`.
pub(crate) fn strip_clitics(word: &str) -> String {
    if !word.contains('\'') {
        return word.to_owned();
    }
    let base = if let Some(stem) = word.strip_suffix("n't") {
        match stem {
            "ca" => "can",
            "wo" => "will",
            "sha" => "shall",
            "ai" => "is",
            other => other,
        }
    } else {
        ["'s", "'re", "'ve", "'ll", "'d", "'m"].iter().find_map(|clitic| word.strip_suffix(clitic)).unwrap_or(word)
    };
    base.replace('\'', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(terms: &[String], term: &str) -> bool {
        terms.iter().any(|t| t == term)
    }

    #[test]
    fn stop_word_lists_are_sorted_and_unique() {
        assert!(ENGLISH_STOP_WORDS.windows(2).all(|pair| pair[0] < pair[1]));
        assert!(ENGLISH_STOP_WORDS.len() >= 140, "{}", ENGLISH_STOP_WORDS.len());
        assert!(CHINESE_STOP_WORDS.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn english_stemming() {
        assert_eq!(terms("The cats are running quickly"), ["cat", "run", "quick"]);
        assert_eq!(terms("runs"), ["run"]);
        assert_eq!(terms("she attended multiple meetings yesterday"), ["attend", "multipl", "meet", "yesterday"]);
        assert_eq!(terms("attending the morning meeting"), ["attend", "morn", "meet"]);
        assert_eq!(terms("allergies"), terms("allergy"));
        assert_eq!(terms("Allergies"), terms("allergies"));
    }

    #[test]
    fn english_stop_words_removed() {
        assert!(terms("this is a very long story of the sea")
            .iter()
            .all(|t| !["this", "is", "a", "very", "of", "the"].contains(&t.as_str())));
        assert_eq!(terms("this is a very long story of the sea"), ["long", "stori", "sea"]);
        assert!(terms("Would you do it for me, if they were here?").is_empty());
        // Content words are not stop words.
        assert_eq!(terms("I like tea but want coffee"), ["like", "tea", "want", "coffe"]);
        // `may` is kept as a possible month.
        assert_eq!(terms("in May"), ["may"]);
    }

    #[test]
    fn acronyms_are_not_stop_words() {
        assert_eq!(terms("She moved to the US"), ["move", "us"]);
        assert!(terms("tell us").iter().all(|t| t != "us"));
        assert_eq!(terms("IT department"), ["it", "depart"]);
    }

    #[test]
    fn clitics_and_apostrophes() {
        assert_eq!(terms("User's brother"), ["user", "brother"]);
        assert_eq!(terms("Google’s office"), ["googl", "offic"]);
        assert!(terms("She's sure they'll say we don't, can't, won't").iter().all(|t| t != "s" && t != "t"));
        assert_eq!(terms("O'Neil"), ["oneil"]);
        assert_eq!(terms("'quoted'"), ["quot"]);
    }

    #[test]
    fn query_and_document_are_symmetric() {
        let query = terms("What allergies does she have?");
        let document = terms("She is allergic to peanuts");
        assert_eq!(query, ["allergi"]);
        assert_eq!(document, ["allerg", "peanut"]);
        // No stop word leaks into either side, so they share no accidental tokens.
        assert!(query.iter().all(|t| !document.contains(t)));
        // A query phrased like a stored memory gets exactly the stored terms.
        let stored = "User is allergic to peanuts and shellfish";
        assert_eq!(terms(stored), terms("user ALLERGIC to Peanuts, and shellfish!"));
        assert_eq!(lemmatize("peanut allergy"), lemmatize("Peanuts allergies"));
    }

    #[test]
    fn numbers() {
        assert_eq!(terms("In 2023 I ran 18km"), ["2023", "ran", "18km", "18", "km"]);
        assert_eq!(terms("18 km"), ["18", "km"]);
        assert_eq!(terms("25,443 stars"), ["25443", "star"]);
        assert_eq!(terms("1,2,3"), ["1", "2", "3"]);
        assert_eq!(terms("pi is 3.14"), ["pi", "3", "14"]);
        assert_eq!(terms("on 2026-05-27"), ["2026", "05", "27"]);
        assert_eq!(terms("GPT-4 and gpt4"), ["gpt", "4", "gpt4", "gpt", "4"]);
        // Full-width digits and letters fold to ASCII.
        assert_eq!(terms("Ｇｏｏｇｌｅ １２"), ["googl", "12"]);
    }

    #[test]
    fn identifiers_yield_their_parts() {
        assert_eq!(terms("person.properties.email"), ["person", "properti", "email"]);
        assert_eq!(terms("user_id"), ["user", "id"]);
        assert_eq!(terms("std::sync::Arc"), ["std", "sync", "arc"]);
        assert_eq!(terms("v1.2.3"), ["v1", "1", "2", "3"]);
        assert_eq!(terms("OpenClaw"), ["openclaw"]);
        assert_eq!(terms("src/main.rs"), ["src", "main", "rs"]);
    }

    #[test]
    fn other_scripts() {
        assert_eq!(terms("Привет мир"), ["привет", "мир"]);
        assert_eq!(terms("café crème"), terms("CAFÉ CRÈME"));
        assert_eq!(terms("Straße"), ["straße"]);
    }

    #[test]
    fn overlong_words_are_skipped() {
        let blob = "a".repeat(MAX_TERM_CHARS + 1);
        assert_eq!(terms(&format!("token {blob} end")), ["token", "end"]);
    }

    #[test]
    fn chinese_segmentation() {
        let got = terms("我下个月要去成都出差");
        assert!(has(&got, "成都"), "{got:?}");
        assert!(has(&got, "出差"), "{got:?}");
        assert!(!has(&got, "我"), "{got:?}");
        let got = terms("他在清华大学读书。");
        assert!(has(&got, "清华大学") && has(&got, "清华") && has(&got, "大学"), "{got:?}");
        assert!(!has(&got, "他") && !has(&got, "在") && !has(&got, "。"), "{got:?}");
        // The query side finds the sub-word.
        let query = terms("清华");
        assert!(query.iter().all(|t| got.contains(t)), "{query:?} {got:?}");
        assert!(terms("的了是在，。！").is_empty());
    }

    #[test]
    fn japanese_and_korean_bigrams() {
        assert_eq!(terms("ありがとう"), ["あり", "りが", "がと", "とう"]);
        assert_eq!(terms("コーヒー"), ["コー", "ーヒ", "ヒー"]);
        assert_eq!(terms("ね"), ["ね"]);
        // Half-width katakana folds to full width.
        assert_eq!(terms("ｺｰﾋｰ"), terms("コーヒー"));
        let got = terms("東京へ行きます");
        assert!(has(&got, "へ") && has(&got, "きま") && has(&got, "ます"), "{got:?}");
        assert!(got.iter().any(|t| t.contains('東')), "{got:?}");
        assert_eq!(terms("서울에 살아요"), ["서울", "울에", "살아", "아요"]);
        // Thai is written without spaces too.
        assert_eq!(terms("กินข้าว"), ["ก\u{e34}", "\u{e34}น", "นข", "ข\u{e49}", "\u{e49}า", "าว"]);
    }

    #[test]
    fn mixed_text() {
        let got = terms("我在Google工作, I love Rust");
        assert!(has(&got, "googl") && has(&got, "工作") && has(&got, "love") && has(&got, "rust"), "{got:?}");
        assert!(!has(&got, "i") && !has(&got, "我") && !has(&got, "在"), "{got:?}");
        assert_eq!(terms("Rust言語が好き"), ["rust", "言語", "が", "好", "き"]);
    }

    #[test]
    fn empty_and_punctuation_only() {
        assert!(terms("").is_empty());
        assert_eq!(lemmatize(""), "");
        assert!(terms("  \n\t ").is_empty());
        assert!(terms("?!... --- ,,, ;; ()[]{} \"'' 。，！").is_empty());
        assert!(terms("🙂👍").is_empty());
        assert_eq!(lemmatize("Hello, world!"), "hello world");
    }

    #[test]
    fn deterministic_output() {
        let text = "我在Google工作, I love Rust; ありがとう 2,573 stars";
        assert_eq!(lemmatize(text), lemmatize(text));
        assert_eq!(lemmatize(text), terms(text).join(" "));
        assert!(!lemmatize(text).contains("  "));
    }
}
