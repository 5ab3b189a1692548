//! The files of a knob sweep's top directory (`sweep --vary`,
//! [`crate::run::vary`]): recall against the knob's value per context, and
//! a `report.html` with that chart, the table and a link to each value's
//! own report. Each value's directory is an ordinary sweep directory.

use std::fmt::Write as _;
use std::path::Path;

use crate::base::files::write_file;
use crate::base::units::tokens_label;
use crate::config::Scenario;
use crate::error::Error;
use crate::report::chart::knob::{render_knob, KnobChart, KnobPanel, KnobSeries};
use crate::report::directory::{plot_dir, write_sweep};
use crate::report::html::{escape, page_start};
use crate::report::meta::{Grid, PlotOptions};
use crate::report::outputs::REPORT_FILE;
use crate::run::store;
use crate::run::sweep::SweepOutcome;
use crate::run::vary::{format_table, read_vary, VaryManifest, VaryOutcome};

/// Panels of the knob chart: at most this many contexts.
const MAX_PANELS: usize = 4;

/// The chart's file stem: `recall_vs_needle_strength`.
pub fn chart_stem(field: &str) -> String {
    format!("recall_vs_{}", field.replace('.', "_"))
}

/// Finishes one value's sweep directory as `sweep` finishes any: its
/// derived files, charts, report and final manifest.
pub fn complete_value(dir: &Path, s: &Scenario, outcome: &SweepOutcome, opts: &PlotOptions) -> Result<(), Error> {
    let files = write_sweep(dir, s, outcome, opts)?;
    store::finish(dir, s, None, outcome, &files)
}

/// Up to [`MAX_PANELS`] contexts spread over the sweep's, the longest always
/// among them.
fn panel_contexts(contexts: &[u64]) -> Vec<u64> {
    if contexts.len() <= MAX_PANELS {
        return contexts.to_vec();
    }
    let last = contexts.len() - 1;
    let mut picked: Vec<u64> = (0..MAX_PANELS).map(|i| contexts[i * last / (MAX_PANELS - 1)]).collect();
    picked.dedup();
    picked
}

/// The knob chart of `outcome` at the depth nearest 50 %.
pub fn knob_chart(outcome: &VaryOutcome) -> Option<KnobChart> {
    let (first, first_sweep) = outcome.sweeps.first()?;
    let grid = Grid::of(&first_sweep.cells);
    let depth = grid.detail_depth();
    let offset = first.needle_offsets.first().copied().flatten();
    let whole = first_sweep.cells.iter().any(|c| c.model_recall.is_some());
    let axis = &outcome.axis;
    let mut panels = Vec::new();
    for &context in &panel_contexts(&grid.contexts) {
        let mut series = Vec::new();
        for (ki, &k) in grid.topks.iter().enumerate() {
            for (pi, p) in grid.precisions.iter().enumerate() {
                let color = ki * grid.precisions.len() + pi;
                let label = format!("k={k} {p}");
                let mut layer = Vec::new();
                let mut model = Vec::new();
                for (i, (_, sweep)) in outcome.sweeps.iter().enumerate() {
                    let cell = sweep.cells.iter().find(|c| {
                        c.depth_percent == depth
                            && c.context_tokens == context
                            && c.topk == k
                            && &c.precision == p
                            && (c.needle_offset == offset || first.needle_offsets.len() == 1)
                    })?;
                    let v = axis.values[i];
                    layer.push((v, cell.recall, cell.ci_low, cell.ci_high));
                    if let (Some(m), Some(lo), Some(hi)) = (cell.model_recall, cell.model_ci_low, cell.model_ci_high) {
                        model.push((v, m, lo, hi));
                    }
                }
                if whole && model.len() == layer.len() {
                    series.push(KnobSeries { label: label.clone(), color, points: model, whole_model: true });
                }
                series.push(KnobSeries { label, color, points: layer, whole_model: false });
            }
        }
        panels.push(KnobPanel { title: tokens_label(context), series });
    }
    let offset_note = match (first.needle_offsets.len(), offset) {
        (n, Some(o)) if n > 1 => format!(" · needle offset {o}"),
        _ => String::new(),
    };
    Some(KnobChart {
        title: format!("Recall vs {}", axis.field),
        subtitle: format!(
            "{} · depth {depth} %{offset_note} · {} trials per cell, seed {} (the same haystacks at every value) · {} of {} contexts",
            first.preset,
            first.trials,
            first.seed,
            panels.len(),
            grid.contexts.len()
        ),
        x_label: axis.label(),
        y_label: "recall".into(),
        key: None,
        panels,
    })
}

/// Writes the top directory's chart(s) and `report.html`; returns their names.
pub fn write_vary(dir: &Path, outcome: &VaryOutcome, opts: &PlotOptions) -> Result<Vec<String>, Error> {
    let mut files = Vec::new();
    let chart = knob_chart(outcome);
    if let Some(chart) = &chart {
        for format in &opts.formats {
            let name = format!("{}.{}", chart_stem(&outcome.axis.field), format.extension());
            render_knob(chart, &dir.join(&name), 1600, 900).map_err(|e| Error::Chart(format!("{name}: {e}")))?;
            files.push(name);
        }
    }
    let html = report_html(dir, outcome, &files)?;
    write_file(&dir.join(REPORT_FILE), html.as_bytes())?;
    files.push(REPORT_FILE.to_string());
    Ok(files)
}

fn report_html(dir: &Path, outcome: &VaryOutcome, charts: &[String]) -> Result<String, Error> {
    let axis = &outcome.axis;
    let mut h = page_start(&format!("dsa-recall · {}", axis.field));
    let _ = writeln!(h, "<h1>dsa-recall sweep over {}</h1>", escape(&axis.label()));
    let _ = writeln!(
        h,
        "<p class=\"meta\">values {} · each value is a whole sweep on the same seed, so the haystacks are the same and neighbouring values differ by the knob alone.</p>",
        escape(&axis.values_text())
    );
    for name in charts {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let kind = if name.ends_with(".svg") { "image/svg+xml" } else { "image/png" };
        let _ = writeln!(
            h,
            "<figure><img alt=\"recall against {}\" src=\"data:{kind};base64,{}\"></figure>",
            escape(&axis.field),
            crate::report::chart::font::base64(&bytes)
        );
    }
    let _ = writeln!(h, "<h2>Tables</h2><pre>{}</pre>", escape(&format_table(outcome)));
    let _ = writeln!(h, "<h2>Each value's sweep</h2><ul>");
    for i in 0..axis.values.len() {
        let name = axis.dir_name(i);
        let _ = writeln!(h, "<li><a href=\"{0}/{REPORT_FILE}\">{0}</a></li>", escape(&name));
    }
    let _ = writeln!(h, "</ul></body></html>");
    Ok(h)
}

/// `plot` on a knob sweep: every value's directory, then the top files.
pub fn plot_vary(dir: &Path, m: &VaryManifest, opts: &PlotOptions) -> Result<Vec<String>, Error> {
    let mut files = Vec::new();
    for name in &m.sweeps {
        files.extend(plot_dir(&dir.join(name), opts)?.into_iter().map(|f| format!("{name}/{f}")));
    }
    let outcome = read_vary(dir, m)?;
    files.extend(write_vary(dir, &outcome, opts)?);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_spread_over_the_contexts_and_keep_the_longest() {
        assert_eq!(panel_contexts(&[1, 2, 3]), vec![1, 2, 3]);
        assert_eq!(panel_contexts(&[1, 2, 3, 4, 5, 6, 7, 8]), vec![1, 3, 5, 8]);
        assert_eq!(chart_stem("needle.strength"), "recall_vs_needle_strength");
    }
}
