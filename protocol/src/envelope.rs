//! Envelopes: a request is `{id, op, args}`; a reply is `{id, ok}` or `{id, err}`.
//!
//! Bodies are MessagePack maps with field names. Request decoding is lenient about unknown
//! fields and strict about the three it needs, and it tells the caller which id to answer
//! even when the rest is wrong.

use std::io::Write;

use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{ErrorBody, ErrorCode};
use crate::raw::Raw;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub id: u64,
    pub op: String,
    #[serde(default)]
    pub args: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err: Option<ErrorBody>,
    /// More fields of `ok` (a map), each already encoded as one MessagePack value and written
    /// after its other fields (decorate's `request`, encoded by the daemon from the messages
    /// it holds instead of from a copy of them). Never decoded into: a decoded reply has every
    /// field in `ok`.
    #[serde(skip)]
    pub encoded: Vec<(String, Vec<u8>)>,
}

impl Reply {
    pub fn ok(id: u64, value: Value) -> Self {
        Reply {
            id,
            ok: Some(value),
            err: None,
            encoded: Vec::new(),
        }
    }

    /// An `ok` reply of the map `fields` and the fields `encoded` ahead (see [`Reply::encoded`]).
    pub fn ok_with(id: u64, fields: Map<String, Value>, encoded: Vec<(String, Vec<u8>)>) -> Self {
        Reply {
            encoded,
            ..Reply::ok(id, Value::Object(fields))
        }
    }

    pub fn err(id: u64, err: ErrorBody) -> Self {
        Reply {
            id,
            ok: None,
            err: Some(err),
            encoded: Vec::new(),
        }
    }
}

/// Why a request body could not be taken, with the id to answer (0 when none could be read).
#[derive(Debug, Clone, PartialEq)]
pub struct BadRequest {
    pub id: u64,
    pub error: ErrorBody,
}

/// Decodes one request body. Unknown envelope fields are ignored.
pub fn decode_request(body: &[u8]) -> Result<Request, BadRequest> {
    let bad = |id: u64, code: ErrorCode, msg: String| BadRequest {
        id,
        error: ErrorBody::new(code, msg),
    };
    let decoded = crate::finite::decode(body).map_err(|e| {
        bad(
            0,
            ErrorCode::MalformedFrame,
            format!("body is not a messagepack map: {e}"),
        )
    })?;
    let Value::Object(mut map) = decoded.value else {
        return Err(bad(0, ErrorCode::MalformedFrame, "body is not a map".into()));
    };
    let id = match map.get("id") {
        Some(v) => v
            .as_u64()
            .ok_or_else(|| bad(0, ErrorCode::MalformedFrame, "id must be an unsigned integer".into()))?,
        None => return Err(bad(0, ErrorCode::MalformedFrame, "id is missing".into())),
    };
    let op = match map.remove("op") {
        Some(Value::String(op)) => op,
        Some(_) => return Err(bad(id, ErrorCode::MalformedFrame, "op must be a string".into())),
        None => return Err(bad(id, ErrorCode::MalformedFrame, "op is missing".into())),
    };
    let args = match map.remove("args") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(args)) => args,
        Some(_) => return Err(bad(id, ErrorCode::MalformedFrame, "args must be a map".into())),
    };
    // JSON values cannot hold NaN or infinity; refuse rather than read them as absent.
    if let Some((at, v)) = decoded.non_finite {
        return Err(bad(
            id,
            ErrorCode::InvalidArgument,
            format!("{at} must be a finite number, got {v}"),
        ));
    }
    Ok(Request { id, op, args })
}

/// What [`decode_request_lean`] keeps of a decorate's body as bytes.
#[derive(Debug, Clone, Default)]
pub struct Passed {
    /// `args.request.tools`, when taken out (the field is then null in `args`).
    pub tools: Option<Raw>,
    /// The bytes of each message of `args.request.messages` (or `input`), in order, where they
    /// are a plain JSON value (see [`Raw`]); empty when not found.
    pub items: Vec<Option<Bytes>>,
}

/// [`decode_request`], with decorate's `args.request.tools` kept as its bytes when they can be
/// passed through unread ([`crate::raw::lean_decorate`]; the field is then null in
/// `args`), and the bytes of each of its messages found. The daemon decodes this way; what it
/// decodes is the same request either way.
pub fn decode_request_lean(body: Bytes) -> Result<(Request, Passed), BadRequest> {
    let Some(lean) = crate::raw::lean_decorate(&body) else {
        return decode_request(&body).map(|r| (r, Passed::default()));
    };
    let (body, tools) = lean.take_tools(body);
    let request = decode_request(&body)?;
    let items = lean.items.into_iter().map(|r| r.map(|r| body.slice(r))).collect();
    Ok((request, Passed { tools, items }))
}

/// Encodes a request body (named maps).
pub fn encode_request(req: &Request) -> Vec<u8> {
    rmp_serde::to_vec_named(req).expect("a request always encodes")
}

/// Encodes a reply body (named maps).
pub fn encode_reply(reply: &Reply) -> Vec<u8> {
    let mut dst = BytesMut::new();
    encode_reply_into(reply, &mut dst);
    dst.to_vec()
}

/// Encodes a reply body onto the end of `dst` (see `frame::encode_frame_with`).
pub fn encode_reply_into(reply: &Reply, dst: &mut BytesMut) {
    let w = &mut dst.writer();
    let fields = match &reply.ok {
        Some(Value::Object(fields)) if !reply.encoded.is_empty() => fields,
        _ => return rmp_serde::encode::write_named(w, reply).expect("a reply always encodes"),
    };
    // `{id, ok}` as the derived encoding writes it, `ok`'s map ending with the fields encoded ahead.
    let written: Result<(), rmp::encode::ValueWriteError> = (|| {
        rmp::encode::write_map_len(w, 2)?;
        rmp::encode::write_str(w, "id")?;
        rmp::encode::write_uint(w, reply.id)?;
        rmp::encode::write_str(w, "ok")?;
        rmp::encode::write_map_len(w, (fields.len() + reply.encoded.len()) as u32)?;
        for (k, v) in fields {
            rmp::encode::write_str(w, k)?;
            rmp_serde::encode::write_named(w, v).expect("a JSON value always encodes");
        }
        for (k, bytes) in &reply.encoded {
            rmp::encode::write_str(w, k)?;
            w.write_all(bytes)
                .map_err(rmp::encode::ValueWriteError::InvalidDataWrite)?;
        }
        Ok(())
    })();
    written.expect("a reply always encodes");
}

/// Encodes one value (named maps), to be a field of a reply encoded ahead ([`Reply::encoded`]).
pub fn encode_value<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(value).expect("a serialisable value always encodes")
}

/// Encodes a request body onto the end of `dst`.
pub fn encode_request_into(req: &Request, dst: &mut BytesMut) {
    rmp_serde::encode::write_named(&mut dst.writer(), req).expect("a request always encodes");
}

/// Decodes a reply body.
pub fn decode_reply(body: &[u8]) -> Result<Reply, rmp_serde::decode::Error> {
    rmp_serde::from_slice(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pack(v: &Value) -> Vec<u8> {
        rmp_serde::to_vec_named(v).unwrap()
    }

    #[test]
    fn fields_encoded_ahead_decode_as_fields_of_ok() {
        let request = json!({"model": "m", "messages": [{"role": "user", "content": "hi ✓"}]});
        let mut fields = Map::new();
        fields.insert("info".into(), json!({"lane": {"queued": 2}, "ms": 0.5}));
        let reply = Reply::ok_with(3, fields, vec![("request".into(), encode_value(&request))]);
        let back = decode_reply(&encode_reply(&reply)).unwrap();
        assert_eq!(back.id, 3);
        assert_eq!(
            back.ok,
            Some(json!({"info": {"lane": {"queued": 2}, "ms": 0.5}, "request": request}))
        );
        assert!(back.err.is_none() && back.encoded.is_empty());
        // Without fields encoded ahead, the bytes are the derived encoding's.
        let plain = Reply::ok(4, json!({"x": [1, 2]}));
        assert_eq!(encode_reply(&plain), rmp_serde::to_vec_named(&plain).unwrap());
    }

    #[test]
    fn decodes_a_request_and_ignores_unknown_fields() {
        let body = pack(&json!({"id": 7, "op": "ping", "args": {"x": 1}, "trace": "abc"}));
        let req = decode_request(&body).unwrap();
        assert_eq!(req.id, 7);
        assert_eq!(req.op, "ping");
        assert_eq!(req.args["x"], json!(1));
    }

    #[test]
    fn missing_args_is_an_empty_map() {
        let req = decode_request(&pack(&json!({"id": 1, "op": "hello"}))).unwrap();
        assert!(req.args.is_empty());
    }

    #[test]
    fn bad_envelopes_name_the_id_when_they_can() {
        let cases = [
            (vec![0xc1], 0),                                    // never-used msgpack byte
            (pack(&json!([1, 2])), 0),                          // not a map
            (pack(&json!({"op": "ping"})), 0),                  // no id
            (pack(&json!({"id": -1, "op": "ping"})), 0),        // negative id
            (pack(&json!({"id": 9, "op": 3})), 9),              // op not a string
            (pack(&json!({"id": 9, "op": "x", "args": 1})), 9), // args not a map
        ];
        for (body, id) in cases {
            let err = decode_request(&body).unwrap_err();
            assert_eq!(err.id, id);
            assert_eq!(err.error.code, ErrorCode::MalformedFrame);
        }
    }

    #[test]
    fn a_non_finite_number_is_an_invalid_argument_naming_the_field() {
        #[derive(Serialize)]
        struct Args {
            memory: &'static str,
            now: f64,
        }
        #[derive(Serialize)]
        struct Body {
            id: u64,
            op: &'static str,
            args: Args,
        }
        for now in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let body = rmp_serde::to_vec_named(&Body {
                id: 5,
                op: "decorate",
                args: Args { memory: "m", now },
            })
            .unwrap();
            let err = decode_request(&body).unwrap_err();
            assert_eq!(err.id, 5);
            assert_eq!(err.error.code, ErrorCode::InvalidArgument);
            assert!(
                err.error.message.starts_with("args.now must be a finite number"),
                "{}",
                err.error.message
            );
        }
    }

    #[test]
    fn replies_are_named_maps() {
        let ok = encode_reply(&Reply::ok(3, json!({"pong": true})));
        let v: Value = rmp_serde::from_slice(&ok).unwrap();
        assert_eq!(v, json!({"id": 3, "ok": {"pong": true}}));
        let err = encode_reply(&Reply::err(4, ErrorBody::new(ErrorCode::Timeout, "slow")));
        let v: Value = rmp_serde::from_slice(&err).unwrap();
        assert_eq!(
            v,
            json!({"id": 4, "err": {"code": "timeout", "message": "slow", "retryable": true}})
        );
    }
}
