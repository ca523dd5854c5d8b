//! Word search: a BM25 index of documents (u64 id, text), one tantivy index per memory.
//! The only module that imports tantivy.
//!
//! Writes are staged and made durable by [`Words::commit`] (one fsync, ~18 ms): a lane job adds
//! its documents and commits once. A search commits staged writes first, so a reader always sees
//! what was added before it (read-your-writes). Staged writes lost to a crash are repaired by the
//! start-up check ([`Words::ids`] against the store, then [`Words::add`] or [`Words::rebuild`]).
//!
//! Tokens (the same for documents and queries): words are runs of letters and digits joined by
//! `_ - . / : # @` (and `,` between digits), so `ORD-12345`, `user_id`, `v1.2.3`, `10:30` and
//! `1,000` stay whole; each such word is also split into its parts (at the joiners, at camelCase
//! humps, at letter/digit edges), so `12345` finds `ORD-12345` and `user` finds `getUserName`.
//! Then lower case and English stemming. Query text is never parsed as a query language: its
//! tokens become plain terms, so any text (quotes, colons, brackets, emoji) searches and none
//! errors.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{Language, LowerCaser, Stemmer, TextAnalyzer, Token, TokenStream, Tokenizer};
use tantivy::{doc, Index, IndexReader, IndexWriter, ReloadPolicy, Term};

use super::open::OpenHandles;
use super::{ensure_memory_dir, memory_dir, IndexError};

const TOKENIZER: &str = "recalld_words";
/// The smallest indexing budget tantivy accepts; our documents are small and committed often.
const WRITER_BYTES: usize = 15_000_000;
/// Longest token kept (bytes); longer runs are base64, hashes or noise.
const MAX_TOKEN_BYTES: usize = 64;
/// The file tantivy writes when it creates an index (and rewrites at each commit).
const META_FILE: &str = "meta.json";
/// Distinct query terms used at most (a pasted log should not become a 10,000-clause query).
const MAX_QUERY_TERMS: usize = 256;

fn err(e: impl std::fmt::Display) -> IndexError {
    IndexError::Words(e.to_string())
}

/// Closes a writer taken out of its handle once its merges are done. Called without the
/// handle's lock, so searches go on meanwhile; the engine writes a memory's index under its
/// index lock, so no other writer opens on it before this one is closed.
fn close(writer: Option<IndexWriter>) -> Result<(), IndexError> {
    match writer {
        Some(w) => w.wait_merging_threads().map_err(err),
        None => Ok(()),
    }
}

/// BM25 word indexes of every memory under one root directory.
pub struct Words {
    root: PathBuf,
    open: OpenHandles<Handle>,
}

/// One memory's open index.
struct Handle {
    index: Index,
    reader: IndexReader,
    writer: Option<IndexWriter>,
    staged: bool,
    id: Field,
    text: Field,
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.staged {
            if let Err(e) = self.commit() {
                tracing::warn!(error = %e, "words index: staged writes not committed at close");
            }
        }
    }
}

fn schema() -> (Schema, Field, Field) {
    let mut b = Schema::builder();
    let id = b.add_u64_field("id", NumericOptions::default().set_indexed().set_fast());
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(TOKENIZER)
        .set_index_option(IndexRecordOption::WithFreqs);
    let text = b.add_text_field("text", TextOptions::default().set_indexing_options(indexing));
    (b.build(), id, text)
}

fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(IdentifierTokenizer::default())
        .filter(LowerCaser)
        .filter(Stemmer::new(Language::English))
        .build()
}

/// The terms `text` is indexed under (and searched by), in order, repeats kept.
pub fn terms(text: &str) -> Vec<String> {
    let mut a = analyzer();
    let mut stream = a.token_stream(text);
    let mut out = Vec::new();
    while let Some(t) = stream.next() {
        out.push(t.text.clone());
    }
    out
}

impl Handle {
    fn open(dir: &Path) -> Result<Handle, IndexError> {
        let (schema, id, text) = schema();
        std::fs::create_dir_all(dir).map_err(|e| IndexError::io(dir, e))?;
        let mmap = tantivy::directory::MmapDirectory::open(dir).map_err(err)?;
        let index = Index::open_or_create(mmap, schema.clone()).map_err(err)?;
        if index.schema() != schema {
            return Err(IndexError::Words(format!("{} holds another schema", dir.display())));
        }
        index.tokenizers().register(TOKENIZER, analyzer());
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(err)?;
        Ok(Handle {
            index,
            reader,
            writer: None,
            staged: false,
            id,
            text,
        })
    }

    fn writer(&mut self) -> Result<&IndexWriter, IndexError> {
        if self.writer.is_none() {
            let w = self.index.writer_with_num_threads(1, WRITER_BYTES).map_err(err)?;
            self.writer = Some(w);
        }
        Ok(self.writer.as_ref().expect("just set"))
    }

    fn add(&mut self, id: u64, text: &str) -> Result<(), IndexError> {
        let (id_field, text_field) = (self.id, self.text);
        let w = self.writer()?;
        w.delete_term(Term::from_field_u64(id_field, id));
        w.add_document(doc!(id_field => id, text_field => text)).map_err(err)?;
        self.staged = true;
        Ok(())
    }

    fn remove(&mut self, id: u64) -> Result<(), IndexError> {
        let id_field = self.id;
        self.writer()?.delete_term(Term::from_field_u64(id_field, id));
        self.staged = true;
        Ok(())
    }

    fn commit(&mut self) -> Result<(), IndexError> {
        if !self.staged {
            return Ok(());
        }
        if let Some(w) = self.writer.as_mut() {
            w.commit().map_err(err)?;
        }
        self.staged = false;
        self.reader.reload().map_err(err)
    }

    /// Commits and hands the writer out, to be closed by [`close`] once the handle's lock is
    /// released: between the lane's jobs a memory's index holds no write state (a writer keeps
    /// an indexing thread, a merge pool and its arena; 64 open ones took over a gigabyte and
    /// hundreds of threads).
    fn commit_and_take(&mut self) -> Result<Option<IndexWriter>, IndexError> {
        self.commit()?;
        Ok(self.writer.take())
    }

    fn search(&mut self, query: &str, k: usize) -> Result<Vec<(u64, f32)>, IndexError> {
        self.commit()?;
        if k == 0 {
            return Ok(Vec::new());
        }
        let mut seen = HashSet::new();
        let clauses: Vec<(Occur, Box<dyn Query>)> = terms(query)
            .into_iter()
            .filter(|t| seen.insert(t.clone()))
            .take(MAX_QUERY_TERMS)
            .map(|t| {
                let q = TermQuery::new(Term::from_field_text(self.text, &t), IndexRecordOption::WithFreqs);
                (Occur::Should, Box::new(q) as Box<dyn Query>)
            })
            .collect();
        if clauses.is_empty() {
            return Ok(Vec::new());
        }
        let searcher = self.reader.searcher();
        let top = searcher
            .search(&BooleanQuery::new(clauses), &TopDocs::with_limit(k).order_by_score())
            .map_err(err)?;
        let mut out = Vec::with_capacity(top.len());
        for (score, addr) in top {
            let ids = searcher
                .segment_reader(addr.segment_ord)
                .fast_fields()
                .u64("id")
                .map_err(err)?;
            if let Some(id) = ids.first(addr.doc_id) {
                out.push((id, score));
            }
        }
        Ok(out)
    }

    fn ids(&mut self) -> Result<Vec<u64>, IndexError> {
        self.commit()?;
        let searcher = self.reader.searcher();
        let mut out = Vec::new();
        for seg in searcher.segment_readers() {
            let ids = seg.fast_fields().u64("id").map_err(err)?;
            out.extend(seg.doc_ids_alive().filter_map(|d| ids.first(d)));
        }
        out.sort_unstable();
        Ok(out)
    }
}

impl Words {
    /// Word indexes under `root` (e.g. `<data>/index`); at most `max_open` memories' indexes
    /// are kept open at once (the least recently used unused one is closed first).
    pub fn open(root: &Path, max_open: usize) -> Result<Words, IndexError> {
        std::fs::create_dir_all(root).map_err(|e| IndexError::io(root, e))?;
        Ok(Words {
            root: root.to_path_buf(),
            open: OpenHandles::new(max_open),
        })
    }

    fn dir(&self, memory: &str) -> PathBuf {
        memory_dir(&self.root, memory).join("words")
    }

    fn handle(&self, memory: &str) -> Result<Arc<Mutex<Handle>>, IndexError> {
        // Closing a handle commits what it staged, so any idle one may be closed.
        self.open.get(
            memory,
            || {
                ensure_memory_dir(&self.root, memory)?;
                Handle::open(&self.dir(memory))
            },
            |_| true,
        )
    }

    fn with<T>(&self, memory: &str, f: impl FnOnce(&mut Handle) -> Result<T, IndexError>) -> Result<T, IndexError> {
        let h = self.handle(memory)?;
        let mut h = h.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut h)
    }

    /// Stages a document (replacing one with the same id); visible after [`Words::commit`] or
    /// to the next search.
    pub fn add(&self, memory: &str, id: u64, text: &str) -> Result<(), IndexError> {
        self.with(memory, |h| h.add(id, text))
    }

    /// Stages the removal of a document.
    pub fn remove(&self, memory: &str, id: u64) -> Result<(), IndexError> {
        self.with(memory, |h| h.remove(id))
    }

    /// Makes the memory's staged writes durable and visible, and closes its writer (the next
    /// write opens one again).
    pub fn commit(&self, memory: &str) -> Result<(), IndexError> {
        close(self.with(memory, Handle::commit_and_take)?)
    }

    /// The `k` best documents of `memory` for `query` by BM25, best first. Any text is a valid
    /// query; text without a single token finds nothing.
    pub fn search(&self, memory: &str, query: &str, k: usize) -> Result<Vec<(u64, f32)>, IndexError> {
        // A memory nothing was written for yet has no index and nothing to find. A search,
        // which recall makes on the request path, creates none: creating one writes and syncs
        // files (the first recall of a memory whose passages the lane had not indexed yet did).
        if self.open.peek(memory).is_none() && !self.dir(memory).join(META_FILE).is_file() {
            return Ok(Vec::new());
        }
        self.with(memory, |h| h.search(query, k))
    }

    /// The ids the memory's index holds, ascending (what the start-up check compares).
    pub fn ids(&self, memory: &str) -> Result<Vec<u64>, IndexError> {
        self.with(memory, Handle::ids)
    }

    /// Throws the memory's index away and builds it again from `docs`, committed.
    pub fn rebuild<S: AsRef<str>>(
        &self,
        memory: &str,
        docs: impl IntoIterator<Item = (u64, S)>,
    ) -> Result<(), IndexError> {
        self.drop_memory(memory)?;
        let writer = self.with(memory, |h| {
            for (id, text) in docs {
                h.add(id, text.as_ref())?;
            }
            h.staged = true;
            h.commit_and_take()
        })?;
        close(writer)
    }

    /// Closes and deletes the memory's word index (it can be rebuilt from the store).
    pub fn drop_memory(&self, memory: &str) -> Result<(), IndexError> {
        self.open.remove(memory, |h| {
            if let Some(h) = h {
                // Nothing staged is worth keeping in an index about to be deleted.
                h.lock().unwrap_or_else(|e| e.into_inner()).staged = false;
            }
            let dir = self.dir(memory);
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(IndexError::io(&dir, e)),
            }
        })
    }

    /// Commits every open memory's staged writes (at shutdown).
    pub fn commit_all(&self) -> Result<(), IndexError> {
        for (_, h) in self.open.all() {
            h.lock().unwrap_or_else(|e| e.into_inner()).commit()?;
        }
        Ok(())
    }
}

/// Splits text into identifier-aware words and their parts (see the module doc).
#[derive(Clone, Default)]
pub struct IdentifierTokenizer {
    tokens: Vec<Token>,
}

pub struct VecTokenStream<'a> {
    tokens: &'a mut Vec<Token>,
    next: usize,
}

impl TokenStream for VecTokenStream<'_> {
    fn advance(&mut self) -> bool {
        self.next += 1;
        self.next <= self.tokens.len()
    }
    fn token(&self) -> &Token {
        &self.tokens[self.next - 1]
    }
    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.next - 1]
    }
}

impl Tokenizer for IdentifierTokenizer {
    type TokenStream<'a> = VecTokenStream<'a>;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> VecTokenStream<'a> {
        self.tokens.clear();
        let mut position = 0;
        for (from, to) in words(text) {
            let word = &text[from..to];
            let parts = parts(word);
            let mut push = |a: usize, b: usize| {
                if b - a <= MAX_TOKEN_BYTES {
                    self.tokens.push(Token {
                        offset_from: from + a,
                        offset_to: from + b,
                        position,
                        text: word[a..b].to_owned(),
                        position_length: 1,
                    });
                    position += 1;
                }
            };
            push(0, word.len());
            if parts.len() > 1 {
                for (a, b) in parts {
                    push(a, b);
                }
            }
        }
        VecTokenStream {
            tokens: &mut self.tokens,
            next: 0,
        }
    }
}

fn is_joiner(c: char) -> bool {
    matches!(c, '_' | '-' | '.' | '/' | ':' | '#' | '@')
}

/// Byte ranges of words: alphanumeric runs, joined across a joiner (or a `,` between digits)
/// that has an alphanumeric character on each side.
fn words(text: &str) -> Vec<(usize, usize)> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].1.is_alphanumeric() {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i + 1;
        loop {
            while end < chars.len() && chars[end].1.is_alphanumeric() {
                end += 1;
            }
            let joins = end + 1 < chars.len() && chars[end + 1].1.is_alphanumeric() && {
                let c = chars[end].1;
                is_joiner(c) || (c == ',' && chars[end - 1].1.is_ascii_digit() && chars[end + 1].1.is_ascii_digit())
            };
            if joins {
                end += 1;
            } else {
                break;
            }
        }
        let to = chars.get(end).map(|c| c.0).unwrap_or(text.len());
        out.push((chars[start].0, to));
        i = end;
    }
    out
}

/// Byte ranges of a word's parts: split at joiners, at lower→upper humps and at letter/digit
/// edges (`getUserName2` → get, User, Name, 2).
fn parts(word: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut prev: Option<char> = None;
    for (i, c) in word.char_indices() {
        if !c.is_alphanumeric() {
            if let Some(s) = start.take() {
                out.push((s, i));
            }
            prev = None;
            continue;
        }
        let edge =
            prev.is_some_and(|p| (p.is_lowercase() && c.is_uppercase()) || (p.is_alphabetic() != c.is_alphabetic()));
        if edge {
            if let Some(s) = start.take() {
                out.push((s, i));
            }
        }
        start.get_or_insert(i);
        prev = Some(c);
    }
    if let Some(s) = start {
        out.push((s, word.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words_in(dir: &Path) -> Words {
        Words::open(dir, 4).unwrap()
    }

    fn ids(hits: &[(u64, f32)]) -> Vec<u64> {
        hits.iter().map(|h| h.0).collect()
    }

    #[test]
    fn identifiers_and_numbers_keep_whole_and_split_into_parts() {
        let t = terms("Ticket ORD-12345 for getUserName, v1.2.3 at 10:30; 1,000 users.");
        for want in [
            "ord-12345",
            "ord",
            "12345",
            "get",
            "user",
            "name",
            "v1.2.3",
            "10:30",
            "1,000",
            "1",
        ] {
            assert!(t.iter().any(|x| x == want), "{want:?} missing from {t:?}");
        }
        // Sentence punctuation does not stick to words.
        assert!(
            t.contains(&"user".to_string()) && !t.iter().any(|x| x.ends_with('.')),
            "{t:?}"
        );
    }

    #[test]
    fn search_finds_identifiers_by_whole_and_by_part() {
        let dir = tempfile::tempdir().unwrap();
        let w = words_in(dir.path());
        w.add("m", 1, "Refund for order ORD-12345 was approved").unwrap();
        w.add("m", 2, "The getUserName helper returns the display name")
            .unwrap();
        w.add("m", 3, "Lunch at noon with Dana").unwrap();
        assert_eq!(ids(&w.search("m", "ORD-12345", 5).unwrap()), vec![1]);
        assert_eq!(ids(&w.search("m", "what about 12345?", 5).unwrap()), vec![1]);
        assert_eq!(ids(&w.search("m", "getUserName", 5).unwrap())[0], 2);
        assert_eq!(ids(&w.search("m", "user name", 5).unwrap())[0], 2);
        // Stemming: "approve" finds "approved".
        assert_eq!(ids(&w.search("m", "approve", 5).unwrap()), vec![1]);
    }

    #[test]
    fn a_search_in_one_memory_never_returns_another_memorys_documents() {
        let dir = tempfile::tempdir().unwrap();
        let w = words_in(dir.path());
        w.add("a", 1, "the blue whale is the largest animal").unwrap();
        w.add("b", 2, "the blue whale sings").unwrap();
        w.add("ab", 3, "blue whale blue whale").unwrap();
        assert_eq!(ids(&w.search("a", "blue whale", 10).unwrap()), vec![1]);
        assert_eq!(ids(&w.search("b", "blue whale", 10).unwrap()), vec![2]);
        assert_eq!(ids(&w.search("ab", "blue whale", 10).unwrap()), vec![3]);
        assert!(w.search("c", "blue whale", 10).unwrap().is_empty());
        assert_eq!(w.ids("a").unwrap(), vec![1]);
    }

    #[test]
    fn a_search_of_a_memory_without_an_index_finds_nothing_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let w = words_in(dir.path());
        assert!(w.search("new", "blue whale", 10).unwrap().is_empty());
        assert!(!memory_dir(dir.path(), "new").exists());
        // Staged but not committed yet: the open handle is searched (read-your-writes).
        w.add("new", 4, "blue whale").unwrap();
        assert_eq!(ids(&w.search("new", "whale", 10).unwrap()), vec![4]);
    }

    #[test]
    fn odd_query_text_never_errors() {
        let dir = tempfile::tempdir().unwrap();
        let w = words_in(dir.path());
        w.add("m", 7, "field: value AND (nested OR \"quoted\") title:x")
            .unwrap();
        let odd = [
            "",
            "   ",
            "\"unbalanced",
            "AND OR NOT",
            "title:x",
            "(((",
            "a^2 ~ * ? + - ! { } [ ] \\",
            "🙂🙃 ︎",
            "\0\u{1}",
            &"x".repeat(10_000),
            &"word ".repeat(5_000),
        ];
        for q in odd {
            w.search("m", q, 5).unwrap();
        }
        assert_eq!(ids(&w.search("m", "(nested", 5).unwrap()), vec![7]);
        assert_eq!(ids(&w.search("m", "title:x", 5).unwrap()), vec![7]);
    }

    #[test]
    fn add_replaces_remove_deletes_and_k_limits() {
        let dir = tempfile::tempdir().unwrap();
        let w = words_in(dir.path());
        for i in 0..20 {
            w.add("m", i, &format!("apple number {i}")).unwrap();
        }
        assert_eq!(w.search("m", "apple", 5).unwrap().len(), 5);
        w.add("m", 3, "pear only").unwrap();
        w.remove("m", 4).unwrap();
        let apples = ids(&w.search("m", "apple", 50).unwrap());
        assert_eq!(apples.len(), 18);
        assert!(!apples.contains(&3) && !apples.contains(&4));
        assert_eq!(ids(&w.search("m", "pear", 5).unwrap()), vec![3]);
        assert_eq!(w.ids("m").unwrap().len(), 19);
    }

    #[test]
    fn committed_documents_survive_reopen_and_many_memories_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        {
            let w = words_in(dir.path());
            for m in 0..10 {
                w.add(&format!("m{m}"), m, &format!("doc of memory {m}")).unwrap();
                w.commit(&format!("m{m}")).unwrap();
            }
            assert!(w.open.len() <= 4);
        }
        let w = words_in(dir.path());
        for m in 0..10u64 {
            assert_eq!(ids(&w.search(&format!("m{m}"), "memory", 5).unwrap()), vec![m]);
        }
    }

    #[test]
    fn a_commit_closes_the_writer_and_the_next_write_opens_another() {
        let dir = tempfile::tempdir().unwrap();
        let w = words_in(dir.path());
        let writing = |w: &Words| w.handle("m").unwrap().lock().unwrap().writer.is_some();
        for round in 0..3u64 {
            for i in 0..10 {
                w.add("m", round * 10 + i, &format!("pear round{round} {i}")).unwrap();
            }
            assert!(writing(&w));
            w.commit("m").unwrap();
            assert!(!writing(&w), "no writer kept between jobs");
            assert_eq!(w.search("m", "pear", 100).unwrap().len() as u64, (round + 1) * 10);
        }
        w.remove("m", 0).unwrap();
        w.commit("m").unwrap();
        assert_eq!(w.ids("m").unwrap().len(), 29);
    }

    #[test]
    fn staged_writes_are_committed_when_a_handle_closes() {
        let dir = tempfile::tempdir().unwrap();
        {
            let w = words_in(dir.path());
            w.add("m", 1, "staged but not committed").unwrap();
        }
        let w = words_in(dir.path());
        assert_eq!(w.ids("m").unwrap(), vec![1]);
    }

    #[test]
    fn rebuild_from_pairs_gives_the_same_results() {
        let dir = tempfile::tempdir().unwrap();
        let docs: Vec<(u64, String)> = (0..50)
            .map(|i| {
                (
                    i,
                    format!("turn {i}: we talked about topic{} and the number {}", i % 7, i * 13),
                )
            })
            .collect();
        let queries = ["topic3", "number 130", "talked about topic5", "nothing here"];
        let before: Vec<_> = {
            let w = words_in(dir.path());
            for (id, t) in &docs {
                w.add("m", *id, t).unwrap();
            }
            w.commit("m").unwrap();
            queries.iter().map(|q| w.search("m", q, 10).unwrap()).collect()
        };
        // The index is derived: delete it while stopped, rebuild from the source pairs.
        std::fs::remove_dir_all(memory_dir(dir.path(), "m")).unwrap();
        let w = words_in(dir.path());
        assert!(w.ids("m").unwrap().is_empty());
        let d = super::super::diff(&w.ids("m").unwrap(), &docs.iter().map(|d| d.0).collect::<Vec<_>>());
        assert_eq!(d.missing.len(), 50);
        w.rebuild("m", docs.iter().map(|(i, t)| (*i, t.as_str()))).unwrap();
        let after: Vec<_> = queries.iter().map(|q| w.search("m", q, 10).unwrap()).collect();
        assert_eq!(before, after);
        assert_eq!(w.ids("m").unwrap(), (0..50).collect::<Vec<_>>());
    }
}
