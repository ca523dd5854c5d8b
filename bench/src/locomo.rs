//! The LoCoMo file format (`../shared/bench/README.md`): conversations in sessions with their
//! dates, questions with evidence turns, and `observation` facts citing their turns.

use std::path::Path;

use serde_json::Value;

/// One turn of a session: `D<session>:<i>`, who spoke, and the text as it is replayed (an
/// image's caption as `[shares <caption>]`).
#[derive(Debug, Clone)]
pub struct Turn {
    pub dia: String,
    /// Speaker A (the user) or B (the assistant).
    pub by_a: bool,
    pub text: String,
}

#[derive(Debug, Clone)]
pub struct Session {
    pub n: u32,
    /// Unix seconds (UTC) of the session's date and time.
    pub at: f64,
    pub turns: Vec<Turn>,
}

#[derive(Debug, Clone)]
pub struct Question {
    pub text: String,
    pub category: u8,
    /// Normalised evidence ids that name a turn of the conversation.
    pub evidence: Vec<String>,
}

/// A fact a model wrote about a session, with the turns it cites.
#[derive(Debug, Clone)]
pub struct Observation {
    pub speaker: String,
    pub text: String,
    pub cites: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Conversation {
    pub id: String,
    pub speaker_a: String,
    pub speaker_b: String,
    pub sessions: Vec<Session>,
    pub questions: Vec<Question>,
    pub observations: Vec<Observation>,
}

impl Conversation {
    pub fn turns(&self) -> impl Iterator<Item = &Turn> {
        self.sessions.iter().flat_map(|s| s.turns.iter())
    }
}

#[derive(Debug)]
pub struct LoadError(pub String);

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

pub fn load(path: &Path) -> Result<Vec<Conversation>, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError(format!("{}: {e}", path.display())))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| LoadError(format!("{}: {e}", path.display())))?;
    let samples = v
        .as_array()
        .ok_or_else(|| LoadError("the file is not a list of samples".into()))?;
    samples.iter().map(parse_sample).collect()
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

pub fn parse_sample(s: &Value) -> Result<Conversation, LoadError> {
    let id = str_of(s, "sample_id").to_owned();
    let c = s
        .get("conversation")
        .and_then(Value::as_object)
        .ok_or_else(|| LoadError(format!("{id}: no conversation")))?;
    let speaker_a = c.get("speaker_a").and_then(Value::as_str).unwrap_or("A").to_owned();
    let speaker_b = c.get("speaker_b").and_then(Value::as_str).unwrap_or("B").to_owned();
    let mut sessions = Vec::new();
    for (key, turns) in c {
        let Some(n) = key.strip_prefix("session_").and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Some(turns) = turns.as_array().filter(|t| !t.is_empty()) else {
            continue;
        };
        let date = c
            .get(&format!("session_{n}_date_time"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let at =
            parse_time(date).ok_or_else(|| LoadError(format!("{id}: session {n} has no readable date {date:?}")))?;
        let turns = turns
            .iter()
            .map(|t| Turn {
                dia: normalise_dia(str_of(t, "dia_id")).unwrap_or_default(),
                by_a: str_of(t, "speaker") == speaker_a,
                text: turn_text(t),
            })
            .collect();
        sessions.push(Session { n, at, turns });
    }
    sessions.sort_by_key(|s| s.n);
    let known: std::collections::HashSet<String> = sessions
        .iter()
        .flat_map(|s| s.turns.iter().map(|t| t.dia.clone()))
        .collect();
    let questions = s
        .get("qa")
        .and_then(Value::as_array)
        .map(|qa| {
            qa.iter()
                .map(|q| Question {
                    text: str_of(q, "question").to_owned(),
                    category: q.get("category").and_then(Value::as_u64).unwrap_or(0) as u8,
                    evidence: evidence_ids(q.get("evidence").unwrap_or(&Value::Null))
                        .into_iter()
                        .filter(|d| known.contains(d))
                        .collect(),
                })
                .collect()
        })
        .unwrap_or_default();
    let mut observations = Vec::new();
    if let Some(obs) = s.get("observation").and_then(Value::as_object) {
        // In session order, so notes are written in the order a model would have written them.
        let mut keys: Vec<(u32, &String)> = obs
            .keys()
            .filter_map(|k| {
                k.strip_prefix("session_")
                    .and_then(|r| r.strip_suffix("_observation"))
                    .and_then(|n| n.parse().ok())
                    .map(|n| (n, k))
            })
            .collect();
        keys.sort();
        for (_, k) in keys {
            let Some(by_speaker) = obs[k].as_object() else { continue };
            for (speaker, facts) in by_speaker {
                for f in facts.as_array().into_iter().flatten() {
                    let Some(pair) = f.as_array() else { continue };
                    let text = pair.first().and_then(Value::as_str).unwrap_or("").trim().to_owned();
                    let cites = pair.get(1).map(evidence_ids).unwrap_or_default();
                    if !text.is_empty() && !cites.is_empty() {
                        observations.push(Observation {
                            speaker: speaker.clone(),
                            text,
                            cites,
                        });
                    }
                }
            }
        }
    }
    Ok(Conversation {
        id,
        speaker_a,
        speaker_b,
        sessions,
        questions,
        observations,
    })
}

/// A turn's replayed text: its words, and an image as `[shares <caption>]`.
fn turn_text(t: &Value) -> String {
    let text = str_of(t, "text").trim();
    match t.get("blip_caption").and_then(Value::as_str).filter(|c| !c.is_empty()) {
        Some(cap) if text.is_empty() => format!("[shares {cap}]"),
        Some(cap) => format!("{text} [shares {cap}]"),
        None => text.to_owned(),
    }
}

/// Evidence ids from a string or a list of strings, split on `;`, `,` and spaces, each read as
/// `D:?(\d+):(\d+)` (so `D:11:26` and `D30:05` are understood).
pub fn evidence_ids(v: &Value) -> Vec<String> {
    let raw: Vec<&str> = match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let mut out = Vec::new();
    for r in raw {
        for piece in r.split([';', ',', ' ']).filter(|p| !p.is_empty()) {
            if let Some(d) = normalise_dia(piece) {
                if !out.contains(&d) {
                    out.push(d);
                }
            }
        }
    }
    out
}

/// `D<n>:<i>` with plain numbers, from `D1:3`, `D:11:26`, `D30:05`; None when unreadable.
pub fn normalise_dia(s: &str) -> Option<String> {
    let rest = s.trim().strip_prefix('D')?;
    let rest = rest.strip_prefix(':').unwrap_or(rest);
    let (a, b) = rest.split_once(':')?;
    let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
    Some(format!("D{a}:{b}"))
}

/// `1:56 pm on 8 May, 2023` (`%I:%M %p on %d %B, %Y`, UTC) → Unix seconds.
pub fn parse_time(s: &str) -> Option<f64> {
    let (time, date) = s.trim().split_once(" on ")?;
    let (hm, ampm) = time.trim().split_once(' ')?;
    let (h, m) = hm.split_once(':')?;
    let (mut h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    match ampm.to_ascii_lowercase().as_str() {
        "am" if h == 12 => h = 0,
        "am" => {}
        "pm" if h < 12 => h += 12,
        "pm" => {}
        _ => return None,
    }
    let mut parts = date.split([' ', ',']).filter(|p| !p.is_empty());
    let day: u32 = parts.next()?.parse().ok()?;
    let month_name = parts.next()?;
    let month = MONTHS.iter().position(|mn| mn.eq_ignore_ascii_case(month_name))? as u32 + 1;
    let year: i64 = parts.next()?.parse().ok()?;
    if h > 23 || m > 59 || !(1..=31).contains(&day) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + (h * 3600 + m * 60) as i64) as f64)
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dates_parse_as_utc() {
        // 2023-05-08 13:56 UTC
        assert_eq!(parse_time("1:56 pm on 8 May, 2023"), Some(1_683_554_160.0));
        assert_eq!(parse_time("12:05 am on 1 January, 1970"), Some(300.0));
        assert_eq!(parse_time("12:00 pm on 1 January, 1970"), Some(43_200.0));
        assert_eq!(parse_time("noon"), None);
    }

    #[test]
    fn malformed_evidence_ids_are_read() {
        assert_eq!(evidence_ids(&json!(["D8:6; D9:17"])), vec!["D8:6", "D9:17"]);
        assert_eq!(
            evidence_ids(&json!(["D:11:26", "D30:05", "junk"])),
            vec!["D11:26", "D30:5"]
        );
        assert_eq!(evidence_ids(&json!("D1:3")), vec!["D1:3"]);
    }
}
