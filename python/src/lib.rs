//! `dsa_recall._native`: the Rust side of the Python package `dsa_recall`.
//!
//! Thin: every function hands its arguments to the library and its result
//! back. Arrays arrive as C-contiguous float32 (the Python wrappers in
//! `dsa_recall/__init__.py` convert other dtypes and layouts, and check
//! shapes); the GIL is released while the library computes. Library errors
//! become Python exceptions whose message is the command line's one-line
//! message without its `error: ` prefix (docs/PYTHON.md, "Errors").

use pyo3::prelude::*;

mod check;
mod convert;
mod numerics;
mod result;
mod sim;

pyo3::create_exception!(
    dsa_recall,
    ConfigError,
    pyo3::exceptions::PyValueError,
    "A bad setting: the message names the field, the value and what is allowed (as the CLI's)."
);
pyo3::create_exception!(
    dsa_recall,
    InputError,
    pyo3::exceptions::PyValueError,
    "Bad input data: wrong shapes, NaN or infinite values, a bad file."
);
pyo3::create_exception!(
    dsa_recall,
    SimulationError,
    pyo3::exceptions::PyRuntimeError,
    "The simulation or an output step failed (not the input's fault)."
);

/// A library error as the Python exception of its kind.
pub(crate) fn to_py(e: dsa_recall::Error) -> PyErr {
    use dsa_recall::Error;
    let message = e.to_string();
    match e {
        Error::Config(_) | Error::ScenarioFile { .. } | Error::Quantize(_) | Error::Mismatch(_) | Error::Resources(_) => {
            ConfigError::new_err(message)
        }
        Error::Input { .. } | Error::Corrupt { .. } | Error::OutputNotEmpty(_) | Error::Io { .. } => InputError::new_err(message),
        Error::Sim(_) | Error::Chart(_) => SimulationError::new_err(message),
    }
}

pub(crate) fn config_err(e: dsa_recall::ConfigError) -> PyErr {
    to_py(e.into())
}

pub(crate) fn input_err(message: impl Into<String>) -> PyErr {
    InputError::new_err(message.into())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("SimulationError", py.get_type::<SimulationError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    numerics::register(m)?;
    sim::register(m)?;
    result::register(m)?;
    check::register(m)?;
    Ok(())
}
