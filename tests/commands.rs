//! Tests of the commands, mostly through the `dsa-recall` binary, one
//! module per file of tests/ (see tests/library.rs).

#[path = "common/mod.rs"]
mod common;

#[path = "agreement.rs"]
mod agreement;
#[path = "calibrate.rs"]
mod calibrate;
#[path = "capture.rs"]
mod capture;
#[path = "charts.rs"]
mod charts;
#[path = "check.rs"]
mod check;
#[path = "cli.rs"]
mod cli;
#[path = "cluster_script.rs"]
mod cluster_script;
#[path = "diagnose.rs"]
mod diagnose;
#[path = "durability.rs"]
mod durability;
#[path = "fit.rs"]
mod fit;
#[path = "habits.rs"]
mod habits;
#[path = "hostile.rs"]
mod hostile;
#[path = "hostile_messages.rs"]
mod hostile_messages;
#[path = "io_safety.rs"]
mod io_safety;
#[path = "quantize_cli.rs"]
mod quantize_cli;
#[path = "ties.rs"]
mod ties;
#[path = "vary.rs"]
mod vary;
