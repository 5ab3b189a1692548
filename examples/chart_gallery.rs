//! Renders every chart type from hand-written synthetic data into
//! `target/chart-gallery/` for visual review (never into `plots/`).
//!
//! cargo run --example chart_gallery

use std::path::PathBuf;

use dsa_recall::report::chart::{
    render_compare, render_heatmap, render_recall_vs_context, render_recall_vs_depth, CompareChart, CompareRow, DepthChart, DepthPanel,
    DepthPoint, DepthSeries, EffectiveMark, Estimate, Heatmap, HeatmapPanel, RecallChart, RecallPoint, RecallSeries,
};

/// Wilson score interval for `successes` out of `n` trials at z = 1.96.
fn wilson(successes: f64, n: f64) -> (f64, f64) {
    let z = 1.96f64;
    let p = successes / n;
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Synthetic recall curve: ~1 up to the coverage limit, then decaying like
/// (limit / context)^slope, quantised to 400 trials.
fn series(topk: u32, precision: &str, coverage: u64, slope: f64, exps: std::ops::RangeInclusive<u32>) -> RecallSeries {
    RecallSeries {
        topk,
        precision: precision.into(),
        points: curve(coverage, slope, exps),
        predicted: Vec::new(),
        model: Vec::new(),
        model_band: Vec::new(),
    }
}

fn curve(coverage: u64, slope: f64, exps: std::ops::RangeInclusive<u32>) -> Vec<RecallPoint> {
    let trials = 400.0;
    exps.map(|e| {
        let c = 1u64 << e;
        let raw = if c <= coverage { 1.0 } else { (coverage as f64 / c as f64).powf(slope) };
        let hits = (raw * trials).round();
        let (lo, hi) = wilson(hits, trials);
        RecallPoint { context_tokens: c, recall: hits / trials, ci_low: lo, ci_high: hi }
    })
    .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into())).join("chart-gallery");
    std::fs::create_dir_all(&dir)?;

    // c = 4 (compression), W = 128 (sliding window): k·c+W
    let cov = |k: u64| k * 4 + 128;
    let recall = RecallChart {
        title: "Per-layer selection recall vs context length".into(),
        subtitle: "synthetic demo data: needle depth 50 %, 400 trials per point, Wilson 95 % bands".into(),
        series: vec![
            series(512, "bf16", cov(512), 0.55, 10..=20),
            series(512, "fp8", cov(512), 0.70, 10..=20),
            series(1024, "bf16", cov(1024), 0.50, 10..=20),
            series(1024, "fp8", cov(1024), 0.62, 10..=20),
            series(2048, "bf16", cov(2048), 0.45, 10..=20),
        ],
        coverage_limits: vec![(512, cov(512)), (1024, cov(1024)), (2048, cov(2048))],
        effective_threshold: Some(0.9),
        effective: Vec::new(),
        effective_at: None,
        whole_model_only: false,
    };
    for (name, w, h) in [("recall_vs_context.png", 1600, 1000), ("recall_vs_context_small.png", 800, 500)] {
        render_recall_vs_context(&recall, &dir.join(name), w, h)?;
    }
    render_recall_vs_context(&recall, &dir.join("recall_vs_context.svg"), 1600, 1000)?;

    // a short range starting below 1K, one series
    let short = RecallChart {
        title: "Per-layer selection recall, wide range".into(),
        subtitle: "synthetic demo data: single series, 512 tokens … 4M tokens (every other tick labelled)".into(),
        series: vec![series(256, "fp8", cov(256), 0.3, 9..=22)],
        coverage_limits: vec![(256, cov(256)), (64, cov(64))],
        effective_threshold: None,
        effective: Vec::new(),
        effective_at: None,
        whole_model_only: false,
    };
    render_recall_vs_context(&short, &dir.join("recall_vs_context_wide.png"), 1600, 1000)?;

    // whole-model recall (solid, banded) over per-layer recall (thin dashed)
    // and the analytic prediction (dotted)
    let mut whole = RecallChart {
        title: "Whole-model recall (solid) and per-layer selection recall (dashed) vs context".into(),
        subtitle: "synthetic demo data: needle depth 50 %, 400 trials per point, Wilson 95 % bands · whole model: 1 of 21 indexer layers"
            .into(),
        series: vec![
            series(512, "bf16", cov(512), 0.55, 10..=17),
            series(512, "fp4", cov(512), 0.60, 10..=17),
            series(1024, "bf16", cov(1024), 0.50, 10..=17),
            series(1024, "fp4", cov(1024), 0.55, 10..=17),
        ],
        coverage_limits: vec![(512, cov(512)), (1024, cov(1024))],
        effective_threshold: Some(0.9),
        effective: Vec::new(),
        effective_at: None,
        whole_model_only: false,
    };
    for sr in &mut whole.series {
        let reach = cov(sr.topk as u64) * 4;
        sr.model = curve(reach, 0.4, 10..=17);
        sr.predicted = curve(cov(sr.topk as u64), 0.5, 10..=17).iter().map(|p| (p.context_tokens, p.recall)).collect();
        whole.effective.push(EffectiveMark::of_series(sr, 0.9));
    }
    whole.effective_at = Some("depth 50 %".into());
    render_recall_vs_context(&whole, &dir.join("recall_vs_context_whole_model.png"), 1600, 1000)?;
    let alone = RecallChart { whole_model_only: true, ..whole.clone() };
    render_recall_vs_context(&alone, &dir.join("recall_vs_context_whole_model_only.png"), 1600, 1000)?;

    // heatmaps
    let contexts: Vec<u64> = (10..=17).map(|e| 1u64 << e).collect();
    let depths: Vec<f64> = (0..=10).map(|i| i as f64 * 10.0).collect();
    let panel = |k: u64, prec: &str, slope: f64| {
        let limit = cov(k);
        HeatmapPanel {
            title: format!("k={k}, {prec}"),
            depths_percent: depths.clone(),
            contexts: contexts.clone(),
            recall: depths
                .iter()
                .map(|&d| {
                    contexts
                        .iter()
                        .map(|&c| {
                            if c == 1 << 16 && (d - 30.0).abs() < 1e-9 {
                                return None; // a missing measurement
                            }
                            let base = if c <= limit { 1.0 } else { (limit as f64 / c as f64).powf(slope) };
                            // needles near the middle are a little harder
                            let dip = 1.0 - 0.12 * (1.0 - ((d - 50.0) / 50.0).powi(2)) * (c > limit) as u8 as f64;
                            Some(((base * dip) * 400.0).round() / 400.0)
                        })
                        .collect()
                })
                .collect(),
            coverage_limit: Some(limit),
            marked: Vec::new(),
        }
    };
    let panels = vec![panel(512, "bf16", 0.55), panel(512, "fp8", 0.7), panel(2048, "fp8", 0.6)];
    let hm = Heatmap {
        title: "Per-layer selection recall by depth and context (synthetic demo data)".into(),
        panels: panels.clone(),
        diverging: false,
        diverging_limit: None,
        note: None,
    };
    render_heatmap(&hm, &dir.join("heatmap.png"), 1600, 1000)?;

    let diff_panel = |a: &HeatmapPanel, b: &HeatmapPanel| HeatmapPanel {
        title: format!("{} − {}", b.title, a.title),
        depths_percent: a.depths_percent.clone(),
        contexts: a.contexts.clone(),
        recall: a.recall.iter().zip(&b.recall).map(|(ra, rb)| ra.iter().zip(rb).map(|(x, y)| Some((*y)? - (*x)?)).collect()).collect(),
        coverage_limit: a.coverage_limit,
        // demo marks: differences beyond 0.05 (a sweep marks Holm-adjusted p < 0.05)
        marked: a
            .recall
            .iter()
            .zip(&b.recall)
            .map(|(ra, rb)| ra.iter().zip(rb).map(|(x, y)| matches!((x, y), (Some(x), Some(y)) if (y - x).abs() > 0.05)).collect())
            .collect(),
    };
    let diff = Heatmap {
        title: "Selection recall difference fp8 − bf16 (synthetic demo data)".into(),
        panels: vec![diff_panel(&panels[0], &panels[1])],
        diverging: true,
        diverging_limit: Some(0.25),
        note: Some("ring: |difference| > 0.05 (demo rule; a sweep rings Holm-adjusted McNemar p < 0.05)".into()),
    };
    render_heatmap(&diff, &dir.join("heatmap_diff.png"), 1600, 1000)?;

    let many = Heatmap {
        title: "Per-layer selection recall, grid layout (synthetic demo data)".into(),
        panels: [128u64, 256, 512, 1024, 2048].iter().map(|&k| panel(k, "fp8", 0.6)).collect(),
        diverging: false,
        diverging_limit: None,
        note: None,
    };
    render_heatmap(&many, &dir.join("heatmap_grid.png"), 1600, 1000)?;

    // every precision and k at one context
    let est = |hits: f64| {
        let (low, high) = wilson(hits, 400.0);
        Estimate { value: hits / 400.0, low, high }
    };
    let rows = [(512u32, 0.0), (1024, 60.0)]
        .iter()
        .flat_map(|&(k, boost)| {
            [("fp32", 0.0), ("bf16", 2.0), ("fp8", 18.0), ("fp4", 70.0)].into_iter().map(move |(p, loss)| CompareRow {
                topk: k,
                precision: p.into(),
                layer: est(180.0 + boost - loss),
                model: Some(est(330.0 + boost / 2.0 - loss)),
                selection: (p != "fp32").then(|| est(400.0 - loss / 2.0)),
            })
        })
        .collect();
    let cmp = CompareChart {
        title: "Whole-model and per-layer selection recall by precision and k at 32K tokens (synthetic demo data)".into(),
        subtitle: "needle depth 50 % · 400 trials per row".into(),
        rows,
        reference: Some("fp32".into()),
        threshold: Some(0.9),
        whole_model_only: false,
    };
    render_compare(&cmp, &dir.join("compare.png"), 1600, cmp.height())?;
    let alone = CompareChart { whole_model_only: true, ..cmp.clone() };
    render_compare(&alone, &dir.join("compare_whole_model_only.png"), 1600, alone.height())?;

    // recall vs depth, four contexts
    let depth_line = |level: f64| -> Vec<DepthPoint> {
        depths
            .iter()
            .map(|&d| {
                let hits = (400.0 * (level - 0.15 * (1.0 - ((d - 50.0) / 50.0).powi(2)))).clamp(0.0, 400.0).round();
                let (lo, hi) = wilson(hits, 400.0);
                DepthPoint { depth_percent: d, recall: hits / 400.0, ci_low: lo, ci_high: hi }
            })
            .collect()
    };
    let depth_chart = DepthChart {
        title: "Per-layer selection recall vs needle depth (synthetic demo data)".into(),
        subtitle: "the longest 4 of 6 contexts".into(),
        panels: [(8, 0.95), (16, 0.85), (32, 0.7), (64, 0.5)]
            .iter()
            .map(|&(kt, level)| DepthPanel {
                title: format!("{kt}K tokens"),
                series: vec![
                    DepthSeries { topk: 512, precision: "bf16".into(), points: depth_line(level), model: Vec::new() },
                    DepthSeries { topk: 512, precision: "fp8".into(), points: depth_line(level - 0.08), model: Vec::new() },
                ],
            })
            .collect(),
        threshold: Some(0.9),
    };
    render_recall_vs_depth(&depth_chart, &dir.join("recall_vs_depth.png"), 1600, 1400)?;

    println!("wrote charts to {}", dir.display());
    Ok(())
}
