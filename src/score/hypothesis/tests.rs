use super::*;
use crate::numerics::key_cache::{ChunkPart, FIRST_BLOCK_PAST_2_31};
use crate::numerics::pipeline::{LogitFormat, Rotation};
use crate::score::selection::{NanOrder, TieRule};

// A person reads what a candidate is beside its name.
#[test]
fn candidate_summaries_join_their_parts() {
    assert_eq!(candidate_summary(""), "a healthy indexer");
    assert_eq!(candidate_summary("block-row0"), info("block-row0").unwrap().summary);
    let both = candidate_summary("scale-unwritten-zero+ties-highest");
    assert_eq!(both, format!("{}; {}", info("scale-unwritten-zero").unwrap().summary, info("ties-highest").unwrap().summary));
    assert_eq!(candidate_summary("topk=1024"), info("topk=N").unwrap().summary);
}
use crate::numerics::pipeline::{QuantizedRows, ScoreNumerics};
use crate::score::indexer::IndexerQuery;

const D: usize = 128;

fn variant(text: &str) -> Result<PrecisionVariant, String> {
    compose(text, PrecisionVariant::builtin)
}

/// `raw` stored through `v`'s cache and scored against a fixed query.
fn scores(v: &PrecisionVariant, raw: &[f32]) -> Vec<f32> {
    let heads = 4;
    let q: Vec<f32> = (0..heads * D).map(|i| ((i as f32) * 0.37).sin()).collect();
    let w = vec![1.0; heads];
    let query = IndexerQuery::new(v.query.quantize_rows(&q, D).unwrap(), &w, D, v.scoring);
    let mut keys = QuantizedRows::default();
    v.store_keys(raw, 0, 0, D, &mut keys).unwrap();
    let mut out = vec![0.0; raw.len() / D];
    query.score_quantized_rows(&keys, &mut out);
    out
}

fn keys(rows: usize, outlier: f32) -> Vec<f32> {
    (0..rows * D).map(|i| ((i as f32) * 0.91).sin() + if i % D == 3 { outlier } else { 0.0 }).collect()
}

/// Entry `name` with a sample value in place of its placeholder.
fn sample(name: &str) -> String {
    name.replace("=N", "=100")
        .replace("=B", "=16")
        .replace("=POOL", "=64M")
        .replace("cap=P", "cap=8K")
        .replace("cap-zero=P", "cap-zero=8K")
        .replace("cap-wrap=P", "cap-wrap=8K")
        .replace("=P", "=0.25")
        .replace("=R", "=100")
        .replace("=SET", "=1..")
        .replace("=S", "=8K")
        .replace("=W", "=8K")
        .replace("=F", "=0.5")
        .replace("=M", "=2")
        .replace("=T", "=20K")
}

#[test]
fn catalogue_names_are_unique_and_all_parse() {
    for (i, h) in CATALOGUE.iter().enumerate() {
        assert!(CATALOGUE[..i].iter().all(|e| e.name != h.name), "{}", h.name);
        let text = sample(h.name);
        let parsed = Hypothesis::parse(&text).unwrap();
        assert_eq!(info(&text).map(|e| e.name), Some(h.name));
        // Every hypothesis changes fp8 except nan-first, the default spelled
        // out, and the after-selection losses, which a sweep refuses.
        let base = PrecisionVariant::builtin("fp8").unwrap();
        let mut v = base.clone();
        if h.group == Group::AfterSelection {
            let e = parsed.apply(&mut v).unwrap_err();
            assert!(e.contains("acts after the indexer's selection") && !e.contains('\n'), "{e}");
            assert!(after_selection(h.name) && candidate_class(h.name) == FaultClass::NotSelection, "{}", h.name);
            continue;
        }
        assert!(!after_selection(h.name), "{}", h.name);
        parsed.apply(&mut v).unwrap();
        assert_eq!(v == base, h.name == "nan-first", "{}", h.name);
    }
}

#[test]
fn composed_names_parse_into_one_variant() {
    let v = variant("fp8+topk=1024+ties-lowest").unwrap();
    assert_eq!(v.name, "fp8+topk=1024+ties-lowest");
    assert_eq!(v.selection.topk_for(512), 1024);
    assert_eq!(v.selection.tie_rule, Some(TieRule::LowestIndex));
    assert_eq!((v.query.clone(), v.key.clone()), {
        let b = PrecisionVariant::builtin("fp8").unwrap();
        (b.query, b.key)
    });
    let v = variant("fp8+no-hadamard+scale-floor+topk=2K").unwrap();
    assert_eq!((v.key.rotation, v.cache.scale_rounded_down, v.selection.topk), (Rotation::None, true, Some(2048)));
    let v = variant("fp8-fp32scale+window=64+rope-swap-k").unwrap();
    assert_eq!((v.selection.window_for(128), v.position.key_rope_layout_swapped), (64, true));
}

#[test]
fn bad_compositions_say_why_in_one_line() {
    for (text, needle) in [
        ("fp8+foo", "no-hadamard, hadamard-q-only"),
        ("fp8+topk=0", "positive"),
        ("fp8+topk", "topk=N"),
        ("fp8+window=x", "window=N"),
        ("fp9+no-hadamard", "fp9"),
        ("fp8+ties-lowest+ties-highest", "both set the tie rule"),
        ("bf16+no-hadamard", "no Hadamard rotation"),
        ("fp4+logits-bf16", "already"),
    ] {
        let err = variant(text).unwrap_err();
        assert!(err.contains(needle) && !err.contains('\n'), "{text}: {err}");
    }
}

#[test]
fn no_hadamard_hurts_outlier_rows_and_is_exact_without_them() {
    let error = |v: &PrecisionVariant, raw: &[f32]| {
        let mut k = QuantizedRows::default();
        v.store_keys(raw, 0, 0, D, &mut k).unwrap();
        let mut deq = k.dequantized(D);
        if v.key.rotation == Rotation::Hadamard {
            crate::numerics::format::hadamard_rows_in_place(&mut deq, D).unwrap();
            // H is its own inverse
        }
        raw.iter().zip(&deq).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>()
    };
    let (fp8, plain) = (variant("fp8").unwrap(), variant("fp8+no-hadamard").unwrap());
    let outliers = keys(8, 200.0);
    assert_ne!(error(&plain, &outliers), error(&fp8, &outliers));
    // An outlier of 3e4 sets a scale of 2^7: the other channels (|v| ≤ 1)
    // fall to e4m3fn subnormals or zero without the rotation that spreads it.
    let huge = keys(8, 3e4);
    let small_channel_error = |v: &PrecisionVariant| {
        let mut k = QuantizedRows::default();
        v.store_keys(&huge, 0, 0, D, &mut k).unwrap();
        let mut deq = k.dequantized(D);
        if v.key.rotation == Rotation::Hadamard {
            crate::numerics::format::hadamard_rows_in_place(&mut deq, D).unwrap();
        }
        huge.iter().zip(&deq).enumerate().filter(|(i, _)| i % D != 3).map(|(_, (a, b))| f64::from(a - b).powi(2)).sum::<f64>()
    };
    assert!(small_channel_error(&plain) > 0.0);
    // ±1 everywhere is exact in e4m3fn with scale 2^-8: no rotation, no error.
    let flat: Vec<f32> = (0..8 * D).map(|i| if i % 3 == 0 { -1.0 } else { 1.0 }).collect();
    assert_eq!(error(&plain, &flat), 0.0);
    assert!(error(&fp8, &flat) > 0.0);
}

#[test]
fn one_sided_rotation_scrambles_scores() {
    let raw = keys(64, 0.0);
    let exact = scores(&variant("fp32").unwrap(), &raw);
    let fp8 = scores(&variant("fp8").unwrap(), &raw);
    let q_only = scores(&variant("fp8+hadamard-q-only").unwrap(), &raw);
    let gap = |a: &[f32]| a.iter().zip(&exact).map(|(x, y)| (x - y).abs()).sum::<f32>();
    assert!(gap(&q_only) > 20.0 * gap(&fp8), "{} vs {}", gap(&q_only), gap(&fp8));
}

#[test]
fn unwritten_scales_make_every_logit_zero_or_nan() {
    let raw = keys(70, 5.0);
    assert!(scores(&variant("fp8+scale-unwritten-zero").unwrap(), &raw).iter().all(|&s| s == 0.0));
    assert!(scores(&variant("fp8-fp32scale+scale-unwritten-nan").unwrap(), &raw).iter().all(|s| s.is_nan()));
    assert!(scores(&variant("fp8").unwrap(), &raw).iter().any(|&s| s != 0.0));
}

#[test]
fn no_relu_scores_the_signed_head_sum() {
    let raw = keys(40, 2.0);
    let heads = 4;
    let q: Vec<f32> = (0..heads * D).map(|i| ((i as f32) * 0.37).sin()).collect();
    let scale = 1.0 / ((heads * D) as f64).sqrt();
    let signed: Vec<f64> = raw
        .chunks_exact(D)
        .map(|k| q.chunks_exact(D).map(|qh| scale * qh.iter().zip(k).map(|(a, b)| f64::from(a * b)).sum::<f64>()).sum())
        .collect();
    let relu = scores(&variant("fp32").unwrap(), &raw);
    let plain = scores(&variant("fp32+no-relu").unwrap(), &raw);
    for ((&p, &s), &r) in plain.iter().zip(&signed).zip(&relu) {
        assert!((f64::from(p) - s).abs() < 1e-4 * (1.0 + s.abs()), "{p} vs {s}");
        assert!(r >= p - 1e-5, "ReLU can only raise a score: {r} < {p}");
    }
    assert!(plain.iter().zip(&relu).any(|(p, r)| (p - r).abs() > 1e-3), "some head product is negative");
    // bf16 logits round the difference, not each half.
    let bf16 = scores(&variant("fp32+logits-bf16+no-relu").unwrap(), &raw);
    for (b, p) in bf16.iter().zip(&plain) {
        assert_eq!(*b, half::bf16::from_f32(*p).to_f32());
    }
}

#[test]
fn block_row0_makes_scores_page_constant_in_every_format() {
    let raw = keys(200, 3.0);
    for base in ["fp8", "bf16", "fp4"] {
        let (own, read) = (scores(&variant(base).unwrap(), &raw), scores(&variant(&format!("{base}+block-row0")).unwrap(), &raw));
        for (r, &s) in read.iter().enumerate() {
            assert_eq!(s.to_bits(), own[r / 64 * 64].to_bits(), "{base} row {r}");
        }
        assert!(own[..64].iter().any(|&s| s != own[0]), "{base}: the keys differ within a page");
    }
    assert!(variant("fp8+block-row0+slot-shift").unwrap_err().contains("both set the slot"));
}

#[test]
fn zero_blocks_and_a_mixed_cache_change_the_rows_they_name() {
    let raw = keys(256, 3.0);
    // Every page zeroed: every logit 0.
    assert!(scores(&variant("fp8+zero-blocks=1").unwrap(), &raw).iter().all(|&s| s == 0.0));
    // A share: whole pages of 64 rows, chosen per request.
    let v = variant("fp8+zero-blocks=0.5").unwrap();
    let (fp8, zeroed) = (scores(&variant("fp8").unwrap(), &raw), scores(&v, &raw));
    for page in 0..4 {
        let rows = page * 64..(page + 1) * 64;
        let zero = crate::numerics::key_cache::page_zeroed(0, page as u64, 500_000);
        assert_eq!(zeroed[rows.clone()].iter().all(|&s| s == 0.0), zero, "page {page}");
        if !zero {
            assert_eq!(zeroed[rows.clone()], fp8[rows], "page {page}");
        }
    }
    // Rotated before row 100: rows before it as fp8 writes them, rows after as without the rotation.
    let mixed = scores(&variant("fp8+rotated-before=100").unwrap(), &raw);
    let q_only = scores(&variant("fp8+hadamard-q-only").unwrap(), &raw);
    assert_eq!(mixed[..100], fp8[..100]);
    assert_eq!(mixed[100..], q_only[100..]);
    assert!(variant("bf16+rotated-before=100").unwrap_err().contains("nothing to mix"));
}

#[test]
fn position_and_selection_parameters_are_checked() {
    let both = variant("fp8+rope-swap-both").unwrap();
    assert!(both.position.query_rope_layout_swapped && both.position.key_rope_layout_swapped);
    assert_eq!(variant("fp8+rope-swap-q+rope-swap-k").unwrap().position, both.position);
    assert!(variant("fp8+rope-swap-both+rope-swap-k").unwrap_err().contains("already"));
    assert_eq!(variant("fp8+tie-truncate=16").unwrap().selection.coarse_bits, Some(16));
    for (text, needle) in [
        ("fp8+tie-truncate=0", "from 1 to 32"),
        ("fp8+tie-truncate=33", "from 1 to 32"),
        ("fp8+zero-blocks=1.5", "at most 1"),
        ("fp8+zero-blocks=0", "above 0"),
        ("fp8+rotated-before=x", "cache rows"),
        ("fp8+offset-32bit=1M", "16268928 to"),
        ("fp8+offset-32bit=16268927", "16268928 to"),
        ("fp8+offset-32bit=x", "cache pool"),
        ("fp8+offset-32bit", "needs a value"),
        ("fp8+offset-32bit=64M+zero-blocks=0.5", "both set which pages read as zeros"),
        ("fp8+layout-tile16+layout-interleaved-read", "both set the byte layout"),
    ] {
        let err = variant(text).unwrap_err();
        assert!(err.contains(needle) && !err.contains('\n'), "{text}: {err}");
    }
}

#[test]
fn byte_layout_faults_scramble_scores_and_refuse_other_keys() {
    let raw = keys(256, 3.0);
    let fp8 = scores(&variant("fp8").unwrap(), &raw);
    for h in ["layout-interleaved-read", "layout-planar-read", "layout-tile16"] {
        let read = scores(&variant(&format!("fp8+{h}")).unwrap(), &raw);
        let changed = read.iter().zip(&fp8).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert!(changed > 200, "{h}: {changed} of 256 scores changed");
        // The writer never stores the NaN codes 0x7f/0xff, so no bit-cast scale is NaN or inf.
        assert!(read.iter().all(|s| !s.is_nan()), "{h}");
        for base in ["bf16", "fp4"] {
            let v = variant(&format!("{base}+{h}")).unwrap();
            assert!(v.unsupported(D).is_some_and(|w| w.contains("e4m3fn")), "{base}+{h}");
        }
    }
    // offset-32bit=64M: 2^20 blocks; the smallest pool gives one overflowing block in 254202.
    assert_eq!(variant("fp8+offset-32bit=64M").unwrap().cache.offset_32bit_blocks, Some(1 << 20));
    assert_eq!(variant("fp8+offset-32bit=16268928").unwrap().cache.offset_32bit_blocks, Some(FIRST_BLOCK_PAST_2_31 + 1));
    assert!(variant("fp8+row-shift").unwrap().position.query_row_shifted);
}

#[test]
fn store_keys_without_hypotheses_is_the_key_pipeline() {
    let raw = keys(300, 30.0);
    for name in PrecisionVariant::builtin_names() {
        let v = PrecisionVariant::builtin(name).unwrap();
        let mut out = QuantizedRows::default();
        v.store_keys(&raw, 256, 0, D, &mut out).unwrap();
        assert_eq!(out, v.key.quantize_rows(&raw, D).unwrap(), "{name}");
    }
}

#[test]
fn fnuz_read_through_the_variant_halves_scores() {
    // Halving every key value halves every logit exactly (power of two),
    // as long as no code is the −0 that fnuz reads as NaN.
    let raw: Vec<f32> = keys(16, 3.0).iter().map(|v| v + 0.5f32.copysign(*v)).collect();
    let v = variant("fp8+e4m3fnuz-read").unwrap();
    let (plain, fnuz) = (scores(&variant("fp8").unwrap(), &raw), scores(&v, &raw));
    for (a, b) in plain.iter().zip(&fnuz) {
        assert_eq!(*b, a / 2.0);
    }
}

#[test]
fn selection_hypotheses_set_the_override() {
    assert_eq!(variant("fp8+topk-round64").unwrap().selection.topk_for(100), 64);
    assert_eq!(variant("fp8+topk-round64").unwrap().selection.topk_for(512), 512);
    assert_eq!(variant("fp8+nan-last").unwrap().selection.nan_order, NanOrder::Last);
    assert_eq!(variant("fp8+ties-highest").unwrap().selection.tie_rule, Some(TieRule::HighestIndex));
    let v = variant("fp32+logits-fp16").unwrap();
    assert_eq!(v.scoring, ScoreNumerics { logits: LogitFormat::F16, ..ScoreNumerics::F32 });
    assert!(variant("fp8+rope-swap-q").unwrap().position.query_rope_layout_swapped);
}

#[test]
fn hypotheses_survive_a_manifest_round_trip_and_plain_variants_keep_their_bytes() {
    let v = variant("fp8+slot-shift+topk=1024+rope-swap-q").unwrap();
    let json = serde_json::to_string(&v).unwrap();
    assert_eq!(serde_json::from_str::<PrecisionVariant>(&json).unwrap(), v);
    let plain = serde_json::to_string(&PrecisionVariant::builtin("fp8").unwrap()).unwrap();
    assert!(!plain.contains("cache") && !plain.contains("selection") && !plain.contains("position"), "{plain}");
}

#[test]
fn every_entry_is_documented_in_its_group() {
    // The catalogue lists group by group, as the generated page does.
    let order: Vec<usize> = CATALOGUE.iter().map(|h| Group::ALL.iter().position(|&g| g == h.group).unwrap()).collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
    for h in CATALOGUE {
        match h.documented_with {
            None => assert!(!h.doc.trim().is_empty(), "{} has no documentation", h.name),
            Some(other) => {
                let o = CATALOGUE.iter().find(|o| o.name == other).unwrap_or_else(|| panic!("{}: no entry {other}", h.name));
                assert!(o.group == h.group && o.documented_with.is_none() && h.doc.is_empty(), "{} documented with {other}", h.name);
            }
        }
        // Every value-taking entry says so in its name, and only those.
        assert_eq!(h.parse.is_some(), h.name.contains('='), "{}", h.name);
    }
}

/// Every key cache fault of the catalogue, alone and in pairs, on the key
/// pipelines it applies to.
fn cache_fault_variants() -> Vec<PrecisionVariant> {
    let faults: Vec<String> = CATALOGUE
        .iter()
        .filter(|h| h.group != Group::AfterSelection)
        .map(|h| sample(h.name))
        .chain(["rotated-before=300".to_string(), "zero-blocks=0.6".to_string()])
        .filter(|text| variant(&format!("fp8+{text}")).is_ok_and(|v| !v.cache.is_default()))
        .collect();
    assert!(faults.len() >= 18, "{faults:?}");
    let mut out = Vec::new();
    for base in ["fp8", "fp8-fp32scale", "bf16", "fp4"] {
        out.extend(faults.iter().filter_map(|f| variant(&format!("{base}+{f}")).ok()));
    }
    for (i, a) in faults.iter().enumerate() {
        out.extend(faults[i + 1..].iter().filter_map(|b| variant(&format!("fp8+{a}+{b}")).ok()));
    }
    out.retain(|v| !v.cache.is_default() && v.cache.unsupported(&v.key, D).is_none());
    out
}

fn same_bits(a: &QuantizedRows, b: &QuantizedRows, rows: std::ops::Range<usize>, at: usize) -> bool {
    rows.enumerate().all(|(i, r)| {
        a.row_scales[at + i].to_bits() == b.row_scales[r].to_bits()
            && a.values[(at + i) * D..(at + i + 1) * D].iter().zip(&b.values[r * D..(r + 1) * D]).all(|(x, y)| x.to_bits() == y.to_bits())
    })
}

// The scorer stores again only the pages a needle's rows change
// (parts_reading) and takes the other rows' read-back as unchanged. Brute
// force: rows written with random values of other magnitudes, the whole
// chunk read back; every row read back differently is one readers_of
// names, and each part stored alone (from raw rows, or from the chunk's
// quantization with the written rows' own) reads back as in the chunk.
#[test]
fn readers_of_names_every_row_a_write_changes_and_parts_read_back_as_the_chunk() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let variants = cache_fault_variants();
    let (mut checked, mut whole) = (0, 0);
    for v in &variants {
        let pair = v.name.matches('+').count() > 1;
        let shapes: &[(u64, usize)] = if pair { &[(256, 200)] } else { &[(0, 256), (256, 200), (512, 130)] };
        for &(first_row, n) in shapes {
            let raw: Vec<f32> = (0..n * D).map(|_| (next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5).collect();
            let mut base = QuantizedRows::default();
            v.store_keys(&raw, first_row, 7, D, &mut base).unwrap();
            let sets: Vec<Vec<usize>> = if pair {
                vec![vec![100], vec![63, 64], vec![0, 129]]
            } else {
                vec![vec![0], vec![63], vec![64], vec![100], vec![127, 128], vec![n - 1], vec![5, 70, 129]]
            };
            for written in sets {
                let mut patched = raw.clone();
                for &r in &written {
                    let magnitude = 2f32.powi((next() % 24) as i32 - 12);
                    for x in &mut patched[r * D..(r + 1) * D] {
                        *x = ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * magnitude;
                    }
                }
                let mut out = QuantizedRows::default();
                v.store_keys(&patched, first_row, 7, D, &mut out).unwrap();
                let changed: Vec<usize> = (0..n).filter(|&r| !same_bits(&out, &base, r..r + 1, r)).collect();
                let Some(readers) = v.cache.readers_of(&v.key, &written, n) else {
                    assert!(v.name.contains("scale-per-tensor"), "{}: no map", v.name);
                    whole += 1;
                    continue;
                };
                assert!(changed.iter().all(|r| readers.contains(r)), "{} {written:?}: changed {changed:?}, readers {readers:?}", v.name);
                let parts = v.cache.parts_reading(&v.key, &written, n).unwrap();
                assert!(readers.iter().all(|r| parts.iter().any(|p| p.contains(r))), "{}", v.name);
                // One row's pages, not the chunk.
                if written.len() == 1 && n == 256 {
                    assert!(parts.iter().map(|p| p.len()).sum::<usize>() <= 128, "{} {written:?}: {parts:?}", v.name);
                }
                let own = v
                    .key
                    .quantize_rows(&written.iter().flat_map(|&r| patched[r * D..(r + 1) * D].to_vec()).collect::<Vec<f32>>(), D)
                    .unwrap();
                let chunk_q = v.key.quantize_rows(&raw, D).unwrap();
                for rows in parts {
                    let part = ChunkPart { first_row, n_rows: n, rows: rows.clone() };
                    let mut alone = QuantizedRows::default();
                    v.cache.store_part(&v.key, &patched[rows.start * D..rows.end * D], &part, 7, D, &mut alone).unwrap();
                    assert!(same_bits(&alone, &out, rows.clone(), 0), "{} {written:?} part {rows:?}", v.name);
                    if v.cache.starts_from_quantized() {
                        let mut q = QuantizedRows {
                            values: chunk_q.values[rows.start * D..rows.end * D].to_vec(),
                            row_scales: chunk_q.row_scales[rows.clone()].to_vec(),
                        };
                        for (j, &r) in written.iter().enumerate().filter(|(_, r)| rows.contains(r)) {
                            let i = r - rows.start;
                            q.values[i * D..(i + 1) * D].copy_from_slice(&own.values[j * D..(j + 1) * D]);
                            q.row_scales[i] = own.row_scales[j];
                        }
                        let mut from_q = QuantizedRows::default();
                        v.cache.store_quantized_part(&v.key, &q, &part, D, &mut from_q).unwrap();
                        assert!(same_bits(&from_q, &out, rows.clone(), 0), "{} {written:?} quantized part {rows:?}", v.name);
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 1000 && whole > 0, "{checked} checked, {whole} whole");
}

#[test]
fn parts_must_be_whole_page_groups_of_an_aligned_chunk() {
    let v = variant("fp8+pages-swapped").unwrap();
    let raw = keys(256, 0.0);
    let mut out = QuantizedRows::default();
    for (first_row, rows) in [(0, 64..128), (0, 0..100), (100, 0..128), (0, 128..300)] {
        let part = ChunkPart { first_row, n_rows: 256, rows: rows.clone() };
        let e = v.cache.store_part(&v.key, &raw[..rows.len().min(256) * D], &part, 0, D, &mut out).unwrap_err().to_string();
        assert!(e.contains("page groups") && !e.contains('\n'), "{e}");
    }
    let tensor = variant("fp8+scale-per-tensor").unwrap();
    assert_eq!(tensor.cache.readers_of(&tensor.key, &[3], 256), None);
    let part = ChunkPart { first_row: 0, n_rows: 256, rows: 0..64 };
    assert!(tensor.cache.store_part(&tensor.key, &raw[..64 * D], &part, 0, D, &mut out).is_err());
}
