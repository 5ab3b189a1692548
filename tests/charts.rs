//! Every chart type from a small sweep, report.html, and `plot` re-rendering.

use assert_cmd::Command;
use std::path::Path;

fn bin() -> Command {
    Command::cargo_bin("dsa-recall").unwrap()
}

/// (width, height) from a PNG's IHDR chunk.
fn png_dims(path: &Path) -> (u32, u32) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{} is not a PNG", path.display());
    assert_eq!(&b[12..16], b"IHDR");
    let be = |x: &[u8]| u32::from_be_bytes([x[0], x[1], x[2], x[3]]);
    (be(&b[16..20]), be(&b[20..24]))
}

/// A tiny sweep: 2 depths, 2 contexts, 2 precisions (fp32 = reference and
/// baseline), one k; the preset's stack gives whole-model recall.
fn small_sweep(dir: &Path) {
    small_sweep_with(dir, &[]);
}

fn small_sweep_with(dir: &Path, extra: &[&str]) {
    bin()
        .args(["sweep", "--trials", "12", "--depths", "0,100", "--contexts", "1K,4K", "--precisions", "fp32,bf16"])
        .args(["--topk", "64", "--threads", "2", "--force"])
        .args(extra)
        .arg("--out")
        .arg(dir)
        .assert()
        .success();
}

/// The small sweep's chart files, from the registry of a sweep's charts:
/// every chart that applies to two depths (recall vs depth needs three),
/// recall vs context once per depth; with its fixed pixel size, None for
/// the heatmaps, sized from their grid.
fn charts() -> Vec<(String, Option<(u32, u32)>)> {
    let mut out = Vec::new();
    for chart in &dsa_recall::report::chart::SWEEP_CHARTS {
        let size = match chart.stem {
            "recall_vs_depth" => continue,
            "compare" => Some((1600, 480)),
            "heatmap" | "heatmap_model" | "heatmap_diff" => None,
            _ => Some((1600, 1000)),
        };
        out.push((format!("{}.png", chart.stem), size));
        if chart.stem == "recall_vs_context" {
            out.push(("recall_vs_context_depth100.png".to_string(), size));
        }
    }
    out
}

#[test]
fn a_sweep_writes_every_chart_and_a_self_contained_report() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    small_sweep(&dir);
    let charts = charts();
    for (name, size) in charts.clone() {
        let (w, h) = png_dims(&dir.join(&name));
        match size {
            Some(s) => assert_eq!((w, h), s, "{name}"),
            None => assert!(w >= 1600 && h >= 1000, "{name}: {w}×{h}"),
        }
    }
    // heatmaps are sized from their grid: 1 k × 2 precisions, 2 depths × 2 contexts
    assert_eq!(png_dims(&dir.join("heatmap.png")), (1600, 1000));
    assert_eq!(png_dims(&dir.join("heatmap_model.png")), (1600, 1000));

    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let files: Vec<&str> = manifest["files"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    for (name, _) in &charts {
        assert!(files.contains(&name.as_str()), "{name} not in manifest files {files:?}");
    }
    for f in &files {
        assert!(dir.join(f).exists(), "manifest lists {f}, which is missing");
    }
    assert!(files.contains(&"report.html"));

    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("src=\"data:image/png;base64,").count(), charts.len());
    // every chart's caption, as the registry gives it
    for (name, _) in &charts {
        let caption = dsa_recall::report::chart::chart_of(name)
            .unwrap()
            .caption(dsa_recall::report::meta::CaptionFacts { whole: true, ..Default::default() });
        assert!(html.contains(&caption), "report.html lacks {name}'s caption");
    }
    for needle in [
        "Effective context",
        "Paired comparison with fp32",
        "McNemar p",
        "Selection fidelity against fp32",
        "&quot;preset&quot;: &quot;deepseek-v4-flash&quot;",
        "recall@k",
        "Whole-model recall per cell",
        "effective context: whole model",
        "21 indexed, ratio 4: 2, 4, …, 42",
        "of its row's gate weight",
    ] {
        assert!(html.contains(needle), "report.html lacks {needle:?}");
    }
    // nothing external
    for external in ["<script", "<link", "http://", "https://", "@import"] {
        assert!(!html.contains(external), "report.html contains {external:?}");
    }
}

#[test]
fn plot_re_renders_byte_identical_pngs_and_svgs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    small_sweep(&dir);
    let mut before = Vec::new();
    let charts = charts();
    for (name, _) in charts.iter().chain(&[("report.html".to_string(), None)]) {
        before.push((name.to_string(), std::fs::read(dir.join(name)).unwrap()));
        std::fs::remove_file(dir.join(name)).unwrap();
    }
    bin().arg("plot").arg(&dir).assert().success();
    for (name, bytes) in &before {
        let now = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("plot did not write {name}: {e}"));
        assert!(now == *bytes, "{name} differs after plot");
    }

    bin().arg("plot").arg(&dir).args(["--format", "svg"]).assert().success();
    for (name, _) in &charts {
        let svg_name = name.replace(".png", ".svg");
        let svg = std::fs::read_to_string(dir.join(&svg_name)).unwrap_or_else(|e| panic!("{svg_name}: {e}"));
        assert!(svg.contains("<svg"), "{svg_name}");
        assert!(svg.contains("@font-face"), "{svg_name} does not embed its font");
    }
    // an svg-only report embeds the SVGs
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert_eq!(html.matches("src=\"data:image/svg+xml;base64,").count(), charts.len());

    // the detail context picks the rank/margin chart's context; others are refused
    bin().arg("plot").arg(&dir).args(["--detail-context", "1K"]).assert().success();
    let out = bin().arg("plot").arg(&dir).args(["--detail-context", "2K"]).assert().code(2).get_output().stderr.clone();
    let err = String::from_utf8(out).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--detail-context") && err.contains("1K, 4K"), "{err}");
}

#[test]
fn report_and_recall_chart_say_per_layer_selection_recall() {
    // Issue 15, item 5: the recall is one query's survival in one indexer
    // layer, and the outputs must not read as a model's needle-in-a-haystack
    // accuracy. Without a stack (`--compress-ratios none`) that is all they show.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    small_sweep_with(&dir, &["--compress-ratios", "none"]);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for phrase in ["<em>per-layer selection recall</em>", "Per-layer selection recall per cell", "Per-layer selection recall vs context"] {
        assert!(html.contains(phrase), "report.html lacks {phrase:?}");
    }
    assert!(!html.contains("Needle recall"), "report.html still says \"Needle recall\"");
    assert!(!html.to_lowercase().contains("whole-model"), "report.html without a stack speaks of whole-model recall");
    assert!(!dir.join("heatmap_model.png").exists(), "a heatmap of whole-model recall without a stack");
    assert_eq!(html.matches("src=\"data:image/png;base64,").count(), charts().len() - 1);

    bin().arg("plot").arg(&dir).args(["--format", "svg"]).assert().success();
    let svg = std::fs::read_to_string(dir.join("recall_vs_context.svg")).unwrap();
    assert!(svg.contains("Per-layer selection recall vs context"), "recall chart title does not say per-layer");
    assert!(svg.contains("per-layer selection recall"), "recall chart's y axis does not say per-layer");
    assert!(!svg.contains("whole"), "recall chart without a stack speaks of whole-model recall");
    let heatmap = std::fs::read_to_string(dir.join("heatmap.svg")).unwrap();
    assert!(heatmap.contains("Per-layer selection recall by depth and context"), "heatmap title does not say per-layer");
}

#[test]
fn whole_model_recall_is_shown_beside_per_layer_recall() {
    // With a stack, the recall chart draws whole-model recall as its main
    // line, and every output says which recall is which.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    small_sweep(&dir);
    bin().arg("plot").arg(&dir).args(["--format", "svg"]).assert().success();
    let svg = std::fs::read_to_string(dir.join("recall_vs_context.svg")).unwrap();
    for text in [
        "Whole-model recall (solid) and per-layer selection recall (dashed) vs context",
        "whole model: 1 of 21 indexer layers, 20 query tokens",
        "whole-model recall, 95 % band",
        "per-layer selection recall",
        "k=64, fp32 · model",
        "recall (solid: whole model, dashed: per layer)",
    ] {
        assert!(svg.contains(text), "recall chart lacks {text:?}");
    }
    let heatmap = std::fs::read_to_string(dir.join("heatmap_model.svg")).unwrap();
    assert!(heatmap.contains("Whole-model recall by depth and context"), "whole-model heatmap title");
    // Issue 30, item 13: its colour bar names the quantity it shows.
    assert!(heatmap.contains("whole-model\n</text>") && !heatmap.contains("selection\n</text>"), "whole-model heatmap colour bar");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for phrase in ["<em>whole-model recall</em>", "neither is a model's needle-in-a-haystack accuracy", "Whole-model recall per cell"] {
        assert!(html.contains(phrase), "report.html lacks {phrase:?}");
    }
    // one whole-model table per depth beside the per-layer ones, each cell with its interval
    assert_eq!(html.matches("<h3>depth 0 %</h3>").count(), 2);
    let model_tables = &html[html.find("Whole-model recall per cell").unwrap()..];
    assert!(model_tables.contains("</span> ["), "whole-model cells without intervals");

    // Tail sampling reads the stack from each trial's survival probability.
    let tail = tmp.path().join("tail");
    small_sweep_with(&tail, &["--mode", "tail", "--needle-profile", "stress"]);
    let html = std::fs::read_to_string(tail.join("report.html")).unwrap();
    assert!(html.contains("Whole-model recall per cell"));
    assert!(tail.join("heatmap_model.png").exists());
    // Without a stack the report reads as it did before whole-model recall.
    let none = tmp.path().join("none");
    small_sweep_with(&none, &["--compress-ratios", "none"]);
    let html = std::fs::read_to_string(none.join("report.html")).unwrap();
    assert!(!html.to_lowercase().contains("whole-model"));
    assert!(!none.join("heatmap_model.png").exists());
}

#[test]
fn whole_model_only_draws_whole_model_recall_alone_and_needs_a_stack() {
    // Issue 30, item 13: the recall and comparison charts can leave the
    // per-layer series out; the report says so; without a stack the flag
    // is refused in one line, exit 2, before anything is simulated.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    small_sweep_with(&dir, &["--format", "svg", "--whole-model-only"]);
    let svg = std::fs::read_to_string(dir.join("recall_vs_context.svg")).unwrap();
    assert!(svg.contains("Whole-model recall vs context") && svg.contains("k=64, fp32 · model"), "whole-model-only recall chart");
    assert!(!svg.contains("per-layer") && !svg.contains("per layer"), "whole-model-only recall chart draws per-layer recall");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("Drawn with --whole-model-only"), "report.html does not say the per-layer series are left out");
    // `plot` without the flag draws both again
    bin().arg("plot").arg(&dir).args(["--format", "svg"]).assert().success();
    assert!(std::fs::read_to_string(dir.join("recall_vs_context.svg")).unwrap().contains("per-layer selection recall"));

    let none = tmp.path().join("none");
    let out = bin()
        .args(["sweep", "--trials", "12", "--contexts", "1K,4K", "--compress-ratios", "none", "--whole-model-only", "--out"])
        .arg(&none)
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    let err = String::from_utf8(out).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--whole-model-only") && err.contains("[stack]"), "{err}");
    assert!(!none.join("results.jsonl").exists(), "refused after simulating");
}

fn plot_error(dir: &Path) -> String {
    let out = bin().arg("plot").arg(dir).assert().code(2).get_output().stderr.clone();
    let err = String::from_utf8(out).unwrap();
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    err
}

#[test]
fn plot_errors_are_one_line_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    assert!(plot_error(&missing).contains("nope"));

    let dir = tmp.path().join("out");
    small_sweep(&dir);
    let results = dir.join("results.jsonl");
    let text = std::fs::read_to_string(&results).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{\"context_tokens\": 1024, \"recall\": oops";
    std::fs::write(&results, lines.join("\n")).unwrap();
    let err = plot_error(&dir);
    assert!(err.contains("results.jsonl line 3"), "{err}");
    // more survivors than trials (an edited file) is refused, naming both
    let line = text.lines().nth(1).unwrap();
    let start = line.find("\"survived\":").expect("a survived field") + "\"survived\":".len();
    let end = start + line[start..].find(',').unwrap();
    let survived = format!("{}9999{}", &line[..start], &line[end..]);
    let edited: Vec<String> = text.lines().enumerate().map(|(i, l)| if i == 1 { survived.clone() } else { l.to_string() }).collect();
    std::fs::write(&results, edited.join("\n")).unwrap();
    let err = plot_error(&dir);
    assert!(err.contains("results.jsonl line 2") && err.contains("survived = 9999"), "{err}");

    std::fs::write(&results, text).unwrap();
    std::fs::remove_file(dir.join("manifest.json")).unwrap();
    assert!(plot_error(&dir).contains("manifest.json"));

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(plot_error(&empty).contains("results.jsonl"));

    // bad usage from clap is exit 2 too
    bin().arg("plot").arg(&dir).args(["--format", "gif"]).assert().code(2);
}

#[test]
fn one_trial_jaccard_matches_selection_recall_by_hand() {
    // Both sets have k_eff rows; with `both` rows in common, recall@k = both/k
    // and Jaccard = both/(2k − both) = r/(2 − r). With one trial the means are
    // the per-trial values, so the identity holds exactly.
    use dsa_recall::config::{self, ScenarioParams};
    let mut p = ScenarioParams::default();
    p.sweep.trials = Some(1);
    p.sweep.contexts = Some(dsa_recall::config::ListSpec::Text("2K,8K".into()));
    p.sweep.topk = Some(dsa_recall::config::ListSpec::Text("64".into()));
    p.sweep.precisions = Some(dsa_recall::config::ListSpec::Text("fp32,fp4".into()));
    let s = config::check(config::resolve(p).unwrap()).unwrap();
    let out = dsa_recall::run::sweep::run_sweep(&s, &|| {}).unwrap();
    let mut checked = 0;
    for c in out.cells.iter().filter(|c| c.precision == "fp4") {
        let (r, j) = (c.selection_recall.unwrap(), c.jaccard.unwrap());
        let both = (r * c.k_eff as f64).round();
        assert!((r - both / c.k_eff as f64).abs() < 1e-12);
        assert!((j - both / (2.0 * c.k_eff as f64 - both)).abs() < 1e-12, "{r} {j}");
        assert!(j <= r);
        checked += 1;
    }
    assert_eq!(checked, 2);
}

/// Runs a sweep into `dir` with `args` (trials and threads small).
fn sweep_args(dir: &Path, args: &[&str]) {
    bin().args(["sweep", "--trials", "12", "--threads", "2", "--force"]).args(args).arg("--out").arg(dir).assert().success();
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn one_context_draws_the_comparison_instead_of_recall_vs_context() {
    // Issue 17 ("compare all precisions at one context"): one context gives
    // compare.png (every precision and k, selection recall against fp32),
    // no single-column recall_vs_context, and no recall_vs_depth.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    sweep_args(&dir, &["--contexts", "4K", "--depths", "50", "--precisions", "fp32,bf16,fp8", "--topk", "64,128", "--format", "both"]);
    let files = names(&dir);
    for f in ["compare.png", "compare.svg", "rank_margin.png", "fidelity.png"] {
        assert!(files.iter().any(|x| x == f), "{f} missing from {files:?}");
    }
    assert!(!files.iter().any(|f| f.starts_with("recall_vs_")), "{files:?}");
    let svg = std::fs::read_to_string(dir.join("compare.svg")).unwrap();
    for text in [
        "by precision and k at 4K tokens",
        "selection recall against the fp32 top-k",
        "k = 128",
        "fp8",
        "whole-model recall, Wilson 95 % interval",
    ] {
        assert!(svg.contains(text), "compare.svg lacks {text:?}");
    }
    assert!(!svg.contains("--detail-context picks another"), "one context needs no detail-context note");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<figure id=\"compare.png\">"), "report does not embed compare.png");
    // Several contexts: compare at the detail context, beside recall_vs_context.
    let two = tmp.path().join("two");
    sweep_args(
        &two,
        &[
            "--contexts",
            "1K,4K",
            "--depths",
            "50",
            "--precisions",
            "fp32,bf16",
            "--topk",
            "64",
            "--detail-context",
            "1K",
            "--format",
            "svg",
        ],
    );
    let svg = std::fs::read_to_string(two.join("compare.svg")).unwrap();
    assert!(svg.contains("at 1K tokens") && svg.contains("--detail-context picks another"));
    assert!(two.join("recall_vs_context.svg").exists());
}

#[test]
fn many_depths_draw_recall_vs_depth_instead_of_one_chart_per_depth() {
    // Issue 17 (recall vs depth): with ≥ 3 depths, one recall_vs_depth chart
    // (the longest 4 contexts) and one recall_vs_context at the detail depth.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    sweep_args(&dir, &["--contexts", "1K..16K", "--depths", "0,50,100", "--precisions", "fp32", "--topk", "64", "--format", "both"]);
    let files = names(&dir);
    for f in ["recall_vs_depth.png", "recall_vs_depth.svg", "recall_vs_context.png", "compare.png", "heatmap.png"] {
        assert!(files.iter().any(|x| x == f), "{f} missing from {files:?}");
    }
    assert!(!files.iter().any(|f| f.contains("_depth0") || f.contains("_depth50") || f.contains("_depth100")), "{files:?}");
    let svg = std::fs::read_to_string(dir.join("recall_vs_depth.svg")).unwrap();
    assert!(svg.contains("the longest 4 of 5 contexts"), "subtitle does not say which contexts");
    for panel in ["2K tokens", "16K tokens"] {
        assert!(svg.contains(panel), "no {panel} panel");
    }
    assert!(!svg.contains(">1K tokens<"), "the shortest context should be left out");
    let rvc = std::fs::read_to_string(dir.join("recall_vs_context.svg")).unwrap();
    assert!(rvc.contains("needle depth 50 %"), "recall_vs_context is not at the detail depth");
    // plot re-renders every file byte-identically, PNG and SVG
    let before: Vec<(String, Vec<u8>)> = files
        .iter()
        .filter(|f| f.ends_with(".png") || f.ends_with(".svg") || f.ends_with(".html"))
        .map(|f| (f.clone(), std::fs::read(dir.join(f)).unwrap()))
        .collect();
    bin().arg("plot").arg(&dir).args(["--format", "both"]).assert().success();
    for (f, bytes) in before {
        assert!(std::fs::read(dir.join(&f)).unwrap() == bytes, "{f} differs after plot");
    }
}

#[test]
fn diff_span_sets_the_colour_scale_and_bad_spans_are_refused() {
    // Issue 17 (statistics): ±0.02 noise does not saturate by default, the
    // user can fix the span, and the heatmap says what its rings mean.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    small_sweep_with(&dir, &["--format", "both"]);
    let default_png = std::fs::read(dir.join("heatmap_diff.png")).unwrap();
    let svg = std::fs::read_to_string(dir.join("heatmap_diff.svg")).unwrap();
    assert!(svg.contains("ring: McNemar p &lt; 0.05 after Holm adjustment"), "no note on the marks");
    assert!(svg.contains("+0.10") && !svg.contains("(--diff-span)"), "default span is not ±0.1 here");
    bin().arg("plot").arg(&dir).args(["--format", "both", "--diff-span", "0.5"]).assert().success();
    let svg = std::fs::read_to_string(dir.join("heatmap_diff.svg")).unwrap();
    assert!(svg.contains("+0.50") && svg.contains("±0.5 (--diff-span)"), "--diff-span 0.5 not applied");
    assert!(std::fs::read(dir.join("heatmap_diff.png")).unwrap() != default_png, "the span did not change the colours");
    for bad in ["0", "-0.1", "1.5", "abc", "nan"] {
        for cmd in ["plot", "sweep"] {
            let mut c = bin();
            if cmd == "plot" {
                c.arg("plot").arg(&dir);
            } else {
                c.args(["sweep", "--trials", "2", "--contexts", "1K", "--topk", "64", "--out"]).arg(tmp.path().join("never"));
            }
            let out = c.args(["--diff-span", bad]).assert().code(2).get_output().stderr.clone();
            let err = String::from_utf8(out).unwrap();
            assert_eq!(err.lines().count(), 1, "{cmd} --diff-span {bad}: {err}");
            assert!(err.contains("--diff-span") && err.contains("(0, 1]"), "{err}");
        }
    }
    assert!(!tmp.path().join("never").exists(), "a refused sweep wrote output");
}

#[test]
fn svgs_embed_a_small_font_subset_and_sweep_writes_them() {
    // Issue 17 (charts for papers): `sweep --format svg` writes SVGs only;
    // each embeds a subset of the bundled font (not the 740 KB face) and
    // names no system font.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    small_sweep_with(&dir, &["--format", "svg"]);
    let files = names(&dir);
    assert!(!files.iter().any(|f| f.ends_with(".png")), "svg-only sweep wrote PNGs: {files:?}");
    let svgs: Vec<&String> = files.iter().filter(|f| f.ends_with(".svg")).collect();
    assert_eq!(svgs.len(), charts().len(), "{files:?}");
    for f in svgs {
        let svg = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(svg.len() < 200_000, "{f}: {} bytes", svg.len());
        assert_eq!(svg.matches("@font-face").count(), 1, "{f}");
        assert!(svg.contains("src:url(data:font/ttf;base64,"), "{f}: font not embedded");
        assert!(!svg.contains("local("), "{f} refers to a system font");
        // every font-family named is the embedded one
        for fam in svg.split("font-family=\"").skip(1) {
            assert!(fam.starts_with("DejaVu Sans\""), "{f}: font-family {}", &fam[..fam.len().min(30)]);
        }
    }
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert_eq!(html.matches("src=\"data:image/svg+xml;base64,").count(), charts().len());
}
