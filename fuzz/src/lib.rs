//! The checks the fuzz targets run, kept in a library so `tests/regressions.rs` runs every
//! input the fuzzer ever found (or was seeded with) in the ordinary test suite.
//!
//! - `frames`: a byte stream cut into arbitrary reads goes through the frame decoder and every
//!   body through the envelope decoder. No panic; a body is never over the limit; a request
//!   that decodes encodes and decodes to itself, and decodes alike when decorate's tools are
//!   passed through as bytes (the daemon's decoder), whose messages' bytes are those messages;
//!   a body read as a reply without its `ok.request` (the load benchmark's client) reads as the
//!   whole one with that field null.
//! - `requests`: JSON text goes through the provider-request and reply parsers (Chat
//!   Completions, Responses, Anthropic Messages). No panic; a request that parses renders to a
//!   request that parses, and rendering is a fixpoint from there.

use bytes::BytesMut;
use recalld_protocol::envelope::decode_reply;
use recalld_protocol::{decode_request, decode_request_lean, encode_request, Frame, FrameDecoder};

/// The first byte sets the frame limit, the second the read size; the rest is the stream.
pub fn frames(data: &[u8]) {
    let [limit, read, stream @ ..] = data else { return };
    let max = 8 + usize::from(*limit) * 16;
    let read = usize::from(*read).max(1);
    let mut decoder = FrameDecoder::new(max);
    let mut buf = BytesMut::new();
    for chunk in stream.chunks(read) {
        buf.extend_from_slice(chunk);
        while let Some(frame) = decoder.decode(&mut buf) {
            match frame {
                Frame::Body(body) => {
                    assert!(
                        body.len() <= max,
                        "a body of {} bytes over the limit of {max}",
                        body.len()
                    );
                    envelope(&body);
                }
                Frame::TooLarge { len } => assert!(len > max, "{len} bytes called too large under {max}"),
            }
        }
    }
}

fn envelope(body: &[u8]) {
    let decoded = decode_request(body);
    if let Ok(request) = &decoded {
        let again = decode_request(&encode_request(request)).expect("an encoded request decodes");
        assert_eq!(&again, request, "a request survives encoding");
    }
    let lean = decode_request_lean(bytes::Bytes::copy_from_slice(body)).map(|(mut request, passed)| {
        if let Some(tools) = passed.tools {
            let slot = request.args.get_mut("request").and_then(|r| r.get_mut("tools"));
            *slot.expect("tools taken out leave their place") = tools.to_value();
        }
        // The list the decoder's walk reads: `messages` when it is a list, else `input`.
        let request_of = request.args.get("request");
        let list = ["messages", "input"]
            .into_iter()
            .find_map(|k| request_of.and_then(|r| r.get(k)).filter(|l| l.is_array()));
        for (i, item) in passed.items.iter().enumerate() {
            if let Some(item) = item {
                let value: serde_json::Value = rmp_serde::from_slice(item).expect("a message's bytes decode");
                assert_eq!(
                    list.and_then(|l| l.get(i)),
                    Some(&value),
                    "message {i}'s bytes are the message"
                );
            }
        }
        request
    });
    assert_eq!(lean, decoded, "the daemon's decoder reads what the plain one reads");
    let _ = decode_reply(body);
    // A reply read without its `ok.request` reads as the whole one with that field null.
    if let Some(cut) = recalld_protocol::raw::reply_without(body, "request") {
        if let Ok(mut whole) = rmp_serde::from_slice::<serde_json::Value>(body) {
            if let Some(slot) = whole.get_mut("ok").and_then(|ok| ok.get_mut("request")) {
                *slot = serde_json::Value::Null;
            }
            let cut: serde_json::Value = rmp_serde::from_slice(&cut).expect("a reply that decoded decodes cut");
            assert_eq!(cut, whole, "a reply cut reads as the whole one");
        }
    }
}

/// The input is JSON text; anything else is no request at all.
#[cfg(feature = "requests")]
pub fn requests(data: &[u8]) {
    use recalld::formats::{parse_request, parse_response, render_request};

    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = parse_response(&value);
    let Ok(parsed) = parse_request(value.clone()) else {
        return;
    };
    let render =
        |p: &recalld::formats::ParsedRequest| render_request(p.format, &p.instructions, &p.history, &p.rest, &[]);
    let once = render(&parsed);
    let reparsed =
        parse_request(once.clone()).unwrap_or_else(|e| panic!("a rendered request does not parse: {e}\n{once}"));
    assert_eq!(reparsed.format, parsed.format, "the format survives rendering");
    let twice = render(&reparsed);
    assert_eq!(twice, once, "rendering is a fixpoint");
}
