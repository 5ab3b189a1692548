//! `report.html`: one self-contained file for an incident review — the
//! effective-context table, every chart (embedded as base64 data URIs), the
//! per-cell table of per-layer selection recall, the paired comparisons, the selection fidelity
//! numbers and the resolved configuration. No external CSS, JS or fonts.
//!
//! When the cells carry whole-model recall (a scenario with a `[stack]`),
//! the report also describes the stack and gives whole-model recall and its
//! effective context beside the per-layer ones; without it the report reads
//! as it did before whole-model recall existed.

use crate::base::units::{tokens_label, Reach, ReachRange};
use crate::error::Error;
use crate::model::stack::{FaultSpreadChoice, HcaReading, LayerKind};
use crate::report::chart::chart_of;
use crate::report::meta::{CaptionFacts, Grid, ReportMeta};
use crate::run::cell::{CellResult, HolmFamily, PairedTest, Pairing};
use crate::run::output::{is_narrow, multiple_comparison_note, row_label};
use std::fmt::Write as _;
use std::path::Path;

/// Significance level of the Holm-adjusted p highlighted in the paired-comparison tables.
pub const SIGNIFICANCE: f64 = 0.05;

/// Escapes text for HTML element content and attribute values.
/// The start of a report page, up to and including `<body>` and a newline;
/// `title` is escaped here.
pub fn page_start(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n",
        escape(title)
    )
}

pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

pub(crate) const STYLE: &str =
    "body{font-family:'DejaVu Sans',Verdana,Arial,sans-serif;color:#222;max-width:1400px;margin:24px auto;padding:0 20px;line-height:1.4}\
h1{font-size:26px;margin-bottom:4px}h2{font-size:20px;margin-top:36px;border-bottom:1px solid #ddd;padding-bottom:4px}\
.meta{color:#555}table{border-collapse:collapse;margin:8px 0;font-size:13px}\
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right;white-space:nowrap}th{background:#f4f4f4}\
td.l,th.l{text-align:left}tr.sig td{background:#fff1c2;font-weight:bold}\
.lost{color:#b2182b}.kept{color:#1a7f5a}figure{margin:16px 0}figure img{max-width:100%;border:1px solid #eee}\
figcaption{color:#555;font-size:13px}pre{background:#f7f7f7;padding:10px;overflow-x:auto;font-size:12px}\
.scroll{overflow-x:auto}";

/// A chart file's caption, from the registry of a sweep's charts.
fn caption(file: &str, f: CaptionFacts) -> String {
    chart_of(file).map_or_else(String::new, |chart| chart.caption(f))
}

fn mime(file: &str) -> Option<&'static str> {
    if file.ends_with(".png") {
        Some("image/png")
    } else if file.ends_with(".svg") {
        Some("image/svg+xml")
    } else {
        None
    }
}

fn fmt_ci(v: Option<f64>, lo: Option<f64>, hi: Option<f64>) -> String {
    match (v, lo, hi) {
        (Some(v), Some(lo), Some(hi)) => format!("{v:.3} [{lo:.3}, {hi:.3}]"),
        (Some(v), _, _) => format!("{v:.3}"),
        _ => "–".into(),
    }
}

fn reach_label(reach: Reach, range: Option<ReachRange>, shortest: u64) -> String {
    escape(&reach.label_with(range, shortest))
}

/// One table per depth of a recall (`value`: recall and its Wilson
/// interval) by context (rows) and (k, precision) (columns).
fn recall_tables(h: &mut String, g: &Grid, cells: &[CellResult], threshold: f64, value: impl Fn(&CellResult) -> Option<(f64, f64, f64)>) {
    for &depth in &g.depths {
        let rows = if g.offsets.len() > 1 { "context @ needle offset" } else { "context" };
        let _ = writeln!(h, "<h3>depth {depth} %</h3><div class=\"scroll\"><table><tr><th>{rows}</th>");
        for &k in &g.topks {
            for p in &g.precisions {
                let _ = write!(h, "<th>k={k} {}</th>", escape(p));
            }
        }
        h.push_str("</tr>\n");
        for &c in &g.contexts {
            for &offset in &g.offsets {
                let _ = write!(h, "<tr><td>{}</td>", row_label(c, offset, g.offsets.len()));
                for &k in &g.topks {
                    for p in &g.precisions {
                        let cell = cells.iter().find(|x| {
                            x.depth_percent == depth
                                && x.context_tokens == c
                                && x.needle_offset == offset
                                && x.topk == k
                                && x.precision == *p
                        });
                        let text = cell.and_then(&value).map_or("–".to_string(), |(recall, lo, hi)| {
                            let class = if recall >= threshold { "kept" } else { "lost" };
                            format!("<span class=\"{class}\">{recall:.3}</span> [{lo:.3}, {hi:.3}]")
                        });
                        let _ = write!(h, "<td>{text}</td>");
                    }
                }
                h.push_str("</tr>\n");
            }
        }
        h.push_str("</table></div>\n");
    }
}

/// The narrow layout of the per-cell tables (one context, or too many
/// (k, precision) columns): per depth, one row per (context, k, precision)
/// with per-layer recall, whole-model recall when present, selection recall
/// against the fidelity reference when measured, and the difference from
/// the baseline precision (its test is in the paired table below).
fn narrow_tables(h: &mut String, g: &Grid, cells: &[CellResult], threshold: f64) {
    let whole = cells.iter().any(|c| c.model_recall.is_some());
    let reference = cells.iter().find_map(|c| c.fidelity_reference.clone());
    let one_row = g.contexts.len() * g.offsets.len() == 1;
    let recall = |r: f64, lo: f64, hi: f64| {
        let class = if r >= threshold { "kept" } else { "lost" };
        format!("<span class=\"{class}\">{r:.3}</span> [{lo:.3}, {hi:.3}]")
    };
    for &depth in &g.depths {
        let at = if one_row { format!("{} tokens, ", tokens_label(g.contexts[0])) } else { String::new() };
        let _ = write!(h, "<h3>{at}depth {depth} %</h3><div class=\"scroll\"><table><tr>");
        if !one_row {
            h.push_str(if g.offsets.len() > 1 { "<th>context @ needle offset</th>" } else { "<th>context</th>" });
        }
        h.push_str("<th>k</th><th class=\"l\">precision</th><th>per-layer recall</th>");
        if whole {
            h.push_str("<th>whole-model recall</th>");
        }
        if let Some(r) = &reference {
            let _ = write!(h, "<th>selection recall vs {}</th>", escape(r));
        }
        if g.precisions.len() > 1 {
            let _ = write!(h, "<th>difference vs {}</th>", escape(&g.precisions[0]));
        }
        h.push_str("</tr>\n");
        for c in cells.iter().filter(|c| c.depth_percent == depth) {
            h.push_str("<tr>");
            if !one_row {
                let _ = write!(h, "<td>{}</td>", row_label(c.context_tokens, c.needle_offset, g.offsets.len()));
            }
            let _ = write!(
                h,
                "<td>{}</td><td class=\"l\">{}</td><td>{}</td>",
                c.topk,
                escape(&c.precision),
                recall(c.recall, c.ci_low, c.ci_high)
            );
            if whole {
                let model = match (c.model_recall, c.model_ci_low, c.model_ci_high) {
                    (Some(r), Some(lo), Some(hi)) => recall(r, lo, hi),
                    _ => "–".into(),
                };
                let _ = write!(h, "<td>{model}</td>");
            }
            if reference.is_some() {
                let _ = write!(h, "<td>{}</td>", fmt_ci(c.selection_recall, c.selection_recall_ci_low, c.selection_recall_ci_high));
            }
            if g.precisions.len() > 1 {
                let _ = write!(h, "<td>{}</td>", c.recall_diff.map_or("–".to_string(), |d| format!("{d:+.3}")));
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table></div>\n");
    }
}

/// "1 depth", "3 depths".
fn count_of(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// What whole-model recall reads: the stack's layers, how its layers and
/// query tokens are tied, and what an HCA layer's pooled row holds of the
/// needle. Empty when the scenario has no stack.
fn stack_section(meta: &ReportMeta) -> String {
    let Some(w) = meta.stack() else { return String::new() };
    let mut h = String::new();
    let _ = writeln!(
        h,
        "<p><b>Whole-model recall.</b> Each trial is also read through the model's layer stack: the needle counts as retrieved when at least {} of its {} select it for at least one of {} query tokens ({} question, {} answer){}. {} the correlation of a row's selection between adjacent indexer layers is {}, between adjacent query tokens {} (a fault's own part {}); faults spread: {}. Its effective context, tables and heatmap sit beside the per-layer ones below. The stack:</p>",
        w.quorum,
        if w.count(LayerKind::Reused) == 0 {
            format!("{} indexer layers", w.indexed_layers())
        } else {
            format!("{} selecting layers ({} with an indexer, the rest reusing their selections)", w.selecting_layers(), w.indexed_layers())
        },
        w.query_tokens(),
        w.question_tokens,
        w.answer_tokens,
        if w.harm.central > 0.0 {
            format!(
                ", and no faulty layer that loses it where a correct selection keeps it corrupts the answer (each does with probability {}, band {} … {}: an assumption, docs/MODEL.md)",
                w.harm.central, w.harm.low, w.harm.high
            )
        } else {
            String::new()
        },
        if w.plan.needs_words() {
            "The simulated layer stands for each indexer layer at its compress ratio, an indexer layer at another ratio is read on its own rows, and a layer that reuses another's selection shares its outcome;"
        } else {
            "The simulated layer stands for each indexer layer;"
        },
        w.layer_correlation,
        w.token_correlation,
        w.fault_token_correlation,
        escape(match w.fault_spread {
            FaultSpreadChoice::Catalogue => "as each hypothesis's catalogue entry says",
            FaultSpreadChoice::Shared => "identically in every layer (correlated as the fault-free layers are)",
            FaultSpreadChoice::Independent => "afresh in each layer",
        })
    );
    let _ = writeln!(h, "<pre>{}</pre>", escape(&w.describe()));
    if w.plan.needs_words() {
        h.push_str(&plan_strip(&w));
    }
    let boost = meta.scenario["physics"]["needle_gate_boost"].as_f64().unwrap_or(0.0);
    if let Some(share) = w.dense_needle_share(meta.needle_tokens, boost) {
        let ratio = w.dense_ratio().unwrap_or(0);
        let reading = match w.hca {
            HcaReading::Blind => {
                "blind</b>: seeing that pooled row does not count as retrieving the needle, so only the indexer layers count"
            }
            HcaReading::Retrieves => {
                "retrieves</b>: seeing that pooled row counts as retrieving the needle, so every trial's needle is found"
            }
        };
        let _ = writeln!(
            h,
            "<p>In the {} dense (HCA) layers every visible row pools {ratio} tokens and is attended without an indexer; a needle of {} tokens carries {:.1} % of its row's gate weight (needle gate boost {boost}). HCA reading <b>{reading}.</p>",
            w.count(LayerKind::Dense),
            meta.needle_tokens,
            share * 100.0
        );
    }
    h
}

/// The layer plan drawn as a strip: one cell per layer, coloured by what
/// selects its rows, each reusing layer in its source's colour, lighter,
/// with the source's number; a title on each cell says the rest.
fn plan_strip(w: &crate::model::stack::WholeModel) -> String {
    use crate::model::plan::PlanLayer;
    let mut ratios: Vec<u64> = Vec::new();
    for r in w.indexer_ratios() {
        if !ratios.contains(&r) {
            ratios.push(r);
        }
    }
    let colour = |ratio: u64| ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"][ratios.iter().position(|&r| r == ratio).unwrap_or(0) % 4];
    let mut h = String::from("<div style=\"display:flex;flex-wrap:wrap;gap:1px;margin:0.4em 0\">");
    for (l, layer) in w.plan.layers().iter().enumerate() {
        let (bg, text, title) = match *layer {
            PlanLayer::Window => ("#dddddd", String::new(), "raw window only".to_string()),
            PlanLayer::Linear => ("#f2e6c9", String::new(), "linear attention".to_string()),
            PlanLayer::Indexer { ratio } => (colour(ratio), format!("{l}"), format!("an indexer at ratio {ratio}")),
            PlanLayer::Dense { ratio } => ("#999999", String::new(), format!("every row at ratio {ratio} (HCA)")),
            PlanLayer::Reuse { source } => (colour(w.ratio_of(source)), String::new(), format!("reuses layer {source}'s selection")),
        };
        let faded = if matches!(layer, PlanLayer::Reuse { .. }) { "opacity:0.45;" } else { "" };
        let _ = write!(
            h,
            "<span title=\"layer {l}: {}\" style=\"{faded}background:{bg};color:#fff;font-size:9px;width:16px;height:22px;display:inline-flex;align-items:center;justify-content:center\">{text}</span>",
            escape(&title)
        );
    }
    h.push_str("</div><p style=\"font-size:smaller\">One cell per layer: numbered cells have an indexer of their own (a colour per compress ratio), faded cells reuse the selection of the indexer before them, grey cells attend the raw window only (light) or every row (dark), beige cells are linear attention.</p>\n");
    h
}

fn fmt_p(p: f64) -> String {
    crate::run::output::format_p(p)
}

/// "3/0" and the p-values, or "-" where the estimator has no per-trial
/// outcomes (tail sampling: no discordant pairs, no McNemar test).
fn test_cells(gained: Option<u64>, lost: Option<u64>, p: Option<f64>, holm: Option<f64>) -> (String, String, String) {
    match (gained, lost, p) {
        (Some(g), Some(l), Some(p)) => (format!("{g}/{l}"), fmt_p(p), holm.map_or("-".to_string(), fmt_p)),
        _ => ("-".to_string(), "-".to_string(), "-".to_string()),
    }
}

/// The note under a paired table: the family, chance findings, and what
/// the highlight means.
fn holm_note(family: usize) -> String {
    format!(
        "<p class=\"meta\">{}. Highlighted: Holm-adjusted p &lt; {SIGNIFICANCE}. Family and adjustment: docs/MODEL.md, “Paired comparisons”.</p>\n",
        escape(&multiple_comparison_note(family))
    )
}

/// A paired table: one row per test (highlighted where Holm p is below
/// [`SIGNIFICANCE`]), the baseline's recall under `baseline_th`, the
/// whole-model difference when `model_column`, then the note on the family.
fn paired_table(h: &mut String, g: &Grid, tests: &[PairedTest], baseline_th: &str, model_column: bool, family: usize) {
    let model_th = if model_column { "<th>whole-model difference</th>" } else { "" };
    let _ = writeln!(
        h,
        "<div class=\"scroll\"><table><tr><th>context</th><th>depth</th><th>k</th><th class=\"l\">precision</th><th>recall</th><th>{}</th><th>difference</th>{model_th}<th>gained/lost</th><th>McNemar p</th><th>Holm p</th></tr>",
        escape(baseline_th)
    );
    for t in tests {
        let c = t.cell;
        let (pairs, p, adjusted) = test_cells(t.gained, t.lost, t.p, t.holm);
        let model = if model_column {
            format!("<td>{}</td>", t.model_diff.map_or("–".to_string(), |d| format!("{d:+.3}")))
        } else {
            String::new()
        };
        let _ = writeln!(
            h,
            "<tr{}><td>{}</td><td>{} %</td><td>{}</td><td class=\"l\">{}</td><td>{:.3}</td><td>{:.3}</td><td>{:+.3}</td>{model}<td>{pairs}</td><td>{p}</td><td>{adjusted}</td></tr>",
            if t.holm.is_some_and(|p| p < SIGNIFICANCE) { " class=\"sig\"" } else { "" },
            row_label(c.context_tokens, c.needle_offset, g.offsets.len()),
            c.depth_percent,
            c.topk,
            escape(&c.precision),
            c.recall,
            c.recall - t.diff,
            t.diff,
        );
    }
    h.push_str("</table></div>\n");
    h.push_str(&holm_note(family));
}

/// The page up to its first paragraph: title and the sweep's facts in a line.
fn page_head(meta: &ReportMeta, g: &Grid, trials: u64) -> String {
    let mut h = page_start(&format!("dsa-recall report · {}", meta.preset));
    let _ = writeln!(h, "<h1>dsa-recall sweep report · {}</h1>", escape(&meta.preset));
    let _ = writeln!(
        h,
        "<p class=\"meta\">dsa-recall {} · needle {}, {} tokens · {trials} trials per cell · seed {} · recall threshold {} · {} ({} … {}) × {} × k {} × precisions {}</p>",
        escape(&meta.version),
        meta.needle,
        meta.needle_tokens,
        meta.seed,
        meta.threshold,
        count_of(g.contexts.len(), "context", "contexts"),
        tokens_label(g.contexts[0]),
        tokens_label(*g.contexts.last().unwrap_or(&0)),
        count_of(g.depths.len(), "depth", "depths"),
        g.topks.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", "),
        escape(&g.precisions.join(", "))
    );
    h
}

/// The report of a sweep directory whose charts `chart_files` (names in
/// `dir`) were just written. PNGs are embedded; an SVG is embedded only when
/// no PNG of the same chart exists.
pub fn report_html(
    dir: &Path,
    meta: &ReportMeta,
    cells: &[CellResult],
    chart_files: &[String],
    whole_model_only: bool,
) -> Result<String, Error> {
    let g = Grid::of(cells);
    let trials = cells.first().map_or(0, |c| c.trials);
    // Whole-model recall present: report it beside per-layer recall.
    let whole = cells.iter().any(|c| c.model_recall.is_some());
    let mut h = page_head(meta, &g, trials);
    let _ = writeln!(
        h,
        "<p>Synthetic model: these numbers are properties of the model's knobs (listed under <a href=\"#configuration\">Configuration</a>), not measurements of a real checkpoint.</p>"
    );
    if whole {
        let _ = writeln!(
            h,
            "<p><b>What is measured.</b> “Recall” on this page is <em>per-layer selection recall</em> unless it says <em>whole-model recall</em>. Per-layer selection recall is the share of trials in which one decoding query at the end of the context, in one indexer layer, keeps the needle: at least one KV row holding a needle token is in its top-k, or the whole needle lies in the raw window. Whole-model recall reads the same trials through the layer stack and several query tokens (below). Both are about which rows attention may see, not whether the model then uses the needle: neither is a model's needle-in-a-haystack accuracy. Selection fidelity’s recall@k, where shown, is another quantity: the share of the exact top-k a quantized selection keeps.</p>"
        );
        h.push_str(&stack_section(meta));
    } else {
        let _ = writeln!(
            h,
            "<p><b>What is measured.</b> “Recall” on this page (charts, tables, effective context) is <em>per-layer selection recall</em>: the share of trials in which one decoding query at the end of the context, in one indexer layer, keeps the needle: at least one KV row holding a needle token is in its top-k, or the whole needle lies in the raw window. It is not a model's needle-in-a-haystack accuracy, which involves many layers and many query tokens (not simulated). Selection fidelity’s recall@k, where shown, is another quantity: the share of the exact top-k a quantized selection keeps.</p>"
        );
    }

    push_effective_section(&mut h, meta, &g, whole);

    let predicted = g.contexts.len() > 1 && cells.iter().any(|c| c.predicted_recall.is_some());
    push_charts(&mut h, dir, chart_files, CaptionFacts { whole, predicted, whole_model_only })?;

    // recall tables
    let narrow = is_narrow(g.contexts.len() * g.offsets.len(), g.topks.len() * g.precisions.len());
    if narrow {
        let stack = meta.stack_label().filter(|_| whole).map_or_else(String::new, |s| format!("; whole-model recall: {}", escape(&s)));
        let _ = writeln!(
            h,
            "<h2>Recall per cell</h2><p>One row per (k, precision): recall with its Wilson 95 % interval{stack}; selection recall with its 95 % interval; the per-layer recall difference from the baseline precision on the same haystacks (tested below).</p>"
        );
        narrow_tables(&mut h, &g, cells, meta.threshold);
    } else {
        let _ = writeln!(h, "<h2>Per-layer selection recall per cell</h2><p>Per-layer selection recall with its Wilson 95 % interval.</p>");
        recall_tables(&mut h, &g, cells, meta.threshold, |x| Some((x.recall, x.ci_low, x.ci_high)));
    }
    if whole && !narrow {
        let stack = meta.stack_label().map_or_else(String::new, |s| format!(" ({s})"));
        let _ = writeln!(
            h,
            "<h2 id=\"whole-model\">Whole-model recall per cell</h2><p>Whole-model recall{stack} with its Wilson 95 % interval, on the same trials as the per-layer tables above.</p>"
        );
        recall_tables(&mut h, &g, cells, meta.threshold, |x| Some((x.model_recall?, x.model_ci_low?, x.model_ci_high?)));
    }

    push_paired_sections(&mut h, &g, cells, whole);

    push_fidelity_section(&mut h, cells);

    push_ties_section(&mut h, cells);

    // configuration
    // Collapsed: the resolved scenario is long and read only when needed.
    let _ = writeln!(h, "<h2 id=\"configuration\">Configuration</h2>");
    let _ = writeln!(
        h,
        "<details><summary>The resolved scenario (as in <code>manifest.json</code>)</summary><pre>{}</pre></details>",
        escape(&serde_json::to_string_pretty(&meta.scenario).unwrap_or_default())
    );
    h.push_str("</body></html>\n");
    Ok(h)
}

/// The selection-fidelity table, when the sweep measured it.
fn push_fidelity_section(h: &mut String, cells: &[CellResult]) {
    let fid: Vec<&CellResult> = cells.iter().filter(|c| c.selection_recall.is_some()).collect();
    if !fid.is_empty() {
        let reference = fid[0].fidelity_reference.clone().unwrap_or_default();
        let _ = writeln!(
            h,
            "<h2>Selection fidelity against {}</h2><p>Share of the {} top-k_eff rows the variant also selects (recall@k) and the Jaccard overlap of the two sets: mean over trials and 95 % interval. Engines' pass rule: ≥ 0.99.</p>",
            escape(&reference),
            escape(&reference)
        );
        h.push_str("<div class=\"scroll\"><table><tr><th>context</th><th>depth</th><th>k</th><th class=\"l\">precision</th><th>recall@k</th><th>Jaccard</th></tr>\n");
        for c in &fid {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{} %</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td></tr>",
                tokens_label(c.context_tokens),
                c.depth_percent,
                c.topk,
                escape(&c.precision),
                fmt_ci(c.selection_recall, c.selection_recall_ci_low, c.selection_recall_ci_high),
                fmt_ci(c.jaccard, c.jaccard_ci_low, c.jaccard_ci_high)
            );
        }
        h.push_str("</table></div>\n");
    }
}

/// The tie audit's table (`ties.csv`), when the sweep ran it.
fn push_ties_section(h: &mut String, cells: &[CellResult]) {
    let audited: Vec<(&CellResult, _)> = cells.iter().filter_map(|c| c.ties.filter(|t| t.trials > 0).map(|t| (c, t))).collect();
    if audited.is_empty() {
        return;
    }
    let _ = writeln!(
        h,
        "<h2>Ties at the cut</h2><p>Rows whose score equals the k-th score, in the variant's logits format (mean and most in one trial), the share of trials whose cut splits them, the share whose needle the tie order decides, and recall under each tie rule on the same trials (truncated: the top 15 bits of each score's order key, ties in arrival order). Also in <code>ties.csv</code>; docs/MODEL.md, “Tie audit”.</p>"
    );
    h.push_str("<div class=\"scroll\"><table><tr><th>context</th><th>depth</th><th>k</th><th class=\"l\">precision</th><th>tied rows</th><th>split</th><th>needle at cut</th><th>lowest index</th><th>highest index</th><th>random</th><th>truncated</th></tr>\n");
    for (c, t) in audited {
        let share = |n: u64| format!("{:.3}", t.share(n));
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{} %</td><td>{}</td><td class=\"l\">{}</td><td>{:.1} (max {})</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            tokens_label(c.context_tokens),
            c.depth_percent,
            c.topk,
            escape(&c.precision),
            t.tied_rows_mean(),
            t.tied_rows_max,
            share(t.split),
            share(t.needle_at_cut),
            t.kept.map(share).join("</td><td>")
        );
    }
    h.push_str("</table></div>\n");
}

/// The paired comparisons with the baseline precision and the smallest k:
/// one Holm family for both tables.
fn push_paired_sections(h: &mut String, g: &Grid, cells: &[CellResult], whole: bool) {
    let holm = HolmFamily::of(cells);
    let paired = holm.tests(cells, Pairing::Precision);
    if let Some(first) = paired.first() {
        let base = escape(first.cell.baseline.as_deref().unwrap_or_default());
        let _ = writeln!(
            h,
            "<h2>Paired comparison with {base}</h2><p>Each variant against {base} on the same haystacks: recall difference, trials kept only by the variant / only by {base}, the exact two-sided McNemar p-value, and the same adjusted by Holm over every paired test of the sweep.</p>"
        );
        paired_table(h, g, &paired, "baseline recall", false, holm.size);
    }
    let k_paired = holm.tests(cells, Pairing::TopK);
    if let Some(first) = k_paired.first() {
        let k0 = first.cell.k_baseline.unwrap_or_default();
        let model = if whole { " and of whole-model recall" } else { "" };
        let _ = writeln!(
            h,
            "<h2 id=\"k-pairs\">Paired comparison with k={k0}</h2><p>What a larger k buys: each k against k={k0}, same context, depth and precision, on the same haystacks: difference of per-layer recall{model}, trials kept only at the larger k / only at k={k0}, the exact two-sided McNemar p-value, and the same adjusted by Holm over every paired test of the sweep.</p>"
        );
        paired_table(h, g, &k_paired, &format!("recall at k={k0}"), whole, holm.size);
    }
}

/// The "Charts" section: each chart embedded with its caption (an SVG only
/// when no PNG of the same chart exists).
fn push_charts(h: &mut String, dir: &Path, chart_files: &[String], facts: CaptionFacts) -> Result<(), Error> {
    let _ = writeln!(h, "<h2>Charts</h2>");
    for file in chart_files {
        let Some(kind) = mime(file) else { continue };
        if kind == "image/svg+xml" && chart_files.iter().any(|f| *f == file.replace(".svg", ".png")) {
            continue;
        }
        let path = dir.join(file);
        let bytes = std::fs::read(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let _ = writeln!(
            h,
            "<figure id=\"{}\"><img alt=\"{}\" src=\"data:{kind};base64,{}\"><figcaption><b>{}</b> · {}</figcaption></figure>",
            escape(file),
            escape(file),
            crate::report::chart::font::base64(&bytes),
            escape(file),
            caption(file, facts)
        );
    }

    Ok(())
}

/// The "Effective context" section: one row per (k, precision).
fn push_effective_section(h: &mut String, meta: &ReportMeta, g: &Grid, whole: bool) {
    let _ = writeln!(h, "<h2>Effective context</h2>");
    let _ = writeln!(
        h,
        "<p>The longest tested context with recall ≥ {} at every depth and every shorter context (point estimates); “≥” when recall held at the longest context tested, “&lt;” when it failed at the shortest. In brackets, when it differs, the same read from the lower and the upper ends of the Wilson 95 % intervals: effective contexts whose brackets overlap are not shown to differ.</p>",
        meta.threshold
    );
    if whole {
        h.push_str("<table><tr><th>k</th><th class=\"l\">precision</th><th>effective context: whole model</th><th>per layer</th><th>coverage limit k·c+W</th></tr>\n");
    } else {
        h.push_str("<table><tr><th>k</th><th class=\"l\">precision</th><th>effective context</th><th>coverage limit k·c+W</th></tr>\n");
    }
    for e in &meta.effective {
        let eff = reach_label(e.layer(), e.layer_range, g.contexts[0]);
        let model = if whole {
            let m = e.model.map_or("–".to_string(), |m| reach_label(m, e.model_range, g.contexts[0]));
            format!("<td>{m}</td>")
        } else {
            String::new()
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"l\">{}</td>{model}<td>{eff}</td><td>{}</td></tr>",
            e.topk,
            escape(&e.precision),
            e.coverage_limit
        );
    }
    h.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captions_describe_only_what_is_drawn() {
        // Issue 30, item 13: prediction lines are described only when the
        // sweep has them, and --whole-model-only is said where it applies.
        let facts = |predicted, whole_model_only| CaptionFacts { whole: true, predicted, whole_model_only };
        let plain = caption("recall_vs_context.png", facts(false, false));
        assert!(!plain.contains("prediction") && !plain.contains("--whole-model-only"), "{plain}");
        assert!(caption("recall_vs_context.png", facts(true, false)).contains("analytic prediction"));
        let alone = caption("recall_vs_context.png", facts(true, true));
        assert!(!alone.contains("prediction") && alone.contains("--whole-model-only"), "{alone}");
        assert!(caption("compare.png", facts(false, true)).contains("--whole-model-only"));
        assert!(!caption("heatmap.png", facts(true, true)).contains("--whole-model-only"));
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
        assert_eq!(escape("k·c+W ≥ 1"), "k·c+W ≥ 1");
    }

    #[test]
    fn the_stack_is_described_only_when_there_is_one() {
        let s = crate::config::check(crate::config::resolve(Default::default()).unwrap()).unwrap();
        let meta = ReportMeta::from_scenario(&s, &[]);
        let text = stack_section(&meta);
        assert!(text.contains("at least 1 of its 21 indexer layers"), "{text}");
        assert!(text.contains("20 dense (HCA), ratio 128: 3, 5, …, 41"), "{text}");
        let share = s.stack.as_ref().unwrap().dense_needle_share(s.needle_tokens, s.physics.needle_gate_boost).unwrap();
        assert!(text.contains(&format!("carries {:.1} % of its row's gate weight", share * 100.0)), "{text}");
        assert!(text.contains("<b>blind</b>"), "{text}");
        let none = crate::config::Scenario { stack: None, ..s };
        assert_eq!(stack_section(&ReportMeta::from_scenario(&none, &[])), "");
    }

    #[test]
    fn p_values_format() {
        assert_eq!(fmt_p(0.5), "0.500");
        assert_eq!(fmt_p(0.00012), "1.2e-4");
    }
}
