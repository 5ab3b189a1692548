//! `diagnose --out DIR`: the diagnosis as files — `diagnosis.json` (what
//! `--json` prints), the chart of likelihood by hypothesis
//! (`likelihood.png`/`.svg`) and `report.html` with a "Diagnosis" section.
//! Everything is computed before this is called; a failure while writing
//! removes what was written.

use crate::base::files::write_file;
use crate::base::units::tokens_label;
use crate::diagnose::observations::{Observation, Observations};
use crate::diagnose::{Diagnosis, Reading};
use crate::error::Error;
use crate::report::chart::likelihood::{render_likelihood, LikelihoodBar, LikelihoodChart, RowRecall};
use crate::report::chart::ImageFormat;
use crate::report::html::{escape, page_start};
use std::fmt::Write as _;
use std::path::Path;

pub const DIAGNOSIS_FILE: &str = "diagnosis.json";
/// The chart's file name without its extension.
pub const LIKELIHOOD_CHART: &str = "likelihood";
pub use crate::report::outputs::REPORT_FILE;

/// Leaders whose simulated recall the chart and the report show per row.
pub const LEADERS_SHOWN: usize = 3;

/// A row's short label: context · depth · k · configuration (· layer).
pub fn row_label(r: &Observation) -> String {
    let mut l = format!("{} · {} % · k {} · {}", tokens_label(r.context_tokens), r.depth_percent, r.topk, r.label);
    if let Some(layer) = r.layer {
        let _ = write!(l, " · layer {layer}");
    }
    l
}

/// A row's label on the chart: context, then depth and k, then the configuration (and layer).
fn chart_label(r: &Observation) -> String {
    let mut l = format!("{}\n{} % · k {}\n{}", tokens_label(r.context_tokens), r.depth_percent, r.topk, r.label);
    if let Some(layer) = r.layer {
        let _ = write!(l, " · layer {layer}");
    }
    l
}

/// The chart of `d` over the rows of `obs` (the rows `d` was computed on).
pub fn likelihood_chart(d: &Diagnosis, obs: &Observations) -> LikelihoodChart {
    let leaders: Vec<_> = d.ranking.iter().take(LEADERS_SHOWN).collect();
    LikelihoodChart {
        title: format!("Diagnosis · {}", d.observations),
        subtitle: format!(
            "{} rows against {} candidates · {} recall · {} simulated trials per cell · uniform prior",
            obs.rows.len(),
            d.ranking.len(),
            if d.reading == Reading::Model { "whole-model" } else { "per-layer" },
            d.trials
        ),
        bars: d
            .ranking
            .iter()
            .map(|r| LikelihoodBar { hypothesis: r.hypothesis.clone(), log10_bayes_factor: r.log10_bayes_factor, posterior: r.posterior })
            .collect(),
        note: (!d.not_applicable.is_empty())
            .then(|| format!("not applicable (change no observed configuration): {}", d.not_applicable.join(", "))),
        leaders: leaders.iter().map(|r| r.hypothesis.clone()).collect(),
        rows: obs
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| RowRecall {
                label: chart_label(r),
                found: r.found,
                total: r.total,
                simulated: leaders.iter().map(|l| l.recalls.get(i).copied().unwrap_or(f64::NAN)).collect(),
            })
            .collect(),
    }
}

fn fmt_posterior(p: f64) -> String {
    if p >= 0.0001 {
        format!("{p:.4}")
    } else {
        format!("{p:.1e}")
    }
}

/// The "Diagnosis" section: ranking, chart, next experiment, rows.
/// `chart` is the embedded image: (MIME type, bytes), if one was drawn.
pub fn diagnosis_section(d: &Diagnosis, obs: &Observations, chart: Option<(&str, &[u8])>) -> String {
    let mut h = String::new();
    let _ = writeln!(h, "<h2 id=\"diagnosis\">Diagnosis</h2>");
    let _ = writeln!(
        h,
        "<p class=\"meta\">{} · {} rows · {} candidates · {} recall · {} simulated trials per cell · candidate posteriors under a uniform prior, class posteriors under one uniform over the classes (docs/OBSERVATIONS.md)</p>",
        escape(&d.observations),
        obs.rows.len(),
        d.ranking.len(),
        if d.reading == Reading::Model { "whole-model" } else { "per-layer" },
        d.trials
    );
    let _ = writeln!(h, "<p><b>Verdict:</b> {}</p>", escape(&d.verdict.text));
    if d.needle_multipliers.len() > 1 {
        let list = d.needle_multipliers.iter().map(|m| format!("{m}")).collect::<Vec<_>>().join(", ");
        let _ = writeln!(
            h,
            "<p>How hard the tested needle was is not known: each candidate's likelihood is averaged over {} × {list} (a uniform prior on them); the last column gives the multiple that fits it best.</p>",
            escape(&d.needle_knob)
        );
    }
    push_ranking_tables(&mut h, d);
    if !d.unexplained.is_empty() {
        let _ = writeln!(h, "<p>Rows {} cannot explain (two-sided p &lt; 0.01):</p><ul>", escape(&d.ranking[0].hypothesis));
        for u in &d.unexplained {
            let _ = writeln!(
                h,
                "<li>line {}: {} tokens, depth {} %, k {}, {}: {} of {} found where it gives recall {:.3} (p {:.1e})</li>",
                u.line,
                tokens_label(u.context_tokens),
                u.depth_percent,
                u.topk,
                escape(&u.config),
                u.found,
                u.total,
                u.recall,
                u.p_value
            );
        }
        h.push_str("</ul>\n");
    }
    if !d.not_applicable.is_empty() {
        let _ = writeln!(
            h,
            "<p>Not applicable to any observed configuration (the same as healthy, left out): {}.</p>",
            escape(&d.not_applicable.join(", "))
        );
    }
    if let Some((mime, bytes)) = chart {
        let _ = writeln!(
            h,
            "<figure><img alt=\"likelihood by hypothesis\" src=\"data:{mime};base64,{}\"><figcaption><b>Likelihood by hypothesis</b> · one bar per candidate, best at the top and longest: its support, the log10 likelihood counted from up to 30 below the best's (a bar 1.3 shorter is 20:1 against; candidates further behind have none), with the posterior and the log10 Bayes factor against the best printed by each bar. Below: each row's observed recall with its Wilson 95 % interval (black) beside the recall the top {} hypotheses simulate for it; what every row shares is named once above them.</figcaption></figure>",
            crate::report::chart::font::base64(bytes),
            d.ranking.len().min(LEADERS_SHOWN)
        );
    }
    push_next_experiment(&mut h, d);
    push_observations_table(&mut h, d, obs);
    for note in &d.notes {
        let _ = writeln!(h, "<p>{}</p>", escape(note));
    }
    h
}

/// Each observed row beside the recall the leaders simulate for it.
fn push_observations_table(h: &mut String, d: &Diagnosis, obs: &Observations) {
    let _ = writeln!(h, "<h3>Observations against the leaders</h3>");
    let leaders: Vec<_> = d.ranking.iter().take(LEADERS_SHOWN).collect();
    h.push_str("<div class=\"scroll\"><table><tr><th>line</th><th>context</th><th>depth %</th><th>k</th><th class=\"l\">configuration</th><th>layer</th><th>found / total</th><th>observed [Wilson 95 %]</th>");
    for l in &leaders {
        let _ = write!(h, "<th>{}</th>", escape(&l.hypothesis));
    }
    h.push_str("</tr>\n");
    for (i, r) in obs.rows.iter().enumerate() {
        let (lo, hi) = crate::base::stats::wilson_interval(r.found, r.total, crate::base::stats::Z95);
        let config = if r.label == r.config { escape(&r.config) } else { format!("{} = {}", escape(&r.label), escape(&r.config)) };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{config}</td><td>{}</td><td>{} / {}</td><td>{:.3} [{:.3}, {:.3}]</td>",
            r.line,
            tokens_label(r.context_tokens),
            r.depth_percent,
            r.topk,
            r.layer.map_or("—".to_string(), |l| l.to_string()),
            r.found,
            r.total,
            r.found as f64 / r.total as f64,
            lo,
            hi
        );
        for l in &leaders {
            let p = l.recalls.get(i).copied().unwrap_or(f64::NAN);
            let class = if p < lo || p > hi { " class=\"lost\"" } else { "" };
            let _ = write!(h, "<td{class}>{p:.3}</td>");
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table></div>\n<p>Simulated recalls outside the observed interval are in red. Leader columns are in rank order.</p>\n");
}

/// The "Next experiment" subsection.
fn push_next_experiment(h: &mut String, d: &Diagnosis) {
    let _ = writeln!(h, "<h3>Next experiment</h3>");
    match &d.next {
        None => h.push_str("<p>Not sought (<code>--no-next</code>, or fewer than two candidates).</p>\n"),
        Some(n) if n.information_per_prompt < 1e-6 => {
            let _ = writeln!(
                h,
                "<p>None in the grid: {} and {} predict the same recall in every cell simulated. A measurement of another kind is needed to separate them.</p>",
                escape(&n.leaders[0]),
                escape(&n.leaders[1])
            );
        }
        Some(n) => {
            let _ = writeln!(
                h,
                "<p>{} {} predicts recall {:.3}, {} {:.3}; {}.</p>",
                next_cell(n),
                escape(&n.leaders[0]),
                n.leader_recalls[0],
                escape(&n.leaders[1]),
                n.leader_recalls[1],
                match n.prompts_for_20_to_1 {
                    Some(p) => format!("{p} prompt(s) for 20:1 odds between them, the leader true"),
                    None => "this cell does not tell them apart".into(),
                }
            );
        }
    }
    if let Some(n) = &d.next_capture {
        let _ = writeln!(
            h,
            "<p>Or a per-layer capture of the indexer's top-k (sglang <code>--enable-return-indexer-topk</code>, then <code>dsa-recall observe</code>), one layer's selection per prompt: {} {} selects the needle with probability {:.3}, {} {:.3}.</p>",
            next_cell(n),
            escape(&n.leaders[0]),
            n.leader_recalls[0],
            escape(&n.leaders[1]),
            n.leader_recalls[1],
        );
    }
}

/// A next experiment's cell in bold, how it leaves the observed grid, and
/// what one prompt there carries.
fn next_cell(n: &crate::diagnose::NextExperiment) -> String {
    let beyond = if n.beyond_observed.is_empty() {
        String::new()
    } else {
        format!(" (outside the observed grid: {})", escape(&n.beyond_observed.join("; ")))
    };
    format!(
        "<b>{} tokens, needle depth {} %, k {}, {}</b>{beyond}: {} nats per prompt.",
        tokens_label(n.context_tokens),
        n.depth_percent,
        n.topk,
        escape(&n.config),
        crate::diagnose::information_text(n.information_per_prompt)
    )
}

/// The class table and the candidates' ranking.
fn push_ranking_tables(h: &mut String, d: &Diagnosis) {
    h.push_str("<table><tr><th class=\"l\">class</th><th>posterior</th><th>log10 BF</th><th class=\"l\">best candidate</th><th class=\"l\">what it means</th></tr>\n");
    for c in &d.classes {
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{:.2}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
            c.class.name(),
            fmt_posterior(c.posterior),
            c.log10_bayes_factor,
            escape(&c.best),
            escape(&c.about)
        );
    }
    h.push_str("</table>\n");
    h.push_str("<table><tr><th>rank</th><th class=\"l\">hypothesis</th><th class=\"l\">class</th><th>log-likelihood</th><th>posterior</th><th>log10 BF</th><th>rows changed</th><th>needle ×</th></tr>\n");
    for (i, r) in d.ranking.iter().enumerate() {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{:.3}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td></tr>",
            i + 1,
            escape(&r.hypothesis),
            r.class.name(),
            r.log_likelihood,
            fmt_posterior(r.posterior),
            r.log10_bayes_factor,
            r.rows_changed,
            r.needle_multiplier
        );
    }
    h.push_str("</table>\n");
}

/// The whole report page of a diagnosis.
pub fn report_html(d: &Diagnosis, obs: &Observations, chart: Option<(&str, &[u8])>) -> String {
    let mut h = page_start(&format!("dsa-recall diagnosis · {}", d.observations));
    let _ = writeln!(h, "<h1>dsa-recall diagnosis · {}</h1>", escape(&d.observations));
    let _ = writeln!(
        h,
        "<p>Synthetic model: each hypothesis's recall is simulated from the scenario's knobs, not measured on a real checkpoint. A ranking says which of the catalogue's faults best explains the counts, not that the fault is present; a fault outside the catalogue (docs/HYPOTHESES.md) cannot be ranked.</p>"
    );
    h.push_str(&diagnosis_section(d, obs, chart));
    h.push_str("</body></html>\n");
    h
}

/// Writes `diagnosis.json`, the chart in each of `formats` and
/// `report.html` into `dir` (which the caller has prepared); returns the
/// file names. On failure, the files written so far are removed.
pub fn write_diagnosis(dir: &Path, d: &Diagnosis, obs: &Observations, formats: &[ImageFormat]) -> Result<Vec<String>, Error> {
    let mut written: Vec<String> = Vec::new();
    let result = (|| -> Result<(), Error> {
        let chart = likelihood_chart(d, obs);
        let mut embedded: Option<(&str, Vec<u8>)> = None;
        for &f in formats {
            let name = format!("{LIKELIHOOD_CHART}.{}", f.extension());
            let path = dir.join(&name);
            render_likelihood(&chart, &path)?;
            written.push(name);
            // A PNG is embedded where there is one; an SVG otherwise.
            if embedded.is_none() || f == ImageFormat::Png {
                let bytes = std::fs::read(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
                embedded = Some((if f == ImageFormat::Png { "image/png" } else { "image/svg+xml" }, bytes));
            }
        }
        // Serializing plain numbers and strings cannot fail.
        let json = serde_json::to_string_pretty(d).unwrap_or_default() + "\n";
        write_file(&dir.join(DIAGNOSIS_FILE), json.as_bytes())?;
        written.push(DIAGNOSIS_FILE.into());
        let html = report_html(d, obs, embedded.as_ref().map(|(m, b)| (*m, b.as_slice())));
        write_file(&dir.join(REPORT_FILE), html.as_bytes())?;
        written.push(REPORT_FILE.into());
        Ok(())
    })();
    match result {
        Ok(()) => Ok(written),
        Err(e) => {
            for name in &written {
                let _ = std::fs::remove_file(dir.join(name));
            }
            Err(e)
        }
    }
}
