//! Distilling a recall block (the `Distill` lane job, queued when the turn's final reply is
//! reported, else at the next user message): the judge reads the block's items against the
//! conversation that followed and keeps those that mattered and were not already said; the
//! block is rewritten to the best few kept facts (or emptied) once, and from then on never
//! changes, so the provider's cached prefix holds. The block's cross-memory section (facts of
//! other conversations) loses its text then (it served its turn) and keeps its items.

use super::recall::render_parts;
use super::records::{RecallBlock, StoredMessage};
use super::state::State;
use super::tokens;
use crate::models::{CallCtx, Judge, ModelError};

/// Items a distilled block keeps at most.
const DISTILLED_ITEMS: usize = 3;
/// Characters of the block's turn the judge reads, at most.
const CONVERSATION_CHARS: usize = 8_000;

pub(super) struct Snapshot {
    pub seq: u64,
    /// The block's facts: their index among its items, and their text. Excerpts are not
    /// judged: a distilled block keeps facts only.
    facts: Vec<(usize, String)>,
    conversation: String,
}

/// The block before user message `seq`, its facts' texts and the conversation from that
/// message on (`messages`: the state's history, or the block's turn read from the store when
/// it is older than the state); None when there is no block to distill.
pub(super) fn snapshot<'a>(
    st: &State,
    seq: u64,
    block: &RecallBlock,
    messages: impl Iterator<Item = &'a StoredMessage>,
) -> Option<Snapshot> {
    // A block holding only the cross-memory section is "distilled" too: to nothing.
    let block = Some(block)
        .filter(|b| !b.distilled && (!b.items.is_empty() || b.across.as_ref().is_some_and(|a| !a.text.is_empty())))?;
    let facts = block
        .items
        .iter()
        .enumerate()
        .filter(|(_, i)| i.kind == "fact")
        .map(|(at, i)| (at, st.fact(i.n).map(|f| f.note.clone()).unwrap_or_default()))
        .collect();
    // The turn the block was made for, from its message to the turn's last reply (a job run
    // late must not judge the block against what came long after); a long turn keeps its
    // head (the question) and its tail (the answer that used the block).
    let conversation: String = messages
        .filter(|m| m.in_history() && m.seq >= seq && m.turn == block.turn)
        .map(|m| format!("{}: {}\n", m.message.role.as_str(), m.message.text))
        .collect();
    let conversation = head_and_tail(&conversation, CONVERSATION_CHARS);
    Some(Snapshot {
        seq,
        facts,
        conversation,
    })
}

impl Snapshot {
    /// Runs the judge (no lock held): the indices among the block's items of the facts to keep.
    pub(super) fn judge(&self, judge: &dyn Judge, memory: &str) -> Result<Vec<usize>, ModelError> {
        if self.facts.is_empty() {
            return Ok(Vec::new());
        }
        let refs: Vec<&str> = self.facts.iter().map(|(_, t)| t.as_str()).collect();
        let keep = judge.distill(&CallCtx::new(memory), &refs, &self.conversation)?;
        Ok(keep
            .into_iter()
            .filter_map(|k| self.facts.get(k).map(|(at, _)| *at))
            .collect())
    }
}

/// Rewrites the block to the kept items, if it is still the one judged, and moves its user
/// message's size by the difference. When that message is older than the state: the block's
/// size before and after, for the caller to resize the stored message.
pub(super) fn apply(st: &mut State, seq: u64, keep: &[usize]) -> Option<(u64, u64)> {
    let block = st.recalls.get(&seq).filter(|b| !b.distilled).cloned()?;
    // The best few facts the judge kept (items are in score order): a distilled block is
    // history from now on, and every turn may leave one. Excerpts served their turn; what
    // lasts of them is the facts noted from them.
    let items: Vec<_> = keep
        .iter()
        .filter_map(|&i| block.items.get(i).cloned())
        .filter(|i| i.kind == "fact")
        .take(DISTILLED_ITEMS)
        .collect();
    let facts: Vec<_> = items.iter().filter_map(|i| st.fact(i.n)).collect();
    let (text, size) = if facts.is_empty() {
        (String::new(), 0)
    } else {
        let text = render_parts(st, &facts, &[]);
        let size = tokens::text_tokens(&text) as u64 + 4;
        (text, size)
    };
    let distilled = RecallBlock {
        text,
        tokens: size,
        items,
        distilled: true,
        // The cross-memory section served its turn: its text goes, the record of what it
        // showed stays (the handoff checks whether the conversation used it).
        across: block.across.clone().map(|a| super::scopes::AcrossSection {
            text: String::new(),
            tokens: 0,
            ..a
        }),
        ..block.clone()
    };
    let loaded = st.messages.iter().any(|m| m.seq == seq);
    if loaded {
        st.message_mut(seq).resize_block(block.tokens, size);
    }
    st.put_recall(distilled);
    (!loaded).then_some((block.tokens, size))
}

/// `text` when it is at most `max` bytes, else its first and last `max / 2` (on char
/// boundaries) joined by a line that says something was left out.
fn head_and_tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut head = max / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - max / 2;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}\n…\n{}", &text[..head], &text[tail..])
}

#[cfg(test)]
mod tests {
    use super::head_and_tail;

    #[test]
    fn a_long_turn_keeps_its_question_and_its_answer() {
        assert_eq!(head_and_tail("short", 10), "short");
        let turn = format!("user: which port?\n{}\nassistant: 7074\n", "tool: ok\n".repeat(500));
        let kept = head_and_tail(&turn, 60);
        assert!(
            kept.starts_with("user: which port?") && kept.ends_with("assistant: 7074\n"),
            "{kept}"
        );
        assert!(kept.len() <= 60 + "\n…\n".len());
        assert_eq!(head_and_tail("ééééé", 4), "é\n…\né");
    }
}
