//! Measuring and assembling the request: the fixed part, the budget, the facts block, the
//! history in view and the note ask, in the provider's format.

use super::fade::in_view;
use super::records::{Episode, EpisodeState, Fact, RecallBlock, StoredMessage};
use super::state::State;
use super::{activation, blocks, budget, tokens, Engine};
use crate::formats::{self, Format, Message};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashMap;

/// Token costs of the note ask and the note tool, counted once (they are reserved on every
/// decorate).
pub(super) struct NoteCosts {
    pub(super) ask: u64,
    pub(super) tool_chat: u64,
    pub(super) tool_responses: u64,
    pub(super) tool_messages: u64,
    /// The scope tools' (remember and recall), per format (chat, responses, messages).
    scope_tools: [u64; 3],
}

impl NoteCosts {
    pub(super) fn new(tool: &str, scopes: &super::scopes::ScopesConfig) -> NoteCosts {
        let count = |format| tokens::text_tokens(&formats::note_tool(format, tool).to_string()) as u64;
        let scope_count = |format| {
            scope_tools(format, scopes)
                .iter()
                .map(|t| tokens::text_tokens(&t.to_string()) as u64)
                .sum()
        };
        NoteCosts {
            ask: tokens::text_tokens(&blocks::note_ask(1, 1, tool)) as u64 + 4,
            tool_chat: count(Format::ChatCompletions),
            tool_responses: count(Format::Responses),
            tool_messages: count(Format::AnthropicMessages),
            scope_tools: [
                scope_count(Format::ChatCompletions),
                scope_count(Format::Responses),
                scope_count(Format::AnthropicMessages),
            ],
        }
    }

    fn scope_tools(&self, format: Format) -> u64 {
        self.scope_tools[match format {
            Format::ChatCompletions => 0,
            Format::Responses => 1,
            Format::AnthropicMessages => 2,
        }]
    }
}

/// The tools offered to the model of a memory that names an agent: `remember` and `recall`
/// (each unless its name is empty).
fn scope_tools(format: Format, scopes: &super::scopes::ScopesConfig) -> Vec<Value> {
    let mut tools = Vec::new();
    if !scopes.remember_tool.is_empty() {
        tools.push(formats::remember_tool(format, &scopes.remember_tool));
    }
    if !scopes.recall_tool.is_empty() {
        tools.push(formats::recall_tool(format, &scopes.recall_tool));
    }
    tools
}

impl Engine {
    /// Whether this memory's model is offered the scope tools: it names an agent (whose scope
    /// its working notes reach and its searches read).
    pub(super) fn offers_scope_tools(&self, st: &State) -> bool {
        st.memory.agent.is_some()
    }

    /// The names of the scope tools this memory's model is offered (none without an agent).
    pub(super) fn offered_scope_tools(&self, st: &State) -> Vec<String> {
        [&self.config.scopes.remember_tool, &self.config.scopes.recall_tool]
            .into_iter()
            .filter(|t| !t.is_empty() && self.offers_scope_tools(st))
            .cloned()
            .collect()
    }

    /// Sizes and the budget for the request as it would be assembled now.
    pub(super) fn measure(&self, st: &State, parsed: &formats::ParsedRequest, ratio: Option<f64>) -> Measure {
        let ceiling = st.memory.ceiling.unwrap_or(self.config.ceiling);
        let (facts_text, ask_text) = (self.facts_text(st, parsed.format), self.ask_text(st));
        let mut fixed: u64 = parsed
            .instructions
            .iter()
            .map(|m| tokens::message_tokens(m) as u64)
            .sum();
        fixed += tokens::json_tokens(&parsed.rest, parsed.tools.as_ref()) as u64;
        // The facts block counted line by line: its lines are reordered by activation as time
        // passes and grow by a note's facts, so the whole text is seldom the one counted last
        // time, while nearly every line is (encoding it whole was a tenth of decorate's CPU at
        // 10k messages of agent traffic).
        let facts = facts_text
            .as_deref()
            .map_or(0, |t| tokens::PieceCounts::default().count(t) as u64 + 4);
        fixed += facts;
        // The note ask and the note tool are reserved even before any ask is out: the fade that
        // starts an episode leaving adds them, and that request must still fit.
        fixed += match &ask_text {
            // Counted line by line: only its first line (the turns leaving) changes from one
            // ask to the next (encoding it whole anew was 4% of decorate's CPU at 10k messages).
            Some(ask) => tokens::PieceCounts::default().count(ask) as u64 + 4,
            None => self.note_costs.ask,
        };
        fixed += match parsed.format {
            Format::ChatCompletions => self.note_costs.tool_chat,
            Format::Responses => self.note_costs.tool_responses,
            Format::AnthropicMessages => self.note_costs.tool_messages,
        };
        if self.offers_scope_tools(st) {
            fixed += self.note_costs.scope_tools(parsed.format);
        }
        let fixed = tokens::corrected(fixed, ratio);
        let history: Vec<&StoredMessage> = st.history().collect();
        let current = st.memory.turn;
        let tok = |m: &StoredMessage| tokens::corrected(m.tokens as u64, ratio);
        let recent = budget::recent(&history, current, tok);
        let current_turn: u64 = history
            .iter()
            .filter(|m| m.turn == current && current > 0)
            .map(|m| tok(m))
            .sum();
        let budget = budget::budget(ceiling, fixed, &recent, parsed.max_output_tokens, current_turn);
        // A block waiting to be distilled is not shown, though its message still counts it.
        let view = history
            .iter()
            .filter(|m| in_view(st, m))
            .map(|m| {
                let waiting = st
                    .recalls
                    .get(&m.seq)
                    .filter(|b| !block_shown(st, b))
                    .map_or(0, |b| b.tokens);
                tok(m).saturating_sub(tokens::corrected(waiting, ratio))
            })
            .sum();
        Measure { budget, view, facts }
    }

    pub(super) fn facts_text(&self, st: &State, _format: Format) -> Option<String> {
        // Active facts only (a merged fact lives on in the one it merged into; a retired one
        // was contradicted). A note's facts stay while any episode they (or their
        // restatements) were written for is sealed, and leave with the last of them:
        // forgetting one small episode does not drop a whole note.
        let shown = super::recall::facts_in_block(st);
        let activations = activation::of_some_facts(&shown, &st.traces, st.memory.updated_at);
        let mut facts: Vec<(&Fact, f64)> = shown.into_iter().zip(activations).collect();
        facts.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.n.cmp(&a.0.n)));
        let lines: Vec<(&Fact, [&str; 2])> = facts.into_iter().map(|(f, _)| (f, entity_names(st, f))).collect();
        blocks::facts_block(&lines)
    }

    pub(super) fn ask_text(&self, st: &State) -> Option<String> {
        let asked: Vec<&Episode> = st
            .episodes_in(EpisodeState::Leaving)
            .filter(|e| !e.acknowledged)
            .collect();
        let first = asked.iter().map(|e| e.first_turn).min()?;
        let last = asked.iter().map(|e| e.last_turn).max()?;
        Some(blocks::note_ask(first, last, &self.config.note_tool))
    }

    /// instructions; facts block; history in view; note ask (+ note tool) while episodes leave.
    /// The request's own values move into the one rendered: its instructions and other fields
    /// (`parsed.instructions` and `parsed.rest` are left empty), a provider-held history's items
    /// (`parsed.history`, left empty then) and, in `sent`, the history messages it resent as
    /// stored.
    pub(super) fn assemble<'s>(
        &self,
        st: &'s State,
        parsed: &mut formats::ParsedRequest,
        ratio: Option<f64>,
        measure: &Measure,
        recall_limit: Option<u64>,
        mut sent: HashMap<u64, Message>,
    ) -> (formats::Rendered<'s>, Assembled) {
        let format = parsed.format;
        let role = parsed.instructions_role;
        let mut view: Vec<&StoredMessage> = st.history().filter(|m| in_view(st, m)).collect();
        let facts = self.facts_text(st, format);
        let ask = self.ask_text(st);
        let mut hidden = Vec::new();
        let ceiling = measure.budget.ceiling;
        let mut total = measure.budget.fixed + measure.view;
        let activations = || in_view_activations(st);
        // Takes an episode's messages out of the view; returns their size.
        let hold_back = |view: &mut Vec<&StoredMessage>, e: &Episode| -> u64 {
            let size = view
                .iter()
                .filter(|m| m.seq >= e.first_seq && m.seq <= e.last_seq)
                .map(|m| tokens::corrected(m.tokens as u64, ratio))
                .sum();
            view.retain(|m| m.seq < e.first_seq || m.seq > e.last_seq);
            size
        };
        // The recall block's room first: what it holds back is held back for it (`info` says
        // so), and the ceiling's pass below finds only what is still over.
        let mut act = None;
        // The live episodes the recall block of the turn in progress shows excerpts of leave
        // the view while it is shown (it says what they said; distilled, it keeps facts only);
        // a new block over the budget makes more room with the least active live episodes, in
        // this request only (never a leaving one: the note ask needs the model to see it).
        let mut hidden_for_recall = Vec::new();
        let excerpted = st
            .recalls
            .values()
            .filter(|b| !b.distilled && block_shown(st, b))
            .flat_map(|b| b.items.iter().filter(|i| i.kind == "passage"))
            .filter_map(|i| st.episode_of(i.seqs[0]));
        for e in excerpted {
            if e.state == EpisodeState::Live && !hidden_for_recall.contains(&e.n) {
                total = total.saturating_sub(hold_back(&mut view, e));
                hidden_for_recall.push(e.n);
            }
        }
        if let Some(limit) = recall_limit {
            let act = act.get_or_insert_with(activations);
            for e in live_by_activation(st, act) {
                if total <= limit {
                    break;
                }
                if hidden_for_recall.contains(&e.n) {
                    continue;
                }
                total = total.saturating_sub(hold_back(&mut view, e));
                hidden_for_recall.push(e.n);
            }
        }
        // Over the ceiling even so (a huge turn): hold back whole episodes, least active first,
        // never the turn in progress. They keep their state and come back when there is room.
        // Live ones go first: a leaving episode is held back only as a last resort, since the
        // note ask asks the model for its facts and the model can only write what it sees.
        if total > ceiling {
            let act = act.get_or_insert_with(activations);
            let mut candidates: Vec<&Episode> = st
                .episodes
                .iter()
                .filter(|e| matches!(e.state, EpisodeState::Live | EpisodeState::Leaving))
                .filter(|e| !hidden_for_recall.contains(&e.n))
                .collect();
            candidates.sort_by(|a, b| {
                let leaving = |e: &Episode| e.state == EpisodeState::Leaving;
                leaving(a)
                    .cmp(&leaving(b))
                    .then(act[a.n as usize].total_cmp(&act[b.n as usize]))
            });
            for e in candidates {
                if total <= ceiling {
                    break;
                }
                total = total.saturating_sub(hold_back(&mut view, e));
                hidden.push(e.n);
            }
        }
        // Borrowed where a stored message is already in the request's format (the usual case):
        // the reply is encoded from it as it is.
        let mut messages: Vec<Cow<'_, Message>> = Vec::new();
        if let Some(text) = &facts {
            messages.push(Cow::Owned(Message::new(format, role, text.clone())));
        }
        if parsed.provider_history.is_some() {
            // The provider holds the history (previous_response_id / conversation): we cannot
            // trim it, so the request's own items go as sent, with our blocks around them.
            messages.extend(std::mem::take(&mut parsed.history).into_iter().map(Cow::Owned));
        } else {
            for m in &view {
                // A recall block stays just before the user message it was made for.
                if let Some(b) = st.recalls.get(&m.seq).filter(|b| block_shown(st, b)) {
                    if !b.text.is_empty() {
                        messages.push(Cow::Owned(Message::new(format, role, b.text.clone())));
                    }
                    if let Some(a) = b.across.as_ref().filter(|a| !a.text.is_empty()) {
                        messages.push(Cow::Owned(Message::new(format, role, a.text.clone())));
                    }
                }
                if m.message.format == format {
                    // The request's own copy, when it sent this message exactly as stored (key
                    // order too: the rendered bytes stay what they were), is moved into the
                    // reply; the stored one is rendered otherwise.
                    match sent
                        .remove(&m.seq)
                        .filter(|s| formats::identical(&s.raw, &m.message.raw))
                    {
                        Some(s) => messages.push(Cow::Owned(s)),
                        None => messages.push(Cow::Borrowed(&m.message)),
                    }
                } else {
                    messages.extend(m.message.to_format(format).into_iter().map(Cow::Owned));
                }
            }
        }
        let mut extra_tools = Vec::new();
        if let Some(text) = &ask {
            messages.push(Cow::Owned(Message::new(format, role, text.clone())));
            extra_tools.push(formats::note_tool(format, &self.config.note_tool));
        }
        if self.offers_scope_tools(st) {
            extra_tools.extend(scope_tools(format, &self.config.scopes));
        }
        let request = formats::render_request_moving(
            format,
            std::mem::take(&mut parsed.instructions),
            messages,
            std::mem::take(&mut parsed.rest),
            parsed.tools.take(),
            &extra_tools,
        );
        let assembled = Assembled {
            tokens: total,
            note_ask: ask.is_some(),
            hidden,
            hidden_for_recall,
            in_view: view.iter().map(|m| m.seq).collect(),
        };
        (request, assembled)
    }
}

/// A fact's subject and object under their resolved names once the lane has placed the fact,
/// as written before.
pub(super) fn entity_names<'a>(st: &'a State, f: &'a Fact) -> [&'a str; 2] {
    let name = |entity: Option<u64>, written: &'a str| -> &'a str {
        entity
            .and_then(|n| st.entities.get(n as usize))
            .map_or(written, |e| e.name.as_str())
    };
    [name(f.subject_entity, &f.subject), name(f.object_entity, &f.object)]
}

/// A recall block is shown while its turn is in progress, then only once the lane has
/// distilled it: an old block waiting for that would take the room the new message's recall
/// needs (a user message left without a reply leaves its block undistilled until the next one).
fn block_shown(st: &State, b: &RecallBlock) -> bool {
    (!b.text.is_empty() || b.across.as_ref().is_some_and(|a| !a.text.is_empty()))
        && (b.distilled || b.turn == st.memory.turn)
}

pub(super) struct Measure {
    pub(super) budget: budget::Budget,
    pub(super) view: u64,
    /// The facts block's tokens (in `budget.fixed`), as estimated.
    pub(super) facts: u64,
}

pub(super) struct Assembled {
    pub(super) tokens: u64,
    pub(super) note_ask: bool,
    pub(super) hidden: Vec<u64>,
    pub(super) hidden_for_recall: Vec<u64>,
    pub(super) in_view: Vec<u64>,
}

/// The live episodes, least active first (by `act`, each episode's activation): the order a
/// recall block holds them back from the view in. Recall reads the same order to know which
/// ones its block may show excerpts of.
pub(super) fn live_by_activation<'a>(st: &'a State, act: &[f64]) -> Vec<&'a Episode> {
    let mut live: Vec<&Episode> = st.episodes_in(EpisodeState::Live).collect();
    live.sort_by(|a, b| act[a.n as usize].total_cmp(&act[b.n as usize]).then(a.n.cmp(&b.n)));
    live
}

/// The tokens episode `e`'s messages take in the view: what holding it back frees. Its note
/// calls and superseded messages are in its range but never in the view.
pub(super) fn view_tokens(st: &State, e: &Episode, ratio: Option<f64>) -> u64 {
    st.messages_in(e.first_seq, e.last_seq)
        .filter(|m| m.in_history() && in_view(st, m))
        .map(|m| tokens::corrected(m.tokens as u64, ratio))
        .sum()
}

/// The activation of each episode in view (live or leaving; 0 for the others) as of the
/// memory's last op: what holding back goes by.
pub(super) fn in_view_activations(st: &State) -> Vec<f64> {
    activation::of_episodes_where(st.episodes.len(), &st.traces, st.memory.updated_at, |n| {
        st.episodes
            .get(n as usize)
            .is_some_and(|e| matches!(e.state, EpisodeState::Live | EpisodeState::Leaving))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::records::EpisodeState;
    use crate::formats::Role;

    /// A request resending its history has those messages rendered from its own values (moved,
    /// not copied); one it resends in another shape that aligns all the same (text parts for a
    /// string, its keys in another order) is rendered as stored, as before, byte for byte.
    #[test]
    fn resent_messages_render_as_stored_whatever_shape_the_request_resends_them_in() {
        use recalld_protocol::ops::DecorateArgs;
        use serde_json::json;
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(crate::store::Store::open(dir.path(), &Default::default()).unwrap());
        let engine = Engine::new(store, None, Default::default());
        let decorate = |messages: Value, now: f64| {
            let request = json!({"model": "gpt-4o", "messages": messages});
            engine
                .decorate(DecorateArgs {
                    now: Some(now),
                    ..DecorateArgs::new("m", request)
                })
                .unwrap()
        };
        let first = json!([
            {"role": "user", "content": "Which linker does the release build use?"},
            {"role": "assistant", "content": "mold, since March."},
            {"role": "user", "content": "And the debug build?"},
        ]);
        decorate(first.clone(), 100.0);
        let mut again = first.as_array().unwrap().clone();
        // The same message with its keys in another order, and one in text parts.
        again[0] = json!({"content": "Which linker does the release build use?", "role": "user"});
        again[1] = json!({"role": "assistant", "content": [{"type": "text", "text": "mold, since March."}]});
        again.push(json!({"role": "assistant", "content": "lld."}));
        again.push(json!({"role": "user", "content": "Thanks."}));
        let out = decorate(Value::Array(again.clone()), 200.0);
        assert_eq!(out.info["aligned"], "extends");
        assert_eq!(out.info["stored"], 2);
        let rendered: Vec<&Value> = out.request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| !m["content"].as_str().is_some_and(|t| t.starts_with("Recorded facts")))
            .collect();
        let mut expected = again;
        expected[0] = first[0].clone();
        expected[1] = first[1].clone();
        // Compared as text: serde_json's `==` would not see the keys' order.
        let text = |v: &[&Value]| v.iter().map(|m| m.to_string()).collect::<Vec<_>>();
        assert_eq!(text(&rendered), text(&expected.iter().collect::<Vec<_>>()));
    }

    /// What holding an episode back frees is what it shows in the view: its note calls and
    /// superseded messages sit in its range but are never shown, so they free nothing.
    #[test]
    fn an_episodes_view_tokens_leave_out_its_note_calls_and_superseded_messages() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path(), &Default::default()).unwrap();
        let mut st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        for (role, tokens) in [
            (Role::User, 10),
            (Role::Assistant, 200),
            (Role::Assistant, 300),
            (Role::Assistant, 20),
        ] {
            let mut record = st.memory.clone();
            let mut m = crate::engine::passages::tests::msg(&mut record, role, "text", 0.0);
            m.tokens = tokens;
            st.memory.turn = record.turn;
            st.push_message(m);
        }
        st.message_mut(1).note = true;
        st.message_mut(2).superseded_at = Some(1.0);
        st.push_episode(Episode::spanning((0, 3), (1, 1), 30, EpisodeState::Live));
        let e = st.episodes[0].clone();
        assert_eq!(view_tokens(&st, &e, None), 30);
        let shown: u64 = st.history().filter(|m| in_view(&st, m)).map(|m| m.tokens as u64).sum();
        assert_eq!(view_tokens(&st, &e, None), shown, "what the view holds of it");
        st.episode_mut(0).state = EpisodeState::Sealed;
        let e = st.episodes[0].clone();
        assert_eq!(view_tokens(&st, &e, None), 0, "a sealed episode is out of view");
    }
}
