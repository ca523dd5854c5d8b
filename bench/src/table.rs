//! Aggregating per-question scores into category × system cells, as JSON and markdown.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::baselines::SYSTEMS;

pub const CATEGORIES: [(u8, &str); 4] = [(1, "multi-hop"), (2, "temporal"), (3, "open-domain"), (4, "single-hop")];

/// One question's score for one system.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    pub availability: f64,
    pub tokens: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Cell {
    availability: f64,
    tokens: f64,
    n: u64,
}

/// Scores of one ceiling, by system and category.
#[derive(Debug, Default)]
pub struct Table {
    cells: BTreeMap<(String, u8), Cell>,
}

impl Table {
    pub fn add(&mut self, system: &str, category: u8, s: Score) {
        for c in [category, 0] {
            let cell = self.cells.entry((system.to_owned(), c)).or_default();
            cell.availability += s.availability;
            cell.tokens += s.tokens as f64;
            cell.n += 1;
        }
    }

    /// Mean availability and tokens of a system in a category (0 = all categories).
    pub fn mean(&self, system: &str, category: u8) -> Option<Score> {
        let c = self.cells.get(&(system.to_owned(), category))?;
        Some(Score {
            availability: c.availability / c.n as f64,
            tokens: (c.tokens / c.n as f64).round() as u64,
        })
    }

    pub fn count(&self, system: &str, category: u8) -> u64 {
        self.cells.get(&(system.to_owned(), category)).map_or(0, |c| c.n)
    }

    pub fn to_json(&self) -> Value {
        let mut systems = serde_json::Map::new();
        for s in SYSTEMS {
            let mut cats = serde_json::Map::new();
            for (c, name) in CATEGORIES.iter().copied().chain([(0, "all")]) {
                if let Some(m) = self.mean(s, c) {
                    cats.insert(
                        if c == 0 { "all".into() } else { format!("{c} {name}") },
                        json!({"availability": round3(m.availability), "tokens": m.tokens, "questions": self.count(s, c)}),
                    );
                }
            }
            systems.insert(s.into(), Value::Object(cats));
        }
        Value::Object(systems)
    }

    /// A markdown table: a row per category, a column per system, `availability · tokens`.
    pub fn markdown(&self, ceiling: u64) -> String {
        let mut out = format!("**ceiling {ceiling} tokens** (evidence availability · mean request tokens)\n\n");
        out.push_str("| category | questions |");
        for s in SYSTEMS {
            out.push_str(&format!(" {s} |"));
        }
        out.push_str("\n|---|---|");
        out.push_str(&"---|".repeat(SYSTEMS.len()));
        out.push('\n');
        for (c, name) in CATEGORIES.iter().copied().chain([(0, "all")]) {
            let label = if c == 0 {
                "**all**".to_owned()
            } else {
                format!("{c} {name}")
            };
            out.push_str(&format!("| {label} | {} |", self.count(SYSTEMS[0], c)));
            for s in SYSTEMS {
                match self.mean(s, c) {
                    Some(m) => out.push_str(&format!(" {:.3} · {} |", m.availability, m.tokens)),
                    None => out.push_str(" – |"),
                }
            }
            out.push('\n');
        }
        out
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
