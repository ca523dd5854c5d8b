//! The note tool: its definition in each format, and reading the facts a note call holds.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{kind_of, Format, FormatError, ToolCall};

/// One fact from a note call: a knowledge-graph triple stated as a sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoteFact {
    pub note: String,
    pub subject: String,
    pub object: String,
    pub milestone: bool,
    /// Other names the conversation used for the subject / object (may be empty).
    #[serde(default)]
    pub subject_aliases: Vec<String>,
    #[serde(default)]
    pub object_aliases: Vec<String>,
    /// When the fact became true / stopped being true, as written (an ISO date), if said.
    #[serde(default)]
    pub valid_from: Option<String>,
    #[serde(default)]
    pub valid_to: Option<String>,
}

const DESCRIPTION: &str = "Record facts from conversation history that is leaving live context. \
Each entry is one fact: a sentence readable on its own (note) relating two entities (subject, \
object) by their canonical names; milestone is true for a milestone (something settled, agreed \
or where the work stands). The aliases list other names the conversation used for the subject or \
object (usually none); valid_from and valid_to are ISO dates when the conversation says when the \
fact held (else null).";

/// The function tool definition for the note tool named `name`, in `format` (Chat:
/// `{"type":"function","function":{name, description, parameters, strict}}`; Responses:
/// `{"type":"function", name, description, parameters, strict}`; Anthropic Messages:
/// `{name, description, input_schema}`). Strict mode holds: every
/// property required, no additional properties.
pub fn note_tool(format: Format, name: &str) -> Value {
    let parameters = json!({
        "type": "object",
        "properties": {
            "notes": {
                "type": "array",
                "description": "One entry per fact.",
                "items": {
                    "type": "object",
                    "properties": {
                        "note": {"type": "string", "description": "The fact as one sentence readable on its own."},
                        "subject": {"type": "string", "description": "The first entity, by its canonical name."},
                        "object": {"type": "string", "description": "The second entity, by its canonical name."},
                        "milestone": {"type": "boolean", "description": "True when the fact is a milestone."},
                        "subject_aliases": {"type": "array", "items": {"type": "string"}},
                        "object_aliases": {"type": "array", "items": {"type": "string"}},
                        "valid_from": {"type": ["string", "null"]},
                        "valid_to": {"type": ["string", "null"]}
                    },
                    "required": ["note", "subject", "object", "milestone", "subject_aliases", "object_aliases", "valid_from", "valid_to"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["notes"],
        "additionalProperties": false
    });
    function_tool(format, name, DESCRIPTION, parameters)
}

/// A function tool in `format`'s shape (see [`note_tool`]).
fn function_tool(format: Format, name: &str, description: &str, parameters: Value) -> Value {
    match format {
        Format::ChatCompletions => json!({
            "type": "function",
            "function": {"name": name, "description": description, "parameters": parameters, "strict": true}
        }),
        Format::Responses => json!({
            "type": "function", "name": name, "description": description,
            "parameters": parameters, "strict": true
        }),
        Format::AnthropicMessages => json!({"name": name, "description": description, "input_schema": parameters}),
    }
}

const REMEMBER_DESCRIPTION: &str = "Save a short working note for this user's next conversations \
with you (the next 24 hours): something to carry over that is not yet a settled fact, such as a \
task in progress or what to check next. With block set (a short name such as \"user\" or \
\"persona\"), the note instead replaces that core block, which every later conversation with \
this user always sees (an empty note removes it). Call it alongside your answer; it returns nothing.";

/// The `remember` tool (seed 002's working tier), offered to memories that name an agent.
pub fn remember_tool(format: Format, name: &str) -> Value {
    let parameters = json!({
        "type": "object",
        "properties": {
            "note": {"type": "string", "description": "The working note, readable on its own (at most 4,000 characters)."},
            "block": {"type": ["string", "null"], "description": "A core block's name to replace with the note; null for a working note."}
        },
        "required": ["note", "block"],
        "additionalProperties": false
    });
    function_tool(format, name, REMEMBER_DESCRIPTION, parameters)
}

const RECALL_DESCRIPTION: &str = "Search what this user's earlier conversations with you left in \
memory (preferences, decisions, facts about their situation) when you need something you are not \
shown. The results are given to you on your next turn.";

/// The `recall` tool (seed 002): the model searches its agent's memory on purpose.
pub fn recall_tool(format: Format, name: &str) -> Value {
    let parameters = json!({
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What to look for, in a few words."}},
        "required": ["query"],
        "additionalProperties": false
    });
    function_tool(format, name, RECALL_DESCRIPTION, parameters)
}

/// The query of a recall call: `{"query": "..."}` (or a bare string).
pub fn recall_arguments(call: &ToolCall) -> Result<String, FormatError> {
    let v: Value = serde_json::from_str(&call.arguments).map_err(|e| FormatError::Json {
        at: "arguments".into(),
        message: e.to_string(),
    })?;
    match v.get("query").unwrap_or(&v) {
        Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        Value::String(_) => Err(FormatError::Missing { at: "query".into() }),
        other => Err(FormatError::WrongType {
            at: "query".into(),
            expected: "a string",
            found: kind_of(other),
        }),
    }
}

/// What a remember call asks: a working note, or a core block replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remember {
    pub note: String,
    /// The core block the note replaces (None: a working note).
    pub block: Option<String>,
}

/// A remember call: `{"note": "...", "block": null | "name"}` (or the note as a bare string,
/// or arguments encoded twice). Anything else is an error naming the place.
pub fn remember_arguments(call: &ToolCall) -> Result<Remember, FormatError> {
    let json = |s: &str| {
        serde_json::from_str::<Value>(s).map_err(|e| FormatError::Json {
            at: "arguments".into(),
            message: e.to_string(),
        })
    };
    let mut v = json(&call.arguments)?;
    if let Value::String(s) = &v {
        v = json(s).unwrap_or(Value::String(s.clone()));
    }
    let block = |m: &serde_json::Map<String, Value>| {
        m.get("block")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|b| !b.is_empty())
            .map(str::to_owned)
    };
    match &v {
        Value::String(s) => Ok(Remember {
            note: s.clone(),
            block: None,
        }),
        Value::Object(m) => match m.get("note") {
            Some(Value::String(s)) => Ok(Remember {
                note: s.clone(),
                block: block(m),
            }),
            Some(other) => Err(FormatError::WrongType {
                at: "note".into(),
                expected: "a string",
                found: kind_of(other),
            }),
            None => Err(FormatError::Missing { at: "note".into() }),
        },
        other => Err(FormatError::WrongType {
            at: "arguments".into(),
            expected: "an object with a note",
            found: kind_of(other),
        }),
    }
}

/// The facts of a note call: `{"notes": [{note, subject, object, milestone}]}`. Tolerates a
/// missing or null `milestone` (false), a bare list of facts, one bare fact, arguments encoded
/// twice as a JSON string, and missing subject/object on an entry whose note is empty (the
/// "nothing worth keeping" entry). Anything else is an error naming the place.
pub fn note_arguments(call: &ToolCall) -> Result<Vec<NoteFact>, FormatError> {
    let at = "arguments";
    let mut v: Value = serde_json::from_str(&call.arguments).map_err(|e| FormatError::Json {
        at: at.into(),
        message: e.to_string(),
    })?;
    if let Value::String(s) = &v {
        v = serde_json::from_str(s).map_err(|e| FormatError::Json {
            at: at.into(),
            message: e.to_string(),
        })?;
    }
    let (list, base) = match &v {
        Value::Array(a) => (a.as_slice(), String::new()),
        Value::Object(m) => match m.get("notes") {
            Some(Value::Array(a)) => (a.as_slice(), "notes".to_string()),
            Some(other) => {
                return Err(FormatError::WrongType {
                    at: "notes".into(),
                    expected: "an array",
                    found: kind_of(other),
                });
            }
            None if m.contains_key("note") => (std::slice::from_ref(&v), String::new()),
            None => return Err(FormatError::Missing { at: "notes".into() }),
        },
        other => {
            return Err(FormatError::WrongType {
                at: at.into(),
                expected: "an object with notes or a list of notes",
                found: kind_of(other),
            });
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, f)| {
            let at = if base.is_empty() {
                format!("[{i}]")
            } else {
                format!("{base}[{i}]")
            };
            fact(f, &at)
        })
        .collect()
}

fn fact(v: &Value, at: &str) -> Result<NoteFact, FormatError> {
    let m = v.as_object().ok_or_else(|| FormatError::WrongType {
        at: at.into(),
        expected: "an object",
        found: kind_of(v),
    })?;
    let text = |key: &str, optional: bool| -> Result<String, FormatError> {
        match m.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            None | Some(Value::Null) if optional => Ok(String::new()),
            None => Err(FormatError::Missing {
                at: format!("{at}.{key}"),
            }),
            Some(other) => Err(FormatError::WrongType {
                at: format!("{at}.{key}"),
                expected: "a string",
                found: kind_of(other),
            }),
        }
    };
    let note = text("note", false)?;
    let empty = note.trim().is_empty();
    let milestone = match m.get("milestone") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) if s == "true" || s == "false" => s == "true",
        Some(other) => {
            return Err(FormatError::WrongType {
                at: format!("{at}.milestone"),
                expected: "a boolean",
                found: kind_of(other),
            });
        }
    };
    // The graph fields are optional on the way in: a model that leaves them out still notes.
    let names = |key: &str| -> Vec<String> {
        match m.get(key) {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            Some(Value::String(s)) if !s.trim().is_empty() => vec![s.trim().to_owned()],
            _ => Vec::new(),
        }
    };
    let date = |key: &str| {
        m.get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    Ok(NoteFact {
        note,
        subject: text("subject", empty)?,
        object: text("object", empty)?,
        milestone,
        subject_aliases: names("subject_aliases"),
        object_aliases: names("object_aliases"),
        valid_from: date("valid_from"),
        valid_to: date("valid_to"),
    })
}
