//! `recalld._native`: the compiled half of the Python client. It owns the wire (frames and
//! envelopes from `recalld-protocol`, values as MessagePack named maps) and the blocking
//! socket used by `recalld.Client`; the Python package re-exports a typed API on top.

mod conn;
mod convert;
mod errors;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Encodes a JSON-shaped Python value as MessagePack (maps with string keys).
#[pyfunction]
fn encode<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let value = convert::to_value(obj)?;
    let bytes = rmp_serde::to_vec_named(&value).map_err(|e| PyValueError::new_err(format!("cannot encode: {e}")))?;
    Ok(PyBytes::new(py, &bytes))
}

/// Decodes one MessagePack value (as `encode` writes it) to Python objects.
#[pyfunction]
fn decode<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    let value: serde_json::Value =
        rmp_serde::from_slice(data).map_err(|e| PyValueError::new_err(format!("cannot decode: {e}")))?;
    convert::to_py(py, &value)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("PROTOCOL_VERSION", recalld_protocol::PROTOCOL_VERSION)?;
    m.add("MIN_PROTOCOL_VERSION", recalld_protocol::MIN_PROTOCOL_VERSION)?;
    m.add("MAX_FRAME_BYTES", recalld_protocol::DEFAULT_MAX_FRAME_BYTES)?;
    m.add("MAX_MEMORY_ID_BYTES", recalld_protocol::MAX_MEMORY_ID_BYTES)?;
    m.add_class::<conn::Connection>()?;
    m.add_function(wrap_pyfunction!(encode, m)?)?;
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    Ok(())
}
