//! Recorded values, in the style of rand_distr's `value_stability.rs`: a
//! few cells' survivals, ranks and margins as the simulator gives them
//! today, written out exactly. Any change to the bits a sweep produces
//! (a reordered sum, a changed stream, a new default) fails here in CI.
//! When a change is meant to move the bits, prove the rest with
//! `tools/same_bits.sh`, then record the new values (the failure prints them).

use crate::common::{sweep, sweep_toml};

/// One line per cell: where it is, survivals, median rank, mean margin and
/// rank-share quantiles ({:?}: the shortest text that reads back exactly).
fn recorded(o: &dsa_recall::run::sweep::SweepOutcome) -> String {
    o.cells
        .iter()
        .map(|c| {
            format!(
                "{} {} {} {}: {}/{} rank {:?} margin {:?} shares {:?}\n",
                c.context_tokens,
                c.depth_percent,
                c.topk,
                c.precision,
                c.survived,
                c.trials,
                c.median_rank,
                c.mean_margin_sd,
                c.rank_share_quantiles
            )
        })
        .collect()
}

fn check(name: &str, got: &str, want: &str) {
    assert!(got == want, "{name}: the recorded values moved. Now:\n{got}");
}

/// The default preset (V4-Flash, quantile needle) with its shipped formats.
#[test]
fn default_preset_cells_keep_their_recorded_values() {
    let o =
        sweep_toml("[sweep]\ncontexts = \"16K,64K\"\ndepths = \"50\"\ntrials = 24\nprecisions = \"bf16,fp8-fp32scale,fp4\"\nseed = 7\n");
    check("default preset", &recorded(&o), DEFAULT_PRESET);
}

/// V3.2 (token-level rows) with the strength unit and an fp8 cache fault.
#[test]
fn v32_strength_cells_keep_their_recorded_values() {
    let o = sweep(&crate::common::scenario(
        "preset = \"deepseek-v3.2\"\n[sweep]\ncontexts = \"8K\"\ndepths = \"10,90\"\ntrials = 24\nprecisions = \"fp8,fp8+scale-floor\"\nseed = 11\n[needle]\nprofile = \"stress\"\n",
    ));
    check("v3.2 strength", &recorded(&o), V32_STRENGTH);
}

const DEFAULT_PRESET: &str = concat!(
    "16384 50 512 bf16: 24/24 rank Some(1.0) margin Some(3.8292100618451834) shares Some([0.0, 0.0, 0.001953125, 0.00390625, 0.013085937499999992])\n",
    "16384 50 512 fp8-fp32scale: 24/24 rank Some(0.5) margin Some(3.8325923898361793) shares Some([0.0, 0.0, 0.0009765625, 0.00244140625, 0.009765625])\n",
    "16384 50 512 fp4: 24/24 rank Some(0.0) margin Some(3.7647344263065077) shares Some([0.0, 0.0, 0.0, 0.0078125, 0.02001953124999998])\n",
    "16384 50 1024 bf16: 24/24 rank Some(1.0) margin Some(4.468519606595446) shares Some([0.0, 0.0, 0.0009765625, 0.001953125, 0.006542968749999996])\n",
    "16384 50 1024 fp8-fp32scale: 24/24 rank Some(0.5) margin Some(4.472176304754599) shares Some([0.0, 0.0, 0.00048828125, 0.001220703125, 0.0048828125])\n",
    "16384 50 1024 fp4: 24/24 rank Some(0.0) margin Some(4.407032756912067) shares Some([0.0, 0.0, 0.0, 0.00390625, 0.01000976562499999])\n",
    "65536 50 512 bf16: 24/24 rank Some(4.0) margin Some(2.5353546689850175) shares Some([0.0, 0.00341796875, 0.0078125, 0.01220703125, 0.05117187499999995])\n",
    "65536 50 512 fp8-fp32scale: 24/24 rank Some(3.0) margin Some(2.5461447212731048) shares Some([0.0, 0.0029296875, 0.005859375, 0.015625, 0.053417968749999954])\n",
    "65536 50 512 fp4: 24/24 rank Some(4.0) margin Some(2.4792000115003208) shares Some([0.0, 0.00146484375, 0.0078125, 0.0205078125, 0.06552734375])\n",
    "65536 50 1024 bf16: 24/24 rank Some(4.0) margin Some(3.0407173878578777) shares Some([0.0, 0.001708984375, 0.00390625, 0.006103515625, 0.025585937499999975])\n",
    "65536 50 1024 fp8-fp32scale: 24/24 rank Some(3.0) margin Some(3.051755869473569) shares Some([0.0, 0.00146484375, 0.0029296875, 0.0078125, 0.026708984374999977])\n",
    "65536 50 1024 fp4: 24/24 rank Some(4.0) margin Some(2.980396321524342) shares Some([0.0, 0.000732421875, 0.00390625, 0.01025390625, 0.032763671875])\n",
);
const V32_STRENGTH: &str = concat!(
    "8192 10 2048 fp8: 22/24 rank Some(623.0) margin Some(0.9970800053818566) shares Some([0.0171875, 0.119873046875, 0.30419921875, 0.41015625, 1.0076660156249997])\n",
    "8192 10 2048 fp8+scale-floor: 23/24 rank Some(472.5) margin Some(1.0110942510897105) shares Some([0.011669921875000001, 0.1553955078125, 0.230712890625, 0.534912109375, 0.9551025390625])\n",
    "8192 10 4096 fp8: 23/24 rank Some(623.0) margin Some(1.6537634594764272) shares Some([0.00859375, 0.0599365234375, 0.152099609375, 0.205078125, 0.5038330078124998])\n",
    "8192 10 4096 fp8+scale-floor: 23/24 rank Some(472.5) margin Some(1.664081840307638) shares Some([0.0058349609375000005, 0.07769775390625, 0.1153564453125, 0.2674560546875, 0.47755126953125])\n",
    "8192 90 2048 fp8: 21/24 rank Some(819.5) margin Some(0.7059165384081383) shares Some([0.062036132812500006, 0.158447265625, 0.400146484375, 0.6029052734375, 1.857275390624999])\n",
    "8192 90 2048 fp8+scale-floor: 21/24 rank Some(823.5) margin Some(0.6815342496529521) shares Some([0.076611328125, 0.1690673828125, 0.402099609375, 0.8067626953125, 1.7254638671875])\n",
    "8192 90 4096 fp8: 24/24 rank Some(819.5) margin Some(1.3606518282947944) shares Some([0.031018066406250003, 0.0792236328125, 0.2000732421875, 0.30145263671875, 0.9286376953124995])\n",
    "8192 90 4096 fp8+scale-floor: 24/24 rank Some(823.5) margin Some(1.3301607849491996) shares Some([0.0383056640625, 0.08453369140625, 0.2010498046875, 0.40338134765625, 0.86273193359375])\n",
);
