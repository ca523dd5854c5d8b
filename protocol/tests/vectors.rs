//! Conformance vectors: each `vectors/NAME.json` has a `NAME.msgpack` twin. Decoding the
//! MessagePack gives the JSON value, and encoding the JSON value gives the MessagePack byte for
//! byte. The Python and TypeScript suites run the same check. `UPDATE_VECTORS=1` rewrites the
//! MessagePack files from the JSON.

use std::path::PathBuf;

use recalld_protocol::envelope::{decode_reply, Reply};
use recalld_protocol::{decode_request, Request};
use serde_json::Value;

fn vectors() -> Vec<(String, Value, PathBuf)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("vectors");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let json: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        out.push((name, json, path.with_extension("msgpack")));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 7, "vectors missing from {}", dir.display());
    out
}

#[test]
fn json_and_msgpack_twins_agree_byte_for_byte() {
    let update = std::env::var_os("UPDATE_VECTORS").is_some();
    for (name, json, msgpack_path) in vectors() {
        let encoded = rmp_serde::to_vec_named(&json).unwrap();
        if update {
            std::fs::write(&msgpack_path, &encoded).unwrap();
        }
        let bytes = std::fs::read(&msgpack_path).unwrap_or_else(|e| panic!("{name}: {e} (run with UPDATE_VECTORS=1)"));
        assert_eq!(encoded, bytes, "{name}: encoding differs from the checked-in twin");
        let decoded: Value = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(decoded, json, "{name}: decoding differs from the JSON twin");
    }
}

#[test]
fn vectors_decode_as_envelopes() {
    for (name, json, msgpack_path) in vectors() {
        let bytes = std::fs::read(&msgpack_path).unwrap();
        if name.ends_with("_request") {
            let req: Request = decode_request(&bytes).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(req.op, json["op"].as_str().unwrap(), "{name}");
            // Re-encoding the typed envelope gives the same bytes: field order is id, op, args.
            assert_eq!(recalld_protocol::encode_request(&req), bytes, "{name}");
        } else {
            let reply: Reply = decode_reply(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(recalld_protocol::encode_reply(&reply), bytes, "{name}");
        }
    }
}
