use super::paint::{assign_label_rows, CoverageLabel};
use super::*;
use crate::base::units::{Reach, ReachRange};
use crate::report::chart::canvas::ChartError;
use plotters::prelude::{BitMapBackend, IntoDrawingArea};

/// A falling recall curve over 1K … 128K with its knee at 2^`knee` tokens.
fn curve(knee: f64) -> Vec<RecallPoint> {
    (10..=17)
        .map(|e| {
            let c = 1u64 << e;
            let r = 1.0 / (1.0 + ((e as f64 - knee) * 1.5).exp());
            RecallPoint { context_tokens: c, recall: r, ci_low: (r - 0.04).max(0.0), ci_high: (r + 0.04).min(1.0) }
        })
        .collect()
}

pub(crate) fn demo_chart() -> RecallChart {
    let mk = |topk: u32, precision: &str, knee: f64| RecallSeries {
        model_band: Vec::new(),
        topk,
        precision: precision.into(),
        predicted: Vec::new(),
        points: curve(knee),
        model: Vec::new(),
    };
    RecallChart {
        title: "test".into(),
        subtitle: "synthetic".into(),
        series: vec![mk(512, "bf16", 13.0), mk(512, "fp8", 12.5), mk(1024, "bf16", 14.0)],
        coverage_limits: vec![(512, 2176), (1024, 4224)],
        effective_threshold: Some(0.9),
        effective: vec![EffectiveMark {
            topk: 512,
            precision: "bf16".into(),
            context_tokens: Some(8192),
            held_at_longest: false,
            model: None,
            layer_range: None,
            model_range: None,
        }],
        effective_at: None,
        whole_model_only: false,
    }
}

/// `demo_chart` with whole-model recall (knee three doublings later) and
/// a prediction on every series.
fn whole_model_chart() -> RecallChart {
    let mut c = demo_chart();
    for (i, sr) in c.series.iter_mut().enumerate() {
        let knee = 13.0 + i as f64 * 0.5;
        sr.model = curve(knee + 3.0);
        sr.predicted = curve(knee + 0.3).iter().map(|p| (p.context_tokens, p.recall)).collect();
    }
    c.effective[0].model = Some(Reach { effective_context: Some(1 << 17), held_at_longest: true });
    c
}

fn png_dims(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

#[test]
fn renders_png_with_requested_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recall.png");
    render_recall_vs_context(&demo_chart(), &path, 800, 500).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(png_dims(&bytes), (800, 500));
    // only the chart itself is left in the directory (temp file renamed)
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn renders_svg() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("recall.svg");
    render_recall_vs_context(&demo_chart(), &path, 800, 500).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.contains("<svg"));
    assert!(svg.contains("per-layer selection recall"));
    assert!(svg.contains("@font-face{font-family:\"DejaVu Sans\""));
}

#[test]
fn empty_series_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.png");
    let mut c = demo_chart();
    c.series.clear();
    assert!(matches!(render_recall_vs_context(&c, &path, 800, 500), Err(ChartError::InvalidInput(_))));
    assert!(!path.exists());
    let mut c = demo_chart();
    c.series[0].points.clear();
    assert!(matches!(render_recall_vs_context(&c, &path, 800, 500), Err(ChartError::InvalidInput(_))));
}

#[test]
fn non_finite_values_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nan.png");
    for f in [
        |c: &mut RecallChart| c.series[0].points[2].recall = f64::NAN,
        |c: &mut RecallChart| c.series[1].points[0].ci_high = f64::INFINITY,
        |c: &mut RecallChart| c.effective_threshold = Some(f64::NAN),
        |c: &mut RecallChart| c.series[0].points[1].context_tokens = 0,
        |c: &mut RecallChart| c.series[0].points[3].recall = 1.5,
    ] {
        let mut c = demo_chart();
        f(&mut c);
        assert!(matches!(render_recall_vs_context(&c, &path, 800, 500), Err(ChartError::InvalidInput(_))));
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn bad_extension_and_size_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(render_recall_vs_context(&demo_chart(), &dir.path().join("x.gif"), 800, 500), Err(ChartError::UnsupportedFormat(_))));
    assert!(render_recall_vs_context(&demo_chart(), &dir.path().join("x.png"), 10, 10).is_err());
}

#[test]
fn whole_model_recall_is_the_solid_line_and_the_legend_says_which_is_which() {
    let dir = tempfile::tempdir().unwrap();
    let svg_of = |c: &RecallChart, name: &str| {
        let path = dir.path().join(name);
        render_recall_vs_context(c, &path, 1600, 1000).unwrap();
        std::fs::read_to_string(&path).unwrap()
    };
    let svg = svg_of(&whole_model_chart(), "whole.svg");
    for text in [
        "whole-model recall, 95 % band",
        "per-layer selection recall",
        "predicted per-layer (analytic)",
        "k=512, bf16 · model ≥ 128K, layer 8K",
        "k=512, fp8",
        "recall (solid: whole model, dashed: per layer)",
    ] {
        assert!(svg.contains(text), "whole-model chart lacks {text:?}");
    }
    // Without the model's reach the label still says both.
    let mut c = whole_model_chart();
    c.effective[0].model = None;
    assert!(svg_of(&c, "unknown.svg").contains("k=512, bf16 · model –, layer 8K"));
    // A series without whole-model recall beside ones with it is drawn too.
    let mut c = whole_model_chart();
    c.series[1].model.clear();
    svg_of(&c, "partial.svg");
    let png = dir.path().join("whole.png");
    render_recall_vs_context(&whole_model_chart(), &png, 800, 500).unwrap();
    assert_eq!(png_dims(&std::fs::read(&png).unwrap()), (800, 500));
    // single whole-model point: its interval is a narrow bar
    let mut c = whole_model_chart();
    c.series[0].model.truncate(1);
    svg_of(&c, "one.svg");
}

#[test]
fn whole_model_recall_leaves_a_chart_without_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.png");
    render_recall_vs_context(&demo_chart(), &plain, 800, 500).unwrap();
    let svg = dir.path().join("plain.svg");
    render_recall_vs_context(&demo_chart(), &svg, 800, 500).unwrap();
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("k=512, bf16 · eff. 8K") && svg.contains("95 % confidence band"));
    assert!(!svg.contains("whole-model") && !svg.contains("model 8K"));
    // An effective mark's model reach alone does not switch the chart.
    let mut c = demo_chart();
    c.effective[0].model = Some(Reach { effective_context: Some(1 << 16), held_at_longest: false });
    let again = dir.path().join("again.png");
    render_recall_vs_context(&c, &again, 800, 500).unwrap();
    assert_eq!(std::fs::read(&plain).unwrap(), std::fs::read(&again).unwrap());
}

#[test]
fn bad_whole_model_and_predicted_points_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.png");
    for f in [
        |c: &mut RecallChart| c.series[0].model[2].recall = f64::NAN,
        |c: &mut RecallChart| c.series[0].model[2].ci_low = 0.999,
        |c: &mut RecallChart| c.series[1].model[0].context_tokens = 0,
        |c: &mut RecallChart| c.series[1].model.swap(1, 2),
        |c: &mut RecallChart| c.series[2].model[3].ci_high = 1.5,
        |c: &mut RecallChart| c.series[0].predicted[1].1 = f64::INFINITY,
        |c: &mut RecallChart| c.series[0].predicted[1].1 = -0.5,
        |c: &mut RecallChart| c.series[0].predicted[0].0 = 0,
    ] {
        let mut c = whole_model_chart();
        f(&mut c);
        let err = render_recall_vs_context(&c, &path, 800, 500);
        assert!(matches!(err, Err(ChartError::InvalidInput(_))), "{err:?}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn reach_labels() {
    let r = |c: Option<u64>, held| Reach { effective_context: c, held_at_longest: held };
    assert_eq!(r(None, false).label(1024), "< 1K");
    assert_eq!(r(Some(2048), false).label(1024), "2K");
    assert_eq!(r(Some(1 << 17), true).label(1024), "≥ 128K");
    let e = EffectiveMark {
        topk: 1,
        precision: "x".into(),
        context_tokens: None,
        held_at_longest: false,
        model: Some(r(Some(8192), false)),
        layer_range: None,
        model_range: None,
    };
    assert_eq!(e.label(1024), "eff. < 1K");
    assert_eq!(e.model_label(1024), "model 8K, layer < 1K");
    assert_eq!(e.model_only_label(1024), "model 8K");
    // a range as wide as its point is not printed; a wider one is
    let same = ReachRange { low: r(Some(8192), false), high: r(Some(8192), false) };
    let wide = ReachRange { low: r(Some(4096), false), high: r(Some(1 << 17), true) };
    let e = EffectiveMark { model_range: Some(same), layer_range: Some(wide), context_tokens: Some(16384), ..e };
    assert_eq!(e.model_label(1024), "model 8K, layer 16K [4K, ≥ 128K]");
    assert_eq!(e.label(1024), "eff. 16K [4K, ≥ 128K]");
}

#[test]
fn whole_model_only_draws_no_per_layer_key() {
    let dir = tempfile::tempdir().unwrap();
    let both = whole_model_chart();
    let alone = RecallChart { whole_model_only: true, ..whole_model_chart() };
    let svg = |c: &RecallChart, name: &str| {
        let path = dir.path().join(name);
        render_recall_vs_context(c, &path, 1600, 1000).unwrap();
        std::fs::read_to_string(path).unwrap()
    };
    let (a, b) = (svg(&both, "both.svg"), svg(&alone, "alone.svg"));
    assert!(a.contains("per-layer selection recall") && a.contains("predicted per-layer"), "the default keys both lines");
    assert!(!b.contains("per-layer"), "whole-model only: no per-layer key or axis name");
    assert!(b.contains("whole-model recall"));
    // with no whole-model recall the option leaves the per-layer chart as it is
    let plain = demo_chart();
    assert_eq!(svg(&plain, "p1.svg"), svg(&RecallChart { whole_model_only: true, ..demo_chart() }, "p2.svg"));
}

#[test]
fn label_rows_do_not_overlap() {
    let mk = |x: i32, width: i32| CoverageLabel { k: 0, x, text: String::new(), width, row: 0 };
    let mut v = vec![mk(100, 150), mk(200, 150), mk(1000, 150)];
    assign_label_rows(&mut v, 5);
    let row = |x: i32| v.iter().find(|l| l.x == x).unwrap().row;
    assert_eq!(row(1000), 0);
    assert_eq!(row(200), 0);
    assert_eq!(row(100), 1); // its text would run over the line at x=200
}

/// A sweep with two depths whose lines differ: at depth 0 recall holds to
/// the longest context, at depth 100 it fails from 4K. Each depth's chart
/// must give the reach of the line it draws, not the sweep's all-depth one
/// (2K), which a line held to 8K contradicts.
#[test]
fn legend_gives_the_drawn_depths_effective_context() {
    use crate::config::{check, resolve, Scenario};
    use crate::report::meta::ReportMeta;
    use crate::run::sweep::{effective_contexts, run_sweep};
    let s = check(resolve(Default::default()).unwrap()).unwrap();
    let s = Scenario { contexts: vec![1024, 2048, 4096, 8192], depths: vec![0.0, 100.0], topks: vec![64], trials: 4, ..s };
    let mut cells = run_sweep(&s, &|| {}).unwrap().cells;
    for c in &mut cells {
        let r = if c.depth_percent == 100.0 && c.context_tokens >= 4096 { 0.5 } else { 1.0 };
        (c.recall, c.ci_low, c.ci_high) = (r, r, r);
        (c.model_recall, c.model_ci_low, c.model_ci_high) = (Some(r), Some(r), Some(r));
    }
    let meta = ReportMeta::from_scenario(&s, &effective_contexts(&s, &cells));
    assert!(meta.effective.iter().all(|e| e.effective_context == Some(2048)), "the sweep's reach is over all depths");
    // The reach of a drawn line, read independently: the last context before the first failure.
    let drawn = |pts: &[RecallPoint]| {
        let held: Vec<u64> = pts.iter().take_while(|p| p.recall >= s.threshold).map(|p| p.context_tokens).collect();
        match (held.last(), held.len() == pts.len()) {
            (None, _) => "< 1K".to_string(),
            (Some(&c), true) => format!("≥ {}", crate::base::units::tokens_label(c)),
            (Some(&c), false) => crate::base::units::tokens_label(c),
        }
    };
    for (depth, expect) in [(0.0, "≥ 8K"), (100.0, "2K")] {
        let chart = recall_chart(&meta, &cells, depth, false);
        let entries = chart.legend_entries();
        assert_eq!(entries.len(), chart.series.len());
        for (i, label) in &entries {
            let sr = &chart.series[*i];
            assert_eq!(drawn(&sr.points), expect);
            let want = format!("model {}, layer {}", drawn(&sr.model), drawn(&sr.points));
            assert!(label.ends_with(&want), "depth {depth}: legend {label:?}, drawn line {want:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.svg");
        render_recall_vs_context(&chart, &path, 1600, 1000).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains(&format!("effective context at depth {depth} %")), "the legend says which depth");
        assert!(svg.contains(&entries[0].1));
    }
}

/// The legend of a sweep with many variants (the fp8-keys incident: 28
/// series and five keys) stays on the image: it is set smaller to fit.
#[test]
fn a_long_legend_stays_on_the_image() {
    let mut c = whole_model_chart();
    let template = c.series[0].clone();
    c.series = (0..28)
        .map(|i| RecallSeries {
            topk: if i < 14 { 512 } else { 1024 },
            precision: format!("fp8-fp32scale+scale-unwritten-zero+ties-{i}"),
            ..template.clone()
        })
        .collect();
    c.effective = c.series.iter().map(|sr| EffectiveMark::of_series(sr, 0.9)).collect();
    c.series[0].model_band = vec![(1024, 0.9, 1.0), (2048, 0.8, 1.0)];
    crate::report::chart::font::ensure_font_registered().unwrap();
    for (w, h) in [(1600u32, 1000u32), (800, 500)] {
        let mut pixels = vec![0u8; w as usize * h as usize * 3];
        let root = BitMapBackend::with_buffer(&mut pixels, (w, h)).into_drawing_area();
        let end = c.paint_to_legend_end(&root).unwrap();
        assert!(end <= h as i32, "{w}×{h}: the legend runs to y = {end}");
    }
}
