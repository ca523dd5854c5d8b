//! Knowledge bases (seed 002): curated documents attached to an agent, cut into chunks and
//! indexed by words (tantivy) and meaning (usearch) through the same `index` module as
//! memories, and searched with the scope's facts for each new user message. Their excerpts
//! are shown as reference, never as something learned from a conversation.
//!
//! The store holds each document whole, its chunks and their vectors with it; the indexes
//! are caches under one pseudo-memory per agent ([`index_name`]). Each add or remove changes
//! them by that document alone; they are rebuilt from the store when their mark (the agent's
//! `documents_version`) is not the version just before a change, or at start.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::block::{overlap, word_set};
use super::records::AuditEntry;
use super::{agent_record, audit};
use crate::engine::{now_or, tokens, Engine, EngineError};
use crate::index::Marks;
use crate::models::{cosine, CallCtx};
use crate::store::{keys, Read, Table};

/// Longest document accepted, in characters.
pub const MAX_DOCUMENT_CHARS: usize = 1_000_000;
/// Longest document name, in characters.
const MAX_NAME_CHARS: usize = 200;
/// A chunk holds whole paragraphs up to about this many tokens (one longer paragraph is cut
/// into windows of [`WINDOW_WORDS`] words).
const CHUNK_TOKENS: u64 = 160;
const WINDOW_WORDS: usize = 100;
/// Chunks per document at most: a chunk's index key is its document's number times this
/// plus its place.
const MAX_CHUNKS: u64 = 1 << 16;
/// Candidates each search returns.
const SEARCH_K: usize = 8;

/// A curated document of an agent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Document {
    pub n: u64,
    pub name: String,
    pub at: f64,
    pub chars: usize,
    pub chunks: Vec<Chunk>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Chunk {
    pub text: String,
    /// Its embedding (empty without an embedder): kept so the indexes rebuild without a model.
    #[serde(default, with = "crate::engine::records::compact_vector")]
    pub v: Vec<f32>,
}

/// A chunk found for a message.
#[derive(Debug, Clone)]
pub struct Excerpt {
    pub document: u64,
    pub name: String,
    pub chunk: usize,
    pub text: String,
    pub relevance: f32,
}

/// The pseudo-memory whose indexes hold an agent's documents. Memory ids hold no NUL, so it
/// never names a memory.
fn index_name(agent: &str) -> String {
    format!("\0documents\0{agent}")
}

fn index_error(e: crate::index::IndexError) -> EngineError {
    EngineError::Index(format!("document index: {e}"))
}

/// A document's chunks into both indexes (by meaning only those with a vector of the index's
/// dimension).
fn add_chunks(ix: &crate::index::Indexes, name: &str, d: &Document) -> Result<(), EngineError> {
    for (i, c) in d.chunks.iter().enumerate() {
        ix.words.add(name, key(d.n, i), &c.text).map_err(index_error)?;
        if let Some(vix) = ix.vectors.as_ref().filter(|v| !c.v.is_empty() && c.v.len() == v.dim()) {
            vix.add(name, key(d.n, i), &c.v).map_err(index_error)?;
        }
    }
    Ok(())
}

fn key(document: u64, chunk: usize) -> u64 {
    document * MAX_CHUNKS + chunk as u64
}

/// Cuts a document into chunks of whole paragraphs (blank-line separated), each carrying the
/// latest Markdown heading above it so an excerpt says what it is part of.
pub fn chunks_of(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut current = String::new();
    let flush = |current: &mut String, out: &mut Vec<String>| {
        if !current.trim().is_empty() {
            out.push(std::mem::take(current).trim().to_owned());
        }
        current.clear();
    };
    for para in text.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
        if para.starts_with('#') && !para.contains('\n') {
            flush(&mut current, &mut out);
            heading = para.trim_start_matches('#').trim().to_owned();
            continue;
        }
        let windows: Vec<String> = if tokens::text_tokens(para) as u64 > CHUNK_TOKENS {
            let words: Vec<&str> = para.split_whitespace().collect();
            words.chunks(WINDOW_WORDS).map(|w| w.join(" ")).collect()
        } else {
            vec![para.to_owned()]
        };
        for w in windows {
            let joined = if current.is_empty() {
                w.clone()
            } else {
                format!("{current}\n\n{w}")
            };
            if !current.is_empty() && tokens::text_tokens(&joined) as u64 > CHUNK_TOKENS {
                flush(&mut current, &mut out);
            }
            if current.is_empty() && !heading.is_empty() {
                current = format!("{heading}: {w}");
            } else if current.is_empty() {
                current = w;
            } else {
                current = format!("{current}\n\n{w}");
            }
        }
    }
    flush(&mut current, &mut out);
    out
}

fn documents(r: &impl Read, agent: &str) -> Result<Vec<Document>, crate::store::StoreError> {
    r.scan(Table::Documents, &keys::memory_prefix(agent))
}

impl Engine {
    /// `add_document`: stores a document under an agent, replacing one of the same name, and
    /// indexes its chunks. Embeds before any lock is taken (an operator's upload, not a turn).
    pub fn add_document(&self, agent: &str, name: &str, text: &str, now: Option<f64>) -> Result<Value, EngineError> {
        let now = now_or(now)?;
        let name = name.trim();
        if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
            return Err(EngineError::InvalidArgument(format!(
                "a document's name must hold 1 to {MAX_NAME_CHARS} characters"
            )));
        }
        let chars = text.chars().count();
        if text.trim().is_empty() || chars > MAX_DOCUMENT_CHARS {
            return Err(EngineError::InvalidArgument(format!(
                "a document must hold 1 to {MAX_DOCUMENT_CHARS} characters, got {chars}"
            )));
        }
        let texts = chunks_of(text);
        if texts.len() as u64 > MAX_CHUNKS {
            return Err(EngineError::InvalidArgument(format!(
                "a document may have at most {MAX_CHUNKS} chunks"
            )));
        }
        let vectors = match &self.models {
            Some(m) => {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                m.embedder
                    .embed(&CallCtx { memory: agent }, &refs)
                    .map_err(|e| EngineError::Index(format!("cannot embed the document: {e}")))?
            }
            None => vec![Vec::new(); texts.len()],
        };
        let chunks: Vec<Chunk> = texts
            .into_iter()
            .zip(vectors)
            .map(|(text, v)| Chunk { text, v })
            .collect();
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (doc, replaced, version) = self.store.write(|w| {
            let mut rec = agent_record(w, agent)?;
            let replaced: Option<Document> = documents(w, agent)?.into_iter().find(|d| d.name == name);
            if let Some(old) = &replaced {
                w.delete(Table::Documents, &keys::seq(agent, old.n))?;
            }
            let doc = Document {
                n: rec.next_document,
                name: name.to_owned(),
                at: now,
                chars,
                chunks: chunks.clone(),
            };
            w.put(Table::Documents, &keys::seq(agent, doc.n), &doc)?;
            rec.next_document += 1;
            rec.documents_version += 1;
            w.put(Table::Agents, &keys::memory(agent), &rec)?;
            audit(w, agent, &AuditEntry {
                at: now,
                action: "add_document".into(),
                memory: None,
                user: None,
                items: vec![doc.n],
                detail: json!({"name": doc.name, "chunks": doc.chunks.len(), "replaced": replaced.as_ref().map(|d| d.n)}),
            })?;
            Ok((doc, replaced, rec.documents_version))
        })?;
        self.index_change(agent, version, Some(&doc), replaced.as_ref())?;
        Ok(json!({
            "id": doc.n,
            "name": doc.name,
            "chunks": doc.chunks.len(),
            "by_meaning": doc.chunks.iter().all(|c| !c.v.is_empty()),
            "replaced": replaced.map(|d| d.n),
        }))
    }

    /// `list_documents`: an agent's documents, without their text.
    pub fn list_documents(&self, agent: &str) -> Result<Value, EngineError> {
        let docs = self.store.read(|r| documents(r, agent))?;
        Ok(json!({
            "agent": agent,
            "documents": docs.iter().map(|d| json!({"id": d.n, "name": d.name, "chunks": d.chunks.len(), "chars": d.chars, "at": d.at})).collect::<Vec<_>>(),
        }))
    }

    /// `remove_document`: removes a document and its index entries; returns what it removed.
    pub fn remove_document(&self, agent: &str, n: u64, now: Option<f64>) -> Result<Value, EngineError> {
        let now = now_or(now)?;
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let doc = self.store.write(|w| {
            let Some(doc) = w.get::<Document>(Table::Documents, &keys::seq(agent, n))? else {
                return Ok(None);
            };
            w.delete(Table::Documents, &keys::seq(agent, n))?;
            let mut rec = agent_record(w, agent)?;
            rec.documents_version += 1;
            w.put(Table::Agents, &keys::memory(agent), &rec)?;
            let version = rec.documents_version;
            audit(
                w,
                agent,
                &AuditEntry {
                    at: now,
                    action: "remove_document".into(),
                    memory: None,
                    user: None,
                    items: vec![n],
                    detail: json!({"name": doc.name, "chunks": doc.chunks.len()}),
                },
            )?;
            Ok(Some((doc, version)))
        })?;
        let (doc, version) =
            doc.ok_or_else(|| EngineError::NotFound(format!("agent {agent:?} has no document {n}")))?;
        self.index_change(agent, version, None, Some(&doc))?;
        Ok(json!({"removed": {"id": n, "name": doc.name, "chunks": doc.chunks.len()}}))
    }

    /// One document added and/or one removed, moving the agent's `documents_version` to
    /// `version`: applied to the indexes alone when they hold the version just before it (the
    /// usual case: changes are made under the agent's lock), else they are rebuilt.
    fn index_change(
        &self,
        agent: &str,
        version: u64,
        added: Option<&Document>,
        removed: Option<&Document>,
    ) -> Result<(), EngineError> {
        let Some(ix) = &self.indexes else { return Ok(()) };
        let name = index_name(agent);
        {
            let lock = self.index_lock(&name);
            let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
            if ix.marks(&name)
                == Some(Marks {
                    facts: version - 1,
                    ..Marks::default()
                })
            {
                if let Some(d) = removed {
                    for i in 0..d.chunks.len() {
                        ix.words.remove(&name, key(d.n, i)).map_err(index_error)?;
                        if let Some(vix) = &ix.vectors {
                            vix.remove(&name, key(d.n, i)).map_err(index_error)?;
                        }
                    }
                }
                if let Some(d) = added {
                    add_chunks(ix, &name, d)?;
                }
                ix.commit(&name).map_err(index_error)?;
                ix.set_marks(
                    &name,
                    Marks {
                        facts: version,
                        ..Marks::default()
                    },
                )
                .map_err(index_error)?;
                return Ok(());
            }
        }
        self.index_documents(agent).map(drop)
    }

    /// Brings the agent's document indexes to the store: rebuilt whole from the stored chunks
    /// and vectors when their mark is not the agent's `documents_version` (a rebuild reads no
    /// model).
    pub(crate) fn index_documents(&self, agent: &str) -> Result<bool, EngineError> {
        let Some(ix) = &self.indexes else { return Ok(false) };
        let name = index_name(agent);
        let lock = self.index_lock(&name);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (version, docs) = self
            .store
            .read(|r| Ok((agent_record(r, agent)?.documents_version, documents(r, agent)?)))?;
        let truth = Marks {
            facts: version,
            ..Marks::default()
        };
        if ix.marks(&name) == Some(truth) {
            return Ok(false);
        }
        ix.drop_memory(&name).map_err(index_error)?;
        for d in &docs {
            add_chunks(ix, &name, d)?;
        }
        ix.commit(&name).map_err(index_error)?;
        ix.set_marks(&name, truth).map_err(index_error)?;
        Ok(true)
    }

    /// At start: every agent's document indexes brought to the store. Returns how many
    /// agents' indexes were rebuilt.
    pub(crate) fn check_document_indexes(&self) -> Result<usize, EngineError> {
        let agents: Vec<String> = self.store.read(|r| {
            let mut out = Vec::new();
            r.visit(Table::Agents, b"", b"", |_, a: super::records::AgentRecord| {
                if a.documents_version > 0 {
                    out.push(a.agent);
                }
                Ok(true)
            })?;
            Ok(out)
        })?;
        let mut rebuilt = 0;
        for a in agents {
            rebuilt += usize::from(self.index_documents(&a)?);
        }
        Ok(rebuilt)
    }

    /// The chunks of the agent's documents relevant to a message: found by words and by
    /// meaning, each scored as scope facts are (cosine or shared words, whichever is higher),
    /// best first, none below `min_relevance`.
    pub(super) fn search_documents(
        &self,
        agent: &str,
        text: &str,
        vector: Option<&[f32]>,
    ) -> Result<Vec<Excerpt>, EngineError> {
        let name = index_name(agent);
        let mut keys_found: Vec<u64> = match &self.indexes {
            Some(ix) => {
                let mut found: Vec<u64> = ix
                    .words
                    .search(&name, text, SEARCH_K)
                    .map_err(index_error)?
                    .into_iter()
                    .map(|h| h.0)
                    .collect();
                if let (Some(vix), Some(v)) = (&ix.vectors, vector) {
                    if v.len() == vix.dim() {
                        found.extend(
                            vix.search(&name, v, SEARCH_K)
                                .map_err(index_error)?
                                .into_iter()
                                .map(|h| h.0),
                        );
                    }
                }
                found
            }
            // No indexes (recall is off): every chunk is a candidate; documents are few.
            None => self.store.read(|r| {
                Ok(documents(r, agent)?
                    .iter()
                    .flat_map(|d| (0..d.chunks.len()).map(|i| key(d.n, i)))
                    .collect())
            })?,
        };
        keys_found.sort_unstable();
        keys_found.dedup();
        let words = word_set(text);
        let mut out = Vec::new();
        self.store.read(|r| {
            for k in &keys_found {
                let (n, i) = (k / MAX_CHUNKS, (k % MAX_CHUNKS) as usize);
                let Some(d) = r.get::<Document>(Table::Documents, &keys::seq(agent, n))? else {
                    continue;
                };
                let Some(c) = d.chunks.get(i) else { continue };
                let meaning = match vector {
                    Some(v) if v.len() == c.v.len() => cosine(v, &c.v),
                    _ => 0.0,
                };
                let relevance = meaning.max(overlap(&words, &word_set(&c.text)));
                if relevance >= self.config.scopes.min_relevance {
                    out.push(Excerpt {
                        document: n,
                        name: d.name.clone(),
                        chunk: i,
                        text: c.text.clone(),
                        relevance,
                    });
                }
            }
            Ok(())
        })?;
        out.sort_by(|a, b| {
            b.relevance
                .total_cmp(&a.relevance)
                .then(a.document.cmp(&b.document))
                .then(a.chunk.cmp(&b.chunk))
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_whole_paragraphs_under_their_heading() {
        let text = "# Returns\n\nItems may be returned within 30 days.\n\nRefunds go to the original card.\n\n# Shipping\n\nOrders ship in 2 days.";
        let chunks = chunks_of(text);
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert!(chunks[0].starts_with("Returns: Items may be returned"));
        assert!(chunks[0].contains("Refunds go to the original card."));
        assert_eq!(chunks[1], "Shipping: Orders ship in 2 days.");
        // A paragraph far over a chunk is cut into windows of words, nothing lost.
        let long = (0..500).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
        let cut = chunks_of(&long);
        assert!(cut.len() >= 5);
        assert_eq!(cut.join(" ").split_whitespace().count(), 500);
    }
}
