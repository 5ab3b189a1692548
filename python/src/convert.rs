//! Library values as Python objects: JSON values as dicts and lists, and
//! typed table columns as NumPy arrays, so that the Python side parses no
//! text.

use dsa_recall::run::output::{Column, Field};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;

/// A JSON value as `json.loads` would give it (objects as dicts in the
/// value's key order, integers as int, other numbers as float).
pub(crate) fn json_to_py(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any().unbind(),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_pyobject(py)?.into_any().unbind(),
            (None, Some(i)) => i.into_pyobject(py)?.into_any().unbind(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any().unbind(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any().unbind(),
        Value::Array(items) => PyList::new(py, items.iter().map(|x| json_to_py(py, x)).collect::<PyResult<Vec<_>>>()?)?.into_any().unbind(),
        Value::Object(map) => {
            let d = PyDict::new(py);
            for (k, x) in map {
                d.set_item(k, json_to_py(py, x)?)?;
            }
            d.into_any().unbind()
        }
    })
}

/// `x` serialized as JSON text and read back: what `json.loads` of the
/// CLI's JSON gives (f32 fields keep their short decimal form, which
/// `serde_json::to_value` would widen).
pub(crate) fn as_json_value<T: serde::Serialize>(x: &T) -> Value {
    serde_json::to_string(x).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or(Value::Null)
}

fn is_missing(f: &Field) -> bool {
    matches!(f, Field::Int(None) | Field::Float(None) | Field::Text(None))
}

/// An integer the field prints as, if it prints as one (a float with no
/// fraction prints without a decimal point, e.g. `1`).
fn as_integer(f: &Field) -> Option<i64> {
    match *f {
        Field::Int(Some(u)) => i64::try_from(u).ok(),
        Field::Float(Some(x)) if x.is_finite() && x.fract() == 0.0 && x.abs() < 9.0e18 => Some(x as i64),
        _ => None,
    }
}

fn as_float(f: &Field) -> f64 {
    match *f {
        Field::Int(Some(u)) => u as f64,
        Field::Float(Some(x)) => x,
        _ => f64::NAN,
    }
}

/// One column as the NumPy array that reading its CSV text infers (the
/// rule of `pandas.read_csv`): int64 when every field prints as an integer,
/// else float64 with NaN for empty fields; bool for true/false; text as
/// objects with None for empty fields; a column with no value at all as
/// float64 NaN.
pub(crate) fn column_array<'py>(py: Python<'py>, values: &[Field]) -> PyResult<Bound<'py, PyAny>> {
    if values.iter().all(is_missing) {
        return Ok(PyArray1::from_vec(py, vec![f64::NAN; values.len()]).into_any());
    }
    if values.iter().any(|f| matches!(f, Field::Text(Some(_)))) {
        let items: Vec<Py<PyAny>> = values
            .iter()
            .map(|f| match f {
                Field::Text(Some(s)) => Ok(s.into_pyobject(py)?.into_any().unbind()),
                f if is_missing(f) => Ok(py.None()),
                f => Ok(f.csv_text().into_pyobject(py)?.into_any().unbind()),
            })
            .collect::<PyResult<_>>()?;
        return Ok(PyArray1::from_vec(py, items).into_any());
    }
    if let Some(flags) = values.iter().map(|f| if let Field::Flag(b) = f { Some(*b) } else { None }).collect::<Option<Vec<bool>>>() {
        return Ok(PyArray1::from_vec(py, flags).into_any());
    }
    if let Some(ints) = values.iter().map(as_integer).collect::<Option<Vec<i64>>>() {
        return Ok(PyArray1::from_vec(py, ints).into_any());
    }
    Ok(PyArray1::from_vec(py, values.iter().map(as_float).collect::<Vec<f64>>()).into_any())
}

/// Columns as a dict of name → array, in column order.
pub(crate) fn columns_dict<'py>(py: Python<'py>, columns: &[Column]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for c in columns {
        d.set_item(c.name, column_array(py, &c.values)?)?;
    }
    Ok(d)
}

/// Little-endian bytes of `dtype` (`<f4`, `<i8`, `|u1`, `<u2`, `<u4`) as a
/// NumPy array of `shape`.
pub(crate) fn tensor_array<'py>(py: Python<'py>, dtype: &str, shape: &[usize], bytes: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    fn le<const N: usize, T>(bytes: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
        bytes.chunks_exact(N).map(|c| from(c.try_into().unwrap_or([0; N]))).collect()
    }
    let flat = match dtype {
        "<f4" => PyArray1::from_vec(py, le(bytes, f32::from_le_bytes)).into_any(),
        "<i8" => PyArray1::from_vec(py, le(bytes, i64::from_le_bytes)).into_any(),
        "|u1" => PyArray1::from_vec(py, bytes.to_vec()).into_any(),
        "<u2" => PyArray1::from_vec(py, le(bytes, u16::from_le_bytes)).into_any(),
        "<u4" => PyArray1::from_vec(py, le(bytes, u32::from_le_bytes)).into_any(),
        other => return Err(crate::SimulationError::new_err(format!("a trial tensor of dtype {other}, which this package does not know"))),
    };
    flat.call_method1("reshape", (shape.to_vec(),))
}
