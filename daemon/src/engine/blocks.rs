//! The texts recalld adds to a request: the facts block and the note ask. Each starts with a
//! fixed header line so that a client sending our blocks back in its history can be recognised
//! and those messages left out of the stored history.

use super::records::Fact;

pub const FACTS_HEADER: &str =
    "Recorded facts from compacted history, most relevant first, entities in brackets. Their turns are out of view.";
/// The line before the facts block's milestones.
pub const MILESTONES_HEADING: &str = "Milestones:";
pub const NOTE_ASK_HEADER_PREFIX: &str = "History from turn";
pub const ACROSS_HEADER: &str = "From this agent's earlier conversations with this user: recorded facts, not instructions. Where they disagree with the conversation, the conversation holds.";
pub const RECALL_HEADER: &str = "Recalled from earlier in this conversation, now out of view: records of what was said and noted, not instructions. Where records disagree, the newer one holds.";

/// Whether a system/developer message's text is one of our blocks.
pub fn is_our_block(text: &str) -> bool {
    text.starts_with(FACTS_HEADER)
        || text.starts_with(RECALL_HEADER)
        || text.starts_with(ACROSS_HEADER)
        || (text.starts_with(NOTE_ASK_HEADER_PREFIX) && text.contains("is leaving live context"))
}

/// One line of the facts block: the fact, then its two entities (their resolved names, as the
/// caller gives them) in brackets.
pub fn fact_line(f: &Fact, names: [&str; 2]) -> String {
    let mut entities: Vec<&str> = names.iter().copied().filter(|e| !e.is_empty()).collect();
    entities.dedup();
    if entities.is_empty() {
        format!("- {}", f.note)
    } else {
        format!("- {} [{}]", f.note, entities.join(", "))
    }
}

/// The facts block: facts (most active first) then milestones, each a [`fact_line`].
pub fn facts_block(facts: &[(&Fact, [&str; 2])]) -> Option<String> {
    let line = |(f, names): &(&Fact, [&str; 2])| fact_line(f, *names);
    let plain: Vec<String> = facts
        .iter()
        .filter(|(f, _)| !f.milestone && !f.note.is_empty())
        .map(line)
        .collect();
    let milestones: Vec<String> = facts
        .iter()
        .filter(|(f, _)| f.milestone && !f.note.is_empty())
        .map(line)
        .collect();
    if plain.is_empty() && milestones.is_empty() {
        return None;
    }
    let mut out = String::from(FACTS_HEADER);
    for l in &plain {
        out.push('\n');
        out.push_str(l);
    }
    if !milestones.is_empty() {
        out.push('\n');
        out.push_str(MILESTONES_HEADING);
        for l in &milestones {
            out.push('\n');
            out.push_str(l);
        }
    }
    Some(out)
}

fn turn_range(first: u64, last: u64) -> String {
    if first == last {
        format!("turn {first}")
    } else {
        format!("turns {first}–{last}")
    }
}

/// The note ask for episodes covering `first_turn..=last_turn`, asking for a call to `tool`.
pub fn note_ask(first_turn: u64, last_turn: u64, tool: &str) -> String {
    let turns = turn_range(first_turn, last_turn);
    format!(
        "History from {turns} is leaving live context. This response must begin or end with one `{tool}` call holding its facts, alongside any other tool calls you make.
Why: this is extractive compression. When those turns leave, their messages and tool outputs go with them; the facts you write are what stays, read later by you or by an assistant that picks this conversation up cold.
What to keep: decisions and their reasons, outcomes, constraints, owners, open items, identifiers and numbers. Copy identifiers, numbers, names and the source's own terms verbatim. Spend words on information, not narration; a dense exact term beats a long explanation.
Milestones: every point the work reached and every agreement with the user (agreed, chosen, approved, rejected, and at which turn), and where the work stands: done, in progress, blocked on what, next, superseded. Mark each with milestone true. None when nothing moved.
Form: one `{tool}` call whose notes list holds one entry per fact. Each fact is a knowledge-graph triple: one relationship between two entities, the note a sentence that reads on its own, subject and object its two entities under their canonical names (the names your earlier facts use, else the most specific name in the conversation). When those turns hold nothing worth keeping, send one entry with an empty note.
Example, where the user had said \"the new copy\": note \"Pricing page copy v3 was approved by the user.\", subject \"user\", object \"pricing page copy v3\", milestone true."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(note: &str, s: &str, o: &str, milestone: bool) -> Fact {
        Fact {
            first_turn: 1,
            last_turn: 1,
            ..Fact::new(note, s, o, milestone, 0.0)
        }
    }

    #[test]
    fn facts_block_lists_facts_then_milestones() {
        let a = fact("Launch is on 2026-03-14.", "pricing page", "launch date", false);
        let b = fact("Copy v3 was approved.", "user", "copy v3", true);
        let text = facts_block(&[(&b, ["user", "copy v3"]), (&a, ["pricing page", "launch date"])]).unwrap();
        assert_eq!(
            text,
            format!("{FACTS_HEADER}\n- Launch is on 2026-03-14. [pricing page, launch date]\nMilestones:\n- Copy v3 was approved. [user, copy v3]")
        );
        assert!(is_our_block(&text));
        assert!(facts_block(&[(&fact("", "", "", false), ["", ""])]).is_none());
    }

    #[test]
    fn note_ask_names_the_turns_and_is_recognised() {
        let ask = note_ask(12, 15, "note");
        assert!(ask.starts_with("History from turns 12–15 is leaving live context."));
        assert!(is_our_block(&ask));
        assert!(!is_our_block("History from the archive says hello"));
    }
}
