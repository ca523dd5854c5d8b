//! Every kept input of each fuzz target (`fuzz/corpus/<target>/`: the seeds, and each crash
//! the fuzzer found, once fixed) runs through the target's checks.

use std::path::Path;

fn run_all(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        if let Err(panic) = std::panic::catch_unwind(|| check(&data)) {
            panic!("{} fails: {panic:?}", path.display());
        }
        n += 1;
    }
    assert!(n > 0, "no inputs in {}", dir.display());
}

#[test]
fn every_kept_frame_stream_passes() {
    run_all("frames", recalld_fuzz::frames);
}

#[test]
fn every_kept_provider_request_passes() {
    run_all("requests", recalld_fuzz::requests);
}
