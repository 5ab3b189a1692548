//! The one decision of which SIMD kernels run: a [`SimdLevel`], detected
//! once per process ([`level`]) and checked by every dispatching function
//! instead of asking the CPU itself.
//!
//! Each level requires every CPU feature that any kernel at that level
//! enables (the union of their `#[target_feature]` sets), so a kernel may
//! rely on all of them whenever [`level`] is at least its level:
//!
//! | level        | features                                               |
//! |--------------|--------------------------------------------------------|
//! | [`SimdLevel::Portable`] | none (plain Rust, any target)                |
//! | [`SimdLevel::Avx2`]     | avx2                                          |
//! | [`SimdLevel::Avx512`]   | avx2, avx512f, avx512bw, avx512dq, avx512vl   |
//!
//! No kernel uses FMA (every path must give the portable path's bits), so no
//! level asks for it. Non-x86-64 targets are always portable.
//!
//! The environment variable `DSA_RECALL_SIMD=portable|avx2|avx512` lowers
//! the level for a whole process (tests and CI run every path this way). A
//! level above what the CPU has is clamped down to the CPU's level; an
//! unknown value is ignored. Either case prints one line on stderr.
//! Results are the same bits at every level (tested per level by `.ci/run`).

use std::sync::OnceLock;

/// The environment variable that lowers the SIMD level (see the module note).
pub const SIMD_ENV: &str = "DSA_RECALL_SIMD";

/// A set of SIMD kernels, ordered: a higher level may use every feature of a
/// lower one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimdLevel {
    /// Plain Rust, no target-specific kernel.
    Portable,
    /// Kernels compiled for AVX2.
    Avx2,
    /// Kernels compiled for AVX-512 (F, BW, DQ, VL) and AVX2.
    Avx512,
}

impl SimdLevel {
    /// The name `DSA_RECALL_SIMD` takes for this level.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Portable => "portable",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    /// Parses a `DSA_RECALL_SIMD` value (case and surrounding spaces ignored).
    pub fn parse(value: &str) -> Option<SimdLevel> {
        match value.trim().to_ascii_lowercase().as_str() {
            "portable" => Some(SimdLevel::Portable),
            "avx2" => Some(SimdLevel::Avx2),
            "avx512" => Some(SimdLevel::Avx512),
            _ => None,
        }
    }

    /// True at [`SimdLevel::Avx2`] and above.
    #[inline(always)]
    pub fn avx2(self) -> bool {
        self >= SimdLevel::Avx2
    }

    /// True at [`SimdLevel::Avx512`].
    #[inline(always)]
    pub fn avx512(self) -> bool {
        self >= SimdLevel::Avx512
    }
}

impl std::fmt::Display for SimdLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The level the kernels use in this process: the CPU's level, lowered by
/// `DSA_RECALL_SIMD` when set. Detected on the first call, then a load.
///
/// Never above [`cpu_level`]: every `unsafe` call of a `#[target_feature]`
/// kernel relies on that.
#[inline]
pub fn level() -> SimdLevel {
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let value = std::env::var(SIMD_ENV).ok();
        let (level, note) = resolve(cpu_level(), value.as_deref());
        if let Some(note) = note {
            eprintln!("{note}");
        }
        level
    })
}

/// The highest level whose features this CPU has (ignores `DSA_RECALL_SIMD`).
pub fn cpu_level() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx2") {
            if has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl") {
                return SimdLevel::Avx512;
            }
            return SimdLevel::Avx2;
        }
    }
    SimdLevel::Portable
}

/// The level for a CPU at `cpu` and a `DSA_RECALL_SIMD` value, with the line
/// to print on stderr when the value was unknown or above the CPU's level.
/// An unset or empty value means the CPU's level.
fn resolve(cpu: SimdLevel, value: Option<&str>) -> (SimdLevel, Option<String>) {
    let Some(value) = value.filter(|v| !v.trim().is_empty()) else {
        return (cpu, None);
    };
    match SimdLevel::parse(value) {
        Some(wanted) if wanted <= cpu => (wanted, None),
        Some(wanted) => (cpu, Some(format!("dsa-recall: {SIMD_ENV}={value}: this CPU lacks {wanted}, using {cpu}"))),
        None => (cpu, Some(format!("dsa-recall: {SIMD_ENV}={value:?} ignored (expected portable, avx2 or avx512), using {cpu}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SimdLevel::*;

    #[test]
    fn the_override_parses_the_three_names() {
        assert_eq!(SimdLevel::parse("portable"), Some(Portable));
        assert_eq!(SimdLevel::parse("avx2"), Some(Avx2));
        assert_eq!(SimdLevel::parse("avx512"), Some(Avx512));
        assert_eq!(SimdLevel::parse(" AVX512\n"), Some(Avx512));
        for bad in ["", "avx", "avx-512", "sse4.2", "avx512f", "native", "0"] {
            assert_eq!(SimdLevel::parse(bad), None, "{bad:?}");
        }
        for level in [Portable, Avx2, Avx512] {
            assert_eq!(SimdLevel::parse(level.name()), Some(level));
            assert_eq!(level.to_string(), level.name());
        }
    }

    #[test]
    fn the_override_only_lowers_the_level() {
        for cpu in [Portable, Avx2, Avx512] {
            assert_eq!(resolve(cpu, None), (cpu, None));
            assert_eq!(resolve(cpu, Some("")), (cpu, None));
            assert_eq!(resolve(cpu, Some("portable")), (Portable, None));
            for wanted in [Avx2, Avx512] {
                let (level, note) = resolve(cpu, Some(wanted.name()));
                assert_eq!(level, wanted.min(cpu));
                assert_eq!(note.is_some(), wanted > cpu, "{wanted} on {cpu}");
            }
            let (level, note) = resolve(cpu, Some("fast"));
            assert_eq!(level, cpu);
            let note = note.expect("an unknown value is reported");
            assert!(note.contains("DSA_RECALL_SIMD") && note.contains("fast") && !note.contains('\n'), "{note}");
        }
    }

    #[test]
    fn levels_are_ordered_and_imply_their_features() {
        assert!(Portable < Avx2 && Avx2 < Avx512);
        assert!(!Portable.avx2() && Avx2.avx2() && Avx512.avx2());
        assert!(!Portable.avx512() && !Avx2.avx512() && Avx512.avx512());
    }

    /// The level in use never exceeds the CPU's, and follows the override.
    /// Prints the level (`.ci/run` reads it with `--nocapture`).
    #[test]
    fn level_in_use() {
        let (cpu, used) = (cpu_level(), level());
        assert!(used <= cpu);
        assert_eq!(used, resolve(cpu, std::env::var(SIMD_ENV).ok().as_deref()).0);
        #[cfg(target_arch = "x86_64")]
        if used.avx512() {
            for f in [
                std::arch::is_x86_feature_detected!("avx512f"),
                std::arch::is_x86_feature_detected!("avx512bw"),
                std::arch::is_x86_feature_detected!("avx512dq"),
                std::arch::is_x86_feature_detected!("avx512vl"),
            ] {
                assert!(f);
            }
        }
        println!("simd level in use: {used} (cpu: {cpu})");
    }
}
