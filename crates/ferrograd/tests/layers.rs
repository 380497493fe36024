//! The crate's layers (DESIGN.md, README "Code layout"): a module may name only modules of a
//! lower layer. This test reads every source file and fails on any `crate::` path that runs
//! upward or sideways, so the picture in the README stays true.

use std::fs;
use std::path::{Path, PathBuf};

/// Bottom up. A unit is a top-level module of `src/`, or `io/tensors` and `io/checkpoint`,
/// which sit on different layers: layers load weights through the first, the second saves a
/// whole `Model`.
const LAYERS: &[&[&str]] = &[
    &["error", "kernels"],
    &["tensor"],
    &["ops"],
    &["autograd"],
    &["init", "io/tensors", "data"],
    &["nn", "loss", "optim", "metrics"],
    &["model"],
    &["io/checkpoint", "io", "distributed"],
    &["graph"],
];

fn layer_of(unit: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&unit))
        .unwrap_or_else(|| panic!("module {unit} is on no layer: add it to LAYERS"))
}

/// The unit a file belongs to, from its path under `src/`; `None` for the crate root, which
/// only declares and re-exports.
fn unit_of_file(rel: &Path) -> Option<String> {
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    match parts.as_slice() {
        [root] if root == "lib" => None,
        [first, second, ..] if first == "io" && second != "mod" => Some(format!("io/{second}")),
        [first, ..] => Some(first.clone()),
        [] => None,
    }
}

/// The unit a path such as `crate::io::tensors::save` or `crate::nn::Dense` names.
fn unit_of_path(segments: &[&str]) -> String {
    match segments {
        ["io", sub, ..] if *sub == "tensors" || *sub == "checkpoint" => format!("io/{sub}"),
        [first, ..] => first.to_string(),
        [] => String::new(),
    }
}

/// The module paths named after each `crate::` (or `$crate::`) in `code`, one per item of a
/// braced group (`crate::{error::Error, tensor}` names `error` and `tensor`).
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let preceded = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if preceded.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                out.push(segments(item.trim()));
            }
        } else {
            out.push(segments(rest));
        }
    }
    out
}

fn segments(s: &str) -> Vec<String> {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(s.len());
    s[..end]
        .split("::")
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Code without line comments (doc links may point anywhere).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn no_module_imports_upward_or_sideways() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src/");
        let Some(unit) = unit_of_file(rel) else {
            continue;
        };
        let own = layer_of(&unit);
        let code = code_of(&fs::read_to_string(file).expect("readable source"));
        for path in crate_paths(&code) {
            let segs: Vec<&str> = path.iter().map(String::as_str).collect();
            let target = unit_of_path(&segs);
            // Upper-case first segments are the root's re-exports (`crate::Error`).
            if target.is_empty() || target == unit || target.starts_with(char::is_uppercase) {
                continue;
            }
            let theirs = layer_of(&target);
            if theirs >= own {
                problems.push(format!(
                    "{}: `crate::{}` ({target}, layer {theirs}) from {unit} (layer {own})",
                    rel.display(),
                    path.join("::")
                ));
            }
        }
    }
    problems.dedup();
    assert!(
        problems.is_empty(),
        "imports against the layers:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checker_sees_grouped_and_macro_paths() {
    let paths = crate_paths(
        "use crate::{nn::Dense, error};\n$crate::tensor::with_dtype!(x);\nlet v = mycrate::x;",
    );
    assert_eq!(
        paths,
        vec![
            vec!["nn".to_string(), "Dense".to_string()],
            vec!["error".to_string()],
            vec!["tensor".to_string(), "with_dtype".to_string()],
        ]
    );
    assert_eq!(unit_of_path(&["io", "tensors", "save"]), "io/tensors");
    assert_eq!(unit_of_path(&["io", "load_checkpoint"]), "io");
    assert_eq!(
        unit_of_file(Path::new("io/checkpoint.rs")).as_deref(),
        Some("io/checkpoint")
    );
    assert_eq!(unit_of_file(Path::new("lib.rs")), None);
}
