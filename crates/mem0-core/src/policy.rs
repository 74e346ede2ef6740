//! The write policy: what must never be stored. Every text about to become a memory (verbatim
//! messages, the messages sent for extraction and buffered, the facts the model returns, updated
//! texts, procedural summaries) passes [`Policy::check`] first. Built-in detectors find secrets
//! (provider keys and tokens, private keys, "password is …" with a value that is not a plain
//! lower-case word), payment card numbers (Luhn-valid),
//! national ids (US SSN, Chinese resident id, with their checks), e-mail addresses and phone
//! numbers; custom rules add regular expressions or literal terms. Each detector and rule has an
//! action: `reject` (the call fails with the rule's name, nothing stored), `redact` (the match is
//! stored as `[REDACTED:kind]`) or `allow`. Tenants can override actions and add rules
//! (`memory.policy.tenants.<tenant>`). Every decision is logged (rule and action, never the text).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// What happens to a text a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Stored as it is.
    Allow,
    /// The match is replaced by `[REDACTED:kind]`.
    Redact,
    /// The call fails (400 `policy_rejected`), nothing is stored.
    Reject,
}

/// Actions of the built-in detectors; unset ones keep the default (tenant: the global one).
///
/// Always flattened into a struct that refuses unknown keys; refusing them here too would make
/// the schema refuse its neighbours' keys (`rules`) in the `allOf` it is part of.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DetectorActions {
    /// Provider keys and tokens, private keys, "password is …" (default `redact`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Action>,
    /// Luhn-valid card numbers (default `redact`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_cards: Option<Action>,
    /// US social security numbers and Chinese resident ids (default `redact`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub national_ids: Option<Action>,
    /// E-mail addresses (default `allow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emails: Option<Action>,
    /// Phone numbers (default `allow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phones: Option<Action>,
}

/// A custom rule: a regular expression or literal terms (matched case-insensitively as words).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Named in rejections and in `[REDACTED:name]`.
    pub name: String,
    /// A regular expression (Rust `regex` syntax).
    #[serde(default)]
    pub pattern: Option<String>,
    /// Literal words or phrases.
    #[serde(default)]
    pub terms: Vec<String>,
    /// What to do with a match.
    pub action: Action,
}

/// A tenant's overrides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TenantPolicy {
    /// Detector actions overriding the global ones.
    #[serde(flatten)]
    pub detectors: DetectorActions,
    /// Rules added to the global ones.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
}

/// `memory.policy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Detector actions for every tenant.
    #[serde(flatten)]
    pub detectors: DetectorActions,
    /// Rules for every tenant.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    /// Per-tenant overrides, by tenant id.
    #[serde(default)]
    pub tenants: BTreeMap<String, TenantPolicy>,
}

/// The kinds of built-in detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Detector {
    Secret,
    PaymentCard,
    NationalId,
    Email,
    Phone,
}

impl Detector {
    const ALL: [Detector; 5] =
        [Detector::Secret, Detector::PaymentCard, Detector::NationalId, Detector::Email, Detector::Phone];

    fn name(self) -> &'static str {
        match self {
            Self::Secret => "secret",
            Self::PaymentCard => "payment_card",
            Self::NationalId => "national_id",
            Self::Email => "email",
            Self::Phone => "phone",
        }
    }

    fn default_action(self) -> Action {
        match self {
            Self::Secret | Self::PaymentCard | Self::NationalId => Action::Redact,
            Self::Email | Self::Phone => Action::Allow,
        }
    }

    fn configured(self, actions: &DetectorActions) -> Option<Action> {
        match self {
            Self::Secret => actions.secrets,
            Self::PaymentCard => actions.payment_cards,
            Self::NationalId => actions.national_ids,
            Self::Email => actions.emails,
            Self::Phone => actions.phones,
        }
    }

    /// Byte ranges of `text` this detector matches.
    fn find(self, text: &str) -> Vec<(usize, usize)> {
        match self {
            Self::Secret => {
                let mut found: Vec<(usize, usize)> =
                    SECRETS.iter().flat_map(|pattern| pattern.find_iter(text).map(|m| (m.start(), m.end()))).collect();
                // "password is hunter2": only the value, and not a plain lower-case word ("the
                // password is stored in the vault" is prose, not a password).
                found.extend(
                    SECRET_PHRASE
                        .captures_iter(text)
                        .filter_map(|c| c.get(1))
                        .filter(|m| !m.as_str().chars().all(|c| c.is_ascii_lowercase()))
                        .map(|m| (m.start(), m.end())),
                );
                found
            }
            Self::PaymentCard => CARD
                .find_iter(text)
                .filter(|m| {
                    let digits: Vec<u32> = m.as_str().chars().filter_map(|c| c.to_digit(10)).collect();
                    // Card networks' number ranges start with 2–6 (a 13-digit Unix time in
                    // milliseconds starts with 1).
                    (13..=19).contains(&digits.len()) && (2..=6).contains(&digits[0]) && luhn(&digits)
                })
                .map(|m| (m.start(), m.end()))
                .collect(),
            Self::NationalId => {
                let ssn = SSN.captures_iter(text).filter(|c| valid_ssn(&c[1], &c[2], &c[3])).filter_map(|c| c.get(0));
                let resident = RESIDENT_ID.find_iter(text).filter(|m| valid_resident_id(m.as_str()));
                ssn.chain(resident).map(|m| (m.start(), m.end())).collect()
            }
            Self::Email => EMAIL.find_iter(text).map(|m| (m.start(), m.end())).collect(),
            Self::Phone => PHONE
                .find_iter(text)
                .filter(|m| (9..=15).contains(&m.as_str().chars().filter(char::is_ascii_digit).count()))
                .map(|m| (m.start(), m.end()))
                .collect(),
        }
    }
}

fn patterns(sources: &[&str]) -> Vec<Regex> {
    sources.iter().map(|source| Regex::new(source).expect("built-in pattern")).collect()
}

static SECRETS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    patterns(&[
        r"\bsk-(?:proj-|ant-|live-)?[A-Za-z0-9_-]{20,}",
        r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
        r"\bgh[pousr]_[A-Za-z0-9]{30,}\b",
        r"\bgithub_pat_[A-Za-z0-9_]{30,}\b",
        r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
        r"\bAIza[0-9A-Za-z_-]{35}",
        r"\b[rs]k_(?:live|test)_[0-9A-Za-z]{16,}",
        r"\bm0sk_[A-Za-z0-9_-]{20,}",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        r"(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\z)",
    ])
});
static SECRET_PHRASE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\b(?:password|passwd|passphrase|passcode|pin code|api[ _-]?key|secret key|access token)\b(?:\s+(?:is|was)\s*[:=]?|\s*[:=])\s*["'`]?([^\s"'`]{4,})"#,
    )
    .expect("built-in pattern")
});
static CARD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b\d(?:[ -]?\d){12,18}\b").expect("built-in pattern"));
static SSN: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b(\d{3})-(\d{2})-(\d{4})\b").expect("built-in pattern"));
static RESIDENT_ID: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b\d{17}[\dXx]\b").expect("built-in pattern"));
static EMAIL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b").expect("built-in pattern")
});
static PHONE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)[ .-]?)?\d{2,4}[ .-]\d{3,4}[ .-]?\d{3,4}\b")
        .expect("built-in pattern")
});

/// The Luhn check of a card number's digits.
fn luhn(digits: &[u32]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(index, &digit)| {
            if index % 2 == 1 {
                if digit * 2 > 9 {
                    digit * 2 - 9
                } else {
                    digit * 2
                }
            } else {
                digit
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// A US SSN as issued: area not 000, 666 or 9xx; group not 00; serial not 0000.
fn valid_ssn(area: &str, group: &str, serial: &str) -> bool {
    area != "000" && area != "666" && !area.starts_with('9') && group != "00" && serial != "0000"
}

/// A Chinese resident id: a valid birth date and the ISO 7064 MOD 11-2 check character.
fn valid_resident_id(id: &str) -> bool {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    const CHECKS: [char; 11] = ['1', '0', 'X', '9', '8', '7', '6', '5', '4', '3', '2'];
    let chars: Vec<char> = id.chars().collect();
    let Some(digits) = chars[..17].iter().map(|c| c.to_digit(10)).collect::<Option<Vec<u32>>>() else { return false };
    let birth = &id[6..14];
    if chrono::NaiveDate::parse_from_str(birth, "%Y%m%d").is_err() {
        return false;
    }
    let sum: u32 = digits.iter().zip(WEIGHTS).map(|(digit, weight)| digit * weight).sum();
    chars[17].to_ascii_uppercase() == CHECKS[(sum % 11) as usize]
}

/// A compiled custom rule.
#[derive(Debug, Clone)]
struct Rule {
    name: String,
    pattern: Regex,
    action: Action,
}

impl Rule {
    fn compile(config: &RuleConfig, field: &str) -> Result<Self, String> {
        let name = config.name.trim();
        if name.is_empty()
            || name.len() > 64
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!("{field}.name must be 1 to 64 characters of letters, digits, `_` and `-`"));
        }
        let mut sources: Vec<String> = config.pattern.iter().cloned().collect();
        let terms: Vec<String> =
            config.terms.iter().map(|term| term.trim()).filter(|term| !term.is_empty()).map(regex::escape).collect();
        if !terms.is_empty() {
            sources.push(format!(r"(?i)\b(?:{})\b", terms.join("|")));
        }
        if sources.is_empty() {
            return Err(format!("{field} ({name}) needs a `pattern` or `terms`"));
        }
        let pattern = Regex::new(&sources.iter().map(|source| format!("(?:{source})")).collect::<Vec<_>>().join("|"))
            .map_err(|error| format!("{field} ({name}): invalid pattern: {error}"))?;
        Ok(Self { name: name.to_owned(), pattern, action: config.action })
    }
}

/// The rules of one tenant (or the defaults), compiled.
#[derive(Debug, Clone)]
struct RuleSet {
    detectors: Vec<(Detector, Action)>,
    rules: Vec<Rule>,
}

/// The outcome of checking a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// The text to store (redacted where rules said so); `redacted` names what was redacted.
    Store {
        /// The text to store.
        text: String,
        /// Kinds or rule names redacted, one per match.
        redacted: Vec<String>,
    },
    /// A `reject` rule matched: nothing may be stored.
    Rejected {
        /// The detector kind or rule name.
        rule: String,
    },
}

/// The compiled write policy.
#[derive(Debug, Clone)]
pub struct Policy {
    global: RuleSet,
    tenants: BTreeMap<String, RuleSet>,
}

impl Default for Policy {
    fn default() -> Self {
        Self::compile(&PolicyConfig::default()).expect("the default policy compiles")
    }
}

impl Policy {
    /// Compiles `config`.
    ///
    /// # Errors
    /// A message naming the bad rule (under `memory.policy`).
    pub fn compile(config: &PolicyConfig) -> Result<Self, String> {
        let compile_rules = |rules: &[RuleConfig], prefix: &str| -> Result<Vec<Rule>, String> {
            rules
                .iter()
                .enumerate()
                .map(|(index, rule)| Rule::compile(rule, &format!("{prefix}.rules[{index}]")))
                .collect()
        };
        let global_rules = compile_rules(&config.rules, "memory.policy")?;
        let detectors = |overrides: &[&DetectorActions]| -> Vec<(Detector, Action)> {
            Detector::ALL
                .iter()
                .map(|&detector| {
                    let action = overrides.iter().find_map(|actions| detector.configured(actions));
                    (detector, action.unwrap_or(detector.default_action()))
                })
                .collect()
        };
        let global = RuleSet { detectors: detectors(&[&config.detectors]), rules: global_rules.clone() };
        let mut tenants = BTreeMap::new();
        for (tenant, overrides) in &config.tenants {
            let mut rules = global_rules.clone();
            rules.extend(compile_rules(&overrides.rules, &format!("memory.policy.tenants.{tenant}"))?);
            tenants.insert(
                tenant.clone(),
                RuleSet { detectors: detectors(&[&overrides.detectors, &config.detectors]), rules },
            );
        }
        Ok(Self { global, tenants })
    }

    /// Checks a text of `tenant` before it is stored.
    pub fn check(&self, tenant: &str, text: &str) -> Checked {
        let set = self.tenants.get(tenant).unwrap_or(&self.global);
        // (start, end, action, name) of every match of a rule that does not allow it.
        let mut hits: Vec<(usize, usize, Action, String)> = Vec::new();
        for &(detector, action) in set.detectors.iter().filter(|(_, action)| *action != Action::Allow) {
            hits.extend(
                detector.find(text).into_iter().map(|(start, end)| (start, end, action, detector.name().to_owned())),
            );
        }
        for rule in set.rules.iter().filter(|rule| rule.action != Action::Allow) {
            hits.extend(rule.pattern.find_iter(text).map(|m| (m.start(), m.end(), rule.action, rule.name.clone())));
        }
        if let Some((_, _, _, rule)) = hits.iter().find(|(_, _, action, _)| *action == Action::Reject) {
            tracing::info!(%tenant, rule = %rule, action = "reject", "write policy");
            return Checked::Rejected { rule: rule.clone() };
        }
        if hits.is_empty() {
            return Checked::Store { text: text.to_owned(), redacted: Vec::new() };
        }
        // Longest first among overlapping matches, then left to right.
        hits.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut out = String::with_capacity(text.len());
        let mut redacted = Vec::new();
        let mut position = 0;
        for (start, end, _, name) in hits {
            if start < position {
                continue;
            }
            out.push_str(&text[position..start]);
            out.push_str(&format!("[REDACTED:{name}]"));
            redacted.push(name);
            position = end;
        }
        out.push_str(&text[position..]);
        tracing::info!(%tenant, redacted = ?redacted, action = "redact", "write policy");
        Checked::Store { text: out, redacted }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redacted(text: &str) -> String {
        match Policy::default().check("t", text) {
            Checked::Store { text, .. } => text,
            Checked::Rejected { rule } => panic!("rejected by {rule}"),
        }
    }

    #[test]
    fn secrets_are_redacted_by_default() {
        for (text, expected) in [
            ("my key is sk-proj-abcdefghijklmnopqrstuvwx1234", "my key is [REDACTED:secret]"),
            ("AWS AKIAIOSFODNN7EXAMPLE in prod", "AWS [REDACTED:secret] in prod"),
            ("token ghp_0123456789abcdefghijklmnopqrstuvwxyz", "token [REDACTED:secret]"),
            ("The wifi password is hunter2!", "The wifi password is [REDACTED:secret]"),
            ("password: \"Tr0ub4dor&3\"", "password: \"[REDACTED:secret]\""),
            ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- ok", "[REDACTED:secret] ok"),
        ] {
            assert_eq!(redacted(text), expected, "{text}");
        }
        // Near misses stay.
        for text in [
            "I forgot my password again",
            "My password is stored in the vault",
            "the API key: rotate it monthly",
            "sk-short",
            "the passcode is ok",
            "skiing in AKIA",
        ] {
            assert_eq!(redacted(text), text, "{text}");
        }
    }

    #[test]
    fn card_numbers_need_the_luhn_check() {
        assert_eq!(redacted("card 4111 1111 1111 1111 exp 12/27"), "card [REDACTED:payment_card] exp 12/27");
        assert_eq!(redacted("card 4111-1111-1111-1112"), "card 4111-1111-1111-1112", "Luhn-invalid");
        assert_eq!(redacted("order 20260512 shipped"), "order 20260512 shipped", "too short");
        assert_eq!(redacted("at 1764590000006 ms"), "at 1764590000006 ms", "a millisecond time is no card");
    }

    #[test]
    fn national_ids_need_their_checks() {
        assert_eq!(redacted("SSN 123-45-6789."), "SSN [REDACTED:national_id].");
        assert_eq!(redacted("SSN 000-45-6789"), "SSN 000-45-6789", "area 000 is never issued");
        assert_eq!(redacted("id 11010519491231002X ok"), "id [REDACTED:national_id] ok");
        assert_eq!(redacted("id 110105194912310021"), "id 110105194912310021", "wrong check character");
    }

    #[test]
    fn emails_and_phones_are_allowed_unless_configured() {
        let text = "mail ann@example.com or call +1 415 555 0132";
        assert_eq!(redacted(text), text);
        let config = PolicyConfig {
            detectors: DetectorActions {
                emails: Some(Action::Redact),
                phones: Some(Action::Redact),
                ..DetectorActions::default()
            },
            ..PolicyConfig::default()
        };
        let Checked::Store { text, redacted } = Policy::compile(&config).expect("policy").check("t", text) else {
            panic!("rejected")
        };
        assert_eq!(text, "mail [REDACTED:email] or call [REDACTED:phone]");
        assert_eq!(redacted, ["email", "phone"]);
    }

    #[test]
    fn configuration_reads_flat_detectors_and_refuses_typos() {
        let config: PolicyConfig = serde_json::from_value(serde_json::json!({
            "secrets": "reject",
            "rules": [{"name": "codenames", "terms": ["Falcon"], "action": "redact"}],
            "tenants": {"bank": {"payment_cards": "reject"}}
        }))
        .expect("config");
        assert_eq!(config.detectors.secrets, Some(Action::Reject));
        assert_eq!(config.tenants["bank"].detectors.payment_cards, Some(Action::Reject));
        assert!(serde_json::from_value::<PolicyConfig>(serde_json::json!({"secret": "reject"})).is_err());
        assert!(
            serde_json::from_value::<PolicyConfig>(serde_json::json!({"tenants": {"b": {"card": "reject"}}})).is_err()
        );
        assert!(serde_json::from_value::<TenantPolicy>(serde_json::json!({"emails": "redact", "email": "x"})).is_err());
    }

    #[test]
    fn rules_and_tenant_overrides() {
        let config = PolicyConfig {
            rules: vec![RuleConfig {
                name: "codenames".into(),
                pattern: None,
                terms: vec!["Project Falcon".into()],
                action: Action::Reject,
            }],
            tenants: BTreeMap::from([(
                "bank".to_owned(),
                TenantPolicy {
                    detectors: DetectorActions { payment_cards: Some(Action::Reject), ..DetectorActions::default() },
                    rules: vec![RuleConfig {
                        name: "iban".into(),
                        pattern: Some(r"\b[A-Z]{2}\d{2}[A-Z0-9]{11,30}\b".into()),
                        terms: Vec::new(),
                        action: Action::Redact,
                    }],
                },
            )]),
            ..PolicyConfig::default()
        };
        let policy = Policy::compile(&config).expect("policy");
        assert_eq!(policy.check("acme", "notes on project falcon"), Checked::Rejected { rule: "codenames".into() });
        assert_eq!(policy.check("bank", "pay 4111111111111111"), Checked::Rejected { rule: "payment_card".into() });
        let Checked::Store { text, .. } = policy.check("bank", "to NO9386011117947") else { panic!("rejected") };
        assert_eq!(text, "to [REDACTED:iban]");
        let Checked::Store { text, .. } = policy.check("acme", "pay 4111111111111111") else { panic!("rejected") };
        assert_eq!(text, "pay [REDACTED:payment_card]", "other tenants keep the global action");
        let bad = PolicyConfig {
            rules: vec![RuleConfig {
                name: "x".into(),
                pattern: Some("(".into()),
                terms: Vec::new(),
                action: Action::Reject,
            }],
            ..PolicyConfig::default()
        };
        assert!(Policy::compile(&bad).expect_err("invalid").contains("memory.policy.rules[0]"));
    }
}
