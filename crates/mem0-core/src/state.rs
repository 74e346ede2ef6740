//! Current truth over an append-only history: the memories that are values of one state key
//! (`user.home_city`) in one scope form a chain ordered by event time (when what they say took
//! effect; the observation time when unknown), not by arrival. The newest is current (`active`),
//! each older one is `superseded` by the next (`superseded_by`) until that one's time
//! (`valid_to`). Nothing is deleted: superseded memories stay readable by id and in history, and
//! search and listing show them on request.
//!
//! The chain is a pure function of its rows ([`resolve`]), recomputed inside the write
//! transaction of every change that touches the key, so a fact arriving late slots in where it
//! belongs and undoing a write restores the statuses before it. People have the last word: a
//! `pinned` memory stays current whatever arrives later (the rest of the chain is superseded by
//! it) and a `retired` one is out of the chain; the resolver changes neither.

use std::cmp::Ordering;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::scope::Scope;
use crate::types::{MemoryStatus, SourceType};

/// Longest state key, in bytes.
pub const MAX_STATE_KEY_BYTES: usize = 128;

/// One state key in one scope: the memories a resolution looks at.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StateKey {
    /// Owning tenant.
    pub tenant: String,
    /// Exactly this scope (ids not set must be unset on the memory too).
    pub scope: Scope,
    /// The key.
    pub key: String,
}

impl StateKey {
    /// The key of `record`'s chain, when it has a state key.
    pub fn of(record: &crate::types::MemoryRecord) -> Option<Self> {
        record.state.state_key.as_ref().map(|key| Self {
            tenant: record.tenant.clone(),
            scope: record.scope.clone(),
            key: key.clone(),
        })
    }
}

/// What the resolver needs of one memory of a chain.
#[derive(Debug, Clone, PartialEq)]
pub struct StateRow {
    /// The memory.
    pub id: Uuid,
    /// Its status now.
    pub status: MemoryStatus,
    /// Its event time, else its observation time.
    pub time: DateTime<Utc>,
    /// Its confidence.
    pub confidence: f32,
    /// Its source.
    pub source_type: SourceType,
    /// Its successor now.
    pub superseded_by: Option<Uuid>,
    /// Its end now.
    pub valid_to: Option<DateTime<Utc>>,
}

/// A memory whose status, successor or end must change.
#[derive(Debug, Clone, PartialEq)]
pub struct StateChange {
    /// The memory.
    pub id: Uuid,
    /// New status.
    pub status: MemoryStatus,
    /// New successor.
    pub superseded_by: Option<Uuid>,
    /// New end.
    pub valid_to: Option<DateTime<Utc>>,
}

/// How much a source is trusted when two memories of one key are otherwise equal: a person's
/// review, then what the user said, a tool's output, an import, the assistant, a model's inference.
pub fn source_rank(source: SourceType) -> u8 {
    match source {
        SourceType::HumanReviewed => 5,
        SourceType::UserStated => 4,
        SourceType::ToolResult => 3,
        SourceType::Imported => 2,
        SourceType::AssistantStated => 1,
        SourceType::AgentInferred => 0,
    }
}

/// Checks a state key: 1 to [`MAX_STATE_KEY_BYTES`] bytes of letters, digits, `_ . - :`.
///
/// # Errors
/// A message saying what is wrong.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_STATE_KEY_BYTES {
        return Err(format!("must be 1 to {MAX_STATE_KEY_BYTES} bytes"));
    }
    if !key.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '-' | ':')) {
        return Err("only letters, digits and _ . - : (e.g. user.home_city)".to_owned());
    }
    Ok(())
}

/// Prefix of the keys given to a memory that a newer fact replaces without either having a key
/// (see [`chain_key`]); such keys carry no words worth embedding.
pub const CHAIN_KEY_PREFIX: &str = "chain.";

/// The key a memory replaced by a newer fact (the model's `replaces`) is given when it had none,
/// shared with its replacement so the resolver supersedes it: `chain.<its id>`.
pub fn chain_key(replaced: Uuid) -> String {
    format!("{CHAIN_KEY_PREFIX}{}", replaced.simple())
}

/// What is embedded for a memory that is a value of `key`: the key's words before the text
/// (`user.employer` + "I joined Acme" → "employer: I joined Acme"), so "where does the user work?"
/// finds the value that never says "work". A leading `user` adds nothing and is left out. Without
/// a key, the text alone.
pub fn embedding_text(key: Option<&str>, text: &str) -> String {
    match key.and_then(key_words) {
        Some(words) => format!("{words}: {text}"),
        None => text.to_owned(),
    }
}

/// The words of a state key (`user.home_city` → "home city"): its parts without a leading
/// `user`; `None` for a [`chain_key`] or a key of no words.
pub fn key_words(key: &str) -> Option<String> {
    if key.starts_with(CHAIN_KEY_PREFIX) {
        return None;
    }
    let words: Vec<&str> = key
        .split(['.', '_', '-', ':'])
        .filter(|word| !word.is_empty())
        .enumerate()
        .filter(|(index, word)| !(*index == 0 && word.eq_ignore_ascii_case("user")))
        .map(|(_, word)| word)
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}

/// The better of two memories to stand for a group of equal time: higher confidence, then the
/// more trusted source, then the later arrival (ids are time-ordered).
fn better(a: &StateRow, b: &StateRow) -> Ordering {
    a.confidence
        .total_cmp(&b.confidence)
        .then_with(|| source_rank(a.source_type).cmp(&source_rank(b.source_type)))
        .then_with(|| a.id.cmp(&b.id))
}

/// The statuses of one chain (every memory of one key and scope, any status), and which of them
/// differ from what the rows hold. Rules, in order:
/// 1. `retired` and `pinned` memories keep their status (people set them).
/// 2. The others, grouped by time: each memory of a group is `superseded` by the best of the
///    next group (see [`better`]) with `valid_to` that group's time.
/// 3. The newest group: one memory is `active`; several of one source type are a restatement,
///    the latest arrival is `active` and the others superseded by it; several of different source
///    types cannot be ordered and are all `conflict`.
/// 4. With a pinned memory, whatever rule 3 left current is superseded by the newest pinned one
///    (`valid_to` its time when that is later).
pub fn resolve(rows: &[StateRow]) -> Vec<StateChange> {
    let pinned = rows
        .iter()
        .filter(|row| row.status == MemoryStatus::Pinned)
        .max_by(|a, b| a.time.cmp(&b.time).then_with(|| a.id.cmp(&b.id)));
    let mut chain: Vec<&StateRow> =
        rows.iter().filter(|row| !matches!(row.status, MemoryStatus::Pinned | MemoryStatus::Retired)).collect();
    chain.sort_by(|a, b| a.time.cmp(&b.time).then_with(|| a.id.cmp(&b.id)));
    let mut groups: Vec<Vec<&StateRow>> = Vec::new();
    for row in chain {
        match groups.last_mut() {
            Some(group) if group[0].time == row.time => group.push(row),
            _ => groups.push(vec![row]),
        }
    }
    let change = |id: Uuid, status: MemoryStatus, superseded_by: Option<Uuid>, valid_to: Option<DateTime<Utc>>| {
        StateChange { id, status, superseded_by, valid_to }
    };
    let mut wanted: Vec<StateChange> = Vec::new();
    for pair in groups.windows(2) {
        let next = pair[1].iter().copied().max_by(|a, b| better(a, b)).expect("groups are not empty");
        for row in &pair[0] {
            wanted.push(change(row.id, MemoryStatus::Superseded, Some(next.id), Some(next.time)));
        }
    }
    if let Some(newest) = groups.last() {
        let mut current: Vec<StateChange> = Vec::new();
        let one_source = newest.iter().all(|row| row.source_type == newest[0].source_type);
        if newest.len() == 1 {
            current.push(change(newest[0].id, MemoryStatus::Active, None, None));
        } else if one_source {
            let latest = newest.iter().copied().max_by_key(|row| row.id).expect("not empty");
            for row in newest {
                if row.id == latest.id {
                    current.push(change(row.id, MemoryStatus::Active, None, None));
                } else {
                    current.push(change(row.id, MemoryStatus::Superseded, Some(latest.id), Some(latest.time)));
                }
            }
        } else {
            current.extend(newest.iter().map(|row| change(row.id, MemoryStatus::Conflict, None, None)));
        }
        if let Some(pin) = pinned {
            let time = newest[0].time;
            for entry in &mut current {
                if entry.status != MemoryStatus::Superseded {
                    *entry =
                        change(entry.id, MemoryStatus::Superseded, Some(pin.id), (pin.time > time).then_some(pin.time));
                }
            }
        }
        wanted.extend(current);
    }
    wanted
        .into_iter()
        .filter(|wanted| {
            rows.iter().find(|row| row.id == wanted.id).is_none_or(|row| {
                row.status != wanted.status
                    || row.superseded_by != wanted.superseded_by
                    || row.valid_to != wanted.valid_to
            })
        })
        .collect()
}

/// What [`order_conflicts`] needs of a ranked result: the chain it is in conflict within (key
/// and scope), its confidence, its source and its id; `None` for results not in conflict.
pub type ConflictTerms = Option<(String, f32, SourceType, Uuid)>;

/// Orders the values in `conflict` of each chain among the places they hold in a ranking: the
/// best first (higher confidence, then the more trusted source, then the later arrival, as the
/// resolver picks), whatever their scores. Other results keep their places.
pub fn order_conflicts<T: Clone>(ranked: &mut [T], terms: impl Fn(&T) -> ConflictTerms) {
    let mut chains: Vec<(String, Vec<usize>)> = Vec::new();
    for (index, item) in ranked.iter().enumerate() {
        if let Some((chain, ..)) = terms(item) {
            match chains.iter_mut().find(|(known, _)| *known == chain) {
                Some((_, places)) => places.push(index),
                None => chains.push((chain, vec![index])),
            }
        }
    }
    for (_, places) in chains.into_iter().filter(|(_, places)| places.len() > 1) {
        let mut members: Vec<T> = places.iter().map(|&index| ranked[index].clone()).collect();
        members.sort_by(|a, b| {
            let (Some((_, a_confidence, a_source, a_id)), Some((_, b_confidence, b_source, b_id))) =
                (terms(a), terms(b))
            else {
                return Ordering::Equal;
            };
            b_confidence
                .total_cmp(&a_confidence)
                .then_with(|| source_rank(b_source).cmp(&source_rank(a_source)))
                .then_with(|| b_id.cmp(&a_id))
        });
        for (index, member) in places.into_iter().zip(members) {
            ranked[index] = member;
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(day: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, day, 12, 0, 0).single().expect("time")
    }

    fn row(n: u128, day: u32, source: SourceType) -> StateRow {
        StateRow {
            id: Uuid::from_u128(n),
            status: MemoryStatus::Active,
            time: at(day),
            confidence: source.default_confidence(),
            source_type: source,
            superseded_by: None,
            valid_to: None,
        }
    }

    /// Applies changes to rows (what the store does) and returns (id, status, successor, end).
    fn apply(rows: &mut [StateRow]) -> Vec<(u128, MemoryStatus, Option<u128>, Option<u32>)> {
        for change in resolve(rows) {
            let row = rows.iter_mut().find(|row| row.id == change.id).expect("row");
            row.status = change.status;
            row.superseded_by = change.superseded_by;
            row.valid_to = change.valid_to;
        }
        assert!(resolve(rows).is_empty(), "a resolved chain needs no change");
        let mut out: Vec<_> = rows
            .iter()
            .map(|row| {
                (
                    row.id.as_u128(),
                    row.status,
                    row.superseded_by.map(|id| id.as_u128()),
                    row.valid_to.map(|time| time.format("%d").to_string().parse().expect("day")),
                )
            })
            .collect();
        out.sort_by_key(|entry| entry.0);
        out
    }

    use MemoryStatus::{Active, Conflict, Pinned, Retired, Superseded};
    use SourceType::{AssistantStated, UserStated};

    #[test]
    fn a_chain_of_three_values_in_any_arrival_order() {
        // New York (1st), Boston (10th), San Francisco (20th): arrival order must not matter.
        let rows = [row(1, 1, UserStated), row(2, 10, UserStated), row(3, 20, UserStated)];
        let expected =
            vec![(1, Superseded, Some(2), Some(10)), (2, Superseded, Some(3), Some(20)), (3, Active, None, None)];
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0], [2, 0, 1]] {
            let mut chain: Vec<StateRow> = Vec::new();
            for index in order {
                chain.push(rows[index].clone());
                apply(&mut chain);
            }
            assert_eq!(apply(&mut chain), expected, "arrival order {order:?}");
        }
    }

    #[test]
    fn the_same_time_from_different_sources_is_a_conflict() {
        let mut chain = vec![row(1, 1, UserStated), row(2, 5, UserStated), row(3, 5, AssistantStated)];
        assert_eq!(
            apply(&mut chain),
            vec![(1, Superseded, Some(2), Some(5)), (2, Conflict, None, None), (3, Conflict, None, None)],
            "the older one points at the better of the two (user over assistant)"
        );
        // A later value ends the conflict.
        chain.push(row(4, 9, AssistantStated));
        assert_eq!(
            apply(&mut chain),
            vec![
                (1, Superseded, Some(2), Some(5)),
                (2, Superseded, Some(4), Some(9)),
                (3, Superseded, Some(4), Some(9)),
                (4, Active, None, None)
            ]
        );
    }

    #[test]
    fn the_same_time_from_one_source_is_a_restatement() {
        let mut chain = vec![row(1, 5, UserStated), row(2, 5, UserStated)];
        assert_eq!(apply(&mut chain), vec![(1, Superseded, Some(2), Some(5)), (2, Active, None, None)]);
    }

    #[test]
    fn pinned_stays_current_and_retired_leaves_the_chain() {
        let mut chain = vec![row(1, 1, UserStated), row(2, 10, UserStated)];
        chain[0].status = Pinned;
        assert_eq!(apply(&mut chain), vec![(1, Pinned, None, None), (2, Superseded, Some(1), None)]);
        chain[0].status = Retired;
        assert_eq!(apply(&mut chain), vec![(1, Retired, None, None), (2, Active, None, None)]);
        // Retiring the current value makes the one before it current again.
        let mut chain = vec![row(1, 1, UserStated), row(2, 10, UserStated)];
        apply(&mut chain);
        chain[1].status = Retired;
        assert_eq!(apply(&mut chain), vec![(1, Active, None, None), (2, Retired, None, None)]);
    }

    #[test]
    fn keys_lend_their_words_to_the_embedding() {
        assert_eq!(embedding_text(Some("user.employer"), "I joined Acme"), "employer: I joined Acme");
        assert_eq!(embedding_text(Some("project.test_command"), "Run make"), "project test command: Run make");
        assert_eq!(embedding_text(Some("user"), "x"), "x");
        assert_eq!(embedding_text(None, "x"), "x");
        assert_eq!(key_words("user.home_city").as_deref(), Some("home city"));
        assert_eq!(key_words("tom.employer").as_deref(), Some("tom employer"));
        assert_eq!((key_words("user"), key_words(&chain_key(Uuid::nil()))), (None, None));
    }

    #[test]
    fn keys_are_checked() {
        assert!(check_key("user.home_city").is_ok());
        assert!(check_key("project:mem0-rs.test_command").is_ok());
        for bad in ["", "a b", "x;drop", &"k".repeat(129)] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn conflicting_values_are_ordered_by_confidence_then_source_in_their_places() {
        // (name, chain in conflict, confidence, source, id order)
        let item = |name: &'static str, chain: Option<&str>, confidence: f32, source: SourceType, n: u128| {
            (name, chain.map(|chain| (chain.to_owned(), confidence, source, Uuid::from_u128(n))))
        };
        let mut ranked = vec![
            item("guess", Some("ann/user.city"), 0.6, SourceType::AgentInferred, 1),
            item("tea", None, 0.0, SourceType::UserStated, 2),
            item("said", Some("ann/user.city"), 0.9, SourceType::UserStated, 3),
            item("other", Some("bob/user.city"), 0.5, SourceType::ToolResult, 4),
            item("tool", Some("ann/user.city"), 0.9, SourceType::ToolResult, 5),
            item("newer other", Some("bob/user.city"), 0.5, SourceType::ToolResult, 6),
        ];
        order_conflicts(&mut ranked, |(_, terms)| terms.clone());
        let names: Vec<&str> = ranked.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["said", "tea", "tool", "newer other", "guess", "other"]);
    }
}
