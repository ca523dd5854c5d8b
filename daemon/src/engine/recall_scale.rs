//! Two benchmarks of the engine at scale (not tests; in release, with the built-in model).
//!
//! `recall_at_scale`: what recall costs in decorate as a memory grows to 1k, 10k and 100k facts
//! and passages, with the lane's prepared walk ready and without it:
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
//!
//! `memories_at_scale`: how the process's RSS grows with the number of memories in use, and
//! whether it levels off once more are used than the engine's caches hold (64 loaded states,
//! `EngineConfig::cached_memories`; 64 open word and 64 vector indexes, `index::Indexes`):
//!
//!     RECALLD_MEMORIES=128 RECALLD_MESSAGES=10000 \
//!         cargo test --release -p recalld --lib memories_at_scale -- --ignored --nocapture
//!
//! (the defaults; 128 memories of 10k messages take ~10 minutes here, most of it building the
//! indexes). The memories (`agent-0001`…) are written as above, with their entities' vectors
//! too, into one store, and their indexes built from it; then the store and engine are opened
//! again as after a restart (the model kept, the heap the build freed given back) and each
//! memory in turn gets a question as a new user message, kept (not a dry run, ceiling 16k),
//! twice over: the second pass finds every memory evicted and loads it again. Every 16 memories
//! it prints VmRSS, of it the heap (RssAnon) and mapped files (RssFile: the store's map, the
//! indexes' files), VmHWM, threads, open files, mappings, the cached states and per-memory
//! locks, and the median decorate of those 16; at the end, the RSS before use and at the end,
//! the growth per memory until the caps fill, the plateau past them, and the sizes on disk.
//! Only decorate runs: no lane (indexing, graph, distill jobs), so no vector index is loaded
//! for a change during use; the line after the build shows what writing the indexes of every
//! memory leaves behind.
//!
//! Two small tests run with the others: a memory not in the state cache is loaded into it
//! while its new message embeds, and the message's word searches are made meanwhile.

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

/// When the memories' first message was written (2026-01-01, unix seconds).
const T0: f64 = 1_767_225_600.0;

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

/// A question about some names and a place, never one of the stored texts.
fn random_question(rng: &mut Rng) -> String {
    format!(
        "What did {} do with {} in {}, and when?",
        rng.pick(&PEOPLE),
        rng.pick(&PEOPLE),
        rng.pick(&PLACES)
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
    let model_dir = model_dir();
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
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let engine = Engine::new(
        store.clone(),
        Some(load_models(model_dir, dir.path())),
        EngineConfig::default(),
    );
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (pool_texts, pool, model) = embed_pool(&engine, &mut rng, 1_000);
    let mut st = write_memory(&store, &pool_texts, &pool, &model, "m", n, &mut rng);
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
            engine.cache.lock().unwrap().take("m");
        }
        let (mut decorate, mut recall, mut embed, mut search, mut walk) = (vec![], vec![], vec![], vec![], vec![]);
        for q in 0..65 {
            let text = random_question(rng);
            let t = Instant::now();
            let out = engine
                .decorate(question("m", &text, T0 + n as f64 * 30.0 + 3_600.0))
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
    engine.cache.lock().unwrap().clear();
    // What opening each index costs (a search opens it), then a decorate on another new copy.
    let dim = embedder_dim(&engine);
    let reopen = || crate::index::Indexes::open(&store.path().join("index"), Some(dim)).unwrap();
    // As after a restart: indexes saved and opened again, no state cached.
    let restarted = |engine: &mut Engine| {
        engine.indexes.take().unwrap().flush().unwrap();
        engine.indexes = Some(reopen());
        engine.cache.lock().unwrap().clear();
    };
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
    // For comparison, the tables as a load that read them whole would (facts are read only
    // for the episodes not forgotten).
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
    // One new question, timed: the decorate, its recall and recall's searches.
    let ask = |engine: &Engine, text: &str| {
        let t = Instant::now();
        let out = engine
            .decorate(question("m", text, T0 + n as f64 * 30.0 + 3_600.0))
            .unwrap();
        let r = &out.info["recall"]["ms"];
        (
            t.elapsed().as_secs_f64() * 1e3,
            r["total"].as_f64().unwrap_or(0.0),
            r["search"].as_f64().unwrap_or(0.0),
        )
    };
    engine.indexes = Some(reopen());
    let (ms, recall_ms, search_ms) = ask(&engine, "What did Amara do in Lisbon?");
    println!(
        "cold at {n}: first decorate {ms:.1} ms (recall {recall_ms:.1}, searches {search_ms:.1}); alone: the state's load {load_ms:.1} ms (read whole: {}), the first search of the vectors {vectors_ms:.1} and of the words {words_ms:.1}",
        parts.join(", "),
    );
    // The same after a start's warm-up (state loaded, indexes opened and searched once).
    restarted(&mut engine);
    let t = Instant::now();
    engine.warm(true);
    let warm_ms = t.elapsed().as_secs_f64() * 1e3;
    let (ms, recall_ms, search_ms) = ask(&engine, "What did Amara do in Lisbon?");
    println!(
        "after the warm-up ({warm_ms:.1} ms) at {n}: first decorate {ms:.1} ms (recall {recall_ms:.1}, searches {search_ms:.1})"
    );
    // A memory that left the state cache while its indexes stayed open (others used since),
    // asked something new (its embedding not cached).
    engine.cache.lock().unwrap().clear();
    let (ms, recall_ms, search_ms) = ask(&engine, "Where did Amara travel with her sister?");
    println!(
        "not in the state cache, indexes open, at {n}: decorate {ms:.1} ms (recall {recall_ms:.1}, searches {search_ms:.1})"
    );
    // Neither its state nor its indexes kept (more memories used since than either cache
    // holds), asked something new.
    restarted(&mut engine);
    let (ms, recall_ms, search_ms) = ask(&engine, "Which museum did Amara visit with her brother?");
    println!(
        "not in the state cache, indexes closed, at {n}: decorate {ms:.1} ms (recall {recall_ms:.1}, searches {search_ms:.1})"
    );
}

/// A memory "m" of 40 messages written straight to a new store, its indexes built as at a start,
/// its state not cached. Returns the engine, the state written and the directory to keep.
fn small_memory(seed: u64) -> (Engine, State, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let engine = Engine::new(
        store.clone(),
        Some(load_models(&model_dir(), dir.path())),
        EngineConfig::default(),
    );
    let mut rng = Rng(seed);
    let (pool_texts, pool, model) = embed_pool(&engine, &mut rng, 40);
    let written = write_memory(&store, &pool_texts, &pool, &model, "m", 40, &mut rng);
    engine.check_indexes().unwrap();
    engine.cache.lock().unwrap().clear();
    (engine, written, dir)
}

#[test]
fn a_memory_left_out_of_the_state_cache_is_loaded_while_its_new_message_embeds() {
    let (engine, written, _dir) = small_memory(7);

    let parsed = crate::formats::parse_request(
        json!({"messages": [{"role": "user", "content": "What did Amara do in Lisbon?"}]}),
    )
    .unwrap();
    let q = engine.recall_query("m", &parsed, None, 0.0).unwrap();
    assert!(!q.vectors.is_empty(), "the message was embedded");
    // The state decorate will take is already cached, and it is the one the store holds.
    assert!(engine.is_cached("m"));
    let cached = engine.cache.lock().unwrap().get("m").unwrap().clone();
    assert_eq!(
        (cached.memory.next_seq, cached.memory.next_fact, cached.episodes.len()),
        (
            written.memory.next_seq,
            written.memory.next_fact,
            written.episodes.len()
        )
    );
    // A memory the store does not hold is not cached.
    assert!(engine.recall_query("nobody", &parsed, None, 0.0).is_none());
    assert!(!engine.is_cached("nobody"));
}

#[test]
fn a_new_messages_word_searches_are_made_while_it_embeds_and_made_again_when_the_conversation_differs() {
    let (engine, _, _dir) = small_memory(11);

    let question_text = "What did Amara do in Lisbon?";
    let parsed =
        crate::formats::parse_request(json!({"messages": [{"role": "user", "content": question_text}]})).unwrap();
    let q = engine.recall_query("m", &parsed, None, 0.0).unwrap();
    // Made while the message embedded: the message and the recent conversation (the cached
    // state's last messages, then the message), each as a search now would find.
    let names: Vec<&str> = q.words.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, ["words:message", "words:recent"]);
    let words = &engine.indexes.as_ref().unwrap().words;
    for (_, text, hits) in &q.words {
        let now: Vec<u64> = words
            .search("m", text, 24)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(*hits, now);
        assert!(!hits.is_empty());
    }
    let st = engine.cache.lock().unwrap().get("m").unwrap().clone();
    let last: Vec<&str> = st.history().rev().take(3).map(|m| m.message.text.as_str()).collect();
    assert!(q.words[1].1.starts_with(last[2]) && q.words[1].1.ends_with(&format!("{}\n{question_text}", last[0])));

    // Recall uses them when its own query texts are theirs (the message stored after the
    // state's last)…
    let (seq, room) = (
        st.memory.next_seq,
        super::recall::Room {
            free: 2_000,
            reserved: 2_000,
            hideable: Vec::new(),
        },
    );
    let used = engine.recall(&st, &q, seq, &room, T0 + 3_600.0 * 24.0);
    assert_eq!(
        used.info["searched_while_embedding"],
        json!(["words:message", "words:recent"])
    );
    // …and searches itself where they differ (another conversation before the message): the
    // same block either way.
    let mut other = q.clone();
    for (_, text, hits) in &mut other.words {
        *text = format!("earlier talk\n{text}");
        *hits = vec![u64::MAX];
    }
    let searched = engine.recall(&st, &other, seq, &room, T0 + 3_600.0 * 24.0);
    assert_eq!(searched.info["searched_while_embedding"], json!([]));
    assert_eq!(searched.info["searches"], used.info["searches"]);
    assert_eq!(searched.info["items"], used.info["items"]);
    assert!(used.block.is_some());
}

#[test]
#[ignore]
fn memories_at_scale() {
    let model_dir = model_dir();
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .map(|v| v.trim().parse::<u64>().unwrap_or_else(|_| panic!("{name}: a number")))
            .unwrap_or(default)
    };
    let (memories, n) = (env("RECALLD_MEMORIES", 128), env("RECALLD_MESSAGES", 10_000));
    let at_start = Proc::read();
    let dir = tempfile::tempdir().unwrap();
    // ~4 KB a message: 128 memories of 10k take ~5 GB, past the default map (1 GB, doubled when
    // full, each time under an exclusive lock). The map is address space, not RSS.
    let opts = StoreOptions {
        map_size: StoreOptions::default().map_size.max((memories * n * 8_192) as usize),
        ..StoreOptions::default()
    };
    let store = Arc::new(Store::open(dir.path(), &opts).unwrap());
    let config = EngineConfig::default();
    let engine = Engine::new(store.clone(), Some(load_models(&model_dir, dir.path())), config.clone());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (pool_texts, pool, model) = embed_pool(&engine, &mut rng, 1_000);
    let model_loaded = Proc::read();
    println!(
        "{memories} memories of {n} messages; RSS at the start {:.0} MB, with the model loaded (and run on 1,000 texts) {:.0} MB",
        at_start.rss, model_loaded.rss
    );

    let ids: Vec<String> = (1..=memories).map(|i| format!("agent-{i:04}")).collect();
    let started = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        let mut st = write_memory(&store, &pool_texts, &pool, &model, id, n, &mut rng);
        // The entities' vectors, as the graph's lane stores them (without them every start
        // would find the entity indexes behind the store).
        for e in 0..st.entities.len() {
            let (en, v) = (st.entities[e].n, near(&pool[e % pool.len()], &mut rng));
            st.put_vector(
                VectorKind::Entity,
                en,
                VectorRecord {
                    model: model.clone(),
                    v,
                },
            );
        }
        store.write(|w| st.save(w)).unwrap();
        if (i + 1) % 8 == 0 || i + 1 == ids.len() {
            println!(
                "written {} memories, {:.0} s, data.mdb {:.0} MB, RSS {:.0} MB",
                i + 1,
                started.elapsed().as_secs_f64(),
                mb(store.size_bytes()),
                Proc::read().rss
            );
        }
    }
    let t = Instant::now();
    assert_eq!(engine.check_indexes().unwrap(), ids.len());
    let built = Proc::read();
    give_back_freed_heap();
    let trimmed = Proc::read();
    println!(
        "indexes built from the store in {:.0} s, the last {} memories' indexes still open: RSS {:.0} MB (heap {:.0}, files {:.0}), {} threads, {} open files; {:.0} MB (heap {:.0}) once the freed heap is given back",
        t.elapsed().as_secs_f64(),
        ids.len().min(crate::index::OPEN_WORD_INDEXES),
        built.rss,
        built.anon,
        built.file,
        built.threads,
        built.fds,
        trimmed.rss,
        trimmed.anon
    );

    // In use as after a restart: the store and indexes opened again (the build's open indexes
    // and mapped pages gone), the heap the build freed given back, the model kept.
    let mut engine = engine;
    let models = engine.models.take().unwrap();
    engine.indexes.take().unwrap().flush().unwrap();
    drop(engine);
    drop(store);
    give_back_freed_heap();
    let reopened = Instant::now();
    let store = Arc::new(Store::open(dir.path(), &opts).unwrap());
    let engine = Engine::new(store.clone(), Some(models), config.clone());
    assert_eq!(
        engine.check_indexes().unwrap(),
        0,
        "the indexes were left behind the store"
    );
    let reopened = reopened.elapsed();
    let before = Proc::read();
    println!(
        "reopened as after a restart in {:.0} ms (the store, the engine, every memory's index marks checked; {:.1} GB of store): RSS {:.0} MB (heap {:.0}, files {:.0}), {} threads, {} open files",
        reopened.as_secs_f64() * 1e3,
        std::fs::metadata(dir.path().join("data.mdb")).map_or(0, |m| m.len()) as f64 / 1e9,
        before.rss,
        before.anon,
        before.file,
        before.threads,
        before.fds
    );
    println!();
    println!("| pass | memories used | RSS MB | heap (RssAnon) | files (RssFile) | of them data.mdb / word / vector index files | VmHWM | threads | open files | mappings | states cached (estimated heap) | memory locks / index locks | decorate p50 ms (these 16) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");

    // Each memory in turn gets a question as a new user message (kept: not a dry run), twice
    // over, so the second pass finds every memory evicted by the later ones. Readings: the
    // memories used in all, of them distinct, what /proc says then.
    let mut readings: Vec<(u64, u64, Proc)> = Vec::new();
    for pass in 1..=2u64 {
        let now = T0 + n as f64 * 30.0 + 3_600.0 * pass as f64;
        let mut ms = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let text = random_question(&mut rng);
            let t = Instant::now();
            let out = engine
                .decorate(DecorateArgs {
                    dry_run: false,
                    ..question(id, &text, now)
                })
                .unwrap();
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            let r = &out.info["recall"];
            assert!(
                r["items"].as_array().is_some_and(|i| !i.is_empty()),
                "recall found nothing in {id}: {r:#}"
            );
            if (i + 1) % 16 == 0 || i + 1 == ids.len() {
                let p = Proc::read();
                let used = i as u64 + 1;
                readings.push(((pass - 1) * memories + used, used.max((pass - 1) * memories), p));
                let p = &readings.last().unwrap().2;
                let cached = {
                    let cache = engine.cache.lock().unwrap();
                    (cache.states.len(), cache.bytes)
                };
                println!(
                    "| {pass} | {} | {:.0} | {:.0} | {:.0} | {:.0} / {:.0} / {:.0} | {:.0} | {} | {} | {} | {} ({:.0} MB estimated) | {} / {} | {:.1} |",
                    i + 1,
                    p.rss,
                    p.anon,
                    p.file,
                    p.mdb,
                    p.words,
                    p.vectors,
                    p.hwm,
                    p.threads,
                    p.fds,
                    p.maps,
                    cached.0,
                    cached.1 as f64 / 1e6,
                    engine.locks.lock().unwrap().len(),
                    engine.index_locks.lock().unwrap().len(),
                    percentile(&mut ms, 0.5)
                );
                ms.clear();
            }
        }
    }

    let end = Proc::read();
    // What the cached states themselves take: the heap given back once they are dropped,
    // against the cache's own estimate (`State::resident_bytes`, its bound in bytes).
    give_back_freed_heap();
    let kept = Proc::read();
    let (states, estimated) = {
        let mut cache = engine.cache.lock().unwrap();
        let held = (cache.states.len(), cache.bytes);
        cache.clear();
        held
    };
    give_back_freed_heap();
    let cleared = Proc::read();
    println!(
        "the {states} cached states: heap {:.0} → {:.0} MB once dropped ({:.2} MB a state; the cache estimated {:.2})",
        kept.anon,
        cleared.anon,
        (kept.anon - cleared.anon) / states.max(1) as f64,
        estimated as f64 / 1e6 / states.max(1) as f64
    );
    let (word_cap, vector_cap) = (crate::index::OPEN_WORD_INDEXES, crate::index::OPEN_VECTOR_INDEXES);
    let cap = config.cached_memories.max(word_cap).max(vector_cap) as u64;
    let range = |xs: Vec<f64>| {
        let lo = xs.iter().copied().reduce(f64::min).unwrap_or(0.0);
        let hi = xs.iter().copied().reduce(f64::max).unwrap_or(0.0);
        format!("{lo:.0}–{hi:.0}")
    };
    let past: Vec<&Proc> = readings.iter().filter(|r| r.0 > cap).map(|r| &r.2).collect();
    let plateau = if past.is_empty() {
        format!("none (no more than {cap} memories used)")
    } else {
        format!(
            "RSS {} MB (heap {}, files {}) over the {} readings past {cap} memories used",
            range(past.iter().map(|p| p.rss).collect()),
            range(past.iter().map(|p| p.anon).collect()),
            range(past.iter().map(|p| p.file).collect()),
            past.len()
        )
    };
    let filled = readings
        .iter()
        .rfind(|r| r.0 <= cap)
        .map(|(_, used, p)| {
            let per = |now: f64, then: f64| (now - then) / *used as f64;
            format!(
                ", {:.2} MB a memory used up to {used} (heap {:.2}, files {:.2})",
                per(p.rss, before.rss),
                per(p.anon, before.anon),
                per(p.file, before.file)
            )
        })
        .unwrap_or_default();
    println!();
    println!(
        "{memories} memories of {n} messages: RSS {:.0} MB with the model loaded, {:.0} MB reopened before use (heap {:.0}), {:.0} MB at the end (heap {:.0}, files {:.0}: data.mdb {:.0}, word index files {:.0}, vector index files {:.0}; VmHWM {:.0}){filled}; plateau: {plateau}; data.mdb {:.0} MB, index dir {:.0} MB; caps: {} cached states, {} open word and {} vector indexes",
        model_loaded.rss,
        before.rss,
        before.anon,
        end.rss,
        end.anon,
        end.file,
        end.mdb,
        end.words,
        end.vectors,
        end.hwm,
        mb(store.size_bytes()),
        mb(dir_bytes(&store.path().join("index"))),
        config.cached_memories,
        word_cap,
        vector_cap
    );
}

/// What /proc says of this process: RSS (of it heap and mapped files), its peak, in MB;
/// threads, open files and mappings.
struct Proc {
    rss: f64,
    anon: f64,
    file: f64,
    /// Of `file`: the store's map, the word indexes' files, the vector indexes' files.
    mdb: f64,
    words: f64,
    vectors: f64,
    hwm: f64,
    threads: usize,
    fds: usize,
    maps: usize,
}

impl Proc {
    fn read() -> Proc {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // Resident pages by mapped file.
        let (mut mdb, mut words, mut vectors, mut path) = (0.0, 0.0, 0.0, String::new());
        for line in std::fs::read_to_string("/proc/self/smaps").unwrap_or_default().lines() {
            if let Some(kb) = line.strip_prefix("Rss:") {
                let kb: f64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0.0);
                if path.ends_with("/data.mdb") {
                    mdb += kb / 1024.0;
                } else if path.contains("/index/") && path.contains("/words/") {
                    words += kb / 1024.0;
                } else if path.contains("/index/") && path.ends_with(".usearch") {
                    vectors += kb / 1024.0;
                }
            } else if line
                .split_whitespace()
                .next()
                .is_some_and(|a| a.contains('-') && !a.ends_with(':'))
            {
                path = line.split_whitespace().nth(5).unwrap_or("").to_owned();
            }
        }
        Proc {
            mdb,
            words,
            vectors,
            rss: field("VmRSS:") / 1024.0,
            anon: field("RssAnon:") / 1024.0,
            file: field("RssFile:") / 1024.0,
            hwm: field("VmHWM:") / 1024.0,
            threads: field("Threads:") as usize,
            fds: std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0),
            maps: std::fs::read_to_string("/proc/self/maps")
                .map(|m| m.lines().count())
                .unwrap_or(0),
        }
    }
}

/// Returns the heap's free pages to the system (glibc keeps them), so RSS shows what is held.
fn give_back_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory at the top and in the middle of the heap.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Where the built-in model is: `RECALLD_MODEL_DIR`, else where `make model` puts it.
fn model_dir() -> String {
    std::env::var("RECALLD_MODEL_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../models/all-MiniLM-L6-v2").to_owned())
}

/// The built-in model, from `model_dir`.
fn load_models(model_dir: &str, data: &std::path::Path) -> Models {
    let cfg: ModelsConfig = toml::from_str(&format!("[embedder]\npath = {model_dir:?}\n")).unwrap();
    Models::load(&cfg, data).unwrap()
}

/// A pool of `count` texts and their vectors from the engine's embedder, and its name.
fn embed_pool(engine: &Engine, rng: &mut Rng, count: usize) -> (Vec<String>, Vec<Vec<f32>>, String) {
    let embedder = &engine.models.as_ref().unwrap().embedder;
    let pool_texts: Vec<String> = (0..count).map(|_| sentence(rng)).collect();
    let mut pool: Vec<Vec<f32>> = Vec::new();
    for chunk in pool_texts.chunks(64) {
        let texts: Vec<&str> = chunk.iter().map(String::as_str).collect();
        pool.extend(embedder.embed(&CallCtx::new("m"), &texts).unwrap());
    }
    (pool_texts, pool, embedder.id().name)
}

/// Writes memory `memory` straight to the store: n messages in episodes of ten (all forgotten
/// but the last twenty), a passage per forgotten message and n facts over n/5 entities, each
/// with a vector near its pool text's. Returns its state, saved.
fn write_memory(
    store: &Store,
    pool_texts: &[String],
    pool: &[Vec<f32>],
    model: &str,
    memory: &str,
    n: u64,
    rng: &mut Rng,
) -> State {
    // The memory: messages in episodes of ten, a passage per message, n facts over n/5 entities.
    let mut st = store.read(|r| State::load(r, memory, T0)).unwrap();
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
        let p = i as usize % pool_texts.len();
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
                at,
                acknowledged: true,
                changed_at: at,
                passaged: k < live_from,
                ..Episode::spanning(
                    (i - 9, i),
                    ((i - 9) / 2 + 1, turn),
                    200,
                    if k < live_from {
                        EpisodeState::Forgotten
                    } else {
                        EpisodeState::Live
                    },
                )
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
                skipped: Vec::new(),
            };
            let pn = passage.n;
            st.push_passages(vec![passage]);
            let v = near(&pool[p], rng);
            st.put_vector(
                VectorKind::Passage,
                pn,
                VectorRecord {
                    model: model.to_owned(),
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
        let v = near(&pool[p], rng);
        st.put_vector(
            VectorKind::Fact,
            fact,
            VectorRecord {
                model: model.to_owned(),
                v,
            },
        );
        if i % 5_000 == 4_999 || i + 1 == n {
            store.write(|w| st.save(w)).unwrap();
            st.mark_saved();
        }
    }
    st
}

/// A question to `memory` as a new user message, decorated as a dry run at a 16k ceiling.
fn question(memory: &str, text: &str, now: f64) -> DecorateArgs {
    DecorateArgs {
        now: Some(now),
        dry_run: true,
        ceiling: Some(16_000),
        history: HistoryMode::Delta,
        ..DecorateArgs::new(
            memory,
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}),
        )
    }
}

fn embedder_dim(engine: &Engine) -> usize {
    engine.models.as_ref().unwrap().embedder.id().dim
}
