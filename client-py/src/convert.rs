//! Python objects ↔ `serde_json::Value`, the value type the wire crate encodes as MessagePack.
//!
//! Only JSON-shaped data crosses: `None`, `bool`, `int` (i64 or u64 range), `float`, `str`,
//! `list`/`tuple` and `dict` with `str` keys. Ints stay ints and floats stay floats (`1.0` is
//! written as an f64), so a value survives a round trip with its Python type.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// Nesting deeper than this is refused (it also stops self-referencing lists).
pub const MAX_DEPTH: usize = 512;

/// Converts a Python object to a JSON value, or raises `TypeError` naming the offending type.
pub fn to_value(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    to_value_at(obj, 0)
}

/// Converts a Python dict to a JSON map (the `args` of a request).
pub fn to_map(obj: &Bound<'_, PyAny>) -> PyResult<Map<String, Value>> {
    match obj.cast::<PyDict>() {
        Ok(dict) => dict_to_map(dict, 0),
        Err(_) => Err(PyTypeError::new_err(format!(
            "args must be a dict, not {}",
            type_name(obj)
        ))),
    }
}

fn to_value_at(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "value is nested more than {MAX_DEPTH} levels deep"
        )));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        return Ok(Value::Object(dict_to_map(dict, depth)?));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    // bool before int: bool is a subclass of int.
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.cast::<PyInt>().is_ok() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::Number(Number::from(i)));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::Number(Number::from(u)));
        }
        return Err(PyOverflowError::new_err(
            "int does not fit in 64 bits (the wire carries i64 or u64)",
        ));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let v = f.value();
        return Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| PyValueError::new_err(format!("float {v} cannot be sent (nan and inf are not allowed)")));
    }
    if let Ok(list) = obj.cast::<PyList>() {
        let mut out = Vec::with_capacity(list.len());
        for item in list.iter() {
            out.push(to_value_at(&item, depth + 1)?);
        }
        return Ok(Value::Array(out));
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        let mut out = Vec::with_capacity(tuple.len());
        for item in tuple.iter() {
            out.push(to_value_at(&item, depth + 1)?);
        }
        return Ok(Value::Array(out));
    }
    Err(PyTypeError::new_err(format!(
        "cannot send a value of type {}: use None, bool, int, float, str, list, tuple or dict",
        type_name(obj)
    )))
}

fn dict_to_map(dict: &Bound<'_, PyDict>, depth: usize) -> PyResult<Map<String, Value>> {
    let mut map = Map::with_capacity(dict.len());
    for (key, value) in dict.iter() {
        let Ok(key) = key.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "dict keys must be str, not {}",
                type_name(&key)
            )));
        };
        map.insert(key.to_cow()?.into_owned(), to_value_at(&value, depth + 1)?);
    }
    Ok(map)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "<unknown>".to_owned())
}

/// Converts a JSON value to Python objects (dicts keep the wire's key order).
pub fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                PyInt::new(py, i).into_any()
            } else if let Some(u) = n.as_u64() {
                PyInt::new(py, u).into_any()
            } else {
                PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(PyString::new(py, k), to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}
