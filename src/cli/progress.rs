//! Progress of the binary's long commands, and the signals that stop a
//! sweep cleanly. On a terminal, a bar with elapsed time and ETA; anywhere
//! else (Slurm logs, `| tee`), a plain line every few seconds and no escape
//! codes. The library only calls back (`dsa_recall::base::observe::Observer`).

use dsa_recall::base::observe::{Observer, Standing};
use dsa_recall::ConfigError;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Seconds between plain progress lines; the environment variable
/// `DSA_RECALL_PROGRESS_EVERY` sets another period (a testing knob).
const PLAIN_EVERY: Duration = Duration::from_secs(10);

/// Trials per checkpoint chunk when `DSA_RECALL_CHUNK_TRIALS` is set (a
/// testing knob: tests use small chunks to interrupt a sweep between them).
pub fn chunk_trials_knob() -> Result<Option<u64>, ConfigError> {
    match std::env::var("DSA_RECALL_CHUNK_TRIALS") {
        Err(_) => Ok(None),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(ConfigError::new("DSA_RECALL_CHUNK_TRIALS", format!("{v:?}"), "a whole number of trials ≥ 1, or unset")),
        },
    }
}

fn plain_every() -> Result<Duration, ConfigError> {
    match std::env::var("DSA_RECALL_PROGRESS_EVERY") {
        Err(_) => Ok(PLAIN_EVERY),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => Ok(Duration::from_secs_f64(s)),
            _ => Err(ConfigError::new("DSA_RECALL_PROGRESS_EVERY", format!("{v:?}"), "seconds between progress lines, ≥ 0, or unset")),
        },
    }
}

/// What a sweep's progress counts, said once (in a log, with the first
/// progress line): the trials are not any one cell's.
const TRIALS_LEGEND: &str = "progress counts trials: each draws one haystack at one needle depth and scores it for every context, \
     k and precision of that depth; a depth's cells are written when its trials are done";

/// Estimated run time past which a sweep is announced with a warning.
const LONG_RUN: Duration = Duration::from_secs(3600);

/// The warning before a sweep estimated to take longer than [`LONG_RUN`]
/// on `threads` threads (None: shorter).
fn long_run_warning(rows: u64, threads: usize) -> Option<String> {
    let seconds = rows as f64 / (dsa_recall::run::plan::ROWS_PER_SECOND_PER_THREAD * threads.max(1) as f64);
    (seconds >= LONG_RUN.as_secs_f64()).then(|| {
        format!(
            "warning: this sweep scores about {rows:.1e} key rows, roughly {} on {threads} thread(s); fewer --trials \
             (intervals narrow only as 1/√trials), shorter --contexts, or fewer --precisions or --depths make it shorter, \
             --shard I/N splits it over machines, and Ctrl-C stops it for --resume",
            duration_label(Duration::from_secs_f64(seconds.min(1e12)))
        )
    })
}

/// `12 s`, `3 min 05 s`, `2 h 07 min`.
fn duration_label(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

/// Trials (and, for a sweep, cells) done out of a total, drawn as a bar or
/// printed as plain lines.
pub struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    every: Duration,
    last_line: Mutex<Instant>,
    printed: AtomicBool,
    trials_done: AtomicU64,
    /// Trials done before this run started (a resumed sweep's): not part of its rate.
    trials_before: AtomicU64,
    trials_total: AtomicU64,
    /// Whether cells are counted (a sweep) or not (one cell's trials).
    cells: bool,
    cells_done: AtomicUsize,
    cells_total: AtomicUsize,
    announce_resume: bool,
    /// A run of several simulations, each reporting its own start (a
    /// diagnosis: one per depth group, then the next experiment's): each
    /// line names the simulation, its percent and its ETA.
    parts: bool,
    part: AtomicUsize,
    part_started: Mutex<Instant>,
    /// Set by the signal handlers of a sweep, read before each chunk.
    interrupt: Option<&'static Interrupt>,
}

impl Progress {
    /// Progress of a sweep (`cells` true) or of one cell's trials; a sweep
    /// that resumes says first how much is done.
    pub fn new(cells: bool, announce_resume: bool) -> Result<Progress, ConfigError> {
        let every = plain_every()?;
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(0);
            // The bar takes what the text leaves of the terminal's width, so the line never wraps.
            let template = "{spinner} {pos}/{len} trials{msg} · {elapsed} elapsed · ETA {eta} {wide_bar}";
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar
        });
        let now = Instant::now();
        Ok(Progress {
            bar,
            started: now,
            every,
            last_line: Mutex::new(now),
            printed: AtomicBool::new(false),
            trials_done: AtomicU64::new(0),
            trials_before: AtomicU64::new(0),
            trials_total: AtomicU64::new(0),
            cells,
            cells_done: AtomicUsize::new(0),
            cells_total: AtomicUsize::new(0),
            announce_resume,
            parts: false,
            part: AtomicUsize::new(0),
            part_started: Mutex::new(now),
            interrupt: None,
        })
    }

    /// Asks `interrupt` whether to stop (a sweep's signals).
    pub fn stopped_by(mut self, interrupt: &'static Interrupt) -> Progress {
        self.interrupt = Some(interrupt);
        self
    }

    /// Progress of a run made of several simulations (see `parts`).
    pub fn in_parts(mut self) -> Progress {
        self.parts = true;
        self
    }

    fn begin(&self, s: &Standing) {
        if self.parts {
            self.part.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut started) = self.part_started.lock() {
                *started = Instant::now();
            }
        }
        if self.cells {
            if let Some(warning) = long_run_warning(s.rows_to_score, rayon::current_num_threads()) {
                eprintln!("{warning}");
            }
            if self.bar.is_some() {
                eprintln!("{TRIALS_LEGEND}");
            }
        }
        if self.announce_resume {
            eprintln!(
                "resuming: {} of {} trials done ({} of {} cells complete)",
                s.trials_done, s.trials_total, s.cells_done, s.cells_total
            );
        }
        self.trials_done.store(s.trials_done, Ordering::Relaxed);
        self.trials_before.store(s.trials_done, Ordering::Relaxed);
        self.trials_total.store(s.trials_total, Ordering::Relaxed);
        self.cells_done.store(s.cells_done, Ordering::Relaxed);
        self.cells_total.store(s.cells_total, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.set_message(self.cells_label(" · "));
            bar.set_length(s.trials_total);
            bar.set_position(s.trials_done);
            // Trials done before this run must not count in its rate.
            bar.reset_eta();
            bar.enable_steady_tick(Duration::from_millis(200));
        }
    }

    fn cells_label(&self, lead: &str) -> String {
        if self.parts {
            format!("{lead}simulation {}", self.part.load(Ordering::Relaxed))
        } else if self.cells {
            format!("{lead}{}/{} cells written", self.cells_done.load(Ordering::Relaxed), self.cells_total.load(Ordering::Relaxed))
        } else {
            String::new()
        }
    }

    /// One trial finished.
    pub fn inc(&self) {
        let done = self.trials_done.fetch_add(1, Ordering::Relaxed) + 1;
        match &self.bar {
            Some(bar) => bar.inc(1),
            None => self.maybe_line(done),
        }
    }

    fn set_cells(&self, done: usize) {
        self.cells_done.store(done, Ordering::Relaxed);
        if let Some(bar) = &self.bar {
            bar.set_message(self.cells_label(" · "));
        }
    }

    /// Prints a plain line when the period has passed since the last one.
    fn maybe_line(&self, done: u64) {
        let Ok(mut last) = self.last_line.try_lock() else { return };
        let now = Instant::now();
        if now.duration_since(*last) < self.every {
            return;
        }
        *last = now;
        if !self.printed.swap(true, Ordering::Relaxed) && self.cells {
            eprintln!("{TRIALS_LEGEND}");
        }
        eprintln!("{}", self.line(done, now));
    }

    /// `progress: 40 % (1200/3000 trials, 3/12 cells written) · 12 s elapsed · ETA 18 s`;
    /// in parts, `progress: simulation 3: 40 % (1200/3000 trials) · 1 min 02 s elapsed · ETA of this simulation 18 s`.
    fn line(&self, done: u64, now: Instant) -> String {
        let total = self.trials_total.load(Ordering::Relaxed);
        let before = self.trials_before.load(Ordering::Relaxed);
        let elapsed = now.duration_since(self.started);
        // A part's rate is that of its own trials, timed from its start.
        let part_elapsed = self.part_started.lock().map_or(elapsed, |started| now.duration_since(*started));
        let rate_over = if self.parts { part_elapsed } else { elapsed };
        let percent = (done * 100).checked_div(total).unwrap_or(100);
        let ran = done.saturating_sub(before);
        let eta =
            if ran == 0 { "?".to_string() } else { duration_label(rate_over.mul_f64(total.saturating_sub(done) as f64 / ran as f64)) };
        if self.parts {
            let part = self.part.load(Ordering::Relaxed);
            return format!(
                "progress: simulation {part}: {percent} % ({done}/{total} trials) · {} elapsed · ETA of this simulation {eta}",
                duration_label(elapsed)
            );
        }
        format!("progress: {percent} % ({done}/{total} trials{}) · {} elapsed · ETA {eta}", self.cells_label(", "), duration_label(elapsed))
    }

    /// Clears the bar; in plain mode, a last line when earlier ones were
    /// printed (so that a log shows the end).
    pub fn finish(&self) {
        match &self.bar {
            Some(bar) => bar.finish_and_clear(),
            None if self.printed.load(Ordering::Relaxed) => {
                eprintln!("{}", self.line(self.trials_done.load(Ordering::Relaxed), Instant::now()))
            }
            None => {}
        }
    }
}

impl Observer for Progress {
    fn started(&self, standing: &Standing) {
        self.begin(standing);
    }

    fn trial_done(&self) {
        self.inc();
    }

    fn cells_written(&self, cells_done: usize) {
        self.set_cells(cells_done);
    }

    fn stop_requested(&self) -> bool {
        self.interrupt.is_some_and(Interrupt::requested)
    }
}

/// A spinner that names the step in progress (a trial dump has steps, not
/// trials); in plain mode a line per step once the period has passed.
pub struct Steps {
    bar: Option<ProgressBar>,
    started: Instant,
    every: Duration,
    last_line: Mutex<Instant>,
}

impl Steps {
    pub fn new() -> Result<Steps, ConfigError> {
        let every = plain_every()?;
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} · {elapsed} elapsed") {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        let now = Instant::now();
        Ok(Steps { bar, started: now, every, last_line: Mutex::new(now) })
    }

    pub fn step(&self, what: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(what.to_string()),
            None => {
                let Ok(mut last) = self.last_line.lock() else { return };
                let now = Instant::now();
                if now.duration_since(*last) >= self.every {
                    *last = now;
                    eprintln!("progress: {what} · {} elapsed", duration_label(now.duration_since(self.started)));
                }
            }
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// SIGINT and SIGTERM during a sweep: the first asks it to stop after the
/// chunk of trials in flight (finished work stays on disk), a second ends
/// the process at once.
pub struct Interrupt {
    /// The exit code the first signal asks for (130 SIGINT, 143 SIGTERM), 0 before any.
    code: Arc<AtomicUsize>,
}

static INTERRUPT: OnceLock<Interrupt> = OnceLock::new();

impl Interrupt {
    /// Installs the handlers (once) and returns the flag they set.
    pub fn catch() -> &'static Interrupt {
        INTERRUPT.get_or_init(|| {
            use signal_hook::consts::{SIGINT, SIGTERM};
            use signal_hook::flag;
            let code = Arc::new(AtomicUsize::new(0));
            let armed = Arc::new(AtomicBool::new(false));
            for (signal, exit) in [(SIGINT, 130), (SIGTERM, 143)] {
                // The shutdown goes first: the first signal arms it, the second fires it.
                // Failing to install leaves the default (die at once), which is safe.
                let _ = flag::register_conditional_shutdown(signal, exit, Arc::clone(&armed));
                let _ = flag::register(signal, Arc::clone(&armed));
                let _ = flag::register_usize(signal, Arc::clone(&code), exit as usize);
            }
            Interrupt { code }
        })
    }

    pub fn requested(&self) -> bool {
        self.code.load(Ordering::Relaxed) != 0
    }

    /// The exit code of an interrupted sweep: 128 + the signal's number.
    pub fn exit_code() -> u8 {
        INTERRUPT.get().map_or(0, |i| i.code.load(Ordering::Relaxed) as u8).max(130)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_say_percent_counts_and_times() {
        let p = Progress::new(true, false).unwrap();
        p.begin(&Standing { trials_done: 200, trials_total: 1000, cells_done: 2, cells_total: 10, rows_to_score: 0 });
        let start = p.started;
        assert_eq!(
            p.line(600, start + Duration::from_secs(8)),
            "progress: 60 % (600/1000 trials, 2/10 cells written) · 8 s elapsed · ETA 8 s",
            "400 trials in 8 s (the 200 resumed ones do not count in the rate) leave 400 for 8 s"
        );
        assert_eq!(duration_label(Duration::from_secs(125)), "2 min 05 s");
        let p = Progress::new(false, false).unwrap().in_parts();
        p.begin(&Standing { trials_total: 100, ..Standing::default() });
        p.begin(&Standing { trials_total: 400, ..Standing::default() });
        let part_start = *p.part_started.lock().unwrap();
        let line = p.line(100, part_start + Duration::from_secs(5));
        assert!(line.starts_with("progress: simulation 2: 25 % (100/400 trials) · "), "{line}");
        assert!(line.ends_with("ETA of this simulation 15 s"), "100 trials in this simulation's 5 s leave 300 for 15 s: {line}");
        assert_eq!(duration_label(Duration::from_secs(7260)), "2 h 01 min");
    }

    #[test]
    fn a_long_sweep_is_announced_with_what_shortens_it() {
        let hour = dsa_recall::run::plan::ROWS_PER_SECOND_PER_THREAD * 3600.0;
        assert!(long_run_warning((0.9 * hour) as u64, 1).is_none());
        assert!(long_run_warning((1.5 * hour) as u64, 2).is_none(), "two threads halve it");
        let w = long_run_warning((4.0 * hour) as u64, 2).unwrap();
        assert!(w.contains("roughly 2 h 00 min on 2 thread(s)") && w.contains("--trials") && w.contains("--shard"), "{w}");
    }
}
