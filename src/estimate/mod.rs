//! Estimators of a cell's recall: full simulation ([`full`]), tail
//! sampling ([`tail`]) and the prediction ([`predict`], [`predict_sampled`]),
//! with their shared row sampling ([`sample`]) and settings ([`settings`]).

pub mod full;
pub mod predict;
pub mod predict_sampled;
pub mod sample;
pub mod settings;
pub mod tail;
