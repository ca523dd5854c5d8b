//! Time a message names: the days and months its words point at ("on 3 June, 2023", "June 3rd",
//! "in July 2022", "2023-06-03", "yesterday", "last Friday", "last week", "last weekend", "two
//! weeks ago", "a few days ago", and ahead: "tomorrow", "next week", "next month"), as windows of time
//! recall searches the conversation in. A question about a day is answered by what was said that
//! day or in the days after it ("yesterday I…", "last weekend…"), so a window runs from the day
//! before the named days to a week after them. The same reading of a passage's text at its own
//! date gives the days it speaks of (`mentioned`: "last month" said in April is March), which
//! the time search finds too, plans included ("next month" said in May is June). A relative time
//! followed by "before" and a date is read at that date ("last weekend before April 10, 2023"),
//! and a time told by where it lies from a named day is that stretch ("the week before August
//! 3, 2023", "two weeks before 11 August", "the Sunday before October 25, 2022", "the day after
//! tomorrow"). Pure: text and a time in, days or windows out.
//!
//! Years alone, seasons and weekdays without "last" are not read: a window that wide narrows
//! nothing, and "on Friday" may be the one to come. A month name alone is read only capitalised
//! after a word such as "in" ("in May"), so "may" the verb is not a month.

use super::notes::days_from_civil;
use super::passages::civil_from_days;

const DAY: f64 = 86_400.0;
/// Days before the named ones a window opens (a time zone's worth, and what was said the
/// evening before).
const BEFORE_DAYS: i64 = 1;
/// Days after the named ones a window closes: what happened is told in the days that follow.
const AFTER_DAYS: i64 = 7;

/// The days a message names, first and last (days since 1970), and the stretch of time around
/// them recall searches: from the day before to a week after.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub days: (i64, i64),
}

impl Window {
    /// Where the window opens, Unix seconds (inclusive).
    pub fn from(&self) -> f64 {
        (self.days.0 - BEFORE_DAYS) as f64 * DAY
    }

    /// Where it closes, Unix seconds (exclusive).
    pub fn to(&self) -> f64 {
        (self.days.1 + AFTER_DAYS + 1) as f64 * DAY
    }
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

const WEEKDAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

/// Windows read from one message at most (the first named): a pasted log full of dates would
/// otherwise search every day it names.
const MAX_WINDOWS: usize = 8;

/// Words before a month named alone that make it a time ("in May", "during March").
const MONTH_LEADS: [&str; 12] = [
    "in", "during", "of", "since", "until", "by", "early", "mid", "late", "last", "this", "before",
];

/// The windows of time `text` names, relative to `now` where it leaves the year out, in the
/// order named, without repeats. A time still to come has one too: nothing was said in it yet,
/// but what was said of it (plans: "next month", "on 5 May") is found by its mentions.
pub fn windows(text: &str, now: f64) -> Vec<Window> {
    let mut out: Vec<Window> = Vec::new();
    for (first, last) in spans(text, now) {
        let w = Window { days: (first, last) };
        if !out.contains(&w) && out.len() < MAX_WINDOWS {
            out.push(w);
        }
    }
    out
}

/// The days `text`, said at `at`, speaks of other than its own ("yesterday", "last month", "on
/// 3 June"), as (first, last) days since 1970, in the order named, without repeats: a turn
/// said in April about "last month" is about March, and a question about March should find
/// it. The first 8 such, none before 1970.
pub fn mentioned(text: &str, at: f64) -> Vec<(i64, i64)> {
    let today = (at / DAY).floor() as i64;
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (first, last) in spans(text, at) {
        let own = (first..=last).contains(&today);
        if !own && first >= 0 && !out.contains(&(first, last)) && out.len() < MAX_WINDOWS {
            out.push((first, last));
        }
    }
    out
}

/// Every stretch of days `text` names, (first, last) days since 1970, relative to `now` where
/// it leaves the year out.
fn spans(text: &str, now: f64) -> Vec<(i64, i64)> {
    let words = words(text);
    let today = (now / DAY).floor() as i64;
    let mut spans = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if let Some((taken, span)) = from_a_date(&words, i, today) {
            spans.push(span);
            i += taken;
            continue;
        }
        let (taken, span) = named_at(&words, i, today);
        if let Some(s) = span {
            spans.push(anchored(&words, i, taken, today).unwrap_or(s));
        }
        i += taken.max(1);
    }
    spans
}

/// A time named relative to today but anchored to a date named after it ("last weekend before
/// April 10, 2023", "last week before 3 June"): the same words read as if said that day.
fn anchored(words: &[Word], i: usize, taken: usize, today: i64) -> Option<(i64, i64)> {
    if words.get(i + taken)?.lower != "before" {
        return None;
    }
    // Relative words name other days when read years later; a dated day names the same.
    if named_at(words, i, today).1 == named_at(words, i, today + 1_000).1 {
        return None;
    }
    let (anchor, _) = named_at(words, i + taken + 1, today).1?;
    named_at(words, i, anchor).1
}

/// A stretch of time told by where it lies from a named day ("the week before August 3, 2023",
/// "two weeks before 11 August", "the Sunday before October 25, 2022", "the day after
/// tomorrow", "a month after June 2023"), as (words taken, days). The named day itself is taken
/// too: the stretch's window reaches it.
fn from_a_date(words: &[Word], i: usize, today: i64) -> Option<(usize, (i64, i64))> {
    // A count of units ("two weeks", "a day"), or one ("the week", "the Sunday").
    let the = usize::from(words[i].lower == "the");
    if i + the >= words.len() {
        return None;
    }
    let (n, counted, at) = match quantity(words, i + the).filter(|_| the == 0) {
        Some((q, (least, most))) if least == most => (least, true, i + q),
        Some(_) => return None,
        None => (1, false, i + the),
    };
    let unit = words.get(at)?.lower.as_str();
    let unit = if counted { unit.trim_end_matches('s') } else { unit };
    let later = match words.get(at + 1)?.lower.as_str() {
        "before" => false,
        "after" => true,
        _ => return None,
    };
    let (taken, named) = named_at(words, at + 2, today);
    let (first, last) = named?;
    let sign = if later { 1 } else { -1 };
    let a = if later { last } else { first };
    // The weekday `wd` (0: Monday) nearest `a`: before it, or after it.
    let nearest = |wd: i64| {
        if later {
            a + 1 + (wd - weekday(a + 1)).rem_euclid(7)
        } else {
            a - 1 - (weekday(a - 1) - wd).rem_euclid(7)
        }
    };
    let span = match unit {
        "day" => (a + sign * n, a + sign * n),
        // "The week before" is the seven days before; "two weeks before" about that day.
        "week" if !counted => {
            if later {
                (a + 1, a + 7)
            } else {
                (a - 7, a - 1)
            }
        }
        "week" => (a + sign * 7 * n - 3, a + sign * 7 * n + 3),
        "weekend" if !counted => {
            let saturday = if later { nearest(5) } else { nearest(6) - 1 };
            (saturday, saturday + 1)
        }
        "month" => months(a, sign * n, sign * n)?,
        _ if !counted && WEEKDAYS.contains(&unit) => {
            let day = nearest(WEEKDAYS.iter().position(|d| *d == unit)? as i64);
            (day, day)
        }
        _ => return None,
    };
    Some((at + 2 + taken - i, span))
}

/// A word of the text: its characters, lower case, and whether it began with a capital.
struct Word {
    lower: String,
    capital: bool,
}

/// Runs of letters and digits ("3rd", "2023", "june"); an ISO date ("2023-06-03") stays one word.
fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let joins_iso = c == '-'
            && current.len() >= 4
            && current.chars().all(|d| d.is_ascii_digit() || d == '-')
            && chars.get(i + 1).is_some_and(char::is_ascii_digit);
        if c.is_alphanumeric() || joins_iso {
            current.push(c);
        } else if !current.is_empty() {
            out.push(word(std::mem::take(&mut current)));
        }
    }
    if !current.is_empty() {
        out.push(word(current));
    }
    out
}

fn word(w: String) -> Word {
    Word {
        capital: w.chars().next().is_some_and(char::is_uppercase),
        lower: w.to_lowercase(),
    }
}

fn month(w: &Word) -> Option<u32> {
    MONTHS.iter().position(|m| *m == w.lower).map(|i| i as u32 + 1)
}

/// A day of the month: "3", "03", "3rd", "21st".
fn day(w: &Word) -> Option<u32> {
    let digits = w
        .lower
        .strip_suffix("st")
        .or_else(|| w.lower.strip_suffix("nd"))
        .or_else(|| w.lower.strip_suffix("rd"))
        .or_else(|| w.lower.strip_suffix("th"))
        .unwrap_or(&w.lower);
    if digits.is_empty() || digits.len() > 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|d| (1..=31).contains(d))
}

fn year(w: &Word) -> Option<i64> {
    if w.lower.len() != 4 || !w.lower.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    w.lower.parse().ok().filter(|y| (1900..=2200).contains(y))
}

/// "2023-06-03", also as the start of a time ("2023-06-03T09:30").
fn iso(w: &Word) -> Option<i64> {
    let mut it = w.lower.split('-');
    let (y, m, d) = (it.next()?, it.next()?, it.next()?);
    let d = d.split_once('t').map_or(d, |(day, _)| day);
    if it.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    valid(y.parse().ok()?, m.parse().ok()?, d.parse().ok()?)
}

/// Days since 1970 of a date that exists.
fn valid(y: i64, m: u32, d: u32) -> Option<i64> {
    if !(1..=12).contains(&m) || d < 1 || d > days_in(y, m) {
        return None;
    }
    Some(days_from_civil(y, m as i64, d as i64))
}

fn days_in(y: i64, m: u32) -> u32 {
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    (days_from_civil(ny, i64::from(nm), 1) - days_from_civil(y, i64::from(m), 1)) as u32
}

/// The time named at word `i`, if any: how many words it took, and its first and last day.
fn named_at(words: &[Word], i: usize, today: i64) -> (usize, Option<(i64, i64)>) {
    // Past the end (a phrase such as "last week before" that ends the text): nothing.
    let Some(w) = words.get(i) else {
        return (1, None);
    };
    let next = |k: usize| words.get(i + k);
    if let Some(d) = iso(w) {
        return (1, Some((d, d)));
    }
    match w.lower.as_str() {
        "today" | "tonight" => return (1, Some((today, today))),
        "yesterday" => return (1, Some((today - 1, today - 1))),
        "tomorrow" => return (1, Some((today + 1, today + 1))),
        "last" if next(1).is_some_and(|n| n.lower == "night") => return (2, Some((today - 1, today - 1))),
        "last" if next(1).is_some_and(|n| n.lower == "week") => return (2, Some((today - 13, today - 7))),
        "next" if next(1).is_some_and(|n| n.lower == "week") => return (2, Some((today + 7, today + 13))),
        "this" if next(1).is_some_and(|n| n.lower == "week") => {
            let monday = today - weekday(today);
            return (2, Some((monday, monday + 6)));
        }
        "last" | "this" | "next" if next(1).is_some_and(|n| n.lower == "weekend") => {
            // This week's Saturday (yesterday on a Sunday), a week before or after it; on a
            // Saturday or Sunday "last weekend" is the one before the one in progress.
            let saturday = today + 5 - weekday(today);
            let saturday = match w.lower.as_str() {
                "last" => saturday - 7,
                "next" => saturday + 7,
                _ => saturday,
            };
            return (2, Some((saturday, saturday + 1)));
        }
        "last" | "this" | "next" if next(1).is_some_and(|n| n.lower == "month") => {
            let k = match w.lower.as_str() {
                "last" => -1,
                "this" => 0,
                _ => 1,
            };
            return (2, months(today, k, k));
        }
        "last" if next(1).is_some_and(|n| WEEKDAYS.contains(&n.lower.as_str())) => {
            // The latest such weekday before today (1970-01-01 was a Thursday).
            let wd = WEEKDAYS.iter().position(|d| *d == words[i + 1].lower).unwrap_or(0) as i64;
            let back = (today + 3 - wd).rem_euclid(7);
            let day = today - if back == 0 { 7 } else { back };
            return (2, Some((day, day)));
        }
        _ => {}
    }
    // "two weeks ago", "a few days ago", "3 months ago"
    if let Some((q, (least, most))) = quantity(words, i) {
        let unit = words.get(i + q).map(|u| u.lower.trim_end_matches('s'));
        if words.get(i + q + 1).is_some_and(|a| a.lower == "ago") {
            let span = match unit {
                Some("day") => Some((today - most, today - least)),
                // A week ago is about that day, give or take half a week.
                Some("week") => Some((today - 7 * most - 3, today - 7 * least + 3)),
                Some("month") => months(today, -most, -least),
                _ => None,
            };
            if span.is_some() {
                return (q + 2, span);
            }
        }
    }
    // "3 June[,] [2023]"
    if let (Some(d), Some(m)) = (day(w), next(1).and_then(month)) {
        let y = next(2).and_then(year);
        let taken = 2 + usize::from(y.is_some());
        return (taken, dated(words, i + taken, y, m, d, today).map(|x| (x, x)));
    }
    let Some(m) = month(w) else {
        return (1, None);
    };
    // "June 3[rd][,] [2023]"
    if let Some(d) = next(1).and_then(day) {
        let y = next(2).and_then(year);
        let taken = 2 + usize::from(y.is_some());
        return (taken, dated(words, i + taken, y, m, d, today).map(|x| (x, x)));
    }
    // "June 2023"
    if let Some(y) = next(1).and_then(year) {
        return (2, whole_month(y, m));
    }
    // "in June"
    let led = i > 0 && MONTH_LEADS.contains(&words[i - 1].lower.as_str());
    if w.capital && led {
        let (ty, tm, _) = civil_from_days(today);
        let y = if m <= tm { ty } else { ty - 1 };
        return (1, whole_month(y, m));
    }
    (1, None)
}

/// Days since Monday (0) of a day since 1970 (1970-01-01 was a Thursday).
fn weekday(day: i64) -> i64 {
    (day + 3).rem_euclid(7)
}

/// How many a count before a unit of time says, as (least, most), and how many words it took:
/// "two", "3", "a", "an", "a couple of", "a few", "several".
fn quantity(words: &[Word], i: usize) -> Option<(usize, (i64, i64))> {
    const NUMBERS: [&str; 12] = [
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    ];
    let w = words[i].lower.as_str();
    let vague = |k: usize| -> Option<(usize, (i64, i64))> {
        match words.get(k)?.lower.as_str() {
            "few" => Some((k + 1 - i, (2, 4))),
            "several" => Some((k + 1 - i, (3, 6))),
            "couple" => {
                let of = words.get(k + 1).is_some_and(|o| o.lower == "of");
                Some((k + 1 + usize::from(of) - i, (2, 3)))
            }
            _ => None,
        }
    };
    match w {
        "a" | "an" => vague(i + 1).or(Some((1, (1, 1)))),
        "few" | "several" | "couple" => vague(i),
        _ => {
            let n = match NUMBERS.iter().position(|n| *n == w) {
                Some(k) => k as i64 + 1,
                None if w.len() <= 2 && w.bytes().all(|b| b.is_ascii_digit()) => w.parse().ok()?,
                None => return None,
            };
            (n > 0).then_some((1, (n, n)))
        }
    }
}

/// Day `d` of month `m`: in year `y` when given, else the next year the text names after it
/// ("August 11 and August 15 2023"), else the latest such day up to today.
fn dated(words: &[Word], after: usize, y: Option<i64>, m: u32, d: u32, today: i64) -> Option<i64> {
    if let Some(y) = y.or_else(|| words[after.min(words.len())..].iter().find_map(year)) {
        return valid(y, m, d);
    }
    let (ty, ..) = civil_from_days(today);
    match valid(ty, m, d) {
        Some(x) if x <= today => Some(x),
        _ => valid(ty - 1, m, d),
    }
}

fn whole_month(y: i64, m: u32) -> Option<(i64, i64)> {
    let first = valid(y, m, 1)?;
    Some((first, first + days_in(y, m) as i64 - 1))
}

/// From the first day of the month `from` months after today's (before, when negative) to the
/// last day of the month `to` months after it: "last month" is (-1, -1), "next month" (1, 1).
fn months(today: i64, from: i64, to: i64) -> Option<(i64, i64)> {
    let (y, m, _) = civil_from_days(today);
    let month = |k: i64| {
        let n = y * 12 + i64::from(m) - 1 + k;
        whole_month(n.div_euclid(12), n.rem_euclid(12) as u32 + 1)
    };
    Some((month(from)?.0, month(to)?.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day_of(y: i64, m: i64, d: i64) -> f64 {
        days_from_civil(y, m, d) as f64 * DAY
    }

    /// Each text's windows at `now`, against the spans of days (first, last) it names.
    fn check(now: f64, cases: &[(&str, &[(f64, f64)])]) {
        for (text, spans) in cases {
            let want: Vec<(f64, f64)> = spans
                .iter()
                .map(|&(first, last)| (first - DAY, last + 8.0 * DAY))
                .collect();
            let got: Vec<(f64, f64)> = windows(text, now).iter().map(|w| (w.from(), w.to())).collect();
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn dates_in_the_forms_people_write_them() {
        let june3 = day_of(2023, 6, 3);
        check(
            day_of(2024, 1, 10) + 3600.0,
            &[
                (
                    "What new activity did Maria start, as mentioned on 3 June, 2023?",
                    &[(june3, june3)],
                ),
                ("what happened on June 3rd, 2023", &[(june3, june3)]),
                ("on 3rd June 2023?", &[(june3, june3)]),
                ("the log from 2023-06-03 says", &[(june3, june3)]),
                ("June 3,2023", &[(june3, june3)]),
                (
                    "Where did Joanna travel to in July 2022?",
                    &[(day_of(2022, 7, 1), day_of(2022, 7, 31))],
                ),
                (
                    "Which book did Tim recommend on 8th December, 2023?",
                    &[(day_of(2023, 12, 8), day_of(2023, 12, 8))],
                ),
            ],
        );
    }

    #[test]
    fn a_missing_year_is_the_next_named_or_the_latest_past() {
        let (aug11, aug15) = (day_of(2023, 8, 11), day_of(2023, 8, 15));
        check(
            day_of(2024, 1, 10) + 3600.0,
            &[
                (
                    "Where was John between August 11 and August 15 2023?",
                    &[(aug11, aug11), (aug15, aug15)],
                ),
                // December is still to come in January: the last one.
                (
                    "what did we fix on December 20?",
                    &[(day_of(2023, 12, 20), day_of(2023, 12, 20))],
                ),
                (
                    "When did Melanie go camping in June?",
                    &[(day_of(2023, 6, 1), day_of(2023, 6, 30))],
                ),
                ("the deploy of January 5", &[(day_of(2024, 1, 5), day_of(2024, 1, 5))]),
            ],
        );
    }

    #[test]
    fn relative_days_count_from_now() {
        let today = day_of(2024, 3, 20);
        check(
            today + 15.0 * 3600.0,
            &[
                ("what did I say yesterday?", &[(today - DAY, today - DAY)]),
                ("anything new today", &[(today, today)]),
                ("the bug from last week", &[(today - 13.0 * DAY, today - 7.0 * DAY)]),
                ("the plan from last month", &[(day_of(2024, 2, 1), day_of(2024, 2, 29))]),
                // 2024-03-20 is a Wednesday.
                (
                    "what did we decide last Friday?",
                    &[(day_of(2024, 3, 15), day_of(2024, 3, 15))],
                ),
                ("since last wednesday", &[(today - 7.0 * DAY, today - 7.0 * DAY)]),
                (
                    "see the log at 2024-03-18T09:30:00Z",
                    &[(day_of(2024, 3, 18), day_of(2024, 3, 18))],
                ),
                ("what I told you last night", &[(today - DAY, today - DAY)]),
                (
                    "how was your hike last weekend?",
                    &[(day_of(2024, 3, 16), day_of(2024, 3, 17))],
                ),
                ("everything this week", &[(day_of(2024, 3, 18), day_of(2024, 3, 24))]),
                ("and this month", &[(day_of(2024, 3, 1), day_of(2024, 3, 31))]),
                ("the one from 3 days ago", &[(today - 3.0 * DAY, today - 3.0 * DAY)]),
                ("a few days ago you said", &[(today - 4.0 * DAY, today - 2.0 * DAY)]),
                (
                    "the idea from two weeks ago",
                    &[(today - 17.0 * DAY, today - 11.0 * DAY)],
                ),
                ("a month ago", &[(day_of(2024, 2, 1), day_of(2024, 2, 29))]),
                ("a couple of months ago", &[(day_of(2023, 12, 1), day_of(2024, 1, 31))]),
                // Not a count of anything ago, nor a time.
                ("a day at the beach, years ago", &[]),
                // Anchored to the date after it, not to now (2023-04-10 was a Monday).
                (
                    "What did Maria do last weekend before April 10, 2023?",
                    &[
                        (day_of(2023, 4, 8), day_of(2023, 4, 9)),
                        (day_of(2023, 4, 10), day_of(2023, 4, 10)),
                    ],
                ),
                (
                    "last week before 3 June 2023",
                    &[
                        (day_of(2023, 5, 21), day_of(2023, 5, 27)),
                        (day_of(2023, 6, 3), day_of(2023, 6, 3)),
                    ],
                ),
            ],
        );
    }

    #[test]
    fn no_run_of_time_words_breaks_the_reading() {
        // Every sequence of up to four such words, ends of text included (a phrase cut short
        // once read past the last word).
        const VOCABULARY: [&str; 14] = [
            "the", "a", "two", "week", "weekend", "sunday", "day", "before", "after", "last", "August", "3", "2023",
            "ago",
        ];
        let now = day_of(2024, 3, 15);
        let mut texts = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = texts
                .iter()
                .flat_map(|t| VOCABULARY.iter().map(move |w| format!("{t} {w}")))
                .collect();
            for t in &longer {
                windows(t, now);
                mentioned(t, now);
            }
            texts = longer;
        }
    }

    #[test]
    fn a_time_told_by_where_it_lies_from_a_named_day_is_that_stretch() {
        // Read on 2024-03-15 (a Friday); 2023-08-03 was a Thursday, 2022-10-25 a Tuesday.
        let today = day_of(2024, 3, 15);
        check(
            today + 10.0 * 3600.0,
            &[
                (
                    "What did John do the week before August 3, 2023 with his kids?",
                    &[(day_of(2023, 7, 27), day_of(2023, 8, 2))],
                ),
                (
                    "the week after 3 August 2023",
                    &[(day_of(2023, 8, 4), day_of(2023, 8, 10))],
                ),
                (
                    "the puppy she got two weeks before August 11, 2023",
                    &[(day_of(2023, 7, 25), day_of(2023, 7, 31))],
                ),
                (
                    "shown on the Sunday before October 25, 2022?",
                    &[(day_of(2022, 10, 23), day_of(2022, 10, 23))],
                ),
                (
                    "the Sunday after October 25, 2022",
                    &[(day_of(2022, 10, 30), day_of(2022, 10, 30))],
                ),
                (
                    "the weekend before 3 August 2023",
                    &[(day_of(2023, 7, 29), day_of(2023, 7, 30))],
                ),
                (
                    "the weekend after 3 August 2023",
                    &[(day_of(2023, 8, 5), day_of(2023, 8, 6))],
                ),
                (
                    "3 days after 3 August 2023",
                    &[(day_of(2023, 8, 6), day_of(2023, 8, 6))],
                ),
                ("the day before yesterday", &[(today - 2.0 * DAY, today - 2.0 * DAY)]),
                ("a month after June 2023", &[(day_of(2023, 7, 1), day_of(2023, 7, 31))]),
                // Before a time that is not named, or a unit that is not one: the named day alone.
                (
                    "the meeting before 3 August 2023",
                    &[(day_of(2023, 8, 3), day_of(2023, 8, 3))],
                ),
                ("the week before the launch", &[]),
                ("as it was the week before", &[]),
                ("a day after", &[]),
                (
                    "a few weeks before 3 August 2023",
                    &[(day_of(2023, 8, 3), day_of(2023, 8, 3))],
                ),
            ],
        );
    }

    #[test]
    fn a_weekend_is_the_one_before_the_one_in_progress_and_a_time_to_come_is_a_window_too() {
        // 2024-03-23 is a Saturday: last weekend is the one before.
        let saturday = day_of(2024, 3, 23);
        check(
            saturday + 10.0 * 3600.0,
            &[
                ("last weekend", &[(saturday - 7.0 * DAY, saturday - 6.0 * DAY)]),
                ("this weekend", &[(saturday, saturday + DAY)]),
            ],
        );
        // On the Wednesday before, what is to come is a window as well (its mentions are plans).
        let today = saturday - 3.0 * DAY;
        check(
            today + 10.0 * 3600.0,
            &[
                ("see you tomorrow", &[(today + DAY, today + DAY)]),
                ("next week", &[(today + 7.0 * DAY, today + 13.0 * DAY)]),
                ("next month", &[(day_of(2024, 4, 1), day_of(2024, 4, 30))]),
                ("this weekend", &[(saturday, saturday + DAY)]),
                ("on 5 May 2030", &[(day_of(2030, 5, 5), day_of(2030, 5, 5))]),
            ],
        );
    }

    #[test]
    fn a_text_speaks_of_the_days_it_names_but_its_own() {
        // Said on Tuesday 2023-04-18.
        let at = day_of(2023, 4, 18) + 19.5 * 3600.0;
        let day = |y, m, d| days_from_civil(y, m, d);
        let cases: [(&str, &[(i64, i64)]); 9] = [
            (
                "My colleagues and I went to a convention together last month.",
                &[(day(2023, 3, 1), day(2023, 3, 31))],
            ),
            // Plans: what is to come is spoken of too.
            (
                "We're going camping next month, and I'll call you tomorrow!",
                &[
                    (day(2023, 5, 1), day(2023, 5, 31)),
                    (day(2023, 4, 19), day(2023, 4, 19)),
                ],
            ),
            ("I went hiking last weekend.", &[(day(2023, 4, 15), day(2023, 4, 16))]),
            ("I adopted her two weeks ago", &[(day(2023, 4, 1), day(2023, 4, 7))]),
            ("Busy this week", &[]),
            (
                "I ran a charity race yesterday!",
                &[(day(2023, 4, 17), day(2023, 4, 17))],
            ),
            (
                "Today was great; on 2 April, 2023 we met, and again on April 2nd.",
                &[(day(2023, 4, 2), day(2023, 4, 2))],
            ),
            ("I'm so happy today", &[]),
            ("Nothing dated here", &[]),
        ];
        for (text, want) in cases {
            assert_eq!(mentioned(text, at), want, "{text}");
        }
    }

    #[test]
    fn a_message_full_of_dates_names_the_first_few() {
        let log: String = (1..=28).map(|d| format!("2023-02-{d:02} ok\n")).collect();
        let w = windows(&log, day_of(2024, 1, 1));
        assert_eq!(w.len(), MAX_WINDOWS);
        assert_eq!(w[0].from(), day_of(2023, 2, 1) - DAY);
    }

    #[test]
    fn words_that_only_look_like_dates_name_no_time() {
        let cases: Vec<(&str, &[(f64, f64)])> = [
            "You may want to march on",
            "May I ask something?",
            "It happened in 2023",
            "see issue 3 in the june branch",
            "We shipped 31 builds",
            "on 31 February, 2023",
            "2023-13-01",
            "Order 1234-56-78",
            "",
            // A weekday alone may be the next one or the last.
            "see you on Friday",
        ]
        .into_iter()
        .map(|t| (t, &[][..]))
        .collect();
        check(day_of(2024, 3, 20), &cases);
    }
}
