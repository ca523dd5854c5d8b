//! `recalld inspect`'s text: the `inspect` op's reply rendered for an 80-column terminal (a
//! pure function, snapshot-tested), and the `--at` time as people write it.

use std::fmt::Write;

use serde_json::Value;

/// Columns every line fits in.
pub const WIDTH: usize = 80;
/// Episodes out of view shown one per line (the latest); older ones are summarised.
const PAST_SHOWN: usize = 8;
/// Facts shown (the latest); older ones are counted.
const FACTS_SHOWN: usize = 40;
/// Recall items shown per decision.
const ITEMS_SHOWN: usize = 5;

/// Unix seconds from `--at`: seconds (`1700000000.5`), RFC 3339 (`2023-11-14T22:13:20Z`,
/// `…+02:00`), or a UTC date and time (`2023-11-14 22:13`, `2023-11-14`).
pub fn parse_time(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let bad = || format!("{s:?} is not a time: use Unix seconds, RFC 3339 or \"YYYY-MM-DD HH:MM\" (UTC)");
    if let Ok(secs) = s.parse::<f64>() {
        return if secs.is_finite() && secs >= 0.0 {
            Ok(secs)
        } else {
            Err(bad())
        };
    }
    // An offset after the time of day: `+02:00`, `-0530`.
    let (local, offset) = match s.find(['T', 't', ' ']) {
        Some(i) => {
            let time = &s[i + 1..];
            match time.rfind(['+', '-']) {
                Some(j) => {
                    let (body, off) = time.split_at(j);
                    let sign = if off.starts_with('-') { -1.0 } else { 1.0 };
                    let digits: String = off[1..].chars().filter(|c| *c != ':').collect();
                    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(bad());
                    }
                    let (h, m): (f64, f64) = (
                        digits[..2].parse().map_err(|_| bad())?,
                        digits[2..].parse().map_err(|_| bad())?,
                    );
                    (format!("{}T{body}", &s[..i]), sign * (h * 3600.0 + m * 60.0))
                }
                None => (s.replacen(['t', ' '], "T", 1), 0.0),
            }
        }
        None => (s.to_owned(), 0.0),
    };
    let local = local.trim_end_matches(['Z', 'z']);
    crate::engine::parse_date(local)
        .map(|t| t - offset)
        .filter(|t| *t >= 0.0)
        .ok_or_else(bad)
}

/// A time as the text shows it: `2023-11-14 22:13 UTC`.
pub fn when(unix: f64) -> String {
    let secs = unix.rem_euclid(86_400.0) as u64;
    format!(
        "{} {:02}:{:02} UTC",
        crate::engine::date(unix),
        secs / 3600,
        secs % 3600 / 60
    )
}

/// The `inspect` op's reply as text, every line at most [`WIDTH`] columns.
pub fn render(reply: &Value) -> String {
    let mut out = Out::default();
    header(&mut out, reply);
    episodes(&mut out, reply);
    facts(&mut out, reply);
    entities(&mut out, reply);
    decisions(&mut out, reply);
    lane(&mut out, reply);
    out.text
}

#[derive(Default)]
struct Out {
    text: String,
}

impl Out {
    /// One line, cut to the width with `…` when longer.
    fn line(&mut self, line: impl AsRef<str>) {
        self.text.push_str(&fit(line.as_ref(), WIDTH));
        self.text.push('\n');
    }

    fn blank(&mut self) {
        self.text.push('\n');
    }
}

fn header(out: &mut Out, r: &Value) {
    let rec = &r["record"];
    let rest = format!(
        " · {} turns · {} messages · ceiling {}",
        thousands(u(&rec["turns"])),
        thousands(u(&rec["messages"])),
        thousands(u(&rec["ceiling"])),
    );
    let memory = str_of(&r["memory"]);
    let room = WIDTH.saturating_sub(rest.chars().count()).max(12);
    out.line(format!("{}{rest}", fit(memory, room)));
    let mut second = format!(
        "as of {} · {} episodes · {} facts · {} entities",
        when(f(&r["at"])),
        u(&rec["episodes"]),
        u(&rec["facts"]),
        u(&rec["entities"])
    );
    if let Some(b) = rec["budget"].as_u64() {
        let _ = write!(second, " · budget {}", thousands(b));
    }
    out.line(second);
    let mut who = Vec::new();
    for key in ["agent", "user"] {
        if let Some(v) = rec[key].as_str() {
            who.push(format!("{key} {v}"));
        }
    }
    if let Some(t) = rec["updated_at"].as_f64() {
        who.push(format!("updated {}", when(t)));
    }
    out.line(who.join(" · "));
}

fn episodes(out: &mut Out, r: &Value) {
    let list = arr(&r["episodes"]);
    let omitted = u(&r["episodes_omitted"]);
    out.blank();
    let mut counts = Vec::new();
    for state in ["live", "leaving", "sealed", "forgotten"] {
        let n = list.iter().filter(|e| e["state"] == state).count();
        if n > 0 {
            counts.push(format!("{n} {state}"));
        }
    }
    if omitted > 0 {
        counts.push(format!("{omitted} older not fetched"));
    }
    heading(out, "EPISODES", &counts);
    if list.is_empty() {
        return;
    }
    out.line("     n  state      turns          tokens  activation  signif.  facts");
    let in_view = |e: &Value| e["state"] == "live" || e["state"] == "leaving";
    let past = list.iter().filter(|e| !in_view(e)).count();
    let hide = past.saturating_sub(PAST_SHOWN);
    let (mut hidden, mut hidden_states, mut turns) = (0usize, [0usize; 2], (u64::MAX, 0u64));
    let mut max_act: f64 = 0.0;
    let mut summarised = false;
    for e in list {
        if !in_view(e) && hidden < hide {
            hidden += 1;
            hidden_states[usize::from(e["state"] == "sealed")] += 1;
            turns = (turns.0.min(u(&e["first_turn"])), turns.1.max(u(&e["last_turn"])));
            max_act = max_act.max(f(&e["activation"]));
            continue;
        }
        if hidden > 0 && !summarised {
            summarised = true;
            let states: Vec<String> = [(hidden_states[0], "forgotten"), (hidden_states[1], "sealed")]
                .iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, s)| format!("{n} {s}"))
                .collect();
            out.line(format!(
                "     … {hidden} earlier: {}, turns {}-{}, activation ≤ {max_act:.4}",
                states.join(", "),
                turns.0,
                turns.1,
            ));
        }
        out.line(format!(
            "{:>6}  {:<9}  {:<11}  {:>8}  {:>10.4}  {:>7.2}  {:>5}",
            u(&e["n"]),
            str_of(&e["state"]),
            format!("{}-{}", u(&e["first_turn"]), u(&e["last_turn"])),
            thousands(u(&e["tokens"])),
            f(&e["activation"]),
            f(&e["significance"]),
            arr(&e["facts"]).len(),
        ));
    }
}

/// A section's title with what it holds by kind ("none" when empty).
fn heading(out: &mut Out, title: &str, counts: &[String]) {
    let held = if counts.is_empty() {
        "none".to_owned()
    } else {
        counts.join(", ")
    };
    out.line(format!("{title}  ({held})"));
}

fn facts(out: &mut Out, r: &Value) {
    let list = arr(&r["facts"]);
    out.blank();
    let mut counts = Vec::new();
    for state in ["active", "merged", "retired"] {
        let n = list.iter().filter(|f| f["status"]["state"] == state).count();
        if n > 0 {
            counts.push(format!("{n} {state}"));
        }
    }
    heading(out, "FACTS", &counts);
    if list.is_empty() {
        return;
    }
    let skip = list.len().saturating_sub(FACTS_SHOWN);
    if skip > 0 {
        out.line(format!("     … {skip} earlier facts (--json lists them all)"));
    }
    for fact in &list[skip..] {
        let status = &fact["status"];
        let status = match str_of(&status["state"]) {
            "merged" => format!("merged→{}", u(&status["into"])),
            "retired" => format!("retired←{}", u(&status["by"])),
            s => s.to_owned(),
        };
        let entity = |key: &str| fact[key].as_u64().map_or("?".to_owned(), |n| format!("e{n}"));
        let prefix = format!(
            "{:>6} {:<10} t{:<6} {:<8} ",
            u(&fact["n"]),
            status,
            span(u(&fact["first_turn"]), u(&fact["last_turn"])),
            format!("{}→{}", entity("subject_entity"), entity("object_entity")),
        );
        let (subject, object) = (one_line(str_of(&fact["subject"])), one_line(str_of(&fact["object"])));
        let note = one_line(str_of(&fact["note"]));
        // The note gives way first: subject and object keep up to 16 columns each.
        let ends = fit(&subject, 16).chars().count() + fit(&object, 16).chars().count() + 4;
        let room = WIDTH.saturating_sub(prefix.chars().count() + ends).max(8);
        out.line(format!(
            "{prefix}{} —{}→ {}",
            fit(&subject, 16),
            fit(&note, room),
            fit(&object, 16)
        ));
    }
}

fn entities(out: &mut Out, r: &Value) {
    let list = arr(&r["entities"]);
    if list.is_empty() {
        return;
    }
    out.blank();
    let items: Vec<String> = list
        .iter()
        .map(|e| {
            let aliases: Vec<&str> = arr(&e["aliases"]).iter().filter_map(Value::as_str).collect();
            let name = fit(&one_line(str_of(&e["name"])), 30);
            if aliases.is_empty() {
                format!("e{} {name}", u(&e["n"]))
            } else {
                format!(
                    "e{} {name} (aka {})",
                    u(&e["n"]),
                    fit(&one_line(&aliases.join(", ")), 30)
                )
            }
        })
        .collect();
    wrap(out, &format!("ENTITIES  ({})", list.len()), &items, " · ");
}

fn decisions(out: &mut Out, r: &Value) {
    let list = arr(&r["decisions"]);
    out.blank();
    out.line(format!(
        "DECISIONS  (last {} of {} kept)",
        list.len(),
        u(&r["decisions_kept"])
    ));
    for d in list {
        out.line(format!(
            "  turn {} · {} · request {}/{} · view {}/{}",
            u(&d["turn"]),
            when(f(&d["at"])).trim_end_matches(" UTC"),
            thousands(u(&d["request_tokens"])),
            thousands(u(&d["ceiling"])),
            thousands(u(&d["view_tokens"])),
            thousands(u(&d["budget"])),
        ));
        let mut parts = vec![format!("in view {}", ranges(&nums(&d["in_view"])))];
        for (key, label) in [
            ("faded", "faded"),
            ("leaving", "leaving"),
            ("forgotten", "forgotten"),
            ("hidden_for_ceiling", "held back (ceiling)"),
            ("hidden_for_recall", "held back (recall)"),
        ] {
            let ns = nums(&d[key]);
            if !ns.is_empty() {
                parts.push(format!("{label} {}", ranges(&ns)));
            }
        }
        if d["sleep"] == true {
            parts.push("after sleep".into());
        }
        if d["note_ask"] == true {
            parts.push("note asked".into());
        }
        wrap(out, "    ", &parts, " · ");
        if let Some(cut) = d["cut"].as_object() {
            out.line(format!(
                "    cut {} units ({} scored) into {} episodes",
                u(&cut["units"]),
                u(&cut["scored"]),
                u(&cut["episodes"])
            ));
        }
        let recall = &d["recall"];
        if recall.is_object() {
            let cosine = recall["best_cosine"]
                .as_f64()
                .map_or("no cosine".to_owned(), |c| format!("best cosine {c:.2}"));
            out.line(format!(
                "    recall {} tokens, {cosine}{}, {:.1} ms",
                thousands(u(&recall["tokens"])),
                if recall["relevant"] == true { ", relevant" } else { "" },
                f(&recall["ms"]["total"])
            ));
            let items = arr(&recall["items"]);
            for item in items.iter().take(ITEMS_SHOWN) {
                let cosine = item["cosine"].as_f64().map_or("-".to_owned(), |c| format!("{c:.2}"));
                let turns = nums(&item["turns"]);
                let turns = span(turns.first().copied().unwrap_or(0), turns.get(1).copied().unwrap_or(0));
                let searches: Vec<&str> = arr(&item["searches"]).iter().filter_map(Value::as_str).collect();
                out.line(format!(
                    "      {:<12} {:.4}  cos {cosine:<4}  t{turns:<6} {}",
                    format!("{} {}", str_of(&item["kind"]), u(&item["n"])),
                    f(&item["score"]),
                    searches.join(", ")
                ));
            }
            if items.len() > ITEMS_SHOWN {
                out.line(format!("      … {} more", items.len() - ITEMS_SHOWN));
            }
        }
    }
}

fn lane(out: &mut Out, r: &Value) {
    let lane = &r["lane"];
    out.blank();
    let depth = u(&lane["depth"]);
    let parked = arr(&lane["parked"]);
    let mut line = if depth == 0 {
        "LANE  idle".to_owned()
    } else {
        let mut kinds: Vec<(String, usize)> = Vec::new();
        for j in arr(&lane["jobs"]) {
            let k = str_of(&j["kind"]).to_owned();
            match kinds.iter_mut().find(|(name, _)| *name == k) {
                Some((_, n)) => *n += 1,
                None => kinds.push((k, 1)),
            }
        }
        let kinds: Vec<String> = kinds
            .into_iter()
            .map(|(k, n)| if n > 1 { format!("{k} ×{n}") } else { k })
            .collect();
        format!(
            "LANE  {depth} waiting (oldest {:.1} s): {}",
            f(&lane["oldest_age_s"]),
            kinds.join(", ")
        )
    };
    if !parked.is_empty() {
        let _ = write!(line, " · {} parked", parked.len());
    }
    out.line(line);
    for j in parked {
        out.line(format!(
            "  parked {} #{} after {} attempts: {}",
            str_of(&j["kind"]),
            u(&j["n"]),
            u(&j["attempts"]),
            one_line(j["error"].as_str().unwrap_or("no error kept"))
        ));
    }
}

/// Items joined by `sep` after `lead`, wrapped at the width (continuation lines indented like
/// the first item).
fn wrap(out: &mut Out, lead: &str, items: &[String], sep: &str) {
    let indent = if lead.trim().is_empty() {
        lead.to_owned()
    } else {
        "  ".to_owned()
    };
    let mut line = if lead.trim().is_empty() {
        lead.to_owned()
    } else {
        out.line(lead);
        indent.clone()
    };
    let mut first = true;
    for item in items {
        let piece = if first { item.clone() } else { format!("{sep}{item}") };
        if !first && line.chars().count() + piece.chars().count() > WIDTH {
            out.line(line.trim_end());
            line = format!("{indent}{item}");
        } else {
            line.push_str(&piece);
        }
        first = false;
    }
    out.line(line.trim_end());
}

/// `text` cut to `width` columns (characters) with `…` when longer.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// Whitespace runs (newlines included) as one space.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Episode numbers as ranges: `3-6, 9`; `-` for none.
fn ranges(ns: &[u64]) -> String {
    if ns.is_empty() {
        return "-".into();
    }
    let mut parts = Vec::new();
    let mut start = ns[0];
    let mut prev = ns[0];
    for &n in &ns[1..] {
        if n == prev + 1 {
            prev = n;
            continue;
        }
        parts.push(span(start, prev));
        start = n;
        prev = n;
    }
    parts.push(span(start, prev));
    parts.join(", ")
}

fn span(a: u64, b: u64) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}-{b}")
    }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let groups: Vec<&str> = digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|g| std::str::from_utf8(g).unwrap_or_default())
        .collect();
    groups.join(",")
}

fn nums(v: &Value) -> Vec<u64> {
    arr(v).iter().filter_map(Value::as_u64).collect()
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_as_people_write_them() {
        assert_eq!(parse_time("1700000000.5"), Ok(1_700_000_000.5));
        assert_eq!(parse_time("2023-11-14T22:13:20Z"), Ok(1_700_000_000.0));
        assert_eq!(parse_time("2023-11-14T22:13:20z"), Ok(1_700_000_000.0));
        assert_eq!(parse_time("2023-11-15T00:13:20+02:00"), Ok(1_700_000_000.0));
        assert_eq!(parse_time("2023-11-14T17:13:20-0500"), Ok(1_700_000_000.0));
        assert_eq!(parse_time("2023-11-14 22:13"), Ok(1_700_000_000.0 - 20.0));
        assert_eq!(parse_time("2023-11-14"), Ok(1_699_920_000.0));
        assert!(parse_time("yesterday").is_err());
        assert!(parse_time("-5").is_err());
        assert!(parse_time("2023-11-14T22:13+2").is_err());
        assert_eq!(when(1_700_000_000.0), "2023-11-14 22:13 UTC");
    }

    #[test]
    fn lines_are_cut_to_fit_and_numbers_grouped() {
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abc", 4), "abc");
        assert_eq!(ranges(&[1, 2, 3, 5, 7, 8]), "1-3, 5, 7-8");
        assert_eq!(ranges(&[]), "-");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(one_line("a\n  b\tc"), "a b c");
    }
}
