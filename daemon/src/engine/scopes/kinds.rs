//! A fact's kind, inferred conservatively from its words when the note gave none: a word
//! list per kind, first match wins; anything unclear is a plain `fact`.

use super::records::Kind;

const PREFERENCE: &[&str] = &[
    "prefer", "prefers", "preferred", "preference", "likes", "like", "loves", "love", "hates", "dislikes",
    "favorite", "favourite", "rather", "wants",
];
const DECISION: &[&str] = &["decided", "decides", "chose", "chosen", "chooses", "picked", "opted", "agreed", "settled"];
const OPEN: &[&str] = &["waiting", "pending", "unresolved", "unknown", "tbd", "undecided", "unanswered"];
const OUTCOME: &[&str] = &["resolved", "fixed", "completed", "finished", "solved", "shipped", "closed", "refunded", "succeeded", "failed"];
const ENVIRONMENT: &[&str] = &[
    "hosted", "runs", "installed", "version", "server", "database", "os", "linux", "windows", "macos", "python",
    "node", "region", "located", "deployed", "use", "stack", "run", "debian", "ubuntu", "host", "cloud",
];

pub fn infer(text: &str, milestone: bool) -> Kind {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    // A plural or third-person "s" counts as the word without it ("servers", "runs").
    let has = |list: &[&str]| {
        words
            .iter()
            .any(|w| list.contains(&w.as_str()) || w.strip_suffix('s').is_some_and(|stem| list.contains(&stem)))
    };
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
        assert_eq!(infer("The staging database is hosted in Sydney", false), Kind::Environment);
        assert_eq!(infer("The March invoice dispute was resolved with a credit note", false), Kind::Outcome);
        assert_eq!(infer("Still waiting on legal sign-off for the new contract", false), Kind::OpenQuestion);
        assert_eq!(infer("Caroline went to a support group", false), Kind::Fact);
        assert_eq!(infer("Moved to Berlin", true), Kind::Outcome);
        assert_eq!(infer("Alex's servers run Debian.", false), Kind::Environment);
    }
}
