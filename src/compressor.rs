//! TEMPORARY stand-in, replaced by the physics branch's module on merge.
pub fn pool_window(values: &[f32], gates: &[f32], tokens: usize, d: usize, out: &mut [f32]) {
    for c in 0..d {
        let m = (0..tokens).map(|j| gates[j * d + c]).fold(f32::NEG_INFINITY, f32::max);
        let (mut num, mut den) = (0.0f32, 0.0f32);
        for j in 0..tokens {
            let e = (gates[j * d + c] - m).exp();
            num += e * values[j * d + c];
            den += e;
        }
        out[c] = num / den;
    }
}
pub fn rms_norm(row: &mut [f32], eps: f32) {
    let ms = row.iter().map(|x| x * x).sum::<f32>() / row.len() as f32;
    let inv = 1.0 / (ms + eps).sqrt();
    for x in row {
        *x *= inv;
    }
}
