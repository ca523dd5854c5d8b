//! A part of a request kept as its MessagePack bytes, passed through without being read.
//!
//! A provider request's tool definitions are often most of its bytes (9 KB of schemas in a
//! tau-bench request), come back unchanged with every call, and are read by the daemon only to
//! be written back into the request it assembles. Decoding them into JSON values, one small
//! allocation per key and string, and encoding them again was a fifth of the request path's
//! work on agent traffic (docs/benchmarks.md, session 46). So decorate's `args.request.tools`
//! is taken out of the body before it is decoded ([`lean_decorate`]) when its bytes decode to
//! exactly the JSON value they stand for, and written back as they came. The same walk finds the
//! bytes of each message the request holds, so a message sent again and assembled into the reply
//! unchanged is written back as the bytes it came as.

use std::collections::HashSet;
use std::ops::Range;

use serde_json::Value;

/// One MessagePack value's bytes, checked to be a JSON value: string keys, each once per map;
/// UTF-8 strings; finite numbers; no binary or extension types.
#[derive(Debug, Clone)]
pub struct Raw(Vec<u8>);

impl Raw {
    /// The bytes of `value` as [`encode_value`](crate::encode_value) writes them.
    pub fn of(value: &Value) -> Raw {
        Raw(crate::encode_value(value))
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The JSON value the bytes stand for.
    pub fn to_value(&self) -> Value {
        rmp_serde::from_slice(&self.0).expect("a Raw holds a checked JSON value")
    }

    /// Whether the value is an array with an element that is a map holding `key` (a provider
    /// request's tools: Anthropic's have `input_schema`).
    pub fn has_item_with_key(&self, key: &str) -> bool {
        let mut r = Reader { buf: &self.0, at: 0 };
        let Some(n) = r.array_len() else { return false };
        for _ in 0..n {
            let Some(fields) = r.map_len() else {
                if r.skip().is_none() {
                    return false;
                }
                continue;
            };
            for _ in 0..fields {
                let k = r.str();
                if k == Some(key.as_bytes()) {
                    return true;
                }
                if k.is_none() || r.skip().is_none() {
                    return false;
                }
            }
        }
        false
    }
}

/// Equal when they stand for equal JSON values (two encodings of one value are equal).
impl PartialEq for Raw {
    fn eq(&self, other: &Raw) -> bool {
        self.0 == other.0 || self.to_value() == other.to_value()
    }
}

/// Values smaller than this are decoded as before: passing them through saves nothing.
const SMALLEST: usize = 256;

/// Nesting deeper than this is left to the decoder (and its errors).
const DEEPEST: usize = 64;

/// What one walk over a decorate's body found ([`lean_decorate`]).
#[derive(Debug)]
pub struct Lean {
    /// Where `args.request.tools` stands, when they are to be taken out ([`Lean::take_tools`]).
    pub tools: Option<Range<usize>>,
    /// Where each element of the request's message list (`messages`, else `input` when it is a
    /// list) stands in the body to decode (the tools taken out): `None` for one whose bytes are
    /// not a plain JSON value; empty when there is no list.
    pub items: Vec<Option<Range<usize>>>,
}

impl Lean {
    /// `body` with the tools taken out (nil in their place; in place when nothing else holds
    /// the body, so no second copy of a large request is made), and their bytes.
    pub fn take_tools(&self, body: bytes::Bytes) -> (bytes::Bytes, Option<Raw>) {
        let Some(t) = self.tools.clone() else {
            return (body, None);
        };
        let raw = Raw(body[t.clone()].to_vec());
        let mut lean = body
            .try_into_mut()
            .unwrap_or_else(|shared| bytes::BytesMut::from(&shared[..]));
        lean[t.start] = NIL;
        lean.copy_within(t.end.., t.start + 1);
        lean.truncate(lean.len() + 1 - t.len());
        (lean.freeze(), Some(raw))
    }
}

/// One walk over a decorate's body: its `args.request.tools` taken out when they are a plain
/// JSON value (see [`Raw`]; non-finite numbers are refused by the decoder, which names where they
/// are, and a key written twice keeps only its last value there) of [`SMALLEST`] bytes or more,
/// and where its messages stand. `None` when `body` is not a decorate, or the way to the request
/// is anything but plain (a key twice, a key not a string, a map where one was expected not a
/// map): the decoder then reads it all, with its errors.
pub fn lean_decorate(body: &[u8]) -> Option<Lean> {
    let mut r = Reader::at(body, 0);
    let (mut decorate, mut request) = (None, None);
    for _ in 0..r.map_len()? {
        match r.str()? {
            b"op" if decorate.is_none() => decorate = Some(r.str()? == &b"decorate"[..]),
            b"args" if request.is_none() => request = Some(r.args()?),
            b"op" | b"args" => return None,
            _ => r.skip()?,
        }
    }
    let Found { tools, items } = request?.filter(|_| decorate == Some(true))?;
    let Some(t) = tools.filter(|t| t.len() >= SMALLEST) else {
        return Some(Lean { tools: None, items });
    };
    // The messages after the tools move with the rest of the body.
    let shift = |at: usize| if at >= t.end { at + 1 - t.len() } else { at };
    let items = items
        .into_iter()
        .map(|i| i.map(|i| shift(i.start)..shift(i.end)))
        .collect();
    Some(Lean { tools: Some(t), items })
}

/// A reply's body with `ok.<key>` in it replaced by nil, for a client that reads the rest only:
/// a decorate's `request` is most of its reply, and a client that reads only its `info` (the
/// load benchmark, whose own CPU shares the machine with the daemon it measures) need not
/// decode it, even to skip it. `None` when the body is not a map whose one `ok` is a map holding
/// `key` once (an error reply, say): the caller then decodes the body as it is.
pub fn reply_without(body: &[u8], key: &str) -> Option<Vec<u8>> {
    let mut r = Reader::at(body, 0);
    let mut found: Option<Option<Range<usize>>> = None;
    for _ in 0..r.map_len()? {
        if r.str()? != b"ok" {
            r.skip()?;
            continue;
        }
        if found.is_some() {
            return None;
        }
        let mut at = None;
        for _ in 0..r.map_len()? {
            let this = r.str()? == key.as_bytes();
            let start = r.at;
            r.skip()?;
            if this {
                if at.is_some() {
                    return None;
                }
                at = Some(start..r.at);
            }
        }
        found = Some(at);
    }
    if r.at != body.len() {
        return None;
    }
    let cut = found??;
    let mut out = Vec::with_capacity(body.len() + 1 - cut.len());
    out.extend_from_slice(&body[..cut.start]);
    out.push(NIL);
    out.extend_from_slice(&body[cut.end..]);
    Some(out)
}

/// What the walk found in a decorate's `args.request`.
struct Found {
    tools: Option<Range<usize>>,
    items: Vec<Option<Range<usize>>>,
}

const NIL: u8 = 0xc0;

/// Maps of up to this many keys are checked for a key written twice without allocating.
const FEW_KEYS: usize = 16;

/// A cursor over MessagePack bytes; every read returns `None` past the end or on a marker it
/// does not expect.
struct Reader<'b> {
    buf: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn at(buf: &'b [u8], at: usize) -> Reader<'b> {
        Reader { buf, at }
    }

    fn take(&mut self, n: usize) -> Option<&'b [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.buf.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn peek(&self) -> Option<u8> {
        self.buf.get(self.at).copied()
    }

    /// A big-endian length of `n` bytes.
    fn len(&mut self, n: usize) -> Option<usize> {
        let b = self.take(n)?;
        Some(b.iter().fold(0usize, |acc, &x| acc << 8 | x as usize))
    }

    fn str(&mut self) -> Option<&'b [u8]> {
        let n = match self.byte()? {
            m @ 0xa0..=0xbf => (m & 0x1f) as usize,
            0xd9 => self.len(1)?,
            0xda => self.len(2)?,
            0xdb => self.len(4)?,
            _ => return None,
        };
        self.take(n)
    }

    fn map_len(&mut self) -> Option<usize> {
        self.count(0x80, 0xde)
    }

    fn array_len(&mut self) -> Option<usize> {
        self.count(0x90, 0xdc)
    }

    /// The entries of the map or array at the cursor, whose fix marker starts at `fix` and whose
    /// 16-bit marker is `wide` (its 32-bit one the next), read past its header; the cursor does
    /// not move for anything else.
    fn count(&mut self, fix: u8, wide: u8) -> Option<usize> {
        let m = self.peek()?;
        let n = match m {
            _ if (fix..=fix + 0x0f).contains(&m) => {
                self.at += 1;
                (m & 0x0f) as usize
            }
            _ if m == wide || m == wide + 1 => {
                self.at += 1;
                self.len(if m == wide { 2 } else { 4 })?
            }
            _ => return None,
        };
        Some(n)
    }

    /// Past a decorate's `args` (a map): what its `request` holds, if it has one.
    fn args(&mut self) -> Option<Option<Found>> {
        let mut found = None;
        for _ in 0..self.map_len()? {
            match self.str()? {
                b"request" if found.is_none() => found = Some(self.request()?),
                b"request" => return None,
                _ => self.skip()?,
            }
        }
        Some(found)
    }

    /// Past a decorate's `request` (a map): where its tools and its list's elements stand.
    fn request(&mut self) -> Option<Found> {
        let (mut tools, mut messages, mut input) = (None, None, None);
        for _ in 0..self.map_len()? {
            match self.str()? {
                b"tools" if tools.is_none() => tools = Some(self.plain()?),
                b"messages" if messages.is_none() => messages = Some(self.list()?),
                b"input" if input.is_none() => input = Some(self.list()?),
                b"tools" | b"messages" | b"input" => return None,
                _ => self.skip()?,
            }
        }
        Some(Found {
            tools: tools.flatten(),
            items: messages.flatten().or(input.flatten()).unwrap_or_default(),
        })
    }

    /// Past one value: where it stands when it is a plain JSON value (see [`Raw`]).
    fn plain(&mut self) -> Option<Option<Range<usize>>> {
        let start = self.at;
        if self.check(DEEPEST).is_some() {
            return Some(Some(start..self.at));
        }
        self.at = start;
        self.skip()?;
        Some(None)
    }

    /// Past one value: when it is an array, where each element stands (see [`Reader::plain`]).
    fn list(&mut self) -> Option<Option<Vec<Option<Range<usize>>>>> {
        let Some(n) = self.array_len() else {
            self.skip()?;
            return Some(None);
        };
        let mut items = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            items.push(self.plain()?);
        }
        Some(Some(items))
    }

    /// Past one value, unchecked. A loop over the values still to pass, not a recursion: a
    /// client's request nested a million levels deep costs no stack (each value read takes a
    /// byte at least, so the loop ends with the body).
    fn skip(&mut self) -> Option<()> {
        let mut pending: usize = 1;
        while pending > 0 {
            pending -= 1;
            let m = self.byte()?;
            let (values, bytes) = match m {
                0x00..=0x7f | 0xc0 | 0xc2 | 0xc3 | 0xe0..=0xff => (0, 0),
                0x80..=0x8f => (2 * (m & 0x0f) as usize, 0),
                0x90..=0x9f => ((m & 0x0f) as usize, 0),
                0xa0..=0xbf => (0, (m & 0x1f) as usize),
                0xc4 | 0xd9 => (0, self.len(1)?),
                0xc5 | 0xda => (0, self.len(2)?),
                0xc6 | 0xdb => (0, self.len(4)?),
                0xc7 => (0, self.len(1)? + 1),
                0xc8 => (0, self.len(2)? + 1),
                0xc9 => (0, self.len(4)? + 1),
                0xca => (0, 4),
                0xcb => (0, 8),
                0xcc | 0xd0 => (0, 1),
                0xcd | 0xd1 => (0, 2),
                0xce | 0xd2 => (0, 4),
                0xcf | 0xd3 => (0, 8),
                0xd4 => (0, 2),
                0xd5 => (0, 3),
                0xd6 => (0, 5),
                0xd7 => (0, 9),
                0xd8 => (0, 17),
                0xdc => (self.len(2)?, 0),
                0xdd => (self.len(4)?, 0),
                0xde => (self.len(2)?.checked_mul(2)?, 0),
                0xdf => (self.len(4)?.checked_mul(2)?, 0),
                0xc1 => return None,
            };
            self.take(bytes)?;
            pending = pending.checked_add(values)?;
        }
        Some(())
    }

    /// Past one value that is a JSON value as [`Raw`] says, at most `depth` levels deep.
    fn check(&mut self, depth: usize) -> Option<()> {
        let depth = depth.checked_sub(1)?;
        match self.peek()? {
            0x80..=0x8f | 0xde | 0xdf => {
                let n = self.map_len()?;
                // Keys seen, to find one written twice: on the stack for the small maps schemas
                // are made of (a vector each was a fifth of this check's time), hashed past that.
                let mut few: [&[u8]; FEW_KEYS] = [&[]; FEW_KEYS];
                let mut many: HashSet<&[u8]> = HashSet::new();
                for i in 0..n {
                    let key = self.str()?;
                    std::str::from_utf8(key).ok()?;
                    let new = if n <= FEW_KEYS {
                        let new = !few[..i].contains(&key);
                        few[i] = key;
                        new
                    } else {
                        many.insert(key)
                    };
                    if !new {
                        return None;
                    }
                    self.check(depth)?;
                }
                Some(())
            }
            0x90..=0x9f | 0xdc | 0xdd => {
                for _ in 0..self.array_len()? {
                    self.check(depth)?;
                }
                Some(())
            }
            0xa0..=0xbf | 0xd9..=0xdb => std::str::from_utf8(self.str()?).ok().map(|_| ()),
            0xca => {
                self.at += 1;
                let b = self.take(4)?;
                f32::from_be_bytes(b.try_into().ok()?).is_finite().then_some(())
            }
            0xcb => {
                self.at += 1;
                let b = self.take(8)?;
                f64::from_be_bytes(b.try_into().ok()?).is_finite().then_some(())
            }
            // Binary, extension types and the unused marker.
            0xc1 | 0xc4..=0xc9 | 0xd4..=0xd8 => None,
            _ => self.skip(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pack(v: &Value) -> Vec<u8> {
        rmp_serde::to_vec_named(v).unwrap()
    }

    /// The body to decode and the tools taken out of it.
    fn take_decorate_tools(body: &[u8]) -> Option<(Vec<u8>, Raw)> {
        let lean = lean_decorate(body)?;
        let (decoded, tools) = lean.take_tools(bytes::Bytes::copy_from_slice(body));
        Some((decoded.to_vec(), tools?))
    }

    /// Each message as its bytes decode, from the body to decode.
    fn messages_of(body: &[u8]) -> Option<Vec<Option<Value>>> {
        let lean = lean_decorate(body)?;
        let (decoded, _) = lean.take_tools(bytes::Bytes::copy_from_slice(body));
        let value = |r: Range<usize>| rmp_serde::from_slice(&decoded[r]).unwrap();
        Some(lean.items.into_iter().map(|r| r.map(value)).collect())
    }

    fn tools() -> Value {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string", "description": "a city's name, as people write it"}}, "required": ["city"]});
        json!((0..4).map(|i| json!({"type": "function", "function": {"name": format!("tool_{i}"), "description": "looks things up ✓", "parameters": schema, "strict": true, "weight": 0.5}})).collect::<Vec<_>>())
    }

    fn decorate(tools: Value) -> Value {
        json!({"id": 9, "op": "decorate", "args": {"memory": "m", "request": {"model": "x", "tools": tools, "messages": [{"role": "user", "content": "hi"}]}, "now": 1.5}})
    }

    /// The request decoded from the lean body with the raw tools put back in their place.
    fn restored(body: &[u8]) -> Option<Value> {
        let (lean, raw) = take_decorate_tools(body)?;
        let mut v: Value = rmp_serde::from_slice(&lean).unwrap();
        let slot = &mut v["args"]["request"]["tools"];
        assert_eq!(*slot, Value::Null, "the field keeps its place as nil");
        *slot = raw.to_value();
        Some(v)
    }

    #[test]
    fn a_replys_field_is_cut_out_and_the_rest_reads_as_before() {
        let reply = json!({"id": 3, "ok": {"request": {"messages": [{"role": "user", "content": "hi"}], "tools": tools()}, "info": {"turn": 2, "recall": null}}});
        let cut = reply_without(&pack(&reply), "request").unwrap();
        let v: Value = rmp_serde::from_slice(&cut).unwrap();
        assert_eq!(
            v,
            json!({"id": 3, "ok": {"request": null, "info": {"turn": 2, "recall": null}}})
        );
        // An error reply, a field not there, a body cut short: the caller decodes it whole.
        let err = json!({"id": 3, "err": {"code": "invalid_argument", "message": "no"}});
        assert_eq!(reply_without(&pack(&err), "request"), None);
        assert_eq!(reply_without(&pack(&reply), "nothing"), None);
        let body = pack(&reply);
        assert_eq!(reply_without(&body[..body.len() - 3], "info"), None);
        // Read as a decoder would read it, or not at all: a key twice, bytes after the reply.
        // {"ok": {k1: 1, k2: 2}, outer: {}}, written key by key so that a key may come twice.
        let written = |inner: [&str; 2], outer: &str| {
            use rmp::encode::{write_map_len, write_str, write_uint};
            let mut b = Vec::new();
            write_map_len(&mut b, 2).unwrap();
            write_str(&mut b, "ok").unwrap();
            write_map_len(&mut b, 2).unwrap();
            for (i, k) in inner.iter().enumerate() {
                write_str(&mut b, k).unwrap();
                write_uint(&mut b, i as u64 + 1).unwrap();
            }
            write_str(&mut b, outer).unwrap();
            write_map_len(&mut b, 0).unwrap();
            b
        };
        assert!(reply_without(&written(["request", "info"], "id"), "request").is_some());
        assert_eq!(reply_without(&written(["request", "request"], "id"), "request"), None);
        assert_eq!(reply_without(&written(["request", "info"], "ok"), "request"), None);
        let mut longer = pack(&reply);
        longer.push(0);
        assert_eq!(reply_without(&longer, "request"), None);
    }

    #[test]
    fn tools_are_taken_out_and_put_back_as_they_were() {
        let body = pack(&decorate(tools()));
        let (lean, raw) = take_decorate_tools(&body).unwrap();
        assert!(lean.len() + raw.bytes().len() == body.len() + 1);
        assert_eq!(raw.to_value(), tools());
        assert_eq!(restored(&body).unwrap(), decorate(tools()));
        // The key order within each map, which a provider's cached prefix sees, is the bytes'.
        assert_eq!(raw.bytes(), pack(&tools()).as_slice());
    }

    #[test]
    fn tools_are_taken_out_in_place_or_from_a_copy_when_the_body_is_shared() {
        let body = bytes::Bytes::from(pack(&decorate(tools())));
        let lean = lean_decorate(&body).unwrap();
        let (alone, _) = lean.take_tools(bytes::Bytes::copy_from_slice(&body));
        let kept = body.clone();
        let (shared, raw) = lean.take_tools(body);
        assert_eq!(alone, shared);
        assert_eq!(raw.unwrap().to_value(), tools());
        assert_eq!(kept, pack(&decorate(tools())), "the other holder's bytes are untouched");
    }

    #[test]
    fn only_a_plain_decorate_with_large_tools_is_taken_apart() {
        let mut other_op = decorate(tools());
        other_op["op"] = json!("ping");
        assert!(take_decorate_tools(&pack(&other_op)).is_none());
        assert!(take_decorate_tools(&pack(&decorate(json!([{"type": "function"}])))).is_none());
        let mut no_tools = decorate(Value::Null);
        no_tools["args"]["request"].as_object_mut().unwrap().remove("tools");
        assert!(take_decorate_tools(&pack(&no_tools)).is_none());
        assert!(take_decorate_tools(&pack(&json!([1, 2]))).is_none());
        assert!(take_decorate_tools(&[]).is_none());
    }

    #[test]
    fn tools_the_decoder_would_read_otherwise_are_left_to_it() {
        let body = pack(&decorate(tools()));
        let (_, raw) = take_decorate_tools(&body).unwrap();
        let start = body.windows(raw.bytes().len()).position(|w| w == raw.bytes()).unwrap();
        let patched = |at: usize, bytes: &[u8]| {
            let mut b = body.clone();
            b.splice(start + at..start + at + bytes.len(), bytes.iter().copied());
            b
        };
        let find = |needle: &[u8]| raw.bytes().windows(needle.len()).position(|w| w == needle).unwrap();
        // A non-finite number (the decoder refuses the request and names where it is).
        let half = find(&[0xcb, 0x3f, 0xe0]);
        let nan = f64::NAN.to_be_bytes();
        assert!(take_decorate_tools(&patched(half + 1, &nan)).is_none());
        // A string that is not UTF-8.
        let tick = find("✓".as_bytes());
        assert!(take_decorate_tools(&patched(tick, &[0xff])).is_none());
        // A key written twice in one map ("strict" renamed "weight").
        let strict = find(b"strict");
        assert!(take_decorate_tools(&patched(strict, b"weight")).is_none());
        // A binary value where a string was.
        let mut bin = body.clone();
        let s = start + find(b"\xa6object");
        bin.splice(s..s + 1, [0xc4, 6]);
        assert!(take_decorate_tools(&bin).is_none());
        // Truncated.
        assert!(take_decorate_tools(&body[..body.len() - 3]).is_none());
    }

    #[test]
    fn a_key_written_twice_is_found_in_a_map_of_any_size() {
        for n in [2, 16, 17, 300] {
            let mut map = Vec::new();
            rmp::encode::write_map_len(&mut map, n).unwrap();
            for i in 0..n {
                // The last key repeats the first.
                rmp::encode::write_str(&mut map, &format!("key {}", if i == n - 1 { 0 } else { i })).unwrap();
                rmp::encode::write_str(&mut map, &"a value long enough to be worth passing through ".repeat(4))
                    .unwrap();
            }
            let mut tools = Vec::new();
            rmp::encode::write_array_len(&mut tools, 1).unwrap();
            tools.extend(&map);
            let body = pack(&decorate(json!(null)));
            let at = body.len() - body.iter().rev().position(|&b| b == NIL).unwrap() - 1;
            let with = |tools: &[u8]| [&body[..at], tools, &body[at + 1..]].concat();
            assert!(take_decorate_tools(&with(&tools)).is_none(), "{n} keys");
            // The same map without the repeat is taken.
            let last = map.len() - map.windows(5).rev().position(|w| w == b"key 0").unwrap() - 5;
            map[last + 4] = b'x';
            tools.truncate(1);
            tools.extend(&map);
            assert!(take_decorate_tools(&with(&tools)).is_some(), "{n} keys, none twice");
        }
    }

    #[test]
    fn a_value_nested_deeper_than_any_stack_is_passed_over_or_left_to_the_decoder() {
        // A message a million arrays deep ahead of the tools: walked past without recursion.
        let mut deep = vec![0x91u8; 1_000_000];
        deep.push(0xc0);
        let mut b = Vec::new();
        rmp::encode::write_map_len(&mut b, 3).unwrap();
        rmp::encode::write_str(&mut b, "op").unwrap();
        rmp::encode::write_str(&mut b, "decorate").unwrap();
        rmp::encode::write_str(&mut b, "args").unwrap();
        rmp::encode::write_map_len(&mut b, 1).unwrap();
        rmp::encode::write_str(&mut b, "request").unwrap();
        rmp::encode::write_map_len(&mut b, 2).unwrap();
        rmp::encode::write_str(&mut b, "messages").unwrap();
        rmp::encode::write_array_len(&mut b, 1).unwrap();
        b.extend(&deep);
        rmp::encode::write_str(&mut b, "tools").unwrap();
        b.extend(pack(&tools()));
        rmp::encode::write_str(&mut b, "id").unwrap();
        rmp::encode::write_uint(&mut b, 1).unwrap();
        let lean = lean_decorate(&b).unwrap();
        assert!(lean.tools.is_some());
        assert_eq!(lean.items, vec![None], "too deep to be passed as bytes");
        // As the tools themselves: left to the decoder.
        let mut t = vec![0x91u8; 1_000_000];
        t.push(0xc0);
        let at = b.len() - pack(&tools()).len() - 4; // "id": 1 follows the tools
        let mut c = b[..at].to_vec();
        c.extend(&t);
        c.extend(&b[at + pack(&tools()).len()..]);
        assert!(lean_decorate(&c).unwrap().tools.is_none());
    }

    #[test]
    fn the_envelope_must_be_plain() {
        // "args" written twice: the decoder keeps the last, so the bytes must not be read for it.
        let mut b = Vec::new();
        rmp::encode::write_map_len(&mut b, 4).unwrap();
        rmp::encode::write_str(&mut b, "id").unwrap();
        rmp::encode::write_uint(&mut b, 9).unwrap();
        rmp::encode::write_str(&mut b, "op").unwrap();
        rmp::encode::write_str(&mut b, "decorate").unwrap();
        for args in [json!({"x": 1}), decorate(tools())["args"].clone()] {
            rmp::encode::write_str(&mut b, "args").unwrap();
            b.extend(pack(&args));
        }
        assert!(take_decorate_tools(&b).is_none());
    }

    #[test]
    fn each_message_is_found_as_its_bytes() {
        let v = decorate(tools());
        let list = v["args"]["request"]["messages"].clone();
        let messages: Vec<Option<Value>> = list.as_array().unwrap().iter().cloned().map(Some).collect();
        // With the tools ahead of them taken out (the messages move with the rest of the body),
        // and in the body left.
        let body = pack(&v);
        assert!(lean_decorate(&body).unwrap().tools.is_some());
        assert_eq!(messages_of(&body).unwrap(), messages);
        let (lean, _) = take_decorate_tools(&body).unwrap();
        assert_eq!(messages_of(&lean).unwrap(), messages);
        // Messages ahead of the tools stay where they are.
        let first = json!({"id": 1, "op": "decorate", "args": {"request": {"messages": list, "tools": tools()}}});
        assert_eq!(messages_of(&pack(&first)).unwrap(), messages);
        // A Responses request's `input` list; a string `input` has none.
        let mut responses = decorate(tools());
        let request = responses["args"]["request"].as_object_mut().unwrap();
        let input = request.remove("messages").unwrap();
        request.insert("input".into(), input);
        assert_eq!(messages_of(&pack(&responses)).unwrap().len(), 1);
        request_as_string(&mut responses);
        assert!(messages_of(&pack(&responses)).unwrap().is_empty());
        // A message whose bytes are not plain gets none; the others keep theirs.
        let mut twice = decorate(tools());
        twice["args"]["request"]["messages"] =
            json!([{"role": "user", "content": "a"}, {"role": "user", "content": "bb"}]);
        let mut b = pack(&twice);
        let at = b.windows(3).position(|w| w == b"\xa2bb").unwrap();
        b.splice(at + 1..at + 3, [0xff, 0xfe]);
        let items = messages_of(&b).unwrap();
        assert!(items[0].is_some() && items[1].is_none());
    }

    fn request_as_string(v: &mut Value) {
        v["args"]["request"]["input"] = json!("just a string");
    }

    #[test]
    fn anthropic_tools_are_told_by_their_input_schema() {
        let anthropic = Raw::of(&json!([{"name": "a", "input_schema": {"type": "object"}}]));
        let chat = Raw::of(&json!([{"type": "function", "function": {"name": "a", "input_schema": 1}}]));
        assert!(anthropic.has_item_with_key("input_schema"));
        assert!(!chat.has_item_with_key("input_schema"));
        assert!(!Raw::of(&json!({"input_schema": 1})).has_item_with_key("input_schema"));
        assert!(!Raw::of(&json!([1, "x", [2]])).has_item_with_key("input_schema"));
    }

    #[test]
    fn equal_values_written_differently_are_equal() {
        let mut small_ints = Vec::new();
        rmp::encode::write_array_len(&mut small_ints, 1).unwrap();
        rmp::encode::write_u64(&mut small_ints, 1).unwrap(); // 9 bytes where 1 would do
        assert_eq!(Raw(small_ints), Raw::of(&json!([1])));
        assert_ne!(Raw::of(&json!([1])), Raw::of(&json!([2])));
    }
}
