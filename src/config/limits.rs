//! The fixed limits of a scenario's numbers, with no other module of the
//! configuration below them: the checks ([`super::values`]) and the flags'
//! parse errors ([`super::flags`]) both read them.

/// Largest context the simulator accepts (tokens): 16M.
pub const MAX_CONTEXT: u64 = 1 << 24;
/// Largest number of trials per cell.
pub const MAX_TRIALS: u64 = 10_000_000;

/// The fixed ranges of whole-number knobs, by TOML path: each knob's check
/// (`values::whole_in`) and its flag's parse error (`--trials -1`) read them, so
/// both say the same range.
const WHOLE_RANGES: [(&str, u64, u64); 13] = [
    ("sweep.trials", 1, MAX_TRIALS),
    ("estimator.tail_rows", 64, 1 << 22),
    ("geometry.compress_ratio", 1, 1 << 16),
    ("geometry.window", 0, MAX_CONTEXT),
    ("geometry.prefill_chunk", 0, MAX_CONTEXT),
    ("needle.tokens", 1, 1 << 20),
    ("needle.rope_min_wavelength", 1, 1 << 48),
    ("physics.distractors", 0, 1000),
    ("stack.indexer_ratio", 1, 1 << 16),
    ("stack.question_tokens", 0, 1 << 16),
    ("stack.answer_tokens", 0, 1 << 16),
    ("stack.candidate_blocks", 1, 1 << 24),
    ("stack.candidate_block_rows", 1, 4096),
];

/// The fixed range of the whole-number knob at `path`, if it has one
/// (others depend on other values, such as the quorum on the layers).
pub fn whole_range(path: &str) -> Option<(u64, u64)> {
    WHOLE_RANGES.iter().find(|(p, _, _)| *p == path).map(|&(_, lo, hi)| (lo, hi))
}
