//! The Slurm array script of docs/CLUSTER.md, run as written except for a
//! small sweep, as a local array: every task with its SLURM_ARRAY_TASK_ID,
//! one task requeued (its `--resume` branch), then the merge line. The
//! merged results equal an unsharded sweep's byte for byte. Slurm itself is
//! not started here (docs/CLUSTER.md says so).

use crate::common::bin;
use std::path::Path;
use std::process::Command;

/// The script and the merge line, from the "Slurm job array" section.
fn script_blocks() -> (String, String) {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/CLUSTER.md")).unwrap();
    let section = &doc[doc.find("### Slurm job array").expect("the Slurm section")..];
    let mut blocks = section.split("```sh\n").skip(1).map(|b| b[..b.find("```").unwrap()].to_string());
    (blocks.next().unwrap(), blocks.next().unwrap())
}

#[test]
fn the_documented_slurm_array_script_shards_and_merges_to_the_unsharded_sweep() {
    let (script, merge) = script_blocks();
    assert!(script.contains("--shard \"${SLURM_ARRAY_TASK_ID}/${N}\"") && script.contains("--resume"), "{script}");
    // The same script with a sweep small enough for a test.
    let small = script
        .replace("N=16", "N=3")
        .replace("--contexts 1K..1M --depths 0..100:10", "--contexts 2K,4K --depths 25,75")
        .replace("--topk 512,1024 --precisions bf16,fp8,fp4 --trials 1000", "--topk 512 --precisions bf16,fp8 --trials 6");
    assert_ne!(small, script, "the script's sweep line changed: update this test");
    let dir = tempfile::tempdir().unwrap();
    let exe = assert_cmd::cargo::cargo_bin!("dsa-recall");
    let path = format!("{}:{}", exe.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let run = |text: &str, task: &str| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(text)
            .current_dir(dir.path())
            .env("PATH", &path)
            .env("SLURM_ARRAY_TASK_ID", task)
            .env("SLURM_CPUS_PER_TASK", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "task {task}: {}", String::from_utf8_lossy(&out.stderr));
    };
    for task in ["1", "2", "3", "2"] {
        run(&small, task);
    }
    run(&merge, "0");
    let merged = std::fs::read(dir.path().join("sweeps/flash-fp8/merged/results.jsonl")).unwrap();
    let whole = dir.path().join("whole");
    bin()
        .args(["sweep", "--preset", "deepseek-v4-flash", "--contexts", "2K,4K", "--depths", "25,75", "--topk", "512"])
        .args(["--precisions", "bf16,fp8", "--trials", "6", "--seed", "42", "--threads", "1", "--out"])
        .arg(&whole)
        .assert()
        .success();
    assert!(merged == std::fs::read(whole.join("results.jsonl")).unwrap(), "merged shards differ from the unsharded sweep");
}
