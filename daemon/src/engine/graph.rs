//! The memory's knowledge graph: each fact is an edge between its subject and object entities.
//!
//! The lane places each new fact (a `Graph` job, before its traces are judged):
//! 1. its two names resolve to entities: a normalised name or a known alias first (the note's
//!    own aliases included), then the nearest held entities by embedding, taken only when the
//!    cosine reaches [`SAME_ENTITY`] and the guard [`distinct`] does not keep them apart;
//!    otherwise a new entity. Candidates are the [`ENTITY_CANDIDATES`] nearest in the memory's
//!    entity index (usearch), plus the entities made since the index was last brought up to
//!    the store (normally none: each job's entities are indexed right after it), so the cost
//!    of resolving a name does not grow with the graph. Their cosines are computed again from
//!    the stored vectors, so the threshold reads exact values, not the index's f16 ones.
//!    A name whose nearest guard-passing entity is close but below the threshold (cosine ≥
//!    [`MAYBE_SAME_ENTITY`]) is put to the judge, all of a job's such names in one call
//!    (`Judge::same_entity_each`), before any is resolved: a model judge settles them, the
//!    built-in judge keeps them apart.
//! 2. it is embedded (the fact's sentence; new entities by name);
//! 3. it is related to the newest held facts on the same two entities: a restatement merges into
//!    the held fact (both sources kept, a counted `Restated` trace on the held fact's episodes);
//!    a contradiction retires the held fact (kept, with when and by which fact). The built-in
//!    judge is conservative; a model judge decides each pair.
//!
//! Planning reads the store and runs the models without the memory's lock; only the lane
//! writes the graph (one worker per memory), so what it read is still what holds when the plan
//! is applied under the lock. Applying re-checks anyway and skips what moved.

use std::collections::{HashMap, HashSet};

use super::records::{Entity, Fact, FactStatus, Restatement, TraceKind, VectorKind, VectorRecord};
use super::state::State;
use crate::index::vectors::Vectors;
use crate::models::{cosine, CallCtx, Judge, Models, NamePair, Relation};
use crate::store::{keys, Reader, StoreError, Table};

/// Cosine of two names' embeddings from which they may name one entity (guard permitting).
/// Calibrated on LoCoMo dev names: see docs/models.md, "Entity resolution".
pub const SAME_ENTITY: f32 = 0.90;
/// Cosine from which a name may name a held entity if the judge says so (below
/// [`SAME_ENTITY`]; the built-in judge says no).
pub const MAYBE_SAME_ENTITY: f32 = 0.80;
/// Nearest held entities considered per name.
pub const ENTITY_CANDIDATES: usize = 8;
/// Newest held facts on the same two entities a new fact is related to.
pub const RELATED_FACTS: usize = 8;

/// The graph's edges as `export` and `inspect` list them: each fact placed between two
/// entities, `{fact, subject, object}` (entity numbers).
pub(super) fn edges<'a>(facts: impl IntoIterator<Item = &'a Fact>) -> Vec<serde_json::Value> {
    facts
        .into_iter()
        .filter_map(|f| {
            Some(serde_json::json!({"fact": f.n, "subject": f.subject_entity?, "object": f.object_entity?}))
        })
        .collect()
}

/// A name's normalised form: lowercase, punctuation as spaces, a leading article and a
/// possessive "'s" dropped, whitespace collapsed. Equal forms name one entity.
pub fn norm(name: &str) -> String {
    let lower = name.to_lowercase().replace(['’', '`'], "'");
    let mut words: Vec<String> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-' || c == '_' || c == '#' || c == '.'))
        .map(|w| w.trim_matches(|c: char| c == '\'' || c == '.' || c == '-'))
        .map(|w| w.strip_suffix("'s").unwrap_or(w).to_owned())
        .filter(|w| !w.is_empty())
        .collect();
    if words.len() > 1 && matches!(words[0].as_str(), "the" | "a" | "an") {
        words.remove(0);
    }
    words.join(" ")
}

/// Tokens that carry an identifier or a number ("1234", "v3", "inv-0042", "#12").
fn id_tokens(name: &str) -> HashSet<String> {
    norm(name)
        .split(' ')
        .filter(|w| w.chars().any(|c| c.is_ascii_digit()))
        .map(str::to_owned)
        .collect()
}

/// Capitalised words of a name as written (proper names), lowercased.
fn proper_words(name: &str) -> HashSet<String> {
    name.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().next().is_some_and(char::is_uppercase) && w.chars().skip(1).any(char::is_lowercase))
        .map(str::to_lowercase)
        .collect()
}

/// "Melanie's kids" → ("melanie", "kid"): the owner and the owned thing (a plural "s" dropped).
fn possessive(name: &str) -> Option<(String, String)> {
    let lower = name.to_lowercase().replace('’', "'");
    let (owner, head) = lower.split_once("'s ")?;
    let head = norm(head);
    let head = head
        .strip_suffix('s')
        .filter(|h| h.len() > 2)
        .unwrap_or(&head)
        .to_owned();
    Some((norm(owner), head))
}

/// The guard against merging distinct entities, whatever their embeddings say: two names with
/// different identifiers or numbers ("ticket 1234" / "ticket 1235"), whose proper names differ
/// on both sides ("Dana Smith" / "Dana Lee"; "Dana" / "Dana Smith" may still be one), or that
/// name different things of one owner ("Melanie's kids" / "Melanie's family", "Caroline" /
/// "Caroline's friends": embeddings rate these alike because the owner dominates).
pub fn distinct(a: &str, b: &str) -> bool {
    let (ia, ib) = (id_tokens(a), id_tokens(b));
    if (!ia.is_empty() || !ib.is_empty()) && ia != ib {
        return true;
    }
    match (possessive(a), possessive(b)) {
        (Some((oa, ha)), Some((ob, hb))) if oa == ob && ha != hb => return true,
        (Some((owner, _)), None) if norm(b) == owner => return true,
        (None, Some((owner, _))) if norm(a) == owner => return true,
        _ => {}
    }
    let (pa, pb) = (proper_words(a), proper_words(b));
    !pa.is_empty() && !pb.is_empty() && !pa.is_subset(&pb) && !pb.is_subset(&pa)
}

/// Where a name resolved: a held entity, or the plan's i-th new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Node {
    Held(u64),
    New(usize),
}

/// A new entity the plan creates.
pub(super) struct NewEntity {
    name: String,
    aliases: Vec<String>,
    vector: Option<Vec<f32>>,
}

/// A new fact's place in the graph.
pub(super) struct Placed {
    fact: u64,
    subject: Node,
    object: Node,
    vector: Option<Vec<f32>>,
    /// Held facts on the same entities and how this fact relates to each, newest first.
    relations: Vec<(u64, Relation)>,
}

/// What a `Graph` job decided, ready to apply under the lock.
pub(super) struct Plan {
    /// The graph's size when planned: applying checks it did not move.
    next_entity: u64,
    entities: Vec<NewEntity>,
    /// New names of held entities.
    aliases: Vec<(u64, String)>,
    placed: Vec<Placed>,
    model: String,
}

impl Plan {
    pub(super) fn placed_count(&self) -> usize {
        self.placed.len()
    }
}

/// The memory's entity index, as the planner searches it.
pub(super) struct EntityIndex<'a> {
    pub vectors: &'a Vectors,
    /// Every entity numbered below this is in the index (its marks).
    pub indexed: u64,
}

/// What the planner reads of the store for one job.
struct Held {
    facts: Vec<Fact>,
    entities: HashMap<u64, Entity>,
    /// The vectors of entities the index does not hold yet (all of them without an index).
    unindexed: Vec<(u64, Vec<f32>)>,
    next_entity: u64,
}

fn read_held(r: &Reader<'_>, memory: &str, facts: &[u64], indexed: u64, model: &str) -> Result<Held, StoreError> {
    let record: Option<super::records::MemoryRecord> = r.get(Table::Memories, &keys::memory(memory))?;
    let mut out = Held {
        facts: Vec::new(),
        entities: HashMap::new(),
        unindexed: Vec::new(),
        next_entity: record.map_or(0, |m| m.next_entity),
    };
    for &n in facts {
        if let Some(f) = r.get::<Fact>(Table::Facts, &keys::seq(memory, n))? {
            out.facts.push(f);
        }
    }
    out.unindexed = entity_vectors(r, memory, indexed, Some(model))?;
    Ok(out)
}

/// The stored vectors of the memory's entities numbered `from` on, made by `model` (others are
/// left to re-embedding; none at all without a model).
pub(super) fn entity_vectors(
    r: &Reader<'_>,
    memory: &str,
    from: u64,
    model: Option<&str>,
) -> Result<Vec<(u64, Vec<f32>)>, StoreError> {
    let mut out = Vec::new();
    let Some(model) = model else { return Ok(out) };
    r.visit(
        Table::Vectors,
        &keys::seq2_prefix(memory, VectorKind::Entity as u64),
        &keys::seq2(memory, VectorKind::Entity as u64, from),
        |k, v: VectorRecord| {
            if v.model == model {
                out.push((keys::last_number(k), v.v));
            }
            Ok(true)
        },
    )?;
    Ok(out)
}

fn entity(r: &Reader<'_>, memory: &str, n: u64) -> Result<Option<Entity>, StoreError> {
    r.get(Table::Entities, &keys::seq(memory, n))
}

/// The newest held facts on the edge between `a` and `b`, at most [`RELATED_FACTS`].
fn facts_between(r: &Reader<'_>, memory: &str, a: u64, b: u64) -> Result<Vec<Fact>, StoreError> {
    let mut ns = Vec::new();
    r.visit_rev(Table::Edges, &keys::seq2_prefix(memory, a), |k, other: u64| {
        if other == b {
            ns.push(keys::last_number(k));
        }
        Ok(ns.len() < RELATED_FACTS * 4)
    })?;
    let mut out = Vec::new();
    for n in ns {
        if let Some(f) = r.get::<Fact>(Table::Facts, &keys::seq(memory, n))? {
            if f.is_active() {
                out.push(f);
            }
        }
        if out.len() == RELATED_FACTS {
            break;
        }
    }
    Ok(out)
}

/// Plans a `Graph` job. Reads the store, runs the embedder and the judge; holds no lock.
/// Without models nothing is resolved (facts stay as written); a failing model leaves the
/// job to be tried again (an error), never a guess.
pub(super) fn plan(
    models: &Models,
    store: &crate::store::Store,
    memory: &str,
    facts: &[u64],
    index: Option<EntityIndex<'_>>,
) -> Result<Option<Plan>, String> {
    let model = models.embedder.id().name;
    let indexed = index.as_ref().map_or(0, |ix| ix.indexed);
    let held = store
        .read(|r| read_held(r, memory, facts, indexed, &model))
        .map_err(|e| e.to_string())?;
    let todo: Vec<&Fact> = held.facts.iter().filter(|f| f.subject_entity.is_none()).collect();
    if todo.is_empty() {
        return Ok(None);
    }
    let ctx = CallCtx { memory };
    // One embedding batch: every name, then every fact's sentence.
    let mut texts: Vec<&str> = Vec::new();
    for f in &todo {
        texts.push(&f.subject);
        texts.push(&f.object);
    }
    for f in &todo {
        texts.push(&f.note);
    }
    let vectors = models.embedder.embed(&ctx, &texts).map_err(|e| e.to_string())?;
    let (name_vecs, note_vecs) = vectors.split_at(todo.len() * 2);

    let mut resolver = Resolver {
        store,
        memory,
        model: &model,
        index: index.map(|ix| ix.vectors),
        unindexed: &held.unindexed,
        entities: held.entities.clone(),
        new: Vec::new(),
        new_norms: HashMap::new(),
        aliases: Vec::new(),
        near: HashMap::new(),
        judged: HashMap::new(),
    };
    resolver.settle_close_names(models.judge.as_ref(), &ctx, &todo, name_vecs)?;
    let mut placed = Vec::new();
    for (i, f) in todo.iter().enumerate() {
        let subject = resolver.resolve(&f.subject, &f.subject_aliases, &name_vecs[2 * i])?;
        // A fact that names no object is about its subject alone: an edge from the subject to
        // itself. An empty name is no entity (it would join every such fact into one hub).
        let object = if norm(&f.object).is_empty() {
            subject
        } else {
            resolver.resolve(&f.object, &f.object_aliases, &name_vecs[2 * i + 1])?
        };
        placed.push(Placed {
            fact: f.n,
            subject,
            object,
            vector: Some(note_vecs[i].clone()),
            relations: Vec::new(),
        });
    }

    // Relations: each new fact against the newest held facts between the same two entities,
    // and against the earlier new facts of this job on them.
    for i in 0..placed.len() {
        let (s, o) = (placed[i].subject, placed[i].object);
        let mut candidates: Vec<(u64, String)> = Vec::new();
        if let (Node::Held(a), Node::Held(b)) = (s, o) {
            let held_facts = store
                .read(|r| facts_between(r, memory, a, b))
                .map_err(|e| e.to_string())?;
            candidates.extend(held_facts.into_iter().map(|f| (f.n, f.note)));
        }
        for (j, earlier) in placed[..i].iter().enumerate().rev() {
            let same = (earlier.subject == s && earlier.object == o) || (earlier.subject == o && earlier.object == s);
            if same {
                candidates.push((earlier.fact, todo[j].note.clone()));
            }
        }
        candidates.truncate(RELATED_FACTS);
        let held_notes: Vec<&str> = candidates.iter().map(|(_, note)| note.as_str()).collect();
        let relations = models
            .judge
            .relation_each(&ctx, &todo[i].note, &held_notes)
            .map_err(|e| e.to_string())?;
        if relations.len() != candidates.len() {
            return Err(format!(
                "the judge gave {} relations for {} facts",
                relations.len(),
                candidates.len()
            ));
        }
        placed[i].relations = candidates.iter().map(|(n, _)| *n).zip(relations).collect();
    }
    Ok(Some(Plan {
        next_entity: held.next_entity,
        entities: resolver.new,
        aliases: resolver.aliases,
        placed,
        model,
    }))
}

struct Resolver<'a> {
    store: &'a crate::store::Store,
    memory: &'a str,
    /// The embedder whose vectors are compared (vectors of another are left out).
    model: &'a str,
    index: Option<&'a Vectors>,
    unindexed: &'a [(u64, Vec<f32>)],
    /// Held entities read so far (by number).
    entities: HashMap<u64, Entity>,
    new: Vec<NewEntity>,
    new_norms: HashMap<String, usize>,
    aliases: Vec<(u64, String)>,
    /// [`Resolver::nearest_held`] by normalised name (the held entities do not change while
    /// a job is planned).
    near: HashMap<String, Vec<(f32, u64)>>,
    /// Names the judge said name a held entity, by normalised name.
    judged: HashMap<String, u64>,
}

impl Resolver<'_> {
    /// Puts to the judge, in one call, every name of the job whose best candidate among the held
    /// entities is close (≥ [`MAYBE_SAME_ENTITY`]) but not close enough to decide alone, and
    /// keeps the pairs it says are one entity.
    fn settle_close_names(
        &mut self,
        judge: &dyn Judge,
        ctx: &CallCtx,
        todo: &[&Fact],
        name_vecs: &[Vec<f32>],
    ) -> Result<(), String> {
        // (name, the fact's sentence, the held entity, its names)
        let mut asks: Vec<(&str, &str, u64, Vec<String>)> = Vec::new();
        let mut asked: HashSet<String> = HashSet::new();
        for (i, f) in todo.iter().enumerate() {
            let sides = [(&f.subject, &f.subject_aliases), (&f.object, &f.object_aliases)];
            for (side, (name, aliases)) in sides.into_iter().enumerate() {
                let vector = &name_vecs[2 * i + side];
                if vector.is_empty()
                    || norm(name).is_empty()
                    || !asked.insert(norm(name))
                    || self.known(name, aliases)?.is_some()
                {
                    continue;
                }
                let mut near = self.nearest_held_cached(name, vector)?;
                near.retain(|(c, _)| *c >= MAYBE_SAME_ENTITY);
                for (c, n) in near {
                    let names = self.names(Node::Held(n)).map_err(|e| e.to_string())?;
                    if names.is_empty() || names.iter().any(|other| distinct(name, other)) {
                        continue;
                    }
                    if c < SAME_ENTITY {
                        asks.push((name, &f.note, n, names));
                    }
                    break; // the nearest the guard lets through decides, or is asked about
                }
            }
        }
        if asks.is_empty() {
            return Ok(());
        }
        let pairs: Vec<NamePair<'_>> = asks
            .iter()
            .map(|(name, fact, _, held)| NamePair { name, fact, held })
            .collect();
        let same = judge.same_entity_each(ctx, &pairs).map_err(|e| e.to_string())?;
        if same.len() != asks.len() {
            return Err(format!(
                "the judge gave {} answers for {} names",
                same.len(),
                asks.len()
            ));
        }
        for ((name, _, n, _), yes) in asks.iter().zip(same) {
            if yes {
                self.judged.insert(norm(name), *n);
            }
        }
        tracing::debug!(asked = asks.len(), same = self.judged.len(), "close names judged");
        Ok(())
    }

    /// A name already known: as written or as the note says it is also called, among the
    /// entities of this job and the held ones.
    fn known(&self, name: &str, aliases: &[String]) -> Result<Option<Node>, String> {
        for n in std::iter::once(name).chain(aliases.iter().map(String::as_str)) {
            let key = norm(n);
            if key.is_empty() {
                continue;
            }
            if let Some(&i) = self.new_norms.get(&key) {
                return Ok(Some(Node::New(i)));
            }
            let memory = self.memory;
            let alias = self
                .store
                .read(|r| r.get::<u64>(Table::Aliases, &keys::name(memory, &key)));
            if let Some(e) = alias.map_err(|e| e.to_string())? {
                return Ok(Some(Node::Held(e)));
            }
        }
        Ok(None)
    }

    /// [`Resolver::nearest_held`], nearest first, computed once per name.
    fn nearest_held_cached(&mut self, name: &str, vector: &[f32]) -> Result<Vec<(f32, u64)>, String> {
        let key = norm(name);
        if let Some(near) = self.near.get(&key) {
            return Ok(near.clone());
        }
        let mut near = self.nearest_held(vector)?;
        near.sort_by(|a, b| b.0.total_cmp(&a.0));
        self.near.insert(key, near.clone());
        Ok(near)
    }

    fn held(&mut self, n: u64) -> Result<Option<&Entity>, StoreError> {
        if !self.entities.contains_key(&n) {
            if let Some(e) = self.store.read(|r| entity(r, self.memory, n))? {
                self.entities.insert(n, e);
            }
        }
        Ok(self.entities.get(&n))
    }

    /// The held entities nearest to `vector` with their exact cosines: the index's nearest
    /// (their stored vectors read again) and those the index does not hold yet.
    fn nearest_held(&self, vector: &[f32]) -> Result<Vec<(f32, u64)>, String> {
        let mut out: Vec<(f32, u64)> = self.unindexed.iter().map(|(n, v)| (cosine(vector, v), *n)).collect();
        let Some(index) = self.index else { return Ok(out) };
        let hits = index
            .search(self.memory, vector, ENTITY_CANDIDATES)
            .map_err(|e| e.to_string())?;
        let (memory, model) = (self.memory, self.model);
        let seen: HashSet<u64> = out.iter().map(|(_, n)| *n).collect();
        self.store
            .read(|r| {
                for (n, _) in hits.iter().filter(|(n, _)| !seen.contains(n)) {
                    let v: Option<VectorRecord> =
                        r.get(Table::Vectors, &keys::seq2(memory, VectorKind::Entity as u64, *n))?;
                    if let Some(v) = v.filter(|v| v.model == model) {
                        out.push((cosine(vector, &v.v), *n));
                    }
                }
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        Ok(out)
    }

    /// The names an entity goes by (canonical first).
    fn names(&mut self, node: Node) -> Result<Vec<String>, StoreError> {
        Ok(match node {
            Node::Held(n) => self
                .held(n)?
                .map(|e| {
                    std::iter::once(e.name.clone())
                        .chain(e.aliases.iter().cloned())
                        .collect()
                })
                .unwrap_or_default(),
            Node::New(i) => std::iter::once(self.new[i].name.clone())
                .chain(self.new[i].aliases.iter().cloned())
                .collect(),
        })
    }

    fn resolve(&mut self, name: &str, aliases: &[String], vector: &[f32]) -> Result<Node, String> {
        let written: Vec<&str> = std::iter::once(name)
            .chain(aliases.iter().map(String::as_str))
            .filter(|n| !norm(n).is_empty())
            .collect();
        // 1. A name already known, as written or as the note says it is also called; else
        //    one the judge said names a held entity.
        let mut found = self.known(name, aliases)?;
        if found.is_none() {
            found = self.judged.get(&norm(name)).map(|&n| Node::Held(n));
        }
        // 2. The nearest entities by meaning, unless the guard keeps them apart.
        if found.is_none() && !vector.is_empty() {
            let mut near: Vec<(f32, Node)> = self
                .nearest_held_cached(name, vector)?
                .into_iter()
                .map(|(c, n)| (c, Node::Held(n)))
                .chain(
                    self.new
                        .iter()
                        .enumerate()
                        .filter_map(|(i, e)| e.vector.as_ref().map(|v| (cosine(vector, v), Node::New(i)))),
                )
                .filter(|(c, _)| *c >= SAME_ENTITY)
                .collect();
            near.sort_by(|a, b| b.0.total_cmp(&a.0));
            near.truncate(ENTITY_CANDIDATES);
            for (_, node) in near {
                let names = self.names(node).map_err(|e| e.to_string())?;
                if !names.is_empty() && names.iter().all(|other| !distinct(name, other)) {
                    found = Some(node);
                    break;
                }
            }
        }
        let node = match found {
            Some(node) => node,
            None => {
                let i = self.new.len();
                self.new.push(NewEntity {
                    name: name.trim().to_owned(),
                    aliases: Vec::new(),
                    vector: Some(vector.to_vec()),
                });
                self.new_norms.insert(norm(name), i);
                Node::New(i)
            }
        };
        // Every written form it did not go by yet becomes an alias.
        let known: HashSet<String> = self
            .names(node)
            .map_err(|e| e.to_string())?
            .iter()
            .map(|n| norm(n))
            .collect();
        let mut added: HashSet<String> = HashSet::new();
        for n in written {
            let key = norm(n);
            if known.contains(&key) || !added.insert(key.clone()) {
                continue;
            }
            match node {
                Node::Held(e) => {
                    self.aliases.push((e, n.trim().to_owned()));
                    if let Some(ent) = self.entities.get_mut(&e) {
                        ent.aliases.push(n.trim().to_owned());
                    }
                }
                Node::New(i) => self.new[i].aliases.push(n.trim().to_owned()),
            }
            if let Node::New(i) = node {
                self.new_norms.insert(key, i);
            }
        }
        Ok(node)
    }
}

/// Applies a plan under the memory's lock. Returns false (nothing applied) when the graph moved
/// since it was planned, so the job is planned again.
pub(super) fn apply(st: &mut State, plan: Plan, at: f64) -> bool {
    if st.memory.next_entity != plan.next_entity {
        return false;
    }
    let mut numbers = Vec::with_capacity(plan.entities.len());
    for e in plan.entities {
        let n = st.push_entity(Entity {
            n: 0,
            name: e.name.clone(),
            aliases: e.aliases.clone(),
            at,
        });
        for name in std::iter::once(&e.name).chain(&e.aliases) {
            st.put_alias(norm(name), n);
        }
        if let Some(v) = e.vector {
            st.put_vector(
                VectorKind::Entity,
                n,
                VectorRecord {
                    model: plan.model.clone(),
                    v,
                },
            );
        }
        numbers.push(n);
    }
    let number = |node: Node| match node {
        Node::Held(n) => n,
        Node::New(i) => numbers[i],
    };
    for (e, alias) in plan.aliases {
        if (e as usize) < st.entities.len() && !st.entities[e as usize].aliases.contains(&alias) {
            st.entity_mut(e).aliases.push(alias.clone());
            st.put_alias(norm(&alias), e);
        }
    }
    for p in plan.placed {
        let Some(f) = st.fact(p.fact) else { continue };
        if f.subject_entity.is_some() {
            continue; // already placed
        }
        let (s, o) = (number(p.subject), number(p.object));
        let fact = st.fact_mut(p.fact);
        fact.subject_entity = Some(s);
        fact.object_entity = Some(o);
        st.put_edge(s, p.fact, o);
        if let Some(v) = p.vector {
            st.put_vector(
                VectorKind::Fact,
                p.fact,
                VectorRecord {
                    model: plan.model.clone(),
                    v,
                },
            );
        }
        for (held, relation) in p.relations {
            if !st.fact(held).is_some_and(Fact::is_active) || !st.fact(p.fact).is_some_and(Fact::is_active) {
                continue;
            }
            match relation {
                Relation::Restates => merge(st, p.fact, held, at),
                Relation::Contradicts => {
                    st.fact_mut(held).status = FactStatus::Retired { by: p.fact, at };
                }
                Relation::Unrelated => {}
            }
        }
    }
    true
}

/// `fact` says what `held` says: it merges into `held`, whose sources grow, and each episode
/// `held` was written for gets a counted trace (being said again renews it).
fn merge(st: &mut State, fact: u64, held: u64, at: f64) {
    let (note_seq, episodes) = {
        let f = st.fact_mut(fact);
        (f.note_seq, f.episodes.clone())
    };
    st.fact_mut(fact).status = FactStatus::Merged { into: held, at };
    st.fact_mut(held).restated_by.push(Restatement {
        fact,
        note_seq,
        episodes,
        at,
    });
    let held_episodes: Vec<u64> = st.fact_mut(held).episodes.clone();
    for e in held_episodes {
        if (e as usize) < st.episodes.len() {
            st.push_trace(e, TraceKind::Restated, at, 1.0, true, Some(held));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_normalise() {
        assert_eq!(norm("The Pricing Page"), "pricing page");
        assert_eq!(norm("Caroline's"), "caroline");
        assert_eq!(norm("  INV-0042. "), "inv-0042");
        assert_eq!(norm("the"), "the");
    }

    #[test]
    fn the_guard_keeps_ids_and_different_people_apart() {
        assert!(distinct("ticket 1234", "ticket 1235"));
        assert!(distinct("copy v3", "copy v4"));
        assert!(distinct("Dana Smith", "Dana Lee"));
        assert!(!distinct("Dana", "Dana Smith"));
        assert!(!distinct("pricing page copy v3", "Pricing page copy v3"));
        assert!(!distinct("the new copy", "pricing page copy"));
        assert!(
            distinct("the new copy", "pricing page copy v3"),
            "one side has an id the other lacks"
        );
        assert!(distinct("Melanie's kids", "Melanie's family"));
        assert!(distinct("Caroline", "Caroline's friends"));
        assert!(!distinct("Joanna's character", "Joanna's characters"));
        assert!(!distinct("NYC", "New York City"));
    }
}
