//! What recall costs in decorate as a memory grows to 1k, 10k and 100k facts and passages, with
//! the lane's prepared walk ready and without it (not a test; in release, with the built-in
//! model):
//!
//!     cargo test --release -p recalld --lib recall_at_scale -- --ignored --nocapture
//!
//! (`RECALLD_SCALES=10000` for one size.)
//! A memory is written straight to the store: N messages in episodes of ten (all forgotten but
//! the last twenty), a passage per message and N facts over N/5 entities. Texts are made from a
//! few hundred names, places and activities, so words repeat as in a long conversation; a pool
//! of 1,000 of them is embedded by the built-in model and every stored vector is a pool vector
//! with a little noise (embedding 200k texts would take an hour here). The indexes are built
//! from the store as at a start, then 60 different questions are decorated (`dry_run`, one new
//! user message each, ceiling 16k) and timed: the whole decorate, and recall's own steps from
//! `info.recall.ms`.

use std::sync::Arc;
use std::time::Instant;

use recalld_protocol::ops::{DecorateArgs, HistoryMode};
use serde_json::json;

use super::records::{Entity, Episode, EpisodeState, Fact, Passage, Source, StoredMessage, VectorKind, VectorRecord};
use super::state::State;
use super::walk::{PreparedWalk, WalkFact};
use super::{Engine, EngineConfig};
use crate::formats::{Format, Message, Role};
use crate::models::{CallCtx, Models, ModelsConfig, WalkLevel};
use crate::store::{Store, StoreOptions};

const PEOPLE: [&str; 40] = [
    "Amara", "Bruno", "Chiara", "Dmitri", "Elif", "Farid", "Greta", "Hiroshi", "Ines", "Jonas", "Kofi", "Lena",
    "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Tamsin", "Umar", "Vera", "Wen", "Ximena", "Yusuf",
    "Zofia", "Aiden", "Bea", "Caleb", "Dana", "Emil", "Fiona", "Gus", "Hana", "Ivo", "Jade", "Kai", "Lior", "Mina",
    "Nico",
];
const PLACES: [&str; 30] = [
    "Lisbon",
    "Oslo",
    "Nairobi",
    "Kyoto",
    "Quito",
    "Tbilisi",
    "Perth",
    "Reykjavik",
    "Hanoi",
    "Accra",
    "Bergen",
    "Cusco",
    "Dakar",
    "Fes",
    "Galway",
    "Hobart",
    "Izmir",
    "Jaipur",
    "Kaunas",
    "Lyon",
    "the lake house",
    "the office",
    "the gym",
    "the library",
    "the farmers market",
    "the school",
    "the hospital",
    "the beach",
    "the museum",
    "the studio",
];
const DOINGS: [&str; 30] = [
    "went hiking",
    "painted a mural",
    "adopted a puppy",
    "started a pottery class",
    "ran a half marathon",
    "baked sourdough",
    "volunteered at a shelter",
    "bought a used car",
    "planted tomatoes",
    "learned to surf",
    "had a job interview",
    "moved apartments",
    "joined a choir",
    "fixed a bicycle",
    "wrote a short story",
    "visited their grandmother",
    "lost their keys",
    "hosted a dinner party",
    "took a photography course",
    "signed up for yoga",
    "read a novel about whales",
    "repaired the roof",
    "went camping",
    "met an old friend",
    "got a promotion",
    "started therapy",
    "played chess in a tournament",
    "sold old furniture",
    "learned Spanish",
    "built a bookshelf",
];
const WHEN: [&str; 12] = [
    "last Monday",
    "in May",
    "over the weekend",
    "two weeks ago",
    "on her birthday",
    "in the summer",
    "after work",
    "early in the morning",
    "during the holidays",
    "in 2022",
    "yesterday",
    "last autumn",
];

/// A small deterministic generator (xorshift), so every run writes the same memory.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }

    fn unit(&mut self) -> f32 {
        (self.next() % 2_000_001) as f32 / 1_000_000.0 - 1.0
    }
}

fn sentence(rng: &mut Rng) -> String {
    format!(
        "{} {} with {} in {} {}.",
        rng.pick(&PEOPLE),
        rng.pick(&DOINGS),
        rng.pick(&PEOPLE),
        rng.pick(&PLACES),
        rng.pick(&WHEN)
    )
}

/// A pool vector with noise, normalised: near its text's meaning, never equal to another.
fn near(v: &[f32], rng: &mut Rng) -> Vec<f32> {
    let mut out: Vec<f32> = v.iter().map(|x| x + 0.02 * rng.unit()).collect();
    let norm = out.iter().map(|x| x * x).sum::<f32>().sqrt();
    out.iter_mut().for_each(|x| *x /= norm);
    out
}

fn percentile(xs: &mut [f64], p: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[((xs.len() - 1) as f64 * p).round() as usize]
}

#[test]
#[ignore]
fn recall_at_scale() {
    let model_dir = std::env::var("RECALLD_MODEL_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../models/all-MiniLM-L6-v2").to_owned());
    println!("| facts and passages | index build s | decorate p50 / p99 ms | recall p50 / p99 | query embedding p50 | searches p50 / p99 | walk p50 | with the prepared walk: decorate p50 / p99 | recall p50 / p99 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    // `RECALLD_SCALES=10000` runs one size only.
    let scales = std::env::var("RECALLD_SCALES").unwrap_or_else(|_| "1000,10000,100000".into());
    for n in scales
        .split(',')
        .map(|s| s.trim().parse::<u64>().expect("RECALLD_SCALES: numbers"))
    {
        one_scale(&model_dir, n);
    }
}

fn one_scale(model_dir: &str, n: u64) {
    const T0: f64 = 1_767_225_600.0;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let cfg: ModelsConfig = toml::from_str(&format!("[embedder]\npath = {model_dir:?}\n")).unwrap();
    let engine = Engine::new(
        store.clone(),
        Some(Models::load(&cfg, dir.path()).unwrap()),
        EngineConfig::default(),
    );
    let embedder = &engine.models.as_ref().unwrap().embedder;
    let model = embedder.id().name;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let pool_texts: Vec<String> = (0..1_000).map(|_| sentence(&mut rng)).collect();
    let mut pool: Vec<Vec<f32>> = Vec::new();
    for chunk in pool_texts.chunks(64) {
        let texts: Vec<&str> = chunk.iter().map(String::as_str).collect();
        pool.extend(embedder.embed(&CallCtx::new("m"), &texts).unwrap());
    }

    // The memory: messages in episodes of ten, a passage per message, n facts over n/5 entities.
    let mut st = store.read(|r| State::load(r, "m", T0)).unwrap();
    let entities = (n / 5).max(10);
    for e in 0..entities {
        let name = format!("{} {}", PEOPLE[(e % 40) as usize], e / 40);
        st.push_entity(Entity {
            n: 0,
            name,
            aliases: Vec::new(),
            at: T0,
        });
    }
    let live_from = (n / 10).saturating_sub(20);
    for i in 0..n {
        let at = T0 + i as f64 * 30.0;
        let p = (i % 1_000) as usize;
        let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
        let text = format!("{} ({i})", pool_texts[p]);
        let m = StoredMessage::new(
            &st.memory,
            Message::new(Format::ChatCompletions, role, &text),
            at,
            Source::Request,
        );
        if role == Role::User {
            st.memory.turn = m.turn;
        }
        let (seq, turn) = (st.push_message(m), st.memory.turn);
        if i % 10 == 9 {
            let k = i / 10;
            st.push_episode(Episode {
                n: 0,
                first_seq: i - 9,
                last_seq: i,
                first_turn: (i - 9) / 2 + 1,
                last_turn: turn,
                at,
                tokens: 200,
                state: if k < live_from {
                    EpisodeState::Forgotten
                } else {
                    EpisodeState::Live
                },
                acknowledged: true,
                facts: Vec::new(),
                changed_at: at,
                passaged: k < live_from,
            });
        }
        let episode = i / 10;
        if episode < live_from {
            let excerpt = format!("{}: {text}", if role == Role::User { "User" } else { "Assistant" });
            let passage = Passage {
                n: st.memory.next_passage,
                episode,
                first_seq: seq,
                last_seq: seq,
                first_turn: turn,
                last_turn: turn,
                at,
                tokens: 20,
                text_tokens: super::tokens::text_tokens(&excerpt) as u64,
                text: excerpt,
            };
            let pn = passage.n;
            st.push_passages(vec![passage]);
            let v = near(&pool[p], &mut rng);
            st.put_vector(
                VectorKind::Passage,
                pn,
                VectorRecord {
                    model: model.clone(),
                    v,
                },
            );
        }
        // A fact about this message's sentence, between two entities.
        let mut f = Fact::new(&pool_texts[p], "", "", false, at);
        let (a, b) = (rng.next() % entities, rng.next() % entities);
        f.subject = st.entities[a as usize].name.clone();
        f.object = st.entities[b as usize].name.clone();
        f.subject_entity = Some(a);
        f.object_entity = Some(b);
        f.episodes = vec![episode];
        f.note_seq = seq;
        f.first_turn = turn;
        f.last_turn = turn;
        let fact = st.push_fact(f);
        st.put_edge(a, fact, b);
        let v = near(&pool[p], &mut rng);
        st.put_vector(
            VectorKind::Fact,
            fact,
            VectorRecord {
                model: model.clone(),
                v,
            },
        );
        if i % 5_000 == 4_999 || i + 1 == n {
            store.write(|w| st.save(w)).unwrap();
            st.mark_saved();
        }
    }
    let started = Instant::now();
    engine.check_indexes().unwrap();
    let build = started.elapsed().as_secs_f64();

    // Questions: none of them stored, each about some names and places.
    let mut ask = |prepared: bool, rng: &mut Rng| {
        if prepared {
            let last = st.history().last().unwrap().seq;
            let facts = (0..12)
                .map(|_| WalkFact {
                    n: rng.next() % n,
                    level: WalkLevel::Keep,
                    from: None,
                })
                .collect();
            st.memory.walk = Some(PreparedWalk { after_seq: last, facts });
            store.write(|w| st.save(w)).unwrap();
            st.mark_saved();
            // The cached state does not hold the walk written behind its back.
            engine.cache.lock().unwrap().states.remove("m");
        }
        let (mut decorate, mut recall, mut embed, mut search, mut walk) = (vec![], vec![], vec![], vec![], vec![]);
        for q in 0..65 {
            let text = format!(
                "What did {} do with {} in {}, and when?",
                rng.pick(&PEOPLE),
                rng.pick(&PEOPLE),
                rng.pick(&PLACES)
            );
            let t = Instant::now();
            let out = engine
                .decorate(question(&text, T0 + n as f64 * 30.0 + 3_600.0))
                .unwrap();
            let ms = t.elapsed().as_secs_f64() * 1e3;
            let r = &out.info["recall"];
            assert!(
                r["items"].as_array().is_some_and(|i| !i.is_empty()),
                "recall found nothing: {r:#}"
            );
            assert_eq!(
                r["prepared_walk"]["ready"].as_bool().unwrap_or(false),
                prepared,
                "{r:#}"
            );
            if q < 5 {
                continue; // the first load of the memory and the model's first runs
            }
            decorate.push(ms);
            recall.push(r["ms"]["total"].as_f64().unwrap());
            embed.push(r["ms"]["embed"].as_f64().unwrap());
            search.push(r["ms"]["search"].as_f64().unwrap());
            walk.push(r["ms"]["walk"].as_f64().unwrap());
        }
        (decorate, recall, embed, search, walk)
    };
    let (mut d, mut r, mut e, mut s, mut w) = ask(false, &mut rng);
    let (mut dp, mut rp, ..) = ask(true, &mut rng);
    println!(
        "| {n} | {build:.1} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} | {:.1} / {:.1} | {:.2} | {:.1} / {:.1} | {:.1} / {:.1} |",
        percentile(&mut d, 0.5),
        percentile(&mut d, 0.99),
        percentile(&mut r, 0.5),
        percentile(&mut r, 0.99),
        percentile(&mut e, 0.5),
        percentile(&mut s, 0.5),
        percentile(&mut s, 0.99),
        percentile(&mut w, 0.5),
        percentile(&mut dp, 0.5),
        percentile(&mut dp, 0.99),
        percentile(&mut rp, 0.5),
        percentile(&mut rp, 0.99),
    );

    // Cold: the memory as a restarted daemon finds it (the model loaded, the OS's page cache
    // warm): its state not cached, its indexes opened again from disk.
    let mut engine = engine;
    let indexes = engine.indexes.take().unwrap();
    indexes.flush().unwrap();
    drop(indexes);
    engine.cache.lock().unwrap().states.clear();
    // What opening each index costs (a search opens it), then a decorate on another new copy.
    let reopen = || crate::index::Indexes::open(&store.path().join("index"), Some(embedder_dim(&engine))).unwrap();
    let opened = reopen();
    let t = Instant::now();
    opened.vectors.as_ref().unwrap().search("m", &pool[0], 1).unwrap();
    let vectors_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    opened.words.search("m", "Lisbon", 1).unwrap();
    let words_ms = t.elapsed().as_secs_f64() * 1e3;
    drop(opened);
    let t = Instant::now();
    let loaded = store.read(|r| State::load(r, "m", T0)).unwrap();
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    drop(loaded);
    // Of the load, the tables read whole.
    let prefix = crate::store::keys::memory_prefix("m");
    let scan_ms = |table: crate::store::Table| {
        let t = Instant::now();
        let n = store
            .read(|r| {
                Ok(match table {
                    crate::store::Table::Facts => r.scan::<Fact>(table, &prefix)?.len(),
                    crate::store::Table::Entities => r.scan::<Entity>(table, &prefix)?.len(),
                    _ => r.scan::<Episode>(table, &prefix)?.len(),
                })
            })
            .unwrap();
        (n, t.elapsed().as_secs_f64() * 1e3)
    };
    let parts: Vec<String> = [
        crate::store::Table::Facts,
        crate::store::Table::Entities,
        crate::store::Table::Episodes,
    ]
    .into_iter()
    .map(|table| {
        let (n, ms) = scan_ms(table);
        format!("{n} {} {ms:.1} ms", table.name())
    })
    .collect();
    let fresh = reopen();
    engine.indexes = Some(fresh);
    let t = Instant::now();
    let out = engine
        .decorate(question("What did Amara do in Lisbon?", T0 + n as f64 * 30.0 + 3_600.0))
        .unwrap();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let r = &out.info["recall"]["ms"];
    println!(
        "cold at {n}: first decorate {ms:.1} ms (recall {:.1}, searches {:.1}); alone: the state's load {load_ms:.1} ms (of it {}), the first search of the vectors {vectors_ms:.1} and of the words {words_ms:.1}",
        r["total"].as_f64().unwrap_or(0.0),
        r["search"].as_f64().unwrap_or(0.0),
        parts.join(", "),
    );
}

/// A question to memory `m` as a new user message, decorated as a dry run at a 16k ceiling.
fn question(text: &str, now: f64) -> DecorateArgs {
    DecorateArgs {
        memory: "m".into(),
        request: json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}),
        now: Some(now),
        dry_run: true,
        ceiling: Some(16_000),
        agent: None,
        user: None,
        history: HistoryMode::Delta,
    }
}

fn embedder_dim(engine: &Engine) -> usize {
    engine.models.as_ref().unwrap().embedder.id().dim
}
