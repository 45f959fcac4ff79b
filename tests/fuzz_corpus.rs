//! The fuzz targets' corpus as regression tests: every file of `fuzz/corpus/TARGET/` (the
//! seeds and what `bench/run fuzz` kept) and of `fuzz/regressions/TARGET/` (inputs that once
//! crashed) goes through the target's body (`kubecast::fuzz`), which must neither panic nor
//! break the property it checks. No long search here: `bench/run fuzz SECONDS` does that.

use std::path::Path;

#[test]
fn every_corpus_and_regression_input_passes_its_fuzz_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut failures = Vec::new();
    let mut ran = 0;
    for (name, target) in kubecast::fuzz::TARGETS {
        let mut seeds = 0;
        for dir in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir).join(name)) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let data =
                    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                if std::panic::catch_unwind(|| target(&data)).is_err() {
                    failures.push(path.display().to_string());
                }
                seeds += 1;
            }
        }
        assert!(seeds > 0, "fuzz/corpus/{name}/ holds no input");
        ran += seeds;
    }
    assert!(
        failures.is_empty(),
        "inputs that fail their target:\n{}",
        failures.join("\n")
    );
    println!(
        "{ran} inputs through {} targets",
        kubecast::fuzz::TARGETS.len()
    );
}
