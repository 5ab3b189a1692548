use super::*;

/// The V4-Flash preset's generative model (64 heads × 128 dims).
pub(crate) fn model(strength: f64) -> GenerativeModel {
    GenerativeModel {
        shape: IndexerShape { heads: 64, head_dim: 128 },
        key_common: 0.5,
        outlier_channels: 4,
        outlier_scale: 8.0,
        weight_mean: 0.0,
        weight_std: 1.0,
        needle_strength: strength,
        needle_unit: Default::default(),
        needle_heads: 16,
        needle_geometry: NeedleGeometry::Isotropic,
        head_coherence: 0.0,
        structure: HaystackStructure::default(),
    }
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum()
}

#[test]
fn needle_offset_shifts_looking_heads_by_strength_sd_and_others_by_zero() {
    let m = model(2.5);
    let t = TrialHaystack::draw(&m, 7).unwrap();
    let d = 128;
    for h in 0..64 {
        let q = &t.queries[h * d..(h + 1) * d];
        let shift = dot(q, t.needle_offset());
        let sd: f64 = (0..d).map(|j| (f64::from(q[j]) * f64::from(t.channel_std[j])).powi(2)).sum::<f64>().sqrt();
        let want = if h < 16 { 2.5 * sd } else { 0.0 };
        assert!((shift - want).abs() < 1e-3 * sd, "head {h}: shift {shift}, want {want}");
    }
}

/// The V4 layout: rope-free dims 0 … 63, rotary 64 … 127; a band of the
/// last 8 pairs' dims.
fn content(rope_share: f64) -> NeedleGeometry {
    NeedleGeometry::Content { free_dims: (0..64).collect(), band_dims: (96..128).collect(), rope_share }
}

#[test]
fn content_geometry_splits_each_looking_heads_shift_between_free_dims_and_the_band() {
    for share in [0.0, 0.25, 1.0] {
        let mut m = model(3.0);
        m.needle_geometry = content(share);
        let t = TrialHaystack::draw(&m, 7).unwrap();
        let delta = t.needle_offset();
        // Nothing outside the match dims: rotary dims below the band stay 0.
        assert!(delta[64..96].iter().all(|&x| x == 0.0));
        let d = 128;
        for h in 0..16 {
            let q = &t.queries[h * d..(h + 1) * d];
            let sd: f64 = (0..d).map(|j| (f64::from(q[j]) * f64::from(t.channel_std[j])).powi(2)).sum::<f64>().sqrt();
            let free = dot(&q[..64], &delta[..64]);
            let band = dot(&q[96..], &delta[96..]);
            assert!((free - (1.0 - share) * 3.0 * sd).abs() < 1e-3 * sd, "share {share}, head {h}: free part {free}");
            assert!((band - share * 3.0 * sd).abs() < 1e-3 * sd, "share {share}, head {h}: band part {band}");
        }
    }
}

#[test]
fn coherent_looking_heads_share_a_direction_and_the_others_do_not_change() {
    let base = TrialHaystack::draw(&model(1.0), 5).unwrap();
    let mut m = model(1.0);
    m.head_coherence = 0.6;
    let t = TrialHaystack::draw(&m, 5).unwrap();
    let d = 128;
    assert_eq!(t.queries[16 * d..], base.queries[16 * d..]);
    assert_eq!(t.weights, base.weights);
    let cos = |a: &[f32], b: &[f32]| dot(a, b) / (dot(a, a) * dot(b, b)).sqrt();
    let (mut sum, mut pairs) = (0.0, 0);
    for a in 0..16 {
        for b in 0..a {
            sum += cos(&t.queries[a * d..(a + 1) * d], &t.queries[b * d..(b + 1) * d]);
            pairs += 1;
        }
    }
    // The cosine of two heads is about c = 0.6 (each has variance c in the shared
    // direction); one pair's sampling SD is about 0.06, the mean of 120 pairs'
    // (correlated through the shared direction) well under 0.1.
    let mean = sum / f64::from(pairs);
    assert!((mean - 0.6).abs() < 0.1, "mean cosine of looking heads {mean}");
    let independent = cos(&base.queries[..d], &base.queries[d..2 * d]);
    assert!(independent.abs() < 0.35, "independent heads have cosine {independent}");
}

#[test]
fn recency_reaches_only_the_newest_rows_and_decays() {
    let mut m = model(1.0);
    m.structure.recency_rows = 10.0;
    m.structure.recency_relevance = 2.0;
    assert_eq!(m.structure.recency_span(1000), 920..1000);
    assert_eq!(m.structure.recency_span(50), 0..50);
    assert!(m.structure.depends_on_row_index() && !m.structure.is_null());
    let t = TrialHaystack::draw(&m, 9).unwrap();
    let g = &t.structure.as_ref().unwrap().relevance_dir;
    let bump = |row: u64, candidates: u64| {
        let mut key = vec![0.0f32; 128];
        t.add_recency(row, candidates, &mut key);
        dot(&key, g)
    };
    let unit = 2.0 * t.channel_std.iter().map(|&s| f64::from(s).powi(2)).sum::<f64>().sqrt();
    assert!((bump(999, 1000) - unit).abs() < 1e-4 * unit);
    assert!((bump(989, 1000) - unit * (-1.0f64).exp()).abs() < 1e-4 * unit);
    assert_eq!(bump(919, 1000), 0.0);
    // The same row is recent in a shorter context only.
    assert_eq!(bump(999, 2000), 0.0);
    // Recency off: nothing.
    let plain = TrialHaystack::draw(&model(1.0), 9).unwrap();
    let mut key = vec![0.0f32; 128];
    plain.add_recency(999, 1000, &mut key);
    assert!(key.iter().all(|&x| x == 0.0));
}

#[test]
fn strength_zero_makes_needle_rows_identical_to_haystack_rows() {
    let t = TrialHaystack::draw(&model(0.0), 3).unwrap();
    let (mut a, mut b) = (vec![0.0; 128], vec![0.0; 128]);
    t.fill_haystack_row(99, &mut a);
    t.fill_needle_row(99, &mut b);
    assert_eq!(a, b);
}

#[test]
fn looking_heads_have_positive_weights_and_rows_are_reproducible() {
    let t = TrialHaystack::draw(&model(1.0), 11).unwrap();
    assert!(t.weights[..16].iter().all(|&w| w >= 0.0));
    assert!(t.weights[16..].iter().any(|&w| w < 0.0));
    let (mut a, mut b) = (vec![0.0; 128], vec![0.0; 128]);
    t.fill_haystack_row(5, &mut a);
    t.fill_haystack_row(5, &mut b);
    assert_eq!(a, b);
    t.fill_haystack_row(6, &mut b);
    assert_ne!(a, b);
}

#[test]
fn haystack_channels_have_the_documented_spread() {
    // Sample variance of an outlier channel vs a normal one, over 4000 rows:
    // the ratio's standard error is about 2·sqrt(2/4000) ≈ 4.5 %; allow 5 SE.
    let m = model(0.0);
    let t = TrialHaystack::draw(&m, 1).unwrap();
    let mut row = vec![0.0; 128];
    let (mut s0, mut s0sq, mut s9, mut s9sq) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let n = 4000;
    for i in 0..n {
        t.fill_haystack_row(i, &mut row);
        s0 += f64::from(row[0]);
        s0sq += f64::from(row[0]).powi(2);
        s9 += f64::from(row[9]);
        s9sq += f64::from(row[9]).powi(2);
    }
    let var = |s: f64, sq: f64| sq / n as f64 - (s / n as f64).powi(2);
    let ratio = var(s0, s0sq) / var(s9, s9sq);
    assert!((ratio / 64.0 - 1.0).abs() < 0.225, "variance ratio {ratio}, want 64");
}

#[test]
fn batched_rows_equal_single_rows_and_the_portable_path() {
    // 128, 256: group quads; 192: a quad and a pair; 96, 40: pairs,
    // single groups and a cut group.
    for d in [128usize, 256, 192, 96, 40] {
        let mut m = model(1.0);
        m.shape.head_dim = d;
        m.shape.heads = 8;
        m.needle_heads = 2;
        let t = TrialHaystack::draw(&m, 21).unwrap();
        let rows = 37;
        let mut batch = vec![0.0f32; rows * d];
        t.fill_haystack_rows(1000, &mut batch);
        let mut portable = vec![0.0f32; rows * d];
        t.fill_rows_portable(1000, &mut portable);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&batch), bits(&portable), "d = {d}");
        let mut one = vec![0.0f32; d];
        for r in (0..rows).rev() {
            t.fill_haystack_row(1000 + r as u64, &mut one);
            assert_eq!(bits(&one), bits(&batch[r * d..(r + 1) * d]), "d = {d}, row {r}");
        }
    }
}

#[test]
fn cholesky_solves_a_known_system() {
    let mut a = vec![4.0, 2.0, 2.0, 3.0];
    let x = cholesky_solve(&mut a, 2, &[2.0, 1.0]).unwrap();
    // [[4,2],[2,3]] x = [2,1] → x = [0.5, 0]
    assert!((x[0] - 0.5).abs() < 1e-12 && x[1].abs() < 1e-12);
    let mut singular = vec![1.0, 1.0, 1.0, 1.0];
    assert!(cholesky_solve(&mut singular, 2, &[1.0, 1.0]).is_none());
}
