//! Library values as Python objects: JSON values as dicts and lists, and
//! typed table columns as NumPy arrays, so that the Python side parses no
//! text.

use dsa_recall::run::output::{Column, Field};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// JSON text as the Python objects `json.loads` gives (dicts in the text's
/// key order, integers as int, other numbers as float), built while the
/// text is read.
pub(crate) fn json_to_py(py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
    let mut reader = serde_json::Deserializer::from_str(text);
    let value = PyValue(py).deserialize(&mut reader).and_then(|v| reader.end().map(|()| v));
    value.map_err(|e| crate::SimulationError::new_err(format!("JSON from the library: {e}")))
}

/// `x` as Python objects: what `json.loads` of its JSON text gives (f32
/// fields keep their short decimal form, as the CLI prints them).
pub(crate) fn to_py_objects<T: serde::Serialize>(py: Python<'_>, x: &T) -> PyResult<Py<PyAny>> {
    let text = serde_json::to_string(x).map_err(|e| crate::SimulationError::new_err(format!("JSON from the library: {e}")))?;
    json_to_py(py, &text)
}

/// Builds the Python object of one JSON value as it is read.
#[derive(Clone, Copy)]
struct PyValue<'py>(Python<'py>);

impl<'de> DeserializeSeed<'de> for PyValue<'_> {
    type Value = Py<PyAny>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

fn object<'py, E: de::Error>(x: PyResult<Bound<'py, PyAny>>) -> Result<Py<PyAny>, E> {
    x.map(Bound::unbind).map_err(|e| E::custom(e.to_string()))
}

impl<'de> Visitor<'de> for PyValue<'_> {
    type Value = Py<PyAny>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(self.0.None())
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
        object(b.into_pyobject(self.0).map(|x| x.to_owned().into_any()).map_err(Into::into))
    }
    fn visit_i64<E: de::Error>(self, i: i64) -> Result<Self::Value, E> {
        object(i.into_pyobject(self.0).map(Bound::into_any).map_err(Into::into))
    }
    fn visit_u64<E: de::Error>(self, u: u64) -> Result<Self::Value, E> {
        object(u.into_pyobject(self.0).map(Bound::into_any).map_err(Into::into))
    }
    fn visit_f64<E: de::Error>(self, x: f64) -> Result<Self::Value, E> {
        object(x.into_pyobject(self.0).map(Bound::into_any).map_err(Into::into))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        object(s.into_pyobject(self.0).map(Bound::into_any).map_err(Into::into))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(x) = seq.next_element_seed(self)? {
            items.push(x);
        }
        object(PyList::new(self.0, items).map(Bound::into_any))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let d = PyDict::new(self.0);
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            d.set_item(key, value).map_err(|e| de::Error::custom(e.to_string()))?;
        }
        Ok(d.into_any().unbind())
    }
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
