//! Temporal intent of a query, read without a model, in English and Chinese: a time range ("last
//! year", "in May", "3 weeks ago", "2025年", "上个月") or a preference ("currently", "these days",
//! "现在" → the newest; "the first time", "originally", "第一次" → the oldest), against the
//! request's reference time. Search turns a range into a filter on when a memory was true (its
//! event time, else its observation time; a value of a state key until its `valid_to`) and looks
//! at superseded values too, since the past is what is asked for; a preference re-weighs the
//! results by age. Both show in `explain`.

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use serde::Serialize;

/// Which end of time a query prefers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TimePreference {
    /// The newest ("currently", "these days", "现在").
    Recent,
    /// The oldest ("the first time", "originally", "第一次").
    Oldest,
}

/// Which side of an event a query asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// "before the move", "搬家之前".
    Before,
    /// "after the wedding", "since I joined Acme", "搬家以后".
    After,
}

/// An event the query's time is relative to ("before the move"): search finds the memory that
/// best matches `phrase` and takes its time (event time, else observation time) as the range's
/// bound.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TimeAnchor {
    /// Before or after it.
    pub side: Side,
    /// The words naming the event ("the move").
    pub phrase: String,
    /// The memory found for it, once search has looked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_id: Option<uuid::Uuid>,
}

/// Earliest and latest times an open-ended range uses.
fn floor() -> DateTime<Utc> {
    month_start(1900, 1)
}

fn ceiling() -> DateTime<Utc> {
    month_start(2200, 1)
}

/// What a query says about time.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TemporalIntent {
    /// The words that said it.
    pub cue: String,
    /// Start of the range asked about (inclusive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<DateTime<Utc>>,
    /// End of the range (exclusive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<DateTime<Utc>>,
    /// Newest or oldest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preference: Option<TimePreference>,
    /// The event the range is relative to; until search has found it, `from` and `to` are unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anchor: Option<TimeAnchor>,
}

impl TemporalIntent {
    fn range(cue: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> Self {
        Self { cue: cue.to_owned(), from: Some(from), to: Some(to), preference: None, anchor: None }
    }

    fn prefer(cue: &str, preference: TimePreference) -> Self {
        Self { cue: cue.to_owned(), from: None, to: None, preference: Some(preference), anchor: None }
    }

    fn anchored(cue: &str, side: Side, phrase: String) -> Self {
        Self {
            cue: cue.to_owned(),
            from: None,
            to: None,
            preference: None,
            anchor: Some(TimeAnchor { side, phrase, memory_id: None }),
        }
    }

    /// The range once the anchor's time is known: before it, or from it on.
    pub fn anchor_at(&mut self, memory_id: uuid::Uuid, at: DateTime<Utc>) {
        if let Some(anchor) = &mut self.anchor {
            anchor.memory_id = Some(memory_id);
            let (from, to) = match anchor.side {
                Side::Before => (floor(), at),
                Side::After => (at, ceiling()),
            };
            self.from = Some(from);
            self.to = Some(to);
        }
    }

    /// The range before the start (`Before`) or from the start (`since`) or the end (`after`) of
    /// `range`, for "before 2025", "since March", "after last week".
    fn beside(cue: &str, side: Side, since: bool, range: &TemporalIntent) -> Option<Self> {
        let (start, end) = (range.from?, range.to?);
        Some(match side {
            Side::Before => Self::range(cue, floor(), start),
            Side::After => Self::range(cue, if since { start } else { end }, ceiling()),
        })
    }
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];
const CHINESE_DIGITS: [&str; 12] = ["一", "二", "三", "四", "五", "六", "七", "八", "九", "十", "十一", "十二"];

fn day_start(date: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&date.and_hms_opt(0, 0, 0).expect("midnight"))
}

fn month_start(year: i32, month: u32) -> DateTime<Utc> {
    day_start(NaiveDate::from_ymd_opt(year, month, 1).expect("valid month"))
}

fn next_month(year: i32, month: u32) -> DateTime<Utc> {
    if month == 12 {
        month_start(year + 1, 1)
    } else {
        month_start(year, month + 1)
    }
}

fn year_range(cue: &str, year: i32) -> Option<TemporalIntent> {
    (1900..=2200).contains(&year).then(|| TemporalIntent::range(cue, month_start(year, 1), month_start(year + 1, 1)))
}

/// The month `month` (1–12) of `year`, or without a year its latest occurrence that has begun by
/// `now` (a memory holds the past: "what did I plan for May" asked in December is the May just
/// past; a plan stored with a future event time is still found, the search then runs without the
/// range and says so).
fn nearest_month(cue: &str, month: u32, year: Option<i32>, now: DateTime<Utc>) -> TemporalIntent {
    let year = year.unwrap_or_else(|| if month <= now.month() { now.year() } else { now.year() - 1 });
    TemporalIntent::range(cue, month_start(year, month), next_month(year, month))
}

/// Words of `text` (lower-cased ASCII letters and digits).
fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_owned)
        .collect()
}

fn has_phrase(words: &[String], phrase: &str) -> bool {
    let wanted: Vec<&str> = phrase.split(' ').collect();
    words.windows(wanted.len()).any(|window| window.iter().zip(&wanted).all(|(word, want)| word == want))
}

/// Reads the temporal intent of `query` asked at `now`; `None` when it says nothing about time.
/// A range wins over a preference when both are present.
pub fn parse(query: &str, now: DateTime<Utc>) -> Option<TemporalIntent> {
    english(query, now).or_else(|| chinese(query, now))
}

/// Leading words that do not name an event ("before *the* move", "since *I* joined").
const ANCHOR_FILLER: [&str; 9] = ["the", "my", "our", "his", "her", "their", "a", "an", "that"];

/// "before the move", "after the wedding", "since I joined Acme", "prior to 2025": a date after
/// the word gives a range beside it; other words name an event for search to find.
fn english_anchor(words: &[String], now: DateTime<Utc>) -> Option<TemporalIntent> {
    for (index, word) in words.iter().enumerate() {
        let (side, skip) = match word.as_str() {
            "before" => (Side::Before, 1),
            "prior" if words.get(index + 1).is_some_and(|next| next == "to") => (Side::Before, 2),
            "after" | "since" => (Side::After, 1),
            _ => continue,
        };
        let rest = &words[index + skip..];
        let cue = format!("{} {}", words[index..index + skip].join(" "), rest.join(" "));
        // A date right after the word, and nothing else: "before 2025", "since last March".
        let date = (rest.len() <= 3)
            .then(|| english(&format!("in {}", rest.join(" ")), now))
            .flatten()
            .filter(|found| found.from.is_some());
        if let Some(range) = date {
            return TemporalIntent::beside(&cue, side, word == "since", &range);
        }
        let named: Vec<&str> =
            rest.iter().map(String::as_str).skip_while(|word| ANCHOR_FILLER.contains(word)).collect();
        // An event is a few words; "before" at the end ("told you before") names none.
        if !named.is_empty() && rest.len() <= 8 && !matches!(named[0], "that" | "this" | "it" | "then" | "now") {
            return Some(TemporalIntent::anchored(&cue, side, rest.join(" ")));
        }
    }
    None
}

fn english(query: &str, now: DateTime<Utc>) -> Option<TemporalIntent> {
    let words = words(query);
    // A date beside "before"/"after" is read first ("before last year" is not "last year"); an
    // event only when the query names no date or preference elsewhere ("after the parade in May
    // 2023" is May).
    let anchored = english_anchor(&words, now);
    if anchored.as_ref().is_some_and(|found| found.anchor.is_none()) {
        return anchored;
    }
    let dated = english_dates(&words, now);
    if dated.is_some() {
        return dated;
    }
    english_preference(&words).or(anchored)
}

/// Ranges named by dates in `words`.
fn english_dates(words: &[String], now: DateTime<Utc>) -> Option<TemporalIntent> {
    let today = day_start(now.date_naive());
    let this_year = now.year();
    let week_start = today - Duration::days(i64::from(now.weekday().num_days_from_monday()));
    let last_month = if now.month() == 1 { (this_year - 1, 12) } else { (this_year, now.month() - 1) };
    let ranges: [(&str, DateTime<Utc>, DateTime<Utc>); 8] = [
        ("last year", month_start(this_year - 1, 1), month_start(this_year, 1)),
        ("this year", month_start(this_year, 1), month_start(this_year + 1, 1)),
        ("last month", month_start(last_month.0, last_month.1), next_month(last_month.0, last_month.1)),
        ("this month", month_start(this_year, now.month()), next_month(this_year, now.month())),
        ("last week", week_start - Duration::days(7), week_start),
        ("this week", week_start, week_start + Duration::days(7)),
        ("yesterday", today - Duration::days(1), today),
        ("today", today, today + Duration::days(1)),
    ];
    for (phrase, from, to) in ranges {
        if has_phrase(words, phrase) {
            return Some(TemporalIntent::range(phrase, from, to));
        }
    }
    // "3 weeks ago", "two years ago": a window of one unit around that time.
    for (index, word) in words.iter().enumerate() {
        if word != "ago" || index < 2 {
            continue;
        }
        let count = match words[index - 2].as_str() {
            "a" | "one" => Some(1),
            "two" => Some(2),
            "three" => Some(3),
            "four" => Some(4),
            "five" => Some(5),
            "six" => Some(6),
            other => other.parse::<i64>().ok().filter(|count| (1..=100).contains(count)),
        };
        let unit = match words[index - 1].trim_end_matches('s') {
            "day" => Some(Duration::days(1)),
            "week" => Some(Duration::days(7)),
            "month" => Some(Duration::days(30)),
            "year" => Some(Duration::days(365)),
            _ => None,
        };
        if let (Some(count), Some(unit)) = (count, unit) {
            let centre = now - unit * count as i32;
            let cue = format!("{} {} ago", words[index - 2], words[index - 1]);
            return Some(TemporalIntent::range(&cue, centre - unit / 2, centre + unit / 2));
        }
    }
    // "in May", "May 2025", "for March", "on June 3": month names are also words ("may", "march",
    // "august") and names ("June"), so only after a preposition or before a year or a day.
    for (index, word) in words.iter().enumerate() {
        let named = MONTHS.iter().position(|name| {
            name == word
                || (word.len() >= 3
                    && name.starts_with(word.as_str())
                    && matches!(
                        word.as_str(),
                        "jan" | "feb" | "apr" | "jun" | "jul" | "aug" | "sep" | "sept" | "oct" | "nov" | "dec"
                    ))
        });
        if let Some(month) = named {
            let next = words.get(index + 1).and_then(|next| next.parse::<i32>().ok());
            let year = next.filter(|year| (1900..=2200).contains(year));
            let day = next.filter(|day| (1..=31).contains(day));
            let introduced = index > 0
                && matches!(
                    words[index - 1].as_str(),
                    "in" | "for" | "of" | "during" | "since" | "until" | "by" | "on"
                );
            if !introduced && year.is_none() && day.is_none() {
                continue;
            }
            let cue = match year {
                Some(year) => format!("{word} {year}"),
                None => word.clone(),
            };
            return Some(nearest_month(&cue, month as u32 + 1, year, now));
        }
    }
    // "in 2025".
    for (index, word) in words.iter().enumerate() {
        if index > 0 && matches!(words[index - 1].as_str(), "in" | "during" | "of") {
            if let Some(found) = word.parse::<i32>().ok().and_then(|year| year_range(&format!("in {year}"), year)) {
                return Some(found);
            }
        }
    }
    None
}

/// "currently", "the first time" and the like.
fn english_preference(words: &[String]) -> Option<TemporalIntent> {
    for phrase in ["first time", "originally", "at first", "initially", "in the beginning", "the first"] {
        if has_phrase(words, phrase) {
            return Some(TemporalIntent::prefer(phrase, TimePreference::Oldest));
        }
    }
    for phrase in
        ["currently", "right now", "these days", "nowadays", "at the moment", "now", "current", "latest", "most recent"]
    {
        if has_phrase(words, phrase) {
            return Some(TemporalIntent::prefer(phrase, TimePreference::Recent));
        }
    }
    None
}

/// "搬家之前", "结婚以后", "2025年以前": the words before the marker, back to the last
/// punctuation, without a leading "我", "我们" or "在".
fn chinese_anchor(query: &str, now: DateTime<Utc>) -> Option<TemporalIntent> {
    for (marker, side) in [("之前", Side::Before), ("以前", Side::Before), ("之后", Side::After), ("以后", Side::After)]
    {
        let Some(position) = query.find(marker) else { continue };
        let head = &query[..position];
        let start = head
            .char_indices()
            .rev()
            .find(|(_, c)| "，。？！、,.?! ".contains(*c))
            .map(|(index, c)| index + c.len_utf8())
            .unwrap_or(0);
        let mut phrase = &head[start..];
        for filler in ["我们", "我", "你", "在"] {
            phrase = phrase.strip_prefix(filler).unwrap_or(phrase);
        }
        if phrase.is_empty() {
            continue;
        }
        let cue = format!("{phrase}{marker}");
        if let Some(range) = chinese(phrase, now).filter(|found| found.from.is_some()) {
            return TemporalIntent::beside(&cue, side, false, &range);
        }
        if phrase.chars().count() <= 16 {
            return Some(TemporalIntent::anchored(&cue, side, phrase.to_owned()));
        }
    }
    None
}

fn chinese(query: &str, now: DateTime<Utc>) -> Option<TemporalIntent> {
    // As in English: a date beside the marker first, then other dates and preferences, then an
    // event.
    let anchored = chinese_anchor(query, now);
    if anchored.as_ref().is_some_and(|found| found.anchor.is_none()) {
        return anchored;
    }
    chinese_plain(query, now).or(anchored)
}

/// Chinese dates and preferences.
fn chinese_plain(query: &str, now: DateTime<Utc>) -> Option<TemporalIntent> {
    let today = day_start(now.date_naive());
    let this_year = now.year();
    let week_start = today - Duration::days(i64::from(now.weekday().num_days_from_monday()));
    let last_month = if now.month() == 1 { (this_year - 1, 12) } else { (this_year, now.month() - 1) };
    let ranges: [(&str, DateTime<Utc>, DateTime<Utc>); 13] = [
        ("前年", month_start(this_year - 2, 1), month_start(this_year - 1, 1)),
        ("去年", month_start(this_year - 1, 1), month_start(this_year, 1)),
        ("今年", month_start(this_year, 1), month_start(this_year + 1, 1)),
        ("上个月", month_start(last_month.0, last_month.1), next_month(last_month.0, last_month.1)),
        ("上月", month_start(last_month.0, last_month.1), next_month(last_month.0, last_month.1)),
        ("这个月", month_start(this_year, now.month()), next_month(this_year, now.month())),
        ("本月", month_start(this_year, now.month()), next_month(this_year, now.month())),
        ("上周", week_start - Duration::days(7), week_start),
        ("上星期", week_start - Duration::days(7), week_start),
        ("本周", week_start, week_start + Duration::days(7)),
        ("前天", today - Duration::days(2), today - Duration::days(1)),
        ("昨天", today - Duration::days(1), today),
        ("今天", today, today + Duration::days(1)),
    ];
    for (cue, from, to) in ranges {
        if query.contains(cue) {
            return Some(TemporalIntent::range(cue, from, to));
        }
    }
    // "2025年", "2025年5月", "5月", "五月".
    let chars: Vec<char> = query.chars().collect();
    let text: String = chars.iter().collect();
    if let Some(position) = text.find('年') {
        let digits: String = text[..position]
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if let Some(year) = digits.parse::<i32>().ok().filter(|year| (1900..=2200).contains(year)) {
            let rest = &text[position + '年'.len_utf8()..];
            if let Some(month) = chinese_month(rest) {
                return Some(nearest_month(&format!("{year}年{month}月"), month, Some(year), now));
            }
            if let Some(found) = year_range(&format!("{year}年"), year) {
                return Some(found);
            }
        }
    }
    if let Some(month) = chinese_month(&text) {
        return Some(nearest_month(&format!("{month}月"), month, None, now));
    }
    // "3天前", "两周前", "3个月前", "2年前".
    if let Some(position) = text.find('前') {
        let before = &text[..position];
        for (suffix, unit) in [
            ("天", Duration::days(1)),
            ("周", Duration::days(7)),
            ("星期", Duration::days(7)),
            ("个月", Duration::days(30)),
            ("年", Duration::days(365)),
        ] {
            if let Some(amount) = before.strip_suffix(suffix) {
                let count_text: String = amount
                    .chars()
                    .rev()
                    .take_while(|c| c.is_ascii_digit() || "一二两三四五六七八九十".contains(*c))
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                if let Some(count) = chinese_number(&count_text) {
                    let centre = now - unit * count;
                    return Some(TemporalIntent::range(
                        &format!("{count_text}{suffix}前"),
                        centre - unit / 2,
                        centre + unit / 2,
                    ));
                }
            }
        }
    }
    for cue in ["第一次", "最初", "起初", "一开始", "最早"] {
        if text.contains(cue) {
            return Some(TemporalIntent::prefer(cue, TimePreference::Oldest));
        }
    }
    for cue in ["现在", "目前", "当前", "最近", "如今"] {
        if text.contains(cue) {
            return Some(TemporalIntent::prefer(cue, TimePreference::Recent));
        }
    }
    None
}

/// The month named in `text` as `5月` or `五月`.
fn chinese_month(text: &str) -> Option<u32> {
    let position = text.find('月')?;
    let before = &text[..position];
    let digits: String =
        before.chars().rev().take_while(char::is_ascii_digit).collect::<Vec<_>>().into_iter().rev().collect();
    if let Ok(month) = digits.parse::<u32>() {
        return (1..=12).contains(&month).then_some(month);
    }
    // Longest numeral first: 十二 before 二.
    (0..12)
        .rev()
        .find(|index| before.ends_with(CHINESE_DIGITS[*index]))
        .map(|index| index as u32 + 1)
        .filter(|_| !before.ends_with("个"))
}

/// A count written in digits or Chinese numerals up to 99.
fn chinese_number(text: &str) -> Option<i32> {
    if let Ok(number) = text.parse::<i32>() {
        return (1..=100).contains(&number).then_some(number);
    }
    let digit = |c: char| "一二三四五六七八九".find(c).map(|index| index as i32 / 3 + 1).or((c == '两').then_some(2));
    let chars: Vec<char> = text.chars().collect();
    match chars.as_slice() {
        [c] if *c == '十' => Some(10),
        [c] => digit(*c),
        ['十', unit] => digit(*unit).map(|unit| 10 + unit),
        [tens, '十'] => digit(*tens).map(|tens| tens * 10),
        [tens, '十', unit] => Some(digit(*tens)? * 10 + digit(*unit)?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tuesday 2026-12-01 10:00 UTC.
    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).single().expect("time")
    }

    fn range(query: &str) -> (String, String) {
        let intent = parse(query, now()).unwrap_or_else(|| panic!("{query}: no intent"));
        let day = |time: Option<DateTime<Utc>>| time.expect("range").format("%Y-%m-%d").to_string();
        (day(intent.from), day(intent.to))
    }

    fn pair(from: &str, to: &str) -> (String, String) {
        (from.to_owned(), to.to_owned())
    }

    #[test]
    fn english_ranges() {
        assert_eq!(range("Where did I live last year?"), pair("2025-01-01", "2026-01-01"));
        assert_eq!(range("what happened last month"), pair("2026-11-01", "2026-12-01"));
        assert_eq!(range("plans this week"), pair("2026-11-30", "2026-12-07"));
        assert_eq!(range("what did I eat yesterday"), pair("2026-11-30", "2026-12-01"));
        assert_eq!(range("What did I plan for May?"), pair("2026-05-01", "2026-06-01"));
        assert_eq!(range("the trip in February"), pair("2026-02-01", "2026-03-01"), "the February that has begun");
        assert_eq!(range("projects in March 2025"), pair("2025-03-01", "2025-04-01"));
        assert_eq!(range("where did I work in 2024"), pair("2024-01-01", "2025-01-01"));
        assert_eq!(range("what did I buy 3 weeks ago"), pair("2026-11-06", "2026-11-13"));
        assert_eq!(range("the concert two years ago"), pair("2024-06-01", "2025-06-01"));
    }

    #[test]
    fn english_preferences_and_near_misses() {
        let preference = |query: &str| parse(query, now()).and_then(|intent| intent.preference);
        assert_eq!(preference("Where do I currently live?"), Some(TimePreference::Recent));
        assert_eq!(preference("what's my job these days"), Some(TimePreference::Recent));
        assert_eq!(preference("when did I first time visit Japan"), Some(TimePreference::Oldest));
        assert_eq!(preference("where did I originally grow up"), Some(TimePreference::Oldest));
        for quiet in [
            "I may move to Lisbon",
            "Where does the user live?",
            "knowledge about March Hare",
            "snowboarding",
            "June likes tea",
        ] {
            assert_eq!(parse(quiet, now()), None, "{quiet}");
        }
    }

    #[test]
    fn chinese() {
        assert_eq!(range("我去年住在哪里"), pair("2025-01-01", "2026-01-01"));
        assert_eq!(range("上个月做了什么"), pair("2026-11-01", "2026-12-01"));
        assert_eq!(range("上周的会议"), pair("2026-11-23", "2026-11-30"));
        assert_eq!(range("昨天吃了什么"), pair("2026-11-30", "2026-12-01"));
        assert_eq!(range("五月的计划"), pair("2026-05-01", "2026-06-01"));
        assert_eq!(range("十二月的计划"), pair("2026-12-01", "2027-01-01"));
        assert_eq!(range("2025年5月去了哪里"), pair("2025-05-01", "2025-06-01"));
        assert_eq!(range("2024年在哪工作"), pair("2024-01-01", "2025-01-01"));
        assert_eq!(range("三天前买了什么"), pair("2026-11-27", "2026-11-28"));
        let preference = |query: &str| parse(query, now()).and_then(|intent| intent.preference);
        assert_eq!(preference("我现在住在哪里"), Some(TimePreference::Recent));
        assert_eq!(preference("第一次去日本是什么时候"), Some(TimePreference::Oldest));
        assert_eq!(parse("我喜欢喝茶", now()), None);
        assert_eq!(parse("三个月的项目", now()), None, "a duration is not a month");
        // Years outside 1900–2200 are not dates (and must not panic).
        assert_eq!(range("99999999年5月"), pair("2026-05-01", "2026-06-01"), "the month is still read");
        assert_eq!(parse("0年", now()), None);
        assert_eq!(parse("in 99999999999", now()), None);
        assert_eq!(parse("May 99999", now()), None);
        for odd in [
            "年",
            "月",
            "前",
            "年月",
            "个月前",
            "十十月",
            "二〇二五年",
            "前年月日",
            "ago",
            "a ago",
            "0 days ago",
            "🙂年5月",
            "in",
            "年年年5月前",
        ] {
            let _ = parse(odd, now());
        }
    }

    #[test]
    fn before_and_after_an_event_or_a_date() {
        let anchor = |query: &str| {
            let intent = parse(query, now()).unwrap_or_else(|| panic!("{query}: no intent"));
            assert_eq!((intent.from, intent.to), (None, None), "{query}: unresolved until search finds the event");
            let anchor = intent.anchor.unwrap_or_else(|| panic!("{query}: no anchor"));
            (anchor.side, anchor.phrase)
        };
        assert_eq!(anchor("Where did the user live before the move?"), (Side::Before, "the move".to_owned()));
        assert_eq!(anchor("what did I do after the wedding"), (Side::After, "the wedding".to_owned()));
        assert_eq!(anchor("Which gym since I joined Acme?"), (Side::After, "i joined acme".to_owned()));
        assert_eq!(anchor("我搬家之前住在哪里"), (Side::Before, "搬家".to_owned()));
        assert_eq!(anchor("结婚以后搬去了哪里"), (Side::After, "结婚".to_owned()));
        // A date elsewhere wins over an event; a date after the word is a range beside it.
        assert_eq!(range("what did Caroline do after the parade in May 2023"), pair("2023-05-01", "2023-06-01"));
        assert_eq!(range("婚礼之后的2025年5月去了哪里"), pair("2025-05-01", "2025-06-01"));
        assert_eq!(range("where did I work before 2025"), pair("1900-01-01", "2025-01-01"));
        assert_eq!(range("projects prior to March 2025"), pair("1900-01-01", "2025-03-01"));
        assert_eq!(range("what changed after last week"), pair("2026-11-30", "2200-01-01"));
        assert_eq!(range("my gym since May"), pair("2026-05-01", "2200-01-01"));
        assert_eq!(range("2025年以前在哪工作"), pair("1900-01-01", "2025-01-01"));
        // "before" naming no event.
        for quiet in ["Have I told you this before?", "what did I say before", "I saw it before that"] {
            assert_eq!(parse(quiet, now()).and_then(|intent| intent.anchor), None, "{quiet}");
        }
        let mut intent = parse("before the move", now()).expect("intent");
        let at = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).single().expect("time");
        intent.anchor_at(uuid::Uuid::nil(), at);
        assert_eq!((intent.from, intent.to), (Some(floor()), Some(at)));
    }
}
