use super::*;

const D: usize = 128;

/// Rows whose every value is distinct per row and that span several
/// orders of magnitude across rows; row r has amax about r + 1.
fn keys(rows: usize) -> Vec<f32> {
    (0..rows * D)
        .map(|i| {
            let (r, j) = (i / D, i % D);
            ((j as f32 * 0.7 + r as f32 * 1.3).sin()) * (r as f32 + 1.0) * if j == 5 { 3.0 } else { 1.0 }
        })
        .collect()
}

fn fp8(name: &str) -> QuantPipeline {
    QuantPipeline::builtin(name).unwrap().0
}

fn store(faults: KeyCacheFaults, key: &QuantPipeline, raw: &[f32]) -> QuantizedRows {
    let mut out = QuantizedRows::default();
    faults.store(key, raw, 0, 0, D, &mut out).unwrap();
    out
}

#[test]
fn no_fault_is_the_key_pipeline_bit_for_bit() {
    let raw = keys(200);
    for name in ["fp32", "bf16", "fp8", "fp8-fp32scale", "fp4", "nvfp4"] {
        let key = fp8(name);
        assert_eq!(store(KeyCacheFaults::default(), &key, &raw), key.quantize_rows(&raw, D).unwrap(), "{name}");
    }
}

// The scorer quantizes each key pipeline once per chunk and lets every
// fault that starts from that quantization read it (store_quantized):
// the same bits as storing the raw rows, for each such fault; a fault
// that writes its own quantization says so and is refused.
#[test]
fn faults_that_start_from_the_quantization_store_it_bit_for_bit() {
    let raw = keys(256 + 80);
    let sharing = [
        KeyCacheFaults::default(),
        KeyCacheFaults { read_as: Fp8Flavour::E4m3fnuz, ..Default::default() },
        KeyCacheFaults { scale_word: ScaleWordFault::NextSlot, ..Default::default() },
        KeyCacheFaults { scale_word: ScaleWordFault::UnwrittenZero, ..Default::default() },
        KeyCacheFaults { scale_word: ScaleWordFault::UnwrittenNan, ..Default::default() },
        KeyCacheFaults { slot_shift: true, ..Default::default() },
        KeyCacheFaults { pages_swapped: true, ..Default::default() },
        KeyCacheFaults { block_row0: true, ..Default::default() },
        KeyCacheFaults { page_layout: PageLayoutFault::InterleavedRead, ..Default::default() },
        KeyCacheFaults { page_layout: PageLayoutFault::PlanarRead, ..Default::default() },
        KeyCacheFaults { page_layout: PageLayoutFault::Tile16Read, ..Default::default() },
    ];
    for name in ["fp8", "fp8-fp32scale"] {
        let key = fp8(name);
        let quantized = key.quantize_rows(&raw, D).unwrap();
        for f in sharing {
            assert!(f.starts_from_quantized(), "{f:?}");
            let mut out = QuantizedRows::default();
            f.store_quantized(&key, &quantized, 0, D, &mut out).unwrap();
            // NaN scale words compare unequal: compare the bits.
            let bits = |q: &QuantizedRows| {
                (q.values.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), q.row_scales.iter().map(|x| x.to_bits()).collect::<Vec<_>>())
            };
            assert_eq!(bits(&out), bits(&store(f, &key, &raw)), "{name} {f:?}");
        }
    }
    let key = fp8("fp8-fp32scale");
    let quantized = key.quantize_rows(&raw, D).unwrap();
    for f in [
        KeyCacheFaults { stale_scale: true, ..Default::default() },
        KeyCacheFaults { scale_span: ScaleSpan::Page, ..Default::default() },
        KeyCacheFaults { written_as: Fp8Flavour::E4m3fnuz, ..Default::default() },
        KeyCacheFaults { zero_pages_ppm: 500_000, ..Default::default() },
        KeyCacheFaults { rotated_before: Some(64), ..Default::default() },
    ] {
        assert!(!f.starts_from_quantized(), "{f:?}");
        assert!(f.store_quantized(&key, &quantized, 0, D, &mut QuantizedRows::default()).is_err(), "{f:?}");
    }
}

#[test]
fn the_fault_writer_with_no_write_fault_matches_the_pipeline() {
    // The hypotheses' own write loop, with nothing changed, must agree
    // with the pipeline bit for bit (every write fault builds on it).
    let raw = keys(130);
    for name in ["fp8", "fp8-fp32scale"] {
        let key = fp8(name);
        let mut out = QuantizedRows::default();
        KeyCacheFaults::default().write(&key, &raw, D, &mut out).unwrap();
        assert_eq!(out, key.quantize_rows(&raw, D).unwrap(), "{name}");
    }
}

#[test]
fn scale_spans_share_one_scale() {
    let raw = keys(300);
    let key = fp8("fp8");
    let own = key.quantize_rows(&raw, D).unwrap();
    let page = store(KeyCacheFaults { scale_span: ScaleSpan::Page, ..Default::default() }, &key, &raw);
    // ue8m0 scales grow with amax: a span's scale is its rows' largest.
    let largest = |rows: std::ops::Range<usize>| own.row_scales[rows].iter().fold(0f32, |a, &b| a.max(b));
    for p in 0..5 {
        let rows = p * 64..((p + 1) * 64).min(300);
        let want = largest(rows.clone());
        assert!(page.row_scales[rows].iter().all(|&s| s == want), "page {p}");
    }
    assert_ne!(page.row_scales[0], own.row_scales[0]);
    let tensor = store(KeyCacheFaults { scale_span: ScaleSpan::Tensor, ..Default::default() }, &key, &raw);
    assert!(tensor.row_scales[..256].iter().all(|&s| s == largest(0..256)));
    assert!(tensor.row_scales[256..].iter().all(|&s| s == largest(256..300)));
    // Small rows lose precision under a shared scale: dequantized values differ.
    assert_ne!(page.dequantized(D)[..D], own.dequantized(D)[..D]);
}

#[test]
fn scale_floor_halves_the_scale_and_saturates() {
    let mut raw = keys(64);
    raw[D..2 * D].iter_mut().enumerate().for_each(|(j, v)| *v = if j == 0 { 448.0 } else { 1.0 }); // amax/448 = 1 exactly
    let key = QuantPipeline { rotation: Rotation::None, ..fp8("fp8") };
    let own = key.quantize_rows(&raw, D).unwrap();
    let floor = store(KeyCacheFaults { scale_rounded_down: true, ..Default::default() }, &key, &raw);
    assert_eq!(floor.row_scales[1], own.row_scales[1]);
    for r in (0..64).filter(|&r| r != 1) {
        assert_eq!(floor.row_scales[r], own.row_scales[r] / 2.0, "row {r}");
        let row = &floor.values[r * D..(r + 1) * D];
        assert!(row.iter().any(|v| v.abs() == 448.0) && row.iter().all(|v| v.abs() <= 448.0), "row {r}");
    }
    let err = KeyCacheFaults { scale_rounded_down: true, ..Default::default() }.unsupported(&fp8("fp8-fp32scale"), D);
    assert!(err.is_some_and(|e| e.contains("ue8m0")));
}

#[test]
fn stale_scale_is_the_previous_rows_in_its_page() {
    let raw = keys(130);
    let key = fp8("fp8-fp32scale");
    let own = key.quantize_rows(&raw, D).unwrap();
    let stale = store(KeyCacheFaults { stale_scale: true, ..Default::default() }, &key, &raw);
    for r in 0..130 {
        let want = if r % 64 == 0 { own.row_scales[r] } else { own.row_scales[r - 1] };
        assert_eq!(stale.row_scales[r], want, "row {r}");
    }
    // Rows grow, so a stale (smaller) scale clips each row's largest values.
    assert!(stale.values[5 * D..6 * D].iter().filter(|v| v.abs() == 448.0).count() > 1);
}

#[test]
fn slot_shift_reads_the_next_slot_of_the_page() {
    let raw = keys(100);
    let key = fp8("fp8");
    let own = key.quantize_rows(&raw, D).unwrap();
    let shifted = store(KeyCacheFaults { slot_shift: true, ..Default::default() }, &key, &raw);
    let row = |q: &QuantizedRows, r: usize| (q.values[r * D..(r + 1) * D].to_vec(), q.row_scales[r]);
    assert_eq!(row(&shifted, 0), row(&own, 1));
    assert_eq!(row(&shifted, 62), row(&own, 63));
    assert_eq!(row(&shifted, 63), row(&own, 0)); // wraps inside its page
    assert_eq!(row(&shifted, 64), row(&own, 65));
    // Row 99 (slot 35 of a partial page) reads slot 36, never written.
    assert_eq!(row(&shifted, 99), (vec![0.0; D], 0.0));
}

#[test]
fn block_row0_reads_every_row_of_a_page_from_its_first() {
    let raw = keys(100);
    let key = fp8("fp8");
    let own = key.quantize_rows(&raw, D).unwrap();
    let read = store(KeyCacheFaults { block_row0: true, ..Default::default() }, &key, &raw);
    let row = |q: &QuantizedRows, r: usize| (q.values[r * D..(r + 1) * D].to_vec(), q.row_scales[r]);
    for r in 0..100 {
        assert_eq!(row(&read, r), row(&own, r / PAGE_ROWS * PAGE_ROWS), "row {r}");
    }
    assert_ne!(row(&own, 1), row(&own, 0));
}

#[test]
fn pages_swapped_reads_the_paired_page() {
    let raw = keys(256 + 80);
    let key = fp8("fp8");
    let own = key.quantize_rows(&raw, D).unwrap();
    let swapped = store(KeyCacheFaults { pages_swapped: true, ..Default::default() }, &key, &raw);
    assert_eq!(swapped.values[..64 * D], own.values[64 * D..128 * D]);
    assert_eq!(swapped.values[192 * D..256 * D], own.values[128 * D..192 * D]);
    assert_eq!(swapped.row_scales[256..272], own.row_scales[320..336]);
    // Slots 16… of page 5 were never written: page 4 reads zeros there.
    assert_eq!(swapped.row_scales[272], 0.0);
}

#[test]
fn scale_words_next_slot_and_unwritten() {
    let raw = keys(70);
    let key = fp8("fp8");
    let own = key.quantize_rows(&raw, D).unwrap();
    let off = store(KeyCacheFaults { scale_word: ScaleWordFault::NextSlot, ..Default::default() }, &key, &raw);
    assert_eq!(off.values, own.values);
    assert_eq!(off.row_scales[..63], own.row_scales[1..64]);
    assert_eq!(off.row_scales[63], own.row_scales[0]);
    assert_eq!(off.row_scales[69], 0.0);
    let zero = store(KeyCacheFaults { scale_word: ScaleWordFault::UnwrittenZero, ..Default::default() }, &key, &raw);
    assert!(zero.row_scales.iter().all(|&s| s == 0.0));
    let nan = store(KeyCacheFaults { scale_word: ScaleWordFault::UnwrittenNan, ..Default::default() }, &key, &raw);
    assert!(nan.row_scales.iter().all(|s| s.is_nan()));
    // Scale faults need one scale per row: fp4's blocks of 32 have none.
    assert!(KeyCacheFaults { scale_word: ScaleWordFault::UnwrittenZero, ..Default::default() }.unsupported(&fp8("fp4"), D).is_some());
    let mut out = QuantizedRows::default();
    let err =
        KeyCacheFaults { scale_word: ScaleWordFault::UnwrittenZero, ..Default::default() }.store(&fp8("fp4"), &raw, 0, 0, D, &mut out);
    assert!(matches!(err, Err(SimError::Hypothesis(_))));
}

#[test]
fn fnuz_read_halves_values_and_turns_negative_zero_into_nan() {
    let mut raw = keys(3);
    raw[7] = -1e-30; // rounds to −0 in e4m3fn: the bit pattern 0x80
    let key = QuantPipeline { rotation: Rotation::None, ..fp8("fp8") };
    let own = key.quantize_rows(&raw, D).unwrap();
    assert_eq!(own.values[7].to_bits(), 0x8000_0000);
    let fnuz = store(KeyCacheFaults { read_as: Fp8Flavour::E4m3fnuz, ..Default::default() }, &key, &raw);
    assert!(fnuz.values[7].is_nan());
    for (i, (&a, &b)) in own.values.iter().zip(&fnuz.values).enumerate().filter(|&(i, _)| i != 7) {
        assert_eq!(b, a / 2.0, "value {i}");
    }
    assert_eq!(fnuz.row_scales, own.row_scales);
}

#[test]
fn fn_read_of_fnuz_codes_doubles_values_and_max_becomes_nan() {
    let raw = keys(4);
    for name in ["fp8", "fp8-fp32scale"] {
        let key = fp8(name);
        let fnuz_written = KeyCacheFaults { written_as: Fp8Flavour::E4m3fnuz, read_as: Fp8Flavour::E4m3fnuz, ..Default::default() };
        let written = store(fnuz_written, &key, &raw);
        assert!(written.values.iter().all(|v| v.abs() <= 240.0));
        let read = store(KeyCacheFaults { written_as: Fp8Flavour::E4m3fnuz, ..Default::default() }, &key, &raw);
        for (&w, &r) in written.values.iter().zip(&read.values) {
            if w.abs() == 240.0 {
                assert!(r.is_nan()); // fnuz 0x7f is e4m3fn's NaN
            } else {
                assert_eq!(r, w * 2.0);
            }
        }
    }
    // With the fp32 scale every row's amax lands on 240 exactly: NaN in every row.
    let read = store(KeyCacheFaults { written_as: Fp8Flavour::E4m3fnuz, ..Default::default() }, &fp8("fp8-fp32scale"), &raw);
    assert!(read.values.chunks(D).all(|row| row.iter().any(|v| v.is_nan())));
}

#[test]
fn fnuz_ue8m0_scale_is_the_smallest_power_of_two_that_fits() {
    assert_eq!(fnuz_scale(240.0, ScaleFormat::Ue8m0Ceil), 1.0);
    assert_eq!(fnuz_scale(f32::from_bits(240f32.to_bits() + 1), ScaleFormat::Ue8m0Ceil), 2.0);
    assert_eq!(fnuz_scale(239.99, ScaleFormat::Ue8m0Ceil), 1.0);
    assert_eq!(fnuz_scale(1.875, ScaleFormat::Ue8m0Ceil), 2f32.powi(-7));
    assert_eq!(fnuz_scale(480.0, ScaleFormat::Fp32), 2.0);
}
/// The page bytes of `own` (64 rows at most) as the engines write
/// them: planar (codes row-major, then fp32 scale words) or as
/// interleaved records of D + 4 bytes. Independent of the code under test.
fn page_bytes(own: &QuantizedRows, interleaved: bool) -> Vec<u8> {
    let mut bytes = vec![0u8; 64 * (D + 4)];
    for r in 0..own.row_scales.len() {
        let (codes, scale) = if interleaved { (r * (D + 4), r * (D + 4) + D) } else { (r * D, 64 * D + 4 * r) };
        for c in 0..D {
            bytes[codes + c] = ElementFormat::E4m3fn.encode(own.values[r * D + c], Overflow::Cast) as u8;
        }
        bytes[scale..scale + 4].copy_from_slice(&own.row_scales[r].to_le_bytes());
    }
    bytes
}

fn le_f32(bytes: &[u8], at: usize) -> f32 {
    f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn interleaved_read_of_a_planar_page_bit_casts_code_bytes_into_scales() {
    for name in ["fp8", "fp8-fp32scale"] {
        let key = fp8(name);
        let raw = keys(64);
        let own = key.quantize_rows(&raw, D).unwrap();
        let bytes = page_bytes(&own, false);
        let read = store(KeyCacheFaults { page_layout: PageLayoutFault::InterleavedRead, ..Default::default() }, &key, &raw);
        for r in 0..64 {
            for c in 0..D {
                let want = ElementFormat::E4m3fn.decode(u32::from(bytes[132 * r + c]));
                assert!(same_bits(read.values[r * D + c], want), "{name} row {r} code {c}");
            }
            assert!(same_bits(read.row_scales[r], le_f32(&bytes, 132 * r + 128)), "{name} row {r} scale");
        }
        // Row 0's codes are its own; its scale is row 1's first four code bytes.
        assert_eq!(read.values[..D], own.values[..D]);
        assert_ne!(read.row_scales[0], own.row_scales[0]);
        // Slots 62 and 63 read real scale words (of slots 30 and 63).
        assert_eq!((read.row_scales[62], read.row_scales[63]), (own.row_scales[30], own.row_scales[63]));
        // Rows 0 … 61 read bit-cast code bytes: both signs and magnitudes far from any real scale.
        let cast = &read.row_scales[..62];
        assert!(cast.iter().any(|&s| s < 0.0) && cast.iter().any(|&s| s > 1e6), "{name}: {cast:?}");
    }
}

#[test]
fn planar_read_of_interleaved_records_reads_scales_from_the_last_records() {
    let key = fp8("fp8");
    let raw = keys(64);
    let own = key.quantize_rows(&raw, D).unwrap();
    let bytes = page_bytes(&own, true);
    let read = store(KeyCacheFaults { page_layout: PageLayoutFault::PlanarRead, ..Default::default() }, &key, &raw);
    for r in 0..64 {
        for c in 0..D {
            let want = ElementFormat::E4m3fn.decode(u32::from(bytes[128 * r + c]));
            assert!(same_bits(read.values[r * D + c], want), "row {r} code {c}");
        }
        assert!(same_bits(read.row_scales[r], le_f32(&bytes, 64 * 128 + 4 * r)), "row {r} scale");
    }
    assert_eq!(read.values[..D], own.values[..D]);
    // Record 1 starts at byte 132: row 1's codes lag by 4 bytes, row 0's scale word among them.
    assert_eq!(read.values[D + 4..2 * D], own.values[D..2 * D - 4]);
    // Slot 63's scale word, bytes 8444 … 8447, is record 63's scale.
    assert_eq!(read.row_scales[63], own.row_scales[63]);
}

#[test]
fn tile16_read_of_a_flat_page_takes_row_pieces_of_its_band() {
    let key = fp8("fp8");
    let raw = keys(100);
    let own = key.quantize_rows(&raw, D).unwrap();
    let read = store(KeyCacheFaults { page_layout: PageLayoutFault::Tile16Read, ..Default::default() }, &key, &raw);
    // Row r, byte c is read from AITER's tiled offset of a flat page.
    for r in 0..100 {
        let (page, slot) = (r / 64, r % 64);
        for c in 0..D {
            let off = (slot / 16) * 16 * D + (c / 16) * 256 + (slot % 16) * 16 + c % 16;
            let (src_row, src_col) = (page * 64 + off / D, off % D);
            // Rows of the partial page past row 99 were never written: zero.
            let want = if src_row < 100 { own.values[src_row * D + src_col] } else { 0.0 };
            assert_eq!(read.values[r * D + c].to_bits(), want.to_bits(), "row {r} code {c}");
        }
    }
    // The documented example: token 17, dim 35 reads flat byte 2579 = row 20, byte 19.
    assert_eq!(read.values[17 * D + 35], own.values[20 * D + 19]);
    assert_eq!(read.row_scales, own.row_scales);
    // Row 0's first 16 bytes are its own; the next 16 are row 0's bytes 16 … 31 of another tile.
    assert_eq!(read.values[..16], own.values[..16]);
    assert_ne!(read.values[D..2 * D], own.values[D..2 * D]);
}

#[test]
fn layout_faults_refuse_keys_without_row_scaled_e4m3fn_bytes() {
    for fault in [
        KeyCacheFaults { page_layout: PageLayoutFault::InterleavedRead, ..Default::default() },
        KeyCacheFaults { page_layout: PageLayoutFault::Tile16Read, ..Default::default() },
        KeyCacheFaults { offset_32bit_blocks: Some(1 << 20), ..Default::default() },
    ] {
        for name in ["bf16", "fp32", "fp4", "nvfp4"] {
            let why = fault.unsupported(&fp8(name), D).unwrap_or_else(|| panic!("{name} accepted"));
            assert!(why.contains("e4m3fn") && !why.contains('\n'), "{why}");
            let mut out = QuantizedRows::default();
            assert!(matches!(fault.store(&fp8(name), &keys(64), 0, 0, D, &mut out), Err(SimError::Hypothesis(_))), "{name}");
        }
        assert!(fault.unsupported(&fp8("fp8-fp32scale"), D).is_none());
    }
    let tile = KeyCacheFaults { page_layout: PageLayoutFault::Tile16Read, ..Default::default() };
    let rows_of_24 = QuantPipeline {
        scaling: fp8("fp8").scaling.map(|s| crate::numerics::format::BlockScaling { shape: crate::numerics::format::BlockShape::Row, ..s }),
        ..fp8("fp8")
    };
    assert!(tile.unsupported(&rows_of_24, 24).is_some_and(|w| w.contains("multiple of 16")));
}

#[test]
fn offset_32bit_zeroes_the_share_of_pages_past_2_31_bytes() {
    assert_eq!(FIRST_BLOCK_PAST_2_31, 254_201);
    const { assert!((FIRST_BLOCK_PAST_2_31 - 1) * 8448 < 1 << 31 && FIRST_BLOCK_PAST_2_31 * 8448 >= 1 << 31) };
    // A pool of 64M tokens: 2^20 blocks, of which those from 254201 on overflow.
    let pool = (64u64 << 20) / 64;
    let want = 1.0 - FIRST_BLOCK_PAST_2_31 as f64 / pool as f64;
    assert!((want - (1.0 - 2f64.powi(31) / (64.0 * 1048576.0 * 132.0))).abs() < 1e-5);
    let (requests, pages) = (200u64, 100u64);
    let zeroed = (0..requests).flat_map(|q| (0..pages).map(move |p| (q, p))).filter(|&(q, p)| page_past_32bit(q, p, pool)).count();
    let (lo, hi) = crate::base::stats::wilson_interval(zeroed as u64, requests * pages, 3.29);
    assert!(lo <= want && want <= hi, "{zeroed} of {}: [{lo}, {hi}] vs {want}", requests * pages);
    // Through the cache: a zeroed page's rows are all zero, the others as written.
    let key = fp8("fp8");
    let raw = keys(256);
    let own = key.quantize_rows(&raw, D).unwrap();
    let fault = KeyCacheFaults { offset_32bit_blocks: Some(pool), ..Default::default() };
    let request = 7;
    let mut out = QuantizedRows::default();
    fault.store(&key, &raw, 512, request, D, &mut out).unwrap();
    for page in 0..4 {
        let rows = page * 64 * D..(page + 1) * 64 * D;
        if page_past_32bit(request, 8 + page as u64, pool) {
            assert!(out.values[rows].iter().all(|&v| v == 0.0), "page {page}");
        } else {
            assert_eq!(out.values[rows.clone()], own.values[rows], "page {page}");
        }
    }
}

#[test]
fn faults_that_only_move_rows_read_each_row_as_the_written_row_it_names() {
    let moves = |slot_shift, pages_swapped, block_row0| KeyCacheFaults { slot_shift, pages_swapped, block_row0, ..Default::default() };
    assert!(!KeyCacheFaults::default().moves_rows_only());
    assert!(!KeyCacheFaults { slot_shift: true, stale_scale: true, ..Default::default() }.moves_rows_only());
    assert!(!KeyCacheFaults { block_row0: true, zero_pages_ppm: 10, ..Default::default() }.moves_rows_only());
    // 200 rows: three whole pages and a partial one, whose swapped partner
    // rows lie past the written rows (read as zero rows with scale 0).
    let raw = keys(200);
    for key in [fp8("fp8-fp32scale"), fp8("bf16")] {
        let written = store(KeyCacheFaults::default(), &key, &raw);
        for faults in [moves(true, false, false), moves(false, true, false), moves(false, false, true), moves(true, true, false)] {
            assert!(faults.moves_rows_only(), "{faults:?}");
            let read = store(faults, &key, &raw);
            for r in 0..200 {
                let src = faults.read_row(r);
                let (values, scale) = match written.row_scales.get(src) {
                    Some(&s) => (written.values[src * D..(src + 1) * D].to_vec(), s),
                    None => (vec![0.0; D], 0.0),
                };
                assert_eq!(read.values[r * D..(r + 1) * D], values[..], "{faults:?} row {r}");
                assert_eq!(read.row_scales[r].to_bits(), scale.to_bits(), "{faults:?} row {r}");
            }
        }
    }
}
