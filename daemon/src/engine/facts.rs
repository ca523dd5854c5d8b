//! A memory's facts as its state holds them. Loading a state reads only the facts a request can
//! show without a search: those written for an episode not yet forgotten, and what they merged
//! into (the facts block is made of these). The rest, most of a long memory's, stay in the store:
//! recall reads the ones its searches find ([`Facts::read`]), and a lane job or an export reads
//! them all once ([`Facts::fill`]), after which the cached state holds them whole.

use std::collections::BTreeMap;

use super::records::{Episode, EpisodeState, Fact, FactStatus};
use crate::store::{keys, Reader, StoreError, Table};

#[derive(Clone, Default)]
pub struct Facts {
    /// The facts read, by number.
    resident: BTreeMap<u64, Fact>,
    /// How many the memory has (numbered 0..len, never removed).
    len: u64,
    /// Whether every one of them is resident.
    whole: bool,
}

impl Facts {
    /// The facts of the episodes not forgotten, and what they merged into, of a memory with
    /// `len` facts.
    pub fn load(r: &Reader<'_>, memory: &str, episodes: &[Episode], len: u64) -> Result<Facts, StoreError> {
        let mut facts = Facts {
            resident: BTreeMap::new(),
            len,
            whole: len == 0,
        };
        let written = episodes
            .iter()
            .filter(|e| e.state != EpisodeState::Forgotten)
            .flat_map(|e| e.facts.iter().copied());
        for n in written {
            // A merge points to an older fact; the bound guards a corrupt record.
            let mut next = Some(n);
            for _ in 0..=len {
                let Some(n) = next.take() else { break };
                if n >= len || facts.resident.contains_key(&n) {
                    break;
                }
                let Some(f) = Self::read(r, memory, n)? else { break };
                if let FactStatus::Merged { into, .. } = f.status {
                    next = Some(into).filter(|into| *into != n);
                }
                facts.resident.insert(n, f);
            }
        }
        Ok(facts)
    }

    /// Fact `n` as the store holds it.
    pub fn read(r: &Reader<'_>, memory: &str, n: u64) -> Result<Option<Fact>, StoreError> {
        r.get::<Fact>(Table::Facts, &keys::seq(memory, n))
    }

    /// Reads every fact not resident yet (the resident ones may hold changes not saved).
    pub fn fill(&mut self, r: &Reader<'_>, memory: &str) -> Result<(), StoreError> {
        if self.whole {
            return Ok(());
        }
        let len = self.len;
        let resident = &mut self.resident;
        r.visit(
            Table::Facts,
            &keys::memory_prefix(memory),
            &keys::seq(memory, 0),
            |_, f: Fact| {
                if f.n < len {
                    resident.entry(f.n).or_insert(f);
                }
                Ok(true)
            },
        )?;
        self.whole = true;
        Ok(())
    }

    /// Takes facts read from the store where none of that number is resident (a resident one
    /// may hold changes not saved); whole once every number is.
    pub fn add_read(&mut self, facts: Vec<Fact>) {
        for f in facts.into_iter().filter(|f| f.n < self.len) {
            self.resident.entry(f.n).or_insert(f);
        }
        self.whole = self.resident.len() as u64 == self.len;
    }

    /// How many facts are resident.
    pub fn resident(&self) -> usize {
        self.resident.len()
    }

    /// How many facts the memory has, resident or not.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_whole(&self) -> bool {
        self.whole
    }

    /// Fact `n` if it is resident.
    pub fn get(&self, n: u64) -> Option<&Fact> {
        self.resident.get(&n)
    }

    pub fn get_mut(&mut self, n: u64) -> Option<&mut Fact> {
        self.resident.get_mut(&n)
    }

    /// Adds the next fact (numbered `len`).
    pub fn push(&mut self, f: Fact) {
        debug_assert_eq!(f.n, self.len);
        self.len = self.len.max(f.n + 1);
        self.resident.insert(f.n, f);
    }

    /// The resident facts in number order (all of them once [`Facts::fill`] ran).
    pub fn iter(&self) -> impl Iterator<Item = &Fact> {
        self.resident.values()
    }

    /// The resident facts numbered `n` and above.
    pub fn from(&self, n: u64) -> impl Iterator<Item = &Fact> {
        self.resident.range(n..).map(|(_, f)| f)
    }
}
