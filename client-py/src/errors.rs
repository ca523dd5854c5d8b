//! Raising the package's exceptions from Rust. The classes live in `recalld/_errors.py`, so
//! the sync and asyncio clients raise the very same types.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use serde_json::Value;

/// An `err` reply body, read leniently: the code is kept as a string so that a code added by
/// a newer daemon arrives as a plain `RecalldError` instead of breaking the connection.
pub struct WireError {
    pub code: String,
    pub message: String,
    pub retryable: Option<bool>,
}

impl WireError {
    pub fn from_value(value: Value) -> WireError {
        let field = |k: &str| value.get(k);
        WireError {
            code: field("code").and_then(Value::as_str).unwrap_or("internal").to_owned(),
            message: match field("message") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            },
            retryable: field("retryable").and_then(Value::as_bool),
        }
    }
}

fn build(
    py: Python<'_>,
    func: &str,
    args: impl for<'py> FnOnce(Python<'py>, &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>>,
) -> PyErr {
    let made = py
        .import("recalld._errors")
        .and_then(|m| m.getattr(func))
        .and_then(|f| args(py, &f));
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => PyRuntimeError::new_err(format!("recalld._errors.{func} failed: {e}")),
    }
}

/// The exception for an `err` reply.
pub fn from_wire(py: Python<'_>, err: WireError) -> PyErr {
    let WireError {
        code,
        message,
        retryable,
    } = err;
    build(py, "error_from_wire", move |_, f| f.call1((code, message, retryable)))
}

/// `RecalldConnectionError` (code `unavailable`).
pub fn connection_error(py: Python<'_>, message: String) -> PyErr {
    build(py, "connection_error", move |_, f| f.call1((message,)))
}

/// `RecalldTimeoutError` (code `timeout`).
pub fn timeout_error(py: Python<'_>, message: String) -> PyErr {
    build(py, "error_from_wire", move |_, f| f.call1(("timeout", message, true)))
}
