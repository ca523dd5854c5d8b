//! Passages: a sealed episode cut into stretches of whole units, the pieces recall searches and
//! shows as excerpts. Pure: messages in, passage drafts out (the lane stores and indexes them).

use super::records::{Passage, StoredMessage};
use super::units::units;
use crate::formats::Role;

/// A passage gathers whole units up to about this many tokens; a larger unit is a passage of
/// its own (a unit is never split, so a tool call stays with its output). The default of
/// `[engine] passage_tokens`: on the LoCoMo dev replay (2 conversations, 4k, runs otherwise
/// equal) 64 scored 0.818 against 0.831 for 160; finer excerpts ranked no better.
pub const PASSAGE_TOKENS: u64 = 160;

/// A pause this long (seconds) between two units starts a new passage: a passage is dated by its
/// first message, and the time search finds it by that date, so the first turns of a
/// conversation taken up again days later must not sit in a passage of the day before.
pub const PAUSE_S: f64 = 3_600.0;

/// The passages of one episode's history messages (in order), numbered from `next`, each up to
/// about `max_tokens` ([`PASSAGE_TOKENS`] by default) and none across a [`PAUSE_S`] pause.
pub fn passages_of(episode: u64, messages: &[&StoredMessage], next: u64, max_tokens: u64) -> Vec<Passage> {
    let mut out: Vec<Passage> = Vec::new();
    let mut current: Vec<&StoredMessage> = Vec::new();
    let mut size = 0u64;
    let flush = |current: &mut Vec<&StoredMessage>, out: &mut Vec<Passage>| {
        if let (Some(first), Some(last)) = (current.first(), current.last()) {
            let text = excerpt(current.iter().copied());
            let shown: std::collections::HashSet<u64> = current.iter().map(|m| m.seq).collect();
            out.push(Passage {
                n: next + out.len() as u64,
                episode,
                first_seq: first.seq,
                last_seq: last.seq,
                first_turn: first.turn,
                last_turn: last.turn,
                at: first.at,
                tokens: current.iter().map(|m| m.tokens as u64).sum(),
                text_tokens: super::tokens::text_tokens(&text) as u64,
                text,
                skipped: (first.seq..=last.seq).filter(|s| !shown.contains(s)).collect(),
            });
        }
        current.clear();
    };
    for u in units(messages) {
        let unit = &messages[u.start..u.end];
        let unit_size: u64 = unit.iter().map(|m| m.tokens as u64).sum();
        let resumed = current.last().is_some_and(|m| unit[0].at - m.at >= PAUSE_S);
        if !current.is_empty() && (size + unit_size > max_tokens || resumed) {
            flush(&mut current, &mut out);
            size = 0;
        }
        current.extend(unit.iter().copied());
        size += unit_size;
    }
    flush(&mut current, &mut out);
    out
}

/// Messages as an excerpt shows them, a line each (a passage's text).
pub fn excerpt<'a>(messages: impl Iterator<Item = &'a StoredMessage>) -> String {
    messages.map(excerpt_line).collect::<Vec<_>>().join("\n")
}

/// One message as an excerpt shows it: who spoke, then the message's text unchanged.
fn excerpt_line(m: &StoredMessage) -> String {
    let who = match m.message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool output",
        Role::System | Role::Developer => "instructions",
    };
    format!("{who}: {}", m.message.text)
}

/// A date as people read it (UTC): `2023-05-08`.
pub fn date(unix: f64) -> String {
    let days = (unix / 86_400.0).floor() as i64;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a count of days since 1970-01-01 (days → era of 400 years
/// → year of era → day of year → month and day, with March as the first month).
pub(super) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// "turn 4" or "turns 4–6".
pub fn turns(first: u64, last: u64) -> String {
    if first == last {
        format!("turn {first}")
    } else {
        format!("turns {first}–{last}")
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::engine::records::{MemoryRecord, Source};
    use crate::formats::{Format, Message};

    /// Numbers a message as `mem`'s next one (a user message opens a turn).
    pub(in crate::engine) fn msg(mem: &mut MemoryRecord, role: Role, text: &str, at: f64) -> StoredMessage {
        let m = StoredMessage::new(
            mem,
            Message::new(Format::ChatCompletions, role, text),
            at,
            Source::Request,
        );
        mem.next_seq += 1;
        if role == Role::User {
            mem.turn += 1;
        }
        m
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(date(0.0), "1970-01-01");
        assert_eq!(date(1_683_504_000.0), "2023-05-08");
        assert_eq!(date(951_782_400.0), "2000-02-29");
        assert_eq!(date(-86_400.0), "1969-12-31");
    }

    #[test]
    fn passages_hold_whole_units_and_cover_every_message() {
        let mut mem = MemoryRecord::new("m", 0.0);
        let long = "word ".repeat(120);
        let ms: Vec<StoredMessage> = (0..6)
            .flat_map(|i| {
                let u = msg(&mut mem, Role::User, &format!("question {i} {long}"), i as f64);
                let a = msg(&mut mem, Role::Assistant, &format!("answer {i}"), i as f64);
                [u, a]
            })
            .collect();
        let refs: Vec<&StoredMessage> = ms.iter().collect();
        let ps = passages_of(3, &refs, 10, PASSAGE_TOKENS);
        assert!(ps.len() >= 3, "{} passages", ps.len());
        assert_eq!(ps[0].n, 10);
        assert_eq!(ps[0].first_seq, 0);
        assert_eq!(ps.last().unwrap().last_seq, 11);
        for w in ps.windows(2) {
            assert_eq!(w[0].last_seq + 1, w[1].first_seq, "contiguous");
        }
        for p in &ps {
            assert_eq!(p.episode, 3);
            for m in &ms[p.first_seq as usize..=p.last_seq as usize] {
                assert!(p.text.contains(&m.message.text), "excerpt keeps the text verbatim");
            }
        }
    }

    #[test]
    fn a_conversation_taken_up_after_a_pause_starts_a_new_passage() {
        let mut mem = MemoryRecord::new("m", 0.0);
        // Four short exchanges: two at day 0, two a day later; all would fit one passage.
        let ms: Vec<StoredMessage> = [0.0, 60.0, 86_400.0, 86_460.0]
            .into_iter()
            .enumerate()
            .flat_map(|(i, at)| {
                let u = msg(&mut mem, Role::User, &format!("question {i}"), at);
                let a = msg(&mut mem, Role::Assistant, &format!("answer {i}"), at + 5.0);
                [u, a]
            })
            .collect();
        let refs: Vec<&StoredMessage> = ms.iter().collect();
        let ps = passages_of(0, &refs, 0, PASSAGE_TOKENS);
        let spans: Vec<(u64, u64, String)> = ps.iter().map(|p| (p.first_seq, p.last_seq, date(p.at))).collect();
        assert_eq!(
            spans,
            vec![(0, 3, "1970-01-01".to_owned()), (4, 7, "1970-01-02".to_owned())]
        );
        // Less than the pause apart, they stay together.
        let close: Vec<StoredMessage> = ms
            .iter()
            .cloned()
            .map(|mut m| {
                m.at = m.at.min(PAUSE_S - 1.0);
                m
            })
            .collect();
        let refs: Vec<&StoredMessage> = close.iter().collect();
        assert_eq!(passages_of(0, &refs, 0, PASSAGE_TOKENS).len(), 1);
    }
}
