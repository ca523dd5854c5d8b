//! Decoding a MessagePack body into JSON values while noticing non-finite numbers.
//!
//! JSON has no NaN or infinity, and serde_json turns them into `null` without a word: a NaN
//! `now` would then read as "absent" and silently become the daemon's clock. This decoder
//! builds the same `Value`, but remembers where the first non-finite number was, so the
//! envelope can refuse the request and name the field.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// A decoded body and, when it held one, the path (`args.now`) of its first non-finite number.
pub struct Decoded {
    pub value: Value,
    pub non_finite: Option<(String, f64)>,
}

pub fn decode(body: &[u8]) -> Result<Decoded, rmp_serde::decode::Error> {
    let found = RefCell::new(None);
    let mut de = rmp_serde::Deserializer::from_read_ref(body);
    let value = Finite {
        found: &found,
        at: None,
    }
    .deserialize(&mut de)?;
    Ok(Decoded {
        value,
        non_finite: found.into_inner(),
    })
}

/// Where a value sits, as a linked list on the stack: rendered only when a number is bad.
enum Seg<'p> {
    Key(&'p str, Option<&'p Seg<'p>>),
    Index(usize, Option<&'p Seg<'p>>),
}

fn render(at: Option<&Seg<'_>>) -> String {
    let mut parts = Vec::new();
    let mut cur = at;
    while let Some(seg) = cur {
        match seg {
            Seg::Key(k, parent) => {
                parts.push(format!(".{k}"));
                cur = *parent;
            }
            Seg::Index(i, parent) => {
                parts.push(format!("[{i}]"));
                cur = *parent;
            }
        }
    }
    parts.reverse();
    let path = parts.concat();
    path.strip_prefix('.').unwrap_or(&path).to_string()
}

struct Finite<'p> {
    found: &'p RefCell<Option<(String, f64)>>,
    at: Option<&'p Seg<'p>>,
}

impl<'de> DeserializeSeed<'de> for Finite<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Finite<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any MessagePack value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        match Number::from_f64(v) {
            Some(n) => Ok(Value::Number(n)),
            None => {
                let mut found = self.found.borrow_mut();
                if found.is_none() {
                    *found = Some((render(self.at), v));
                }
                Ok(Value::Null)
            }
        }
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        loop {
            let seg = Seg::Index(out.len(), self.at);
            let seed = Finite {
                found: self.found,
                at: Some(&seg),
            };
            match seq.next_element_seed(seed)? {
                Some(v) => out.push(v),
                None => break,
            }
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        // Sized up front: a map grown key by key rehashes its index as it goes.
        let mut out = Map::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some(key) = map.next_key::<String>()? {
            let seg = Seg::Key(&key, self.at);
            let value = map.next_value_seed(Finite {
                found: self.found,
                at: Some(&seg),
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finite_bodies_decode_as_serde_json_would() {
        let v = serde_json::json!({"id": 1, "op": "x", "args": {"now": 1.5, "l": [1, -2, "s", null, true]}});
        let body = rmp_serde::to_vec_named(&v).unwrap();
        let d = decode(&body).unwrap();
        assert_eq!(d.value, v);
        assert!(d.non_finite.is_none());
    }

    #[test]
    fn the_first_non_finite_number_is_named_by_its_path() {
        #[derive(serde::Serialize)]
        struct Args {
            list: Vec<f64>,
            now: f64,
        }
        #[derive(serde::Serialize)]
        struct Body {
            id: u64,
            args: Args,
        }
        let body = rmp_serde::to_vec_named(&Body {
            id: 3,
            args: Args {
                list: vec![1.0, f64::INFINITY],
                now: f64::NAN,
            },
        })
        .unwrap();
        let d = decode(&body).unwrap();
        let (at, v) = d.non_finite.unwrap();
        assert_eq!(at, "args.list[1]");
        assert!(v.is_infinite());
    }
}
