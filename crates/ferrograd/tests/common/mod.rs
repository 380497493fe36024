//! Helpers shared by the test binaries (each uses some of them).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use ferrograd::prelude::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

static GENERATOR: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A turn with the shared default generator: tests that seed it (`manual_seed`) or draw from
/// it (building layers) hold one, so that no other test of the binary draws between a seed and
/// the draws that should follow from it.
pub fn turn() -> std::sync::MutexGuard<'static, ()> {
    GENERATOR.lock().unwrap_or_else(|e| e.into_inner())
}

/// The message of the panic `f` raises (fails the test if it does not panic).
pub fn panic_message(f: impl FnOnce()) -> String {
    let err =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// A fresh directory under the target dir for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `bytes` gzip-compressed.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Standard normal f64 values of `shape`, reproducible from `seed`.
pub fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F64, &mut StdRng::seed_from_u64(seed))
}

/// [`randn`]'s values as f32, the layers' dtype.
pub fn randn_f32(shape: &[usize], seed: u64) -> Tensor {
    randn(shape, seed).to_dtype(DType::F32)
}

/// First and second derivatives of `f` at `inputs` against central differences, panicking
/// with `name` and the worst element on a mismatch.
pub fn check(name: &str, f: impl Fn(&[Tensor]) -> Tensor, inputs: &[Tensor]) {
    let opts = GradcheckOptions::default();
    if let Err(e) = gradcheck(&f, inputs, &opts) {
        panic!("{name}: {e}");
    }
    if let Err(e) = gradgradcheck(&f, inputs, &opts) {
        panic!("{name} (second order): {e}");
    }
}

/// Proptest's settings for these suites: `PROPTEST_CASES` cases (else `default_cases`), and no
/// failure files written into the tree.
pub fn proptest_config(default_cases: u32) -> proptest::prelude::ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    proptest::prelude::ProptestConfig {
        cases,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    }
}
