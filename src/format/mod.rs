//! Number formats. (Placeholder with fp32 and bf16; the bit-exact module
//! replaces this file.)
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElementFormat {
    F32,
    Bf16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Overflow {
    #[default]
    Cast,
    Saturate,
}

impl ElementFormat {
    pub fn round_trip(self, x: f32, _overflow: Overflow) -> f32 {
        match self {
            ElementFormat::F32 => x,
            ElementFormat::Bf16 => half::bf16::from_f32(x).to_f32(),
        }
    }
    pub fn round_trip_slice(self, xs: &mut [f32], overflow: Overflow) {
        if self == ElementFormat::F32 {
            return;
        }
        for x in xs {
            *x = self.round_trip(*x, overflow);
        }
    }
}

pub fn hadamard_in_place(x: &mut [f32]) {
    let n = x.len();
    let mut h = 1;
    while h < n {
        for i in (0..n).step_by(2 * h) {
            for j in i..i + h {
                let (a, b) = (x[j], x[j + h]);
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
        h *= 2;
    }
    let s = 1.0 / (n as f32).sqrt();
    for v in x {
        *v *= s;
    }
}
