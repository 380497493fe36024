//! A gzip bomb, alone in its test binary so that the process's peak memory is its own.

use std::path::Path;

use ferrograd::data::{encode_idx_u8, read_idx_u8};

fn write_gzip_bomb(path: &Path, inflated: usize) {
    use std::io::Write;
    let file = std::fs::File::create(path).unwrap();
    let mut e = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
    e.write_all(&encode_idx_u8(&[10], &[7; 10])).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..inflated >> 20 {
        e.write_all(&zeros).unwrap();
    }
    e.finish().unwrap();
}

/// Peak resident memory of this process, in MiB (Linux).
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[test]
fn a_gzip_bomb_is_refused_without_inflating_it() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gzip_bomb");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bomb.gz");
    write_gzip_bomb(&path, 512 << 20);
    assert!(std::fs::metadata(&path).unwrap().len() < 4 << 20);
    let err = read_idx_u8(&path).unwrap_err().to_string();
    assert!(
        err.contains("trailing bytes") && err.contains("need 10 bytes"),
        "{err}"
    );
    // Reading the 512 MiB it inflates to would have shown in the peak.
    if let Some(peak) = peak_rss_mib() {
        assert!(peak < 256.0, "peak RSS {peak} MiB");
    }
}
