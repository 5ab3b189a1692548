//! The optimized GEMM every bench compares our scoring with (the `gemm`
//! crate, f32): C [n × heads] = K [n × d] · Qᵀ, K and Q row-major.

/// `c` = `k` · `q`ᵀ for `k` of n rows of `d` and `q` of `heads` rows of `d`,
/// on `threads` rayon threads (1: none).
pub fn gemm_f32(k: &[f32], q: &[f32], c: &mut [f32], d: usize, heads: usize, threads: usize) {
    let n = k.len() / d;
    assert!(q.len() >= heads * d && c.len() >= n * heads, "gemm_f32: q or c too short");
    let par = if threads <= 1 { gemm::Parallelism::None } else { gemm::Parallelism::Rayon(threads) };
    // SAFETY: k holds n rows of d, q heads rows of d, c n rows of heads
    // (asserted above): the sizes the strides describe.
    unsafe {
        gemm::gemm(
            n,
            heads,
            d,
            c.as_mut_ptr(),
            1,
            heads as isize,
            false,
            k.as_ptr(),
            1,
            d as isize,
            q.as_ptr(),
            d as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}
