//! Recall through the socket against the real daemon and its built-in models: a scripted
//! conversation long enough to seal and forget at a small ceiling, with a simulated model that
//! answers every note ask with one fact per leaving turn. Then a question about an early,
//! forgotten turn brings its fact and an excerpt back in a recall block just before the
//! question, grouped and dated; facts already in the facts block are not repeated; the block is
//! distilled at the next message; and indexes deleted while the daemon is stopped are rebuilt at
//! start and give the same recall.

use crate::util;

use recalld::client::Client;
use serde_json::{json, Value};
use util::Daemon;

const CEILING: u64 = 3_000;
/// 2023-11-14T22:13:20Z.
const START: f64 = 1_700_000_000.0;
const TURNS: usize = 36;
const NAMES: [&str; 12] = [
    "aurora", "borealis", "cygnus", "draco", "eridanus", "fornax", "gemini", "hydra", "indus", "lyra", "musca", "norma",
];
const PEOPLE: [&str; 6] = ["Priya", "Tomas", "Aiko", "Bruno", "Chidi", "Ines"];

fn name(i: usize) -> String {
    format!("{}-{}", NAMES[i % NAMES.len()], i)
}

fn port(i: usize) -> usize {
    7000 + 37 * i
}

fn user_text(i: usize) -> String {
    format!(
        "Next is service {}. It listens on port {} and {} owns it. It was moved to the new cluster last week \
         after the storage incident, and its dashboards still point at the old hosts, which nobody has had time \
         to fix. The on-call rotation for it changes every Monday and the runbook lives in the wiki under \
         operations. We should also check whether its alerts are wired to the right channel before the audit.",
        name(i),
        port(i),
        PEOPLE[i % PEOPLE.len()]
    )
}

fn reply_text(i: usize) -> String {
    format!("Noted, service {} is on my list.", name(i))
}

fn fact_text(i: usize) -> String {
    format!(
        "Service {} listens on port {} and is owned by {}.",
        name(i),
        port(i),
        PEOPLE[i % PEOPLE.len()]
    )
}

fn completion(message: Value) -> Value {
    json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "stop", "message": message}]})
}

struct Convo {
    client: Client,
    memory: String,
    history: Vec<Value>,
    now: f64,
    /// Time between one turn's reply and the next user message.
    gap: f64,
    calls: usize,
}

impl Convo {
    /// The same conversation on a new connection to `d` (a daemon started again on its data).
    fn reconnected(&self, d: &Daemon) -> Convo {
        Convo {
            client: d.client(),
            memory: self.memory.clone(),
            history: self.history.clone(),
            now: self.now,
            gap: self.gap,
            calls: 0,
        }
    }

    fn request(&self, extra: Option<&str>) -> Value {
        let mut messages = vec![json!({"role": "system", "content": "You are the ops assistant."})];
        messages.extend(self.history.iter().cloned());
        if let Some(q) = extra {
            messages.push(json!({"role": "user", "content": q}));
        }
        json!({"model": "gpt-4o", "messages": messages})
    }

    fn decorate(&mut self, extra: Option<&str>, dry_run: bool) -> Value {
        self.decorate_at(extra, dry_run, CEILING)
    }

    fn decorate_at(&mut self, extra: Option<&str>, dry_run: bool, ceiling: u64) -> Value {
        self.client
            .call(
                "decorate",
                json!({"memory": self.memory, "request": self.request(extra), "now": self.now,
                    "ceiling": ceiling, "dry_run": dry_run}),
            )
            .unwrap()
    }

    fn report(&mut self, message: Value) -> Value {
        self.calls += 1;
        self.client
            .call(
                "report",
                json!({"memory": self.memory, "response": completion(message), "now": self.now}),
            )
            .unwrap()
    }

    fn quiet(&mut self) {
        assert_eq!(
            self.client.quiet(&self.memory, 120_000).unwrap(),
            0,
            "the lane did not finish"
        );
    }

    /// One user turn and the model's reply, answering note asks with one fact per leaving turn.
    fn turn(&mut self, text: String, reply: String) {
        self.history.push(json!({"role": "user", "content": text}));
        for _ in 0..4 {
            let d = self.decorate(None, false);
            if !d["info"]["note_ask"].as_bool().unwrap() {
                break;
            }
            let mut notes = Vec::new();
            for e in d["info"]["episodes"].as_array().unwrap() {
                if e["state"] == "leaving" {
                    let (a, b) = (e["turns"][0].as_u64().unwrap(), e["turns"][1].as_u64().unwrap());
                    for t in a.max(1)..=b {
                        let i = t as usize - 1;
                        notes.push(json!({"note": fact_text(i), "subject": format!("service {}", name(i)),
                            "object": format!("port {}", port(i)), "milestone": false}));
                    }
                }
            }
            let call = json!({"id": format!("note-{}", self.calls), "type": "function",
                "function": {"name": "note", "arguments": json!({"notes": notes}).to_string()}});
            let r = self.report(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
            assert_eq!(r["again"], true);
        }
        self.report(json!({"role": "assistant", "content": reply.clone()}));
        self.history.push(json!({"role": "assistant", "content": reply}));
        self.now += self.gap;
        self.quiet();
    }
}

fn recall_block(request: &Value) -> Option<(usize, String)> {
    let messages = request["messages"].as_array().unwrap();
    // The last one: every new user message may have its own, kept (distilled) in the view.
    messages.iter().enumerate().rev().find_map(|(i, m)| {
        let text = m["content"].as_str()?;
        (m["role"] == "system" && text.starts_with("Recalled from earlier")).then(|| (i, text.to_owned()))
    })
}

/// Whether the request holds a message saying exactly `text`.
fn has_message(request: &Value, text: &str) -> bool {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["content"].as_str() == Some(text))
}

fn facts_block(request: &Value) -> String {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .find(|t| t.starts_with("Recorded facts"))
        .unwrap_or_default()
        .to_owned()
}

fn converse(d: &Daemon, memory: &str) -> Convo {
    converse_every(d, memory, 120.0, TURNS)
}

/// `turns` turns, `gap` seconds from one reply to the next message.
fn converse_every(d: &Daemon, memory: &str, gap: f64, turns: usize) -> Convo {
    let mut c = Convo {
        client: d.client(),
        memory: memory.into(),
        history: Vec::new(),
        now: START,
        gap,
        calls: 0,
    };
    for i in 0..turns {
        c.turn(user_text(i), reply_text(i));
    }
    c
}

const QUESTION_TURN: usize = 2;
const DEADLINE: &str = "[engine]\nrecall_deadline_ms = 60000\nrecall_search_ms = 60000\n";

fn question() -> String {
    format!(
        "Which port does service {} listen on, and who owns it?",
        name(QUESTION_TURN)
    )
}

#[test]
fn a_forgotten_turn_comes_back_grouped_dated_distilled_and_survives_an_index_rebuild() {
    // Debug builds on a loaded machine embed slowly: no deadline misses, so runs compare.
    let mut d = Daemon::start_with_config(DEADLINE);
    let mut c = converse(&d, "ops");
    c.now += 3_600.0;
    let q = question();
    let asked = c.decorate(Some(&q), true);
    let info = &asked["info"];
    let request = &asked["request"];

    // The early turn is out of view: its episode sealed or forgotten.
    let out_of_view = info["episodes"].as_array().unwrap().iter().any(|e| {
        let (a, b) = (e["turns"][0].as_u64().unwrap(), e["turns"][1].as_u64().unwrap());
        (a..=b).contains(&(QUESTION_TURN as u64 + 1)) && (e["state"] == "sealed" || e["state"] == "forgotten")
    });
    assert!(
        out_of_view,
        "turn {} should have left the view: {}",
        QUESTION_TURN + 1,
        info["episodes"]
    );

    // A recall block just before the question, within the request's ceiling.
    let (at, block) =
        recall_block(request).unwrap_or_else(|| panic!("no recall block; recall info: {}", info["recall"]));
    let messages = request["messages"].as_array().unwrap();
    assert_eq!(
        messages[at + 1]["content"],
        json!(q),
        "the block sits just before the question"
    );
    assert!(
        info["request_tokens"].as_u64().unwrap() <= CEILING,
        "{}",
        info["request_tokens"]
    );

    // Its fact is in the facts block or in the recall block, never both, and the turn's own
    // words come back as an excerpt, dated.
    let (facts, fact) = (facts_block(request), fact_text(QUESTION_TURN));
    assert!(
        facts.contains(&fact) != block.contains(&fact),
        "fact once:\n{facts}\n---\n{block}"
    );
    assert!(
        block.contains(&user_text(QUESTION_TURN)),
        "excerpt of the turn:\n{block}"
    );
    let dated = format!("[turn {}, 2023-11-14]", QUESTION_TURN + 1);
    assert!(block.contains(&dated), "excerpt dated {dated}:\n{block}");
    let items = info["recall"]["items"].as_array().unwrap();
    assert!(
        items
            .iter()
            .any(|i| i["kind"] == "passage" && i["turns"][0] == QUESTION_TURN as u64 + 1),
        "{items:?}"
    );
    for i in items {
        assert!(
            !i["searches"].as_array().unwrap().is_empty(),
            "every item says which search found it"
        );
    }
    // What the block had no room for is listed apart, each with its turns and size, and
    // nothing listed there is in the block.
    let left_out = info["recall"]["left_out"].as_array().unwrap();
    for l in left_out {
        assert!(
            l["turns"][0].as_u64().is_some() && l["tokens"].as_u64().unwrap() > 0,
            "{l}"
        );
        assert!(
            !items.iter().any(|i| i["kind"] == l["kind"] && i["n"] == l["n"]),
            "{l} is both shown and left out"
        );
    }
    assert!(
        items.len() + left_out.len() <= info["recall"]["candidates"].as_u64().unwrap() as usize,
        "{}",
        info["recall"]
    );
    // Facts recalled are grouped under an entity and dated with their turns.
    if block.contains("- Service ") {
        assert!(block.contains("\nAbout "), "{block}");
        assert!(block.contains(", 2023-11-14)"), "{block}");
    }

    // The question found something relevant by meaning, so its block could hold back live
    // history; small talk finds nothing relevant and takes only the room the view leaves.
    assert_eq!(info["recall"]["relevant"], true, "{}", info["recall"]);
    let small_talk = c.decorate(Some("Thanks, that is all for today. Have a nice evening!"), true);
    let r = &small_talk["info"]["recall"];
    assert_eq!(r["relevant"], false, "{r}");
    assert_eq!(r["budget"], r["room"]["free"], "{r}");
    assert!(
        small_talk["info"]["hidden_for_recall"]
            .as_array()
            .is_none_or(|h| h.is_empty()),
        "{}",
        small_talk["info"]
    );

    // A question at the end of a long correction gets its own memories (each part's best
    // documents go first), and facts a part found are in a section named for it.
    let corrected = format!(
        "No, that is not what I meant about the lunch order for the team offsite next week. The sandwiches \
         go to the second floor, the drinks must be cold, and the invoice goes to finance as usual.\n\
         By the way, which port does service {} listen on?",
        name(QUESTION_TURN)
    );
    let sectioned = c.decorate(Some(&corrected), true);
    let (_, block) = recall_block(&sectioned["request"]).expect("a block for the correction");
    let heading = format!(
        "\nFor “By the way, which port does service {} listen on?”:",
        name(QUESTION_TURN)
    );
    let (at_heading, at_fact) = (block.find(&heading), block.find(&fact_text(QUESTION_TURN)));
    assert!(
        at_heading.is_some() && at_fact.is_some() && at_heading < at_fact,
        "the question's fact in its part's section:\n{block}"
    );

    // Indexes deleted while stopped are rebuilt at start and give the same recall.
    assert_eq!(d.stop(), Some(0));
    std::fs::remove_dir_all(d.data.join("index")).unwrap();
    let config = d.dir.path().join("recalld.toml");
    d.spawn(&["--config", config.to_str().unwrap()]);
    let mut c2 = c.reconnected(&d);
    c2.quiet();
    let again = c2.decorate(Some(&q), true);
    // The same best documents come back (ranks at the block's margin may move: the vector
    // index is approximate and its graph depends on the order vectors were added in).
    let best = |v: &Value| -> std::collections::BTreeSet<String> {
        v.as_array()
            .unwrap()
            .iter()
            .take(8)
            .map(|i| format!("{} {}", i["kind"], i["n"]))
            .collect()
    };
    let (before, after) = (best(&info["recall"]["items"]), best(&again["info"]["recall"]["items"]));
    assert!(
        before.intersection(&after).count() >= 7,
        "same best recall after the rebuild: {before:?} vs {after:?}"
    );
    let rebuilt = recall_block(&again["request"]).expect("a block after the rebuild").1;
    assert!(
        rebuilt.contains(&user_text(QUESTION_TURN)) && rebuilt.contains(&dated),
        "{rebuilt}"
    );

    // Asked for real: the block is stored with the question and stays in the turn's requests;
    // the turn's reply has the lane distill it (shrunk or removed, then never changed).
    c2.history.push(json!({"role": "user", "content": q}));
    let stored = c2.decorate(None, false);
    assert!(recall_block(&stored["request"]).is_some());
    c2.report(json!({"role": "assistant", "content": "It is on the port you set up."}));
    c2.history
        .push(json!({"role": "assistant", "content": "It is on the port you set up."}));
    c2.now += 60.0;
    c2.quiet();
    c2.turn("Thanks. Let's move on to lunch plans.".into(), "Sure.".into());
    let export = c2.client.call("export", json!({"memory": "ops"})).unwrap();
    let recalls = export["recalls"].as_array().unwrap();
    // The question's block, distilled once its turn's reply was reported.
    let turn = &stored["info"]["turn"];
    let r = recalls
        .iter()
        .find(|b| &b["turn"] == turn)
        .unwrap_or_else(|| panic!("no block of turn {turn}"));
    assert_eq!(r["distilled"], true, "{r}");
    let before = stored["info"]["recall"]["tokens"].as_u64().unwrap();
    assert!(
        r["tokens"].as_u64().unwrap() < before,
        "the distilled block is smaller than {before}: {r}"
    );
}

const HELD_CEILING: u64 = 2_500;

/// Whether a decorate's `info` says episode `n` was held back from the view (for the recall
/// block or for the ceiling).
fn held_back(info: &Value, n: u64) -> bool {
    ["hidden_for_recall", "hidden_for_ceiling"]
        .iter()
        .any(|k| info[k].as_array().is_some_and(|a| a.contains(&json!(n))))
}

/// A relevant block makes room by holding back the least active live episodes. One of those
/// is not noted yet (it is live), so its passages, cut as soon as it was, are what keeps it:
/// a question about it gets its excerpt in the block, and the episode leaves the view.
#[test]
fn a_live_episode_the_block_holds_back_comes_back_as_an_excerpt() {
    // The facts block keeps all it is given here, so at the lower ceiling the view is over half
    // the history's budget without being over it (no fade), and the block must make room.
    let d = Daemon::start_with_config(&format!("{DEADLINE}facts_share = 100.0\n"));
    let mut c = converse(&d, "held");
    c.now += 3_600.0;
    // At a lower ceiling than the conversation had, the view leaves less room than a relevant
    // block may take. The live episode it would hold back first: the least active.
    let probe = c.decorate_at(Some(&question()), true, HELD_CEILING);
    let hideable = probe["info"]["recall"]["room"]["hideable"].as_array().unwrap().clone();
    let first = hideable.first().and_then(Value::as_u64).unwrap_or_else(|| {
        let i = &probe["info"];
        panic!(
            "a block that holds back live history (budget {}, view {}, fixed {}): {}",
            i["budget"], i["view_tokens"], i["fixed"], i["recall"]
        )
    });
    let episode = probe["info"]["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["n"] == first)
        .unwrap()
        .clone();
    assert_eq!(episode["state"], "live", "{episode}");
    let i = episode["turns"][0].as_u64().unwrap() as usize - 1;

    let asked = c.decorate_at(
        Some(&format!("Which port does service {} listen on?", name(i))),
        true,
        HELD_CEILING,
    );
    let info = &asked["info"];
    let (_, block) = recall_block(&asked["request"]).expect("a recall block");
    assert!(
        block.contains(&user_text(i)),
        "turn {} is not in the block:\n{block}\n{}",
        i + 1,
        info["recall"]
    );
    assert!(
        info["recall"]["holds_back"].as_array().unwrap().contains(&json!(first)),
        "{}",
        info["recall"]
    );
    assert!(
        info["hidden_for_recall"].as_array().unwrap().contains(&json!(first)),
        "{}",
        info
    );
    // Shown once: in the block, not in the view as well.
    assert!(
        !has_message(&asked["request"], &user_text(i)),
        "turn {} is both in view and in the block",
        i + 1
    );
    // No fact of it exists yet: only the excerpt kept it.
    assert!(!block.contains(&fact_text(i)) && !facts_block(&asked["request"]).contains(&fact_text(i)));

    // Asked for real, the block is stored; while its turn is in progress (the same request
    // again, as in a tool loop) it is shown, and the episode stays out of the view.
    let q = format!("Which port does service {} listen on?", name(i));
    c.history.push(json!({"role": "user", "content": q}));
    for dry_run in [false, true] {
        let again = c.decorate_at(None, dry_run, HELD_CEILING);
        let (_, block) = recall_block(&again["request"]).expect("the turn's block is shown");
        assert!(block.contains(&user_text(i)), "{block}");
        // Held back for the block, or, once the block is counted in the history (a large
        // facts block here takes the request over its ceiling), by the ceiling's pass, which
        // holds back the same least active live episodes first.
        assert!(held_back(&again["info"], first), "{}", again["info"]);
        assert!(
            !has_message(&again["request"], &user_text(i)),
            "turn {} is both in view and in the block",
            i + 1
        );
    }
}

/// Episodes leaving the view stay in it until the model notes them, and a relevant block never
/// holds them back: its share is of the budget they leave, so the live history, the
/// conversation in progress, keeps the rest (a share of the whole budget took its room from the
/// live episodes alone, down to the last of them).
#[test]
fn a_relevant_blocks_room_is_a_share_of_what_the_leaving_episodes_leave() {
    let d = Daemon::start_with_config(DEADLINE);
    let mut c = converse(&d, "leaving");
    // At a lower ceiling than the conversation had, the question's decorate fades: the episodes
    // leaving wait in the view for the note it asks.
    let asked = c.decorate_at(Some(&question()), true, 2_000);
    let info = &asked["info"];
    let episodes = info["episodes"].as_array().unwrap();
    let of_state = |state: &'static str| episodes.iter().filter(move |e| e["state"] == state);
    let leaving: u64 = of_state("leaving").map(|e| e["tokens"].as_u64().unwrap()).sum();
    assert!(leaving > 0, "episodes wait for their note: {info}");
    assert_eq!(info["recall"]["relevant"], true, "{}", info["recall"]);
    let budget = info["budget"].as_u64().unwrap();
    let reserved = info["recall"]["room"]["reserved"].as_u64().unwrap();
    let free = budget.saturating_sub(info["view_tokens"].as_u64().unwrap());
    let share = recalld::engine::EngineConfig::default().recall_share;
    // The engine measures the leaving episodes by their messages in view (no notes), which is
    // less than the episodes' tokens `info` lists: a quarter of those is the allowance.
    assert!(
        reserved <= free.max(((budget - leaving.min(budget)) as f64 * share) as u64 + leaving / 4),
        "reserved {reserved} of budget {budget} beside {leaving} leaving tokens: {info}"
    );
    // The newest live episode stays in view.
    let newest = of_state("live")
        .map(|e| e["n"].clone())
        .next_back()
        .expect("a live episode");
    assert!(!held_back(info, newest.as_u64().unwrap()), "{info}");
}

/// The facts block keeps to its room (`facts_share` of the landing): a fade forgets the least
/// active sealed episodes past it, and what their facts said comes back by recall when asked.
/// The same conversation on a daemon whose block has all the room it wants is the yardstick.
/// (At this ceiling a quarter of the landing, the default, holds the block whole: a tenth here.)
#[test]
fn facts_the_block_had_no_room_for_leave_it_and_come_back_when_asked() {
    let bounded = Daemon::start_with_config(&format!("{DEADLINE}facts_share = 0.1\n"));
    let unbounded = Daemon::start_with_config(&format!("{DEADLINE}facts_share = 100.0\n"));
    let mut b = converse(&bounded, "bounded");
    let mut u = converse(&unbounded, "unbounded");
    // Taken up two days later: the turn sleeps first, a fade whatever the view's size.
    b.now += 2.0 * 86_400.0;
    u.now += 2.0 * 86_400.0;
    let small_talk = "Good morning!";
    let (kept, all) = (
        facts_block(&b.decorate(Some(small_talk), true)["request"]),
        facts_block(&u.decorate(Some(small_talk), true)["request"]),
    );
    let lines = |t: &str| {
        t.lines()
            .filter(|l| l.starts_with("- "))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let (kept, all) = (lines(&kept), lines(&all));
    // Whole episodes leave, least active first.
    assert!(kept.len() < all.len(), "kept {kept:#?}\nall {all:#?}");
    assert!(kept.iter().all(|l| all.contains(l)), "kept {kept:#?}\nall {all:#?}");
    // A fact only the unbounded block shows: the bounded daemon recalls it (or its turn).
    let i = (0..TURNS)
        .find(|&i| all.iter().any(|l| l.contains(&fact_text(i))) && !kept.iter().any(|l| l.contains(&fact_text(i))))
        .expect("a fact the bounded block left out");
    let asked = b.decorate(Some(&format!("Which port does service {} listen on?", name(i))), true);
    let (_, block) =
        recall_block(&asked["request"]).unwrap_or_else(|| panic!("no recall block: {}", asked["info"]["recall"]));
    assert!(
        block.contains(&fact_text(i)) || block.contains(&user_text(i)),
        "turn {} is not recalled:\n{block}",
        i + 1
    );
}

/// After a reply, the lane judges the facts the exchange leads to (the prepared walk), and the
/// next message, a follow-up that names nothing, finds them ready in its recall block.
#[test]
fn a_follow_up_finds_the_walk_the_lane_prepared_from_the_previous_exchange() {
    let d = Daemon::start_with_config(DEADLINE);
    let mut c = converse(&d, "walk");
    c.now += 3_600.0;
    let asked = question();
    let answer = format!(
        "Service {} listens on port {} and is owned by {}.",
        name(QUESTION_TURN),
        port(QUESTION_TURN),
        PEOPLE[QUESTION_TURN % PEOPLE.len()]
    );
    c.turn(asked, answer);
    let follow_up = c.decorate(Some("Thanks. Should I call them today?"), true);
    let recall = &follow_up["info"]["recall"];
    let prepared = &recall["prepared_walk"];
    assert_eq!(prepared["ready"], true, "{recall}");
    assert!(prepared["facts"].as_u64().unwrap() >= 1, "{recall}");
    let from_walk: Vec<&Value> = recall["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["searches"].as_array().unwrap().iter().any(|s| s == "walk:prepared"))
        .collect();
    assert!(
        from_walk.iter().any(|i| i["kind"] == "fact"),
        "facts from the walk: {recall}"
    );
    // The fact the exchange was about, though the follow-up's own words are far from it.
    let (_, block) = recall_block(&follow_up["request"]).expect("a recall block");
    assert!(block.contains(&fact_text(QUESTION_TURN)), "{block}");

    // A walk is ready only for the message right after the exchange it was prepared from.
    c.turn(
        "Let's talk about lunch instead.".into(),
        "Sure, what do you fancy?".into(),
    );
    let later = c.decorate(Some("Pizza, I think."), true);
    let p = &later["info"]["recall"]["prepared_walk"];
    assert_eq!(p["ready"], true, "prepared from the lunch exchange: {p}");
    assert_ne!(p["after_seq"], prepared["after_seq"], "{p}");
}

/// With no time for searching, recall skips its searches and the walk, says so, and uses what
/// needs no search: the walk the lane prepared.
#[test]
fn past_its_search_budget_recall_skips_what_is_left_and_keeps_the_prepared_walk() {
    let d = Daemon::start_with_config("[engine]\nrecall_deadline_ms = 60000\nrecall_search_ms = 0\n");
    let mut c = converse(&d, "hurried");
    c.now += 60.0;
    let r = c.decorate(Some(&question()), true);
    let recall = &r["info"]["recall"];
    let skipped: Vec<&str> = recall["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    for step in ["words:message", "meaning:message", "walk"] {
        assert!(skipped.contains(&step), "{step} skipped: {recall}");
    }
    let searches = recall["searches"].as_object().unwrap();
    assert!(searches.keys().all(|s| s == "walk:prepared"), "{recall}");
    for i in recall["items"].as_array().into_iter().flatten() {
        assert_eq!(i["searches"], json!(["walk:prepared"]), "{recall}");
    }
}

#[test]
fn an_unrelated_memory_recalls_nothing_and_a_fresh_memory_needs_no_embedding() {
    let d = Daemon::start();
    let mut c = Convo {
        client: d.client(),
        memory: "fresh".into(),
        history: vec![],
        now: START,
        gap: 120.0,
        calls: 0,
    };
    let r = c.decorate(Some("Hello there"), true);
    assert!(r["info"]["recall"].is_null(), "{}", r["info"]["recall"]);
    assert!(recall_block(&r["request"]).is_none());
    let stats = c.client.call("stats", json!({})).unwrap();
    assert_eq!(
        stats["recall_embeddings_dropped"], 0,
        "nothing was embedded, nothing dropped"
    );
}

/// What the first searches found fills a block at a small ceiling; at a large one it would not,
/// so the message's meaning search runs again deeper, and what it adds comes after everything
/// they found but the filler: what only the recent conversation's words found goes last.
#[test]
fn a_block_with_room_to_spare_searches_deeper_and_a_full_one_does_not() {
    let d = Daemon::start_with_config(DEADLINE);
    let mut c = converse(&d, "deep");
    c.now += 3_600.0;
    let full = c.decorate(Some(&question()), true);
    let r = &full["info"]["recall"];
    assert!(r["searches"].get("meaning:deeper").is_none(), "{r}");

    let roomy = c.decorate_at(Some(&question()), true, 200_000);
    let r = &roomy["info"]["recall"];
    assert!(r["searches"]["meaning:deeper"].as_u64().unwrap_or(0) > 0, "{r}");
    let items = r["items"].as_array().unwrap();
    let deeper_only = |i: &Value| i["searches"] == json!(["meaning:deeper"]);
    let first_deeper = items
        .iter()
        .position(deeper_only)
        .unwrap_or_else(|| panic!("an item only the deeper search found: {r}"));
    let filler = |i: &Value| i["searches"] == json!(["words:recent"]);
    let first_filler = items.iter().position(filler).unwrap_or(items.len());
    assert!(first_deeper < first_filler, "{r}");
    assert!(items[first_deeper..first_filler].iter().all(deeper_only), "{r}");
    assert!(items[first_filler..].iter().all(filler), "{r}");
    assert!(
        items.len() > full["info"]["recall"]["items"].as_array().unwrap().len(),
        "{r}"
    );
}

/// A question naming a day brings back what was said that day, though nothing in its words or
/// meaning points at it more than at any other day's: the time search finds the passages said
/// then and those that speak of that day from another, and only those; another day's question
/// finds another day's turn.
/// Turn 7 of the dated conversations (2024-01-13) speaks of 4 December instead.
const LOOKING_BACK: usize = 6;

/// A turn every ten days (the sleep fades the view before each): turn i on 2023-11-14 + 10 i,
/// up to turn 7, which looks back at 4 December 2023. Nothing is relevant by meaning (the gate
/// at 0.99), so only the time can make a block relevant.
fn looking_back(memory: &str) -> (Daemon, Convo) {
    let d = Daemon::start_with_config(&format!("{DEADLINE}recall_relevant_cosine = 0.99\n"));
    let mut c = converse_every(&d, memory, 10.0 * 86_400.0, LOOKING_BACK);
    c.turn(
        "Looking back at 4 December 2023: that was the day we rotated the TLS certificates.".into(),
        "Noted.".into(),
    );
    (d, c)
}

/// The turns of the passages a decorate's recall found by the time search (`time:passages`).
fn found_by_time(reply: &Value) -> Vec<Value> {
    let r = &reply["info"]["recall"];
    let mut turns: Vec<Value> = r["items"]
        .as_array()
        .unwrap_or_else(|| panic!("a recall block: {r}"))
        .iter()
        .filter(|it| it["kind"] == "passage" && it["searches"].as_array().unwrap().contains(&json!("time:passages")))
        .map(|it| it["turns"].clone())
        .collect();
    turns.sort_by_key(|t| t[0].as_u64());
    turns
}

#[test]
fn a_question_naming_a_day_brings_back_what_was_said_that_day() {
    let (_d, mut c) = looking_back("days");
    // Turn 12 (2024-03-03) makes a plan for the month after.
    const PLANNING: usize = 11;
    const PLAN: &str =
        "Next month we migrate the billing database to the new cluster, so keep the maintenance window free.";
    for i in LOOKING_BACK + 1..TURNS {
        if i == PLANNING {
            c.turn(PLAN.into(), "Noted.".into());
        } else {
            c.turn(user_text(i), reply_text(i));
        }
    }
    let asked = |day: &str| format!("What did we go over on {day}? I lost my notes from then.");
    for (i, day) in [(2, "4 December 2023"), (9, "February 12th, 2024")] {
        let reply = c.decorate(Some(&asked(day)), true);
        let r = &reply["info"]["recall"];
        assert!(r["searches"]["time:passages"].as_u64().unwrap_or(0) > 0, "{r}");
        let said = START + 10.0 * 86_400.0 * i as f64;
        let time = &r["times"][0];
        assert!(
            time["from"].as_f64().unwrap() <= said && said < time["to"].as_f64().unwrap(),
            "{r}"
        );
        let (_, block) = recall_block(&reply["request"]).unwrap_or_else(|| panic!("a recall block: {r}"));
        assert!(
            block.contains(&user_text(i)),
            "turn {} (said on {day}) is not in the block:\n{block}\n{r}",
            i + 1
        );
        // That day's turn, and for 4 December the turn that spoke of it a month later (not the
        // next, said ten days later, whose "last week" is wider than the day asked about).
        let by_time = found_by_time(&reply);
        let mut want = vec![json!([i + 1, i + 1])];
        if i == 2 {
            want.push(json!([LOOKING_BACK + 1, LOOKING_BACK + 1]));
        }
        assert_eq!(by_time, want, "{r}");
        // What was said on a day long past is what the message asks for, whatever its words'
        // cosine with it: the block gets the room of a relevant one.
        assert_eq!((&r["said_then"], &r["relevant"]), (&json!(true), &json!(true)), "{r}");
    }
    // A plan made the month before is found for the month it speaks of, besides what was said
    // in its window (turns 15 to 18, from 31 March to 8 May): the time search lists it though it
    // was said on 3 March.
    let april = c.decorate(Some("What did we plan to do with the database in April 2024?"), true);
    let r = &april["info"]["recall"];
    assert!(
        found_by_time(&april).contains(&json!([PLANNING + 1, PLANNING + 1])),
        "{r}"
    );
    let (_, block) = recall_block(&april["request"]).unwrap_or_else(|| panic!("a recall block: {r}"));
    assert!(block.contains(PLAN), "{block}\n{r}");
    // "Today" names the conversation in progress, not a time it asks to have back.
    let today = c.decorate(Some("What did we go over today? I lost my notes."), true);
    let r = &today["info"]["recall"];
    assert!(!r["times"].as_array().unwrap().is_empty(), "{r}");
    assert_eq!((&r["said_then"], &r["relevant"]), (&json!(false), &json!(false)), "{r}");
    // Without the day, the same words name no time to search.
    let undated = c.decorate(Some("What did we go over? I lost my notes from then."), true);
    let r = &undated["info"]["recall"];
    assert!(r["searches"].get("time:passages").is_none(), "{r}");
}

/// A store written before table `mentions` (by an older daemon) has no rows for its passages:
/// the memory's next `Index` job writes them, once, so a question naming a day finds again the
/// turn that spoke of it.
#[test]
fn a_memory_stored_before_mentions_gets_them_at_its_next_index_job() {
    use recalld::engine::records::MemoryRecord;
    use recalld::store::{keys, Store, Table};

    let (mut d, mut c) = looking_back("older");
    // Enough turns after it that it leaves the view.
    const TURNS_AFTER: usize = 16;
    for i in LOOKING_BACK + 1..LOOKING_BACK + TURNS_AFTER {
        c.turn(user_text(i), reply_text(i));
    }
    c.quiet();
    let asked = "What did we go over on 4 December 2023? I lost my notes from then.";
    let spoke_of_it = json!([LOOKING_BACK + 1, LOOKING_BACK + 1]);
    assert!(found_by_time(&c.decorate(Some(asked), true)).contains(&spoke_of_it));

    // As an older daemon leaves it: no rows, and the record not marked as having them all.
    assert_eq!(d.stop(), Some(0));
    let rows = {
        let store = Store::open(&d.data, &Default::default()).unwrap();
        store
            .write(|w| {
                let mut deleted = 0;
                for mut record in w.scan::<MemoryRecord>(Table::Memories, &[])? {
                    record.mentions_whole = false;
                    w.put(Table::Memories, &keys::memory(&record.id), &record)?;
                    deleted += w.delete_prefix(Table::Mentions, &keys::memory_prefix(&record.id))?;
                }
                Ok(deleted)
            })
            .unwrap()
    };
    assert!(rows > 0, "the conversation's passages had rows to delete");
    let config = d.dir.path().join("recalld.toml");
    d.spawn(&["--config", config.to_str().unwrap()]);
    let mut c = c.reconnected(&d);
    c.quiet();
    assert!(
        !found_by_time(&c.decorate(Some(asked), true)).contains(&spoke_of_it),
        "without its rows the turn is found only by when it was said"
    );
    // The next turn seals what it sleeps past: an Index job, which writes every passage's rows.
    c.turn(
        user_text(LOOKING_BACK + TURNS_AFTER),
        reply_text(LOOKING_BACK + TURNS_AFTER),
    );
    c.quiet();
    assert!(found_by_time(&c.decorate(Some(asked), true)).contains(&spoke_of_it));
}
