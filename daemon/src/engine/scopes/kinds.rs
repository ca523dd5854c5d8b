//! A fact's kind, inferred conservatively from its words when the note gave none: a word
//! list per kind, first match wins; anything unclear is a plain `fact`.

use super::records::{Domain, Kind};

const PREFERENCE: &[&str] = &[
    "prefer",
    "prefers",
    "preferred",
    "preference",
    "likes",
    "like",
    "loves",
    "love",
    "hates",
    "dislikes",
    "favorite",
    "favourite",
    "rather",
    "wants",
];
const DECISION: &[&str] = &[
    "decided", "decides", "chose", "chosen", "chooses", "picked", "opted", "agreed", "settled",
];
const OPEN: &[&str] = &[
    "waiting",
    "pending",
    "unresolved",
    "unknown",
    "tbd",
    "undecided",
    "unanswered",
];
const OUTCOME: &[&str] = &[
    "resolved",
    "fixed",
    "completed",
    "finished",
    "solved",
    "shipped",
    "closed",
    "refunded",
    "succeeded",
    "failed",
];
const ENVIRONMENT: &[&str] = &[
    "hosted",
    "runs",
    "installed",
    "version",
    "server",
    "database",
    "os",
    "linux",
    "windows",
    "macos",
    "python",
    "node",
    "region",
    "located",
    "deployed",
    "use",
    "stack",
    "run",
    "debian",
    "ubuntu",
    "host",
    "cloud",
];

const EMOTIONAL: &[&str] = &[
    "afraid",
    "fear",
    "scared",
    "anxious",
    "anxiety",
    "worried",
    "worry",
    "stress",
    "stressed",
    "sad",
    "grief",
    "grieving",
    "lonely",
    "depressed",
    "depression",
    "panic",
    "phobia",
    "upset",
    "hurt",
    "trauma",
    "therapy",
    "therapist",
    "overwhelmed",
    "nervous",
    "terrified",
];
const EDUCATIONAL: &[&str] = &[
    "learning",
    "learn",
    "studying",
    "study",
    "course",
    "lesson",
    "exam",
    "grade",
    "tutor",
    "homework",
    "curriculum",
    "chapter",
    "practising",
    "practicing",
    "quiz",
    "syllabus",
    "semester",
];

fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether any word is in `list` (a plural or third-person "s" counts as the word without it:
/// "servers", "runs").
fn any_in(words: &[String], list: &[&str]) -> bool {
    words
        .iter()
        .any(|w| list.contains(&w.as_str()) || w.strip_suffix('s').is_some_and(|stem| list.contains(&stem)))
}

/// A fact's domain, conservatively: emotional or educational only on a clear word.
pub fn domain(text: &str) -> Domain {
    let words = words(text);
    if any_in(&words, EMOTIONAL) {
        Domain::Emotional
    } else if any_in(&words, EDUCATIONAL) {
        Domain::Educational
    } else {
        Domain::General
    }
}

pub fn infer(text: &str, milestone: bool) -> Kind {
    let words = words(text);
    let has = |list: &[&str]| any_in(&words, list);
    if has(PREFERENCE) {
        Kind::Preference
    } else if has(DECISION) {
        Kind::Decision
    } else if has(OPEN) || text.trim_end().ends_with('?') {
        Kind::OpenQuestion
    } else if has(OUTCOME) || milestone {
        Kind::Outcome
    } else if has(ENVIRONMENT) {
        Kind::Environment
    } else {
        Kind::Fact
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_examples() {
        assert_eq!(infer("Prefers summaries as bullet points", false), Kind::Preference);
        assert_eq!(infer("Chose the annual billing plan", false), Kind::Decision);
        assert_eq!(
            infer("The staging database is hosted in Sydney", false),
            Kind::Environment
        );
        assert_eq!(
            infer("The March invoice dispute was resolved with a credit note", false),
            Kind::Outcome
        );
        assert_eq!(
            infer("Still waiting on legal sign-off for the new contract", false),
            Kind::OpenQuestion
        );
        assert_eq!(infer("Caroline went to a support group", false), Kind::Fact);
        assert_eq!(infer("Moved to Berlin", true), Kind::Outcome);
        assert_eq!(infer("Alex's servers run Debian.", false), Kind::Environment);
    }

    #[test]
    fn domains_only_on_clear_words() {
        assert_eq!(domain("Alex is afraid of flying."), Domain::Emotional);
        assert_eq!(domain("Alex is studying for the bar exam."), Domain::Educational);
        assert_eq!(domain("Alex's favourite colour is green."), Domain::General);
    }
}
