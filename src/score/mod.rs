//! Scoring and selection: the lightning indexer's logits ([`indexer`]),
//! top-k selection and needle ranks ([`selection`]), precision variants and
//! the hypothesis catalogue ([`variant`], [`hypothesis`]), and one trial of a
//! haystack group through all of them ([`trial`]).

pub mod address;
pub mod hypothesis;
pub mod indexer;
pub mod needle;
pub mod selection;
pub mod trial;
pub mod variant;
