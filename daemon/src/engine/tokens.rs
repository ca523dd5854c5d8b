//! Token estimates: cl100k counts of a message's text plus a small per-message overhead,
//! corrected per model by the ratio the provider's own counts teach us.

use crate::formats::Message;

/// Tokens a chat message costs beyond its text (role, separators), as providers count.
const PER_MESSAGE: u32 = 4;
/// What one non-text part (an image, a file) is counted as: a low-detail image's cost.
const PER_ATTACHMENT: u32 = 85;

/// The plausible range of provider count / our count; outside it a ratio is not kept (a reply
/// reported out of order, a different request).
pub const RATIO_RANGE: (f64, f64) = (0.5, 2.0);
/// Weight of a new ratio in the running average.
const RATIO_WEIGHT: f64 = 0.3;

pub fn text_tokens(text: &str) -> u32 {
    if text.is_empty() {
        return 0;
    }
    tiktoken_rs::cl100k_base_singleton().encode_ordinary(text).len() as u32
}

pub fn message_tokens(m: &Message) -> u32 {
    let attachments = match m.raw.get("content") {
        Some(serde_json::Value::Array(parts)) => parts
            .iter()
            .filter(|p| {
                let t = p.get("type").and_then(|t| t.as_str()).unwrap_or("");
                !t.contains("text")
            })
            .count() as u32,
        _ => 0,
    };
    text_tokens(&m.text) + PER_MESSAGE + attachments * PER_ATTACHMENT
}

/// Applies a per-model ratio to our own count.
pub fn corrected(tokens: u64, ratio: Option<f64>) -> u64 {
    (tokens as f64 * ratio.unwrap_or(1.0)).ceil() as u64
}

/// The running ratio after one observation, or None when the observation is implausible.
pub fn next_ratio(previous: Option<f64>, provider: u64, ours: u64) -> Option<f64> {
    if ours == 0 || provider == 0 {
        return None;
    }
    let r = provider as f64 / ours as f64;
    if !(RATIO_RANGE.0..=RATIO_RANGE.1).contains(&r) {
        return None;
    }
    Some(match previous {
        Some(p) => p + RATIO_WEIGHT * (r - p),
        None => r,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_cl100k() {
        assert_eq!(text_tokens("hello world"), 2);
        assert_eq!(text_tokens(""), 0);
    }

    #[test]
    fn implausible_ratios_are_discarded() {
        assert_eq!(next_ratio(None, 110, 100), Some(1.1));
        assert_eq!(next_ratio(Some(1.0), 500, 100), None);
        assert_eq!(next_ratio(Some(1.0), 10, 100), None);
        let r = next_ratio(Some(1.0), 120, 100).unwrap();
        assert!((r - 1.06).abs() < 1e-9);
    }
}
