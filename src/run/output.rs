//! What a sweep leaves behind: `results.jsonl`, `summary.csv`,
//! `manifest.json`, charts, and the table on stdout.
//!
//! Files are written through [`crate::base::files::write_file`] (a temporary
//! name in the output directory, renamed into place), so a failure never
//! leaves a half-written file.

use crate::base::units::tokens_label;
use crate::config::Scenario;
use crate::error::Error;
use crate::run::cell::{CellResult, HolmFamily, PairedTest, Pairing};
use crate::run::sweep::{EffectiveContext, SweepOutcome};
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

pub const RESULTS_FILE: &str = "results.jsonl";
pub const SUMMARY_FILE: &str = "summary.csv";
pub const MANIFEST_FILE: &str = "manifest.json";
pub const EFFECTIVE_CONTEXT_FILE: &str = "effective_context.csv";
pub const RECALL_CHART_FILE: &str = "recall_vs_context.png";
/// The tie audit's table (`--tie-audit on`).
pub const TIES_FILE: &str = "ties.csv";
/// The top-k agreement of each pair (`--agreement A:B`).
pub const AGREEMENT_FILE: &str = "agreement.csv";

/// Creates `dir`, refusing a non-empty existing one unless `force`.
pub fn prepare_output_dir(dir: &Path, force: bool) -> Result<(), Error> {
    check_output_dir(dir, force)?;
    fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating output directory {}", dir.display()), e))
}

/// Whether a run may write a file of this name into an output directory:
/// the kinds of file this tool writes (data, manifests, charts, reports).
/// Entries of these names must be regular files (or absent) before a run
/// with `--force` or `--resume` writes anything.
pub fn is_output_name(name: &str) -> bool {
    ["csv", "json", "jsonl", "html", "png", "svg"].iter().any(|ext| name.strip_suffix(ext).is_some_and(|stem| stem.ends_with('.')))
}

/// A knob sweep's value directory (`FIELD=VALUE`), written like a sweep's.
fn is_value_dir(name: &str) -> bool {
    name.contains('=')
}

/// What [`prepare_output_dir`] refuses, checked whole without creating or
/// writing anything (so a refused run leaves the directory as it was): a
/// path that is no directory, a non-empty directory without `force` (an
/// interrupted sweep's is pointed to `--resume`), and, with `force`, an
/// entry the run would write that is a symlink, device, FIFO or directory.
/// The lock file of the directory's [`crate::base::files::DirLock`] does
/// not count.
pub fn check_output_dir(dir: &Path, force: bool) -> Result<(), Error> {
    crate::base::files::check_output_dir_path(dir)?;
    if dir.exists() {
        let entries = fs::read_dir(dir).map_err(|e| Error::io(format!("reading output directory {}", dir.display()), e))?;
        let mut entries = entries.filter(|e| e.as_ref().map_or(true, |e| e.file_name() != crate::base::files::LOCK_FILE));
        if entries.next().is_some() && !force {
            let interrupted = dir.join(crate::run::checkpoint::CHECKPOINT_FILE).exists()
                || crate::base::files::read_capped(&dir.join(MANIFEST_FILE), crate::base::files::JSON_FILE_CAP)
                    .ok()
                    .and_then(|m| serde_json::from_slice::<serde_json::Value>(&m).ok())
                    .is_some_and(|m| m["status"] == "running");
            return Err(Error::OutputNotEmpty(if interrupted {
                format!(
                    "{} holds an interrupted sweep; pass --resume to finish it, or --force to discard it and start again",
                    dir.display()
                )
            } else {
                format!("{} is not empty; pass --force to overwrite it", dir.display())
            }));
        }
        check_output_entries(dir)?;
    }
    Ok(())
}

/// What a run into an existing directory (`--resume`) refuses before
/// writing: a path that is no directory, and an entry it would write that
/// is a symlink, device, FIFO or directory.
pub fn check_output_entries(dir: &Path) -> Result<(), Error> {
    crate::base::files::check_output_dir_path(dir)?;
    crate::base::files::check_owned_entries(dir, &is_output_name, &is_value_dir)
}

/// [`check_output_entries`] for `plot`, which only reads the data files
/// (a linked `results.jsonl` may be plotted) and writes charts and reports.
pub fn check_chart_entries(dir: &Path) -> Result<(), Error> {
    let drawn = |name: &str| [".png", ".svg", ".html"].iter().any(|ext| name.ends_with(ext));
    crate::base::files::check_output_dir_path(dir)?;
    crate::base::files::check_owned_entries(dir, &drawn, &is_value_dir)
}

/// One JSON object per cell, in sweep order.
pub fn results_jsonl(cells: &[CellResult]) -> String {
    let mut out = String::new();
    for c in cells {
        // Serializing plain numbers, strings and options cannot fail.
        out.push_str(&serde_json::to_string(c).unwrap_or_default());
        out.push('\n');
    }
    out
}

fn opt<T: ToString>(x: Option<T>) -> String {
    x.map(|v| v.to_string()).unwrap_or_default()
}

/// One value of a summary row, typed: what `summary.csv` prints (`None`:
/// an empty field) and what the Python package's columns hold.
#[derive(Clone, Debug, PartialEq)]
pub enum Field {
    Int(Option<u64>),
    Float(Option<f64>),
    Flag(bool),
    Text(Option<String>),
}

impl Field {
    /// The field as `summary.csv` writes it.
    pub fn csv_text(&self) -> String {
        match self {
            Field::Int(x) => opt(*x),
            Field::Float(x) => opt(*x),
            Field::Flag(x) => x.to_string(),
            Field::Text(x) => x.clone().unwrap_or_default(),
        }
    }
}

/// One column of `summary.csv`: its name and one field per cell.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub name: &'static str,
    pub values: Vec<Field>,
}

/// The columns of `summary.csv`, in order (the five quantile columns of a
/// `*_quantiles` field are `PREFIX_p05` … `PREFIX_p95`).
const SUMMARY_COLUMNS: [&str; 67] = [
    "context_tokens",
    "depth_percent",
    "needle_offset",
    "topk",
    "precision",
    "trials",
    "survived",
    "recall",
    "ci_low",
    "ci_high",
    "predicted_recall",
    "mean_rank",
    "mean_rank_ties",
    "median_rank",
    "trials_with_ties",
    "mean_margin_sd",
    "needle_rows",
    "needle_start_token",
    "needle_in_window",
    "survived_via_window",
    "visible_rows",
    "candidate_rows",
    "k_eff",
    "coverage_limit",
    "rank_share_p05",
    "rank_share_p25",
    "rank_share_p50",
    "rank_share_p75",
    "rank_share_p95",
    "margin_sd_p05",
    "margin_sd_p25",
    "margin_sd_p50",
    "margin_sd_p75",
    "margin_sd_p95",
    "fidelity_reference",
    "selection_recall",
    "selection_recall_ci_low",
    "selection_recall_ci_high",
    "jaccard",
    "jaccard_ci_low",
    "jaccard_ci_high",
    "baseline",
    "recall_diff",
    "discordant_gained",
    "discordant_lost",
    "mcnemar_p",
    "indexed_layers",
    "model_survived",
    "model_recall",
    "model_ci_low",
    "model_ci_high",
    "layers_reached",
    "layers_reached_ci_low",
    "layers_reached_ci_high",
    "layers_reached_p05",
    "layers_reached_p25",
    "layers_reached_p50",
    "layers_reached_p75",
    "layers_reached_p95",
    "mcnemar_p_holm",
    "k_baseline",
    "k_recall_diff",
    "k_discordant_gained",
    "k_discordant_lost",
    "k_mcnemar_p",
    "k_mcnemar_p_holm",
    "k_model_recall_diff",
];

/// The CSV header of `summary.csv`.
pub fn summary_header() -> String {
    SUMMARY_COLUMNS.join(",")
}

/// Columns only the quantile needle has, after the others: written when a
/// cell has them, so strength-unit summaries keep their bytes.
const QUANTILE_COLUMNS: [&str; 12] = [
    "model_band_low",
    "model_band_high",
    "needle_capped",
    "needle_margin",
    "needle_margin_ci_low",
    "needle_margin_ci_high",
    "needle_margin_exceedance",
    "needle_margin_unbounded",
    "model_needle_margin",
    "model_needle_margin_ci_low",
    "model_needle_margin_ci_high",
    "model_needle_margin_unbounded",
];

fn quantile_fields(q: Option<[f64; 5]>) -> [Field; 5] {
    std::array::from_fn(|i| Field::Float(q.map(|v| v[i])))
}

/// One cell's row of `summary.csv`, in the order of [`SUMMARY_COLUMNS`];
/// `holm` is the cell's (precision-paired, k-paired) adjusted p-values.
fn summary_row(c: &CellResult, holm: (Option<f64>, Option<f64>)) -> Vec<Field> {
    use Field::{Flag, Float, Int, Text};
    let mut row = vec![
        Int(Some(c.context_tokens)),
        Float(Some(c.depth_percent)),
        Int(c.needle_offset),
        Int(Some(c.topk)),
        Text(Some(c.precision.clone())),
        Int(Some(c.trials)),
        Int(Some(c.survived)),
        Float(Some(c.recall)),
        Float(Some(c.ci_low)),
        Float(Some(c.ci_high)),
        Float(c.predicted_recall),
        Float(c.mean_rank),
        Float(c.mean_rank_ties),
        Float(c.median_rank),
        Int(Some(c.trials_with_ties)),
        Float(c.mean_margin_sd),
        Int(Some(c.needle_rows)),
        Int(Some(c.needle_start_token)),
        Flag(c.needle_in_window),
        Int(Some(c.survived_via_window)),
        Int(Some(c.visible_rows)),
        Int(Some(c.candidate_rows)),
        Int(Some(c.k_eff)),
        Int(Some(c.coverage_limit)),
    ];
    row.extend(quantile_fields(c.rank_share_quantiles));
    row.extend(quantile_fields(c.margin_sd_quantiles));
    row.extend([
        Text(c.fidelity_reference.clone()),
        Float(c.selection_recall),
        Float(c.selection_recall_ci_low),
        Float(c.selection_recall_ci_high),
        Float(c.jaccard),
        Float(c.jaccard_ci_low),
        Float(c.jaccard_ci_high),
        Text(c.baseline.clone()),
        Float(c.recall_diff),
        Int(c.discordant_gained),
        Int(c.discordant_lost),
        Float(c.mcnemar_p),
        Int(c.indexed_layers),
        Int(c.model_survived),
        Float(c.model_recall),
        Float(c.model_ci_low),
        Float(c.model_ci_high),
        Float(c.layers_reached),
        Float(c.layers_reached_ci_low),
        Float(c.layers_reached_ci_high),
    ]);
    row.extend(quantile_fields(c.layers_reached_quantiles));
    row.extend([
        Float(holm.0),
        Int(c.k_baseline),
        Float(c.k_recall_diff),
        Int(c.k_discordant_gained),
        Int(c.k_discordant_lost),
        Float(c.k_mcnemar_p),
        Float(holm.1),
        Float(c.k_model_recall_diff),
    ]);
    row
}

/// The quantile needle's extra fields of one cell ([`QUANTILE_COLUMNS`]).
fn quantile_row(c: &CellResult) -> [Field; 12] {
    [
        Field::Float(c.model_band_low),
        Field::Float(c.model_band_high),
        Field::Int(c.needle_capped),
        Field::Float(c.needle_margin),
        Field::Float(c.needle_margin_ci_low),
        Field::Float(c.needle_margin_ci_high),
        Field::Float(c.needle_margin_exceedance),
        c.needle_margin_unbounded.map_or(Field::Text(None), Field::Flag),
        Field::Float(c.model_needle_margin),
        Field::Float(c.model_needle_margin_ci_low),
        Field::Float(c.model_needle_margin_ci_high),
        c.model_needle_margin_unbounded.map_or(Field::Text(None), Field::Flag),
    ]
}

/// The cells as the columns of `summary.csv`, typed: the quantile needle's
/// three columns only when a cell has them. The Holm-adjusted p-values treat
/// `cells` as the sweep's whole family of paired tests.
pub fn summary_columns(cells: &[CellResult]) -> Vec<Column> {
    let quantile = cells.iter().any(|c| c.needle_capped.is_some());
    let holm = HolmFamily::of(cells);
    let names: Vec<&'static str> = SUMMARY_COLUMNS.iter().chain(if quantile { &QUANTILE_COLUMNS[..] } else { &[] }).copied().collect();
    let mut columns: Vec<Column> = names.into_iter().map(|name| Column { name, values: Vec::with_capacity(cells.len()) }).collect();
    for (i, c) in cells.iter().enumerate() {
        let mut row = summary_row(c, (holm.precision[i], holm.topk[i]));
        if quantile {
            row.extend(quantile_row(c));
        }
        for (column, field) in columns.iter_mut().zip(row) {
            column.values.push(field);
        }
    }
    columns
}

/// The same cells as a tidy CSV, one row each ([`summary_columns`] as text).
pub fn summary_csv(cells: &[CellResult]) -> String {
    let columns = summary_columns(cells);
    let mut out = columns.iter().map(|c| c.name).collect::<Vec<_>>().join(",");
    out.push('\n');
    for i in 0..cells.len() {
        let fields: Vec<String> = columns.iter().map(|c| c.values.get(i).map_or_else(String::new, Field::csv_text)).collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// `effective_context.csv`: one row per (k, precision) with its effective
/// context read from per-layer recall and, with a stack, from whole-model
/// recall (docs/MODEL.md, "Effective context"). An empty context means
/// recall was below the threshold already at the shortest context tested;
/// `held_at_longest` true means it held at the longest, so the true value
/// may be longer. The `_low` and `_high` columns are the same read from
/// the lower and upper ends of each cell's Wilson 95 % interval (empty:
/// below the threshold at the shortest context, or not recorded).
pub fn effective_context_csv(effective: &[EffectiveContext]) -> String {
    let mut out = String::from(
        "topk,precision,threshold,effective_context,held_at_longest,model_effective_context,model_held_at_longest,coverage_limit,\
         effective_context_low,effective_context_high,model_effective_context_low,model_effective_context_high\n",
    );
    for e in effective {
        let fields = [
            e.topk.to_string(),
            e.precision.clone(),
            e.threshold.to_string(),
            opt(e.effective_context),
            e.held_at_longest.to_string(),
            opt(e.model.and_then(|m| m.effective_context)),
            opt(e.model.map(|m| m.held_at_longest)),
            e.coverage_limit.to_string(),
            opt(e.layer_range.and_then(|r| r.low.effective_context)),
            opt(e.layer_range.and_then(|r| r.high.effective_context)),
            opt(e.model_range.and_then(|r| r.low.effective_context)),
            opt(e.model_range.and_then(|r| r.high.effective_context)),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// `agreement.csv`: one line per cell and pair of `--agreement A:B` (A is
/// the cell's precision), the columns of `results.jsonl`'s `agreement`
/// (docs/MODEL.md, "Top-k agreement"); None when the sweep had no pairs.
pub fn agreement_csv(cells: &[CellResult]) -> Option<String> {
    if cells.iter().all(|c| c.agreement.is_empty()) {
        return None;
    }
    let mut out = String::from(
        "context_tokens,depth_percent,needle_offset,topk,a,b,trials,agreement,agreement_ci_low,agreement_ci_high,\
         tie_disagreement,real_disagreement,tie_share\n",
    );
    for c in cells {
        for p in &c.agreement {
            let fields = [
                c.context_tokens.to_string(),
                c.depth_percent.to_string(),
                opt(c.needle_offset),
                c.topk.to_string(),
                c.precision.clone(),
                p.with.clone(),
                p.trials.to_string(),
                p.agreement.to_string(),
                p.agreement_ci_low.to_string(),
                p.agreement_ci_high.to_string(),
                p.tie_disagreement.to_string(),
                p.real_disagreement.to_string(),
                opt(p.tie_share),
            ];
            out.push_str(&fields.join(","));
            out.push('\n');
        }
    }
    Some(out)
}

/// `ties.csv`, the tie audit (docs/MODEL.md, "Tie audit"): one row per
/// cell that has one, with the logits format its variant scores in; None
/// when no cell has one (the sweep ran without `--tie-audit on`).
pub fn ties_csv(s: &Scenario, cells: &[CellResult]) -> Option<String> {
    use crate::numerics::pipeline::LogitFormat;
    if cells.iter().all(|c| c.ties.is_none()) {
        return None;
    }
    let mut out = String::from(
        "context_tokens,depth_percent,needle_offset,topk,precision,logits,trials,tied_rows_mean,tied_rows_max,share_tied,share_split,\
         share_needle_at_cut",
    );
    for rule in crate::score::selection::AUDIT_RULES {
        let _ = write!(out, ",recall_{rule}");
    }
    out.push('\n');
    for c in cells {
        let Some(t) = c.ties.filter(|t| t.trials > 0) else { continue };
        let logits = s.precisions.iter().find(|p| p.name == c.precision).map_or("", |p| match p.scoring.logits {
            LogitFormat::F32 => "f32",
            LogitFormat::Bf16 => "bf16",
            LogitFormat::F16 => "f16",
        });
        let share = |n: u64| t.share(n);
        let mut fields = vec![
            c.context_tokens.to_string(),
            c.depth_percent.to_string(),
            opt(c.needle_offset),
            c.topk.to_string(),
            c.precision.clone(),
            logits.to_string(),
            t.trials.to_string(),
            t.tied_rows_mean().to_string(),
            t.tied_rows_max.to_string(),
            share(t.tied).to_string(),
            share(t.split).to_string(),
            share(t.needle_at_cut).to_string(),
        ];
        fields.extend(t.kept.iter().map(|&k| share(k).to_string()));
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    Some(out)
}

/// A recall table's row label: the context, and the needle offset when the
/// sweep has several (`4K @1`).
pub fn row_label(context: u64, offset: Option<u64>, offsets: usize) -> String {
    match offset {
        Some(o) if offsets > 1 => format!("{} @{o}", tokens_label(context)),
        _ => tokens_label(context),
    }
}

/// Widest table the wide layout (contexts × (k, precision)) may print
/// before the narrow layout, one row per (k, precision), takes over.
pub const TABLE_WIDTH: usize = 120;

/// Whether a sweep's recall tables are printed narrow: one row per
/// (context, k, precision) instead of one column per (k, precision). A
/// single row (one context and offset) reads better transposed, and a wide
/// table over [`TABLE_WIDTH`] columns wraps in a terminal.
pub fn narrow_layout(s: &Scenario) -> bool {
    is_narrow(s.contexts.len() * s.needle_offsets.len(), s.topks.len() * s.precisions.len())
}

/// [`narrow_layout`] of a table with `rows` rows (context, needle offset)
/// and `series` (k, precision) columns per depth; report.html follows it too.
pub fn is_narrow(rows: usize, series: usize) -> bool {
    rows == 1 || 8 + 24 * series > TABLE_WIDTH
}

/// A p-value as tables print it: three decimals, or two significant digits
/// below 0.001 (`1.2e-4`).
pub fn format_p(p: f64) -> String {
    if p < 0.001 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

/// The one-line note under a paired table: what a p-value of a family of
/// `tests` paired tests means (docs/MODEL.md, "Paired comparisons").
pub fn multiple_comparison_note(tests: usize) -> String {
    format!(
        "{tests} paired tests (precision and k pairs): about 1 in 20 has p < 0.05 by chance alone; \
         Holm p < 0.05 keeps the risk of any false call among all {tests} at 5 %"
    )
}

/// "3/0", or "-" for estimators without per-trial outcomes (tail sampling):
/// not 0/0 beside a non-zero difference.
fn pairs_text(gained: Option<u64>, lost: Option<u64>) -> String {
    match (gained, lost) {
        (Some(g), Some(l)) => format!("{g}/{l}"),
        _ => "-".into(),
    }
}

fn p_text(p: Option<f64>) -> String {
    p.map_or_else(|| "-".into(), format_p)
}

/// The table printed on stdout after a sweep.
pub fn format_table(s: &Scenario, outcome: &SweepOutcome) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "dsa-recall sweep · {} · needle {} · {} trials per cell · seed {}",
        s.preset,
        if s.model.needle_unit.is_strength() { format!("strength {}", s.model.needle_strength) } else { s.needle_label() },
        s.trials,
        s.seed
    );
    let whole = outcome.cells.iter().any(|c| c.model_recall.is_some());
    let holm = HolmFamily::of(&outcome.cells);
    let narrow = narrow_layout(s);
    let model_title = match &s.stack {
        Some(w) => format!("whole-model recall ({})", w.label()),
        None => "whole-model recall".into(),
    };
    for &depth in &s.depths {
        if narrow {
            narrow_table(&mut out, s, outcome, &holm, depth, whole.then_some(model_title.as_str()));
            continue;
        }
        recall_table(&mut out, s, outcome, depth, "per-layer selection recall", |c| Some((c.recall, c.ci_low, c.ci_high)));
        if whole {
            recall_table(&mut out, s, outcome, depth, &model_title, |c| Some((c.model_recall?, c.model_ci_low?, c.model_ci_high?)));
        }
    }
    if s.precisions.len() > 1 && !narrow {
        precision_pairs(&mut out, s, outcome, &holm);
    }
    if s.topks.len() > 1 {
        k_pairs(&mut out, s, outcome, &holm, whole);
    }
    out.push_str(&crate::run::margin_text::margin_tables(s, outcome, narrow));
    out.push_str(&crate::run::agreement_text::agreement_tables(s, outcome, row_label));
    let _ = writeln!(
        out,
        "\neffective context (longest context with recall ≥ {} at every depth and every shorter context; in brackets, when it differs,\n\
         the same from the Wilson 95 % intervals' lower and upper ends: overlapping brackets are not shown to differ)",
        s.threshold
    );
    let model_column = |text: &str| if whole { format!("  {text:>20}") } else { String::new() };
    let _ = writeln!(
        out,
        "{:>8}  {:<14}  {:>20}{}  {:>22}",
        "k",
        "precision",
        if whole { "per layer" } else { "effective" },
        model_column("whole model"),
        "coverage limit k·c+W"
    );
    for e in &outcome.effective {
        let model = e.model.map_or_else(|| "-".into(), |m| m.label_with(e.model_range, s.contexts[0]));
        let _ = writeln!(
            out,
            "{:>8}  {:<14}  {:>20}{}  {:>22}",
            e.topk,
            e.precision,
            e.layer().label_with(e.layer_range, s.contexts[0]),
            model_column(&model),
            e.coverage_limit
        );
    }
    out
}

/// The paired comparison of each precision with the first, on the same
/// haystacks, with the Holm-adjusted p and the note on reading it.
fn precision_pairs(out: &mut String, s: &Scenario, outcome: &SweepOutcome, holm: &HolmFamily) {
    let base = &s.precisions[0].name;
    let heading = format!(
        "\npaired comparison with {base} on the same haystacks: per-layer recall difference, trials kept only by the variant / only by {base},\n\
         exact McNemar p and Holm-adjusted p"
    );
    paired_table(out, s, &holm.tests(&outcome.cells, Pairing::Precision), &heading, false, holm.size);
}

/// The paired comparison of each k with the sweep's smallest, same
/// context, depth, offset and precision, on the same haystacks.
fn k_pairs(out: &mut String, s: &Scenario, outcome: &SweepOutcome, holm: &HolmFamily, whole: bool) {
    let k0 = s.topks.iter().copied().min().unwrap_or(0);
    let heading = format!(
        "\npaired comparison with k={k0} on the same haystacks: per-layer recall difference{}, trials kept only at the larger k / only at k={k0},\n\
         exact McNemar p and Holm-adjusted p",
        if whole { " (and whole-model)" } else { "" }
    );
    paired_table(out, s, &holm.tests(&outcome.cells, Pairing::TopK), &heading, whole, holm.size);
}

/// A paired table under `heading`: one row per test, the whole-model
/// difference as a column when `model_column`, then the note on the family.
fn paired_table(out: &mut String, s: &Scenario, tests: &[PairedTest], heading: &str, model_column: bool, family: usize) {
    let _ = writeln!(out, "{heading}");
    let model = |text: &str| if model_column { format!("  {text:>10}") } else { String::new() };
    let _ = writeln!(
        out,
        "{:>8}  {:>7}  {:>6}  {:<14}  {:>8}{}  {:>11}  {:>9}  {:>9}",
        "context",
        "depth",
        "k",
        "precision",
        "diff",
        model("model diff"),
        "gained/lost",
        "p",
        "Holm p"
    );
    for t in tests {
        let c = t.cell;
        let model_diff = t.model_diff.map_or_else(|| "-".into(), |d| format!("{d:+.3}"));
        let _ = writeln!(
            out,
            "{:>8}  {:>7}  {:>6}  {:<14}  {:>+8.3}{}  {:>11}  {:>9}  {:>9}",
            row_label(c.context_tokens, c.needle_offset, s.needle_offsets.len()),
            format!("{} %", c.depth_percent),
            c.topk,
            c.precision,
            t.diff,
            model(&model_diff),
            pairs_text(t.gained, t.lost),
            p_text(t.p),
            p_text(t.holm)
        );
    }
    let _ = writeln!(out, "{}", multiple_comparison_note(family));
}

/// The narrow layout of one depth's recall tables: one row per (context,
/// k, precision) with per-layer recall, whole-model recall (`model_title`,
/// when the cells have it), selection recall against the fidelity reference
/// (when measured) and the paired comparison with the first precision.
fn narrow_table(out: &mut String, s: &Scenario, outcome: &SweepOutcome, holm: &HolmFamily, depth: f64, model_title: Option<&str>) {
    let cells: Vec<(usize, &CellResult)> = outcome.cells.iter().enumerate().filter(|(_, c)| c.depth_percent == depth).collect();
    let one_row = s.contexts.len() * s.needle_offsets.len() == 1;
    let reference = cells.iter().find_map(|(_, c)| c.fidelity_reference.clone());
    let paired = s.precisions.len() > 1;
    let name_width = s.precisions.iter().map(|p| p.name.chars().count()).max().unwrap_or(0).max(9);
    let where_ = if one_row {
        let c = cells.first().map_or(0, |(_, c)| c.context_tokens);
        let offset = cells.first().and_then(|(_, c)| c.needle_offset).map_or_else(String::new, |o| format!(", needle offset {o}"));
        format!("{} tokens{offset}, ", tokens_label(c))
    } else {
        String::new()
    };
    let _ = writeln!(out, "\nper-layer selection recall at {where_}depth {depth} % (95 % Wilson interval)");
    if let Some(t) = model_title {
        let _ = writeln!(out, "and {t}");
    }
    if paired {
        let base = &s.precisions[0].name;
        let _ =
            writeln!(out, "paired with {base} on the same haystacks: recall difference, trials kept only by the variant / only by {base},");
        let _ = writeln!(out, "exact McNemar p and Holm-adjusted p");
    }
    let mut header = String::new();
    if !one_row {
        let _ = write!(header, "{:>8}  ", "context");
    }
    let _ = write!(header, "{:>6}  {:<name_width$}  {:>22}", "k", "precision", "recall");
    if model_title.is_some() {
        let _ = write!(header, "  {:>22}", "whole model");
    }
    if let Some(r) = &reference {
        let _ = write!(header, "  {:>12}", format!("sel. vs {r}"));
    }
    if paired {
        let _ = write!(header, "  {:>7}  {:>11}  {:>8}  {:>8}", "diff", "gained/lost", "p", "Holm p");
    }
    let _ = writeln!(out, "{}", header.trim_end());
    for (i, c) in cells {
        let mut line = String::new();
        if !one_row {
            let _ = write!(line, "{:>8}  ", row_label(c.context_tokens, c.needle_offset, s.needle_offsets.len()));
        }
        let interval = |r: f64, lo: f64, hi: f64| format!("{r:.3} [{lo:.3}, {hi:.3}]");
        let _ = write!(line, "{:>6}  {:<name_width$}  {:>22}", c.topk, c.precision, interval(c.recall, c.ci_low, c.ci_high));
        if model_title.is_some() {
            let model = match (c.model_recall, c.model_ci_low, c.model_ci_high) {
                (Some(r), Some(lo), Some(hi)) => interval(r, lo, hi),
                _ => "-".into(),
            };
            let _ = write!(line, "  {model:>22}");
        }
        if reference.is_some() {
            let _ = write!(line, "  {:>12}", c.selection_recall.map_or_else(|| "-".into(), |x| format!("{x:.4}")));
        }
        if paired && c.baseline.is_some() {
            let _ = write!(
                line,
                "  {:>+7.3}  {:>11}  {:>8}  {:>8}",
                c.recall_diff.unwrap_or(0.0),
                pairs_text(c.discordant_gained, c.discordant_lost),
                p_text(c.mcnemar_p),
                p_text(holm.precision[i])
            );
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    if paired {
        let _ = writeln!(out, "{}", multiple_comparison_note(holm.size));
    }
}

/// One table of a recall (`value`: recall and its interval) by context
/// (rows) and (k, precision) (columns), at one depth.
fn recall_table(
    out: &mut String,
    s: &Scenario,
    outcome: &SweepOutcome,
    depth: f64,
    title: &str,
    value: impl Fn(&CellResult) -> Option<(f64, f64, f64)>,
) {
    let series: Vec<(u64, &str)> = s.topks.iter().flat_map(|&k| s.precisions.iter().map(move |p| (k, p.name.as_str()))).collect();
    let by_offset = if s.needle_offsets.len() > 1 { "; rows: context @ needle offset" } else { "" };
    let _ = writeln!(out, "\n{title} at depth {depth} % (95 % Wilson interval{by_offset})");
    let _ = write!(out, "{:>8}", "context");
    for (k, p) in &series {
        let _ = write!(out, "  {:>22}", format!("k={k} {p}"));
    }
    out.push('\n');
    for &context in &s.contexts {
        for &offset in &s.needle_offsets {
            let _ = write!(out, "{:>8}", row_label(context, offset, s.needle_offsets.len()));
            for (k, p) in &series {
                let cell = outcome.cells.iter().find(|c| {
                    c.depth_percent == depth
                        && c.context_tokens == context
                        && c.needle_offset == offset
                        && c.topk == *k
                        && c.precision == *p
                });
                let text = cell.and_then(&value).map_or_else(String::new, |(r, lo, hi)| format!("{r:.3} [{lo:.3}, {hi:.3}]"));
                let _ = write!(out, "  {text:>22}");
            }
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_csv_row_has_as_many_columns_as_the_header() {
        let s = crate::config::check(crate::config::resolve(Default::default()).unwrap()).unwrap();
        let s = crate::config::Scenario {
            contexts: vec![4096],
            trials: 5,
            precisions: vec![
                crate::score::variant::PrecisionVariant::builtin("fp32").unwrap(),
                crate::score::variant::PrecisionVariant::builtin("bf16").unwrap(),
            ],
            ..s
        };
        let outcome = crate::run::sweep::run_sweep(&s, &|| {}).unwrap();
        let csv = summary_csv(&outcome.cells);
        // The quantile needle (the default) appends its twelve columns.
        assert_eq!(summary_header().split(',').count(), 67);
        let columns = csv.lines().next().unwrap().split(',').count();
        assert_eq!(columns, 79);
        assert!(csv.lines().next().unwrap().ends_with(",model_band_low,model_band_high,needle_capped,needle_margin,needle_margin_ci_low,needle_margin_ci_high,needle_margin_exceedance,needle_margin_unbounded,model_needle_margin,model_needle_margin_ci_low,model_needle_margin_ci_high,model_needle_margin_unbounded"));
        for line in csv.lines() {
            assert_eq!(line.split(',').count(), columns, "{line}");
        }
        // Every row has a field per column name (summary_columns zips them).
        let holm = HolmFamily::of(&outcome.cells);
        for (i, c) in outcome.cells.iter().enumerate() {
            assert_eq!(summary_row(c, (holm.precision[i], holm.topk[i])).len(), SUMMARY_COLUMNS.len());
        }
        let typed = summary_columns(&outcome.cells);
        assert_eq!(typed.len(), columns);
        assert!(typed.iter().all(|c| c.values.len() == outcome.cells.len()));
        // Quorum 1: the model keeps the needle whenever the simulated layer does.
        for c in &outcome.cells {
            assert_eq!(c.indexed_layers, Some(21));
            assert!(c.model_survived.unwrap() >= c.survived, "{c:?}");
        }
    }

    #[test]
    fn holm_family_holds_precision_and_k_pairs() {
        // Issue 17, statistics: one Holm family of every paired test; the
        // precision-paired values keep holm_adjusted_p's shape (one per cell).
        use crate::run::cell::{holm_adjusted_k_p, holm_adjusted_p};
        let s = crate::config::check(crate::config::resolve(Default::default()).unwrap()).unwrap();
        let s = crate::config::Scenario {
            contexts: vec![4096],
            topks: vec![32, 128],
            trials: 20,
            precisions: ["fp32", "fp4"].map(|p| crate::score::variant::PrecisionVariant::builtin(p).unwrap()).to_vec(),
            ..s
        };
        let cells = crate::run::sweep::run_sweep(&s, &|| {}).unwrap().cells;
        let (by_precision, by_k) = (holm_adjusted_p(&cells), holm_adjusted_k_p(&cells));
        assert_eq!((by_precision.len(), by_k.len()), (cells.len(), cells.len()));
        let raw: Vec<f64> =
            cells.iter().map(|c| c.mcnemar_p).chain(cells.iter().map(|c| c.k_mcnemar_p)).map(|p| p.unwrap_or(f64::NAN)).collect();
        let want = crate::base::stats::holm_adjust(&raw);
        for (i, c) in cells.iter().enumerate() {
            assert_eq!(by_precision[i].is_some(), c.mcnemar_p.is_some());
            assert_eq!(by_k[i].is_some(), c.k_mcnemar_p.is_some());
            assert_eq!(by_precision[i].unwrap_or(f64::NAN).to_bits(), want[i].to_bits());
            assert_eq!(by_k[i].unwrap_or(f64::NAN).to_bits(), want[cells.len() + i].to_bits());
            assert!(by_precision[i].zip(c.mcnemar_p).is_none_or(|(h, p)| h >= p));
        }
        assert_eq!(HolmFamily::of(&cells).size, 2 + 2, "fp4 at two k, and two precisions at k = 128");
        let table = format_table(&s, &crate::run::sweep::SweepOutcome { cells, effective: vec![] });
        assert!(table.contains(&multiple_comparison_note(4)), "{table}");
    }
}
