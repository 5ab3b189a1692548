//! TEMPORARY stand-in, replaced by the physics branch's module on merge.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeConfig {
    first: usize,
    len: usize,
    interleaved: bool,
    theta: f64,
}

impl RopeConfig {
    pub fn deepseek_v32() -> Self {
        RopeConfig { first: 0, len: 64, interleaved: false, theta: 10000.0 }
    }
    pub fn deepseek_v4() -> Self {
        RopeConfig { first: 64, len: 64, interleaved: true, theta: 160000.0 }
    }
    pub fn rotate(&self, v: &mut [f32], position: u64) {
        let half = self.len / 2;
        for m in 0..half {
            let f = self.theta.powf(-2.0 * m as f64 / self.len as f64);
            let (s, c) = (position as f64 * f).sin_cos();
            let (a, b) = if self.interleaved { (self.first + 2 * m, self.first + 2 * m + 1) } else { (self.first + m, self.first + m + half) };
            let (x, y) = (f64::from(v[a]), f64::from(v[b]));
            v[a] = (x * c - y * s) as f32;
            v[b] = (x * s + y * c) as f32;
        }
    }
    pub fn rotate_rows(&self, rows: &mut [f32], dim: usize, first_position: u64, position_stride: u64) {
        for (r, row) in rows.chunks_exact_mut(dim).enumerate() {
            self.rotate(row, first_position + r as u64 * position_stride);
        }
    }
}
