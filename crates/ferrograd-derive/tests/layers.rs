//! The `ferrograd` crate's layers (README "Layout of the code"): a module may name only modules
//! of a lower layer. This test parses every source file of `crates/ferrograd/src` and resolves
//! every path that starts in the crate (`crate::`, `$crate::`, `super::`, `self::`, in `use`
//! trees, code, types and macro bodies) to the module it names, through the root's re-exports;
//! it fails on any path that runs upward or sideways, so the picture in the README stays true.
//!
//! It lives beside the macros, which parse Rust with `syn` already, so that `ferrograd`'s own
//! dev-dependencies (built with every example, the quick start's included) stay lean.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// Bottom up. A unit is a top-level module of `src/`, or `io/tensors` and `io/checkpoint`,
/// which sit on different layers: layers load weights through the first, the second saves a
/// whole `Model`.
const LAYERS: &[&[&str]] = &[
    &["error", "kernels"],
    &["tensor"],
    &["ops"],
    &["autograd"],
    &["init", "io/tensors", "data", "profiler"],
    &["nn", "loss", "optim", "metrics"],
    &["model"],
    &["io/checkpoint", "io", "distributed"],
    &["graph"],
    &["func", "onnx", "compiled"],
];

/// The layers of the Python binding's modules (`crates/ferrograd-py/src`), bottom up: the
/// tensor's data model (`value`) under the conversions, those under indexing and autograd,
/// the tensor class over them, the layers over the class.
const BINDING_LAYERS: &[&[&str]] = &[
    &["guard", "printing"],
    &["value", "profiler"],
    &["convert"],
    &["index", "autograd"],
    &["tensor"],
    &["nn", "rearrange", "spellings"],
    &["module", "train", "transformer", "graph", "onnx", "func"],
    &["elementwise"],
];

fn layer_of(layers: &[&[&str]], unit: &str) -> usize {
    layers
        .iter()
        .position(|l| l.contains(&unit))
        .unwrap_or_else(|| panic!("module {unit} is on no layer: add it to LAYERS"))
}

/// The module path of a file under `src/` (`graph/mod.rs` is `[graph]`, `lib.rs` the root).
fn module_of_file(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The unit an absolute module path lies in; `None` for the crate root itself.
fn unit_of(path: &[String]) -> Option<String> {
    match path {
        [io, sub, ..] if io == "io" && (sub == "tensors" || sub == "checkpoint") => {
            Some(format!("io/{sub}"))
        }
        [first, ..] => Some(first.clone()),
        [] => None,
    }
}

/// What the crate root makes visible under other names: `(module, name) -> absolute path`,
/// for the root's own `pub use` items (module "") and those of its inline modules (`prelude`).
#[derive(Default)]
struct Reexports(HashMap<(String, String), Vec<String>>);

impl Reexports {
    fn of_root(root: &syn::File) -> Reexports {
        let mut map = Reexports::default();
        let mut add = |module: &str, items: &[syn::Item]| {
            for item in items {
                if let syn::Item::Use(u) = item {
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                    for (name, path) in leaves {
                        let path = match path.first().map(String::as_str) {
                            Some("crate") => path[1..].to_vec(),
                            _ => path,
                        };
                        map.0.insert((module.to_string(), name), path);
                    }
                }
            }
        };
        add("", &root.items);
        for item in &root.items {
            if let syn::Item::Mod(m) = item {
                if let Some((_, items)) = &m.content {
                    add(&m.ident.to_string(), items);
                }
            }
        }
        map
    }

    /// The unit `path` (absolute, from the root) names, through a re-export where the first
    /// segment is not a module of its own.
    fn unit(&self, path: &[String], modules: &[String]) -> Option<String> {
        let first = path.first()?;
        if modules.contains(first) {
            return unit_of(path);
        }
        let key = match path {
            [m, name, ..] if self.0.contains_key(&(m.clone(), name.clone())) => {
                (m.clone(), name.clone())
            }
            [name, ..] => (String::new(), name.clone()),
            [] => return None,
        };
        let target = self.0.get(&key)?;
        // Only a re-export of something in the crate has a layer (`rand`, the derive crate
        // are outside).
        modules.contains(target.first()?).then(|| unit_of(target))?
    }
}

/// Every leaf of a `use` tree as (the name it brings in, its full path).
fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            path.push(n.ident.to_string());
            out.push((n.ident.to_string(), path));
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            path.push(r.ident.to_string());
            out.push((r.rename.to_string(), path));
        }
        syn::UseTree::Glob(_) => out.push(("*".to_string(), prefix.clone())),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| use_leaves(t, prefix, out)),
    }
}

/// `segments` as an absolute path from the crate root, when it starts in the crate: `crate`
/// and `$crate` (given as `crate`) from the root, `self` and `super` from `module`.
fn absolute(module: &[String], segments: &[String]) -> Option<Vec<String>> {
    match segments.first()?.as_str() {
        "crate" => Some(segments[1..].to_vec()),
        "self" => Some([module, &segments[1..]].concat()),
        "super" => {
            let ups = segments.iter().take_while(|s| *s == "super").count();
            let base = module.get(..module.len().checked_sub(ups)?)?;
            Some([base, &segments[ups..]].concat())
        }
        _ => None,
    }
}

/// The crate-relative paths of one file: each as written, with the module it is written in.
struct Paths {
    module: Vec<String>,
    found: Vec<(Vec<String>, Vec<String>)>,
}

impl Paths {
    fn add(&mut self, segments: Vec<String>) {
        if let Some(abs) = absolute(&self.module, &segments) {
            self.found.push((segments, abs));
        }
    }

    /// Paths inside a macro's tokens, which syn leaves unparsed: `crate`, `$crate`, `self` or
    /// `super` followed by `::`-separated names.
    fn scan(&mut self, tokens: TokenStream) {
        let flat = flatten(tokens);
        for (k, t) in flat.iter().enumerate() {
            let TokenTree::Ident(id) = t else { continue };
            let head = id.to_string();
            if !matches!(head.as_str(), "crate" | "self" | "super") {
                continue;
            }
            let mut segments = vec![head];
            let mut j = k + 1;
            while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(next)) =
                (flat.get(j), flat.get(j + 1), flat.get(j + 2))
            {
                if a.as_char() != ':' || b.as_char() != ':' {
                    break;
                }
                let TokenTree::Ident(next) = next else { break };
                segments.push(next.to_string());
                j += 3;
            }
            if segments.len() > 1 {
                self.add(segments);
            }
        }
    }
}

/// The tokens of `tokens` in order, groups opened (their delimiters dropped).
fn flatten(tokens: TokenStream) -> Vec<TokenTree> {
    let mut out = Vec::new();
    for t in tokens {
        match t {
            TokenTree::Group(g) => out.extend(flatten(g.stream())),
            other => out.push(other),
        }
    }
    out
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        self.module.push(m.ident.to_string());
        visit::visit_item_mod(self, m);
        self.module.pop();
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
        for (_, path) in leaves {
            self.add(path);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.add(p.segments.iter().map(|s| s.ident.to_string()).collect());
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.scan(m.tokens.clone());
        visit::visit_macro(self, m);
    }
}

/// Every crate-relative path in `code` (a file of module `module`), resolved.
fn paths_in(module: &[String], code: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let file = syn::parse_file(code).unwrap_or_else(|e| panic!("{module:?} does not parse: {e}"));
    let mut paths = Paths {
        module: module.to_vec(),
        found: Vec::new(),
    };
    paths.visit_file(&file);
    paths.found
}

/// The imports of `code` (module `module`) against the layers, as messages.
fn problems_in(
    layers: &[&[&str]],
    module: &[String],
    code: &str,
    roots: &Reexports,
    modules: &[String],
) -> Vec<String> {
    let Some(unit) = unit_of(module) else {
        return Vec::new(); // the root only declares and re-exports
    };
    let own = layer_of(layers, &unit);
    let mut out = Vec::new();
    for (written, abs) in paths_in(module, code) {
        let Some(target) = roots.unit(&abs, modules) else {
            continue;
        };
        let theirs = layer_of(layers, &target);
        if target != unit && theirs >= own {
            out.push(format!(
                "`{}` names {target} (layer {theirs}) from {unit} (layer {own})",
                written.join("::")
            ));
        }
    }
    out.dedup();
    out
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

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../ferrograd/src")
}

/// The root's re-exports and the names of the top-level modules.
fn crate_root(src: &Path) -> (Reexports, Vec<String>) {
    let root = syn::parse_file(&fs::read_to_string(src.join("lib.rs")).expect("lib.rs"))
        .expect("lib.rs parses");
    let modules = root
        .items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Mod(m) if m.content.is_none() => Some(m.ident.to_string()),
            _ => None,
        })
        .collect();
    (Reexports::of_root(&root), modules)
}

/// Every import of the crate under `src` against `layers`, as messages.
fn crate_problems(src: &Path, layers: &[&[&str]]) -> Vec<String> {
    let (roots, modules) = crate_root(src);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(src).expect("under src/");
        let code = fs::read_to_string(file).expect("readable source");
        for p in problems_in(layers, &module_of_file(rel), &code, &roots, &modules) {
            problems.push(format!("{}: {p}", rel.display()));
        }
    }
    problems
}

#[test]
fn no_module_imports_upward_or_sideways() {
    let problems = crate_problems(&src(), LAYERS);
    assert!(
        problems.is_empty(),
        "imports against the layers:\n{}",
        problems.join("\n")
    );
}

#[test]
fn no_module_of_the_python_binding_imports_upward_or_sideways() {
    let binding = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ferrograd-py/src");
    let problems = crate_problems(&binding, BINDING_LAYERS);
    assert!(
        problems.is_empty(),
        "the binding's imports against its layers:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checker_sees_every_form_of_path() {
    let (roots, modules) = crate_root(&src());
    let check = |file: &str, code: &str| {
        problems_in(
            LAYERS,
            &module_of_file(Path::new(file)),
            code,
            &roots,
            &modules,
        )
    };
    // Each form names a higher layer (nn or graph) from a lower one and must be caught.
    let caught = [
        ("ops/unary.rs", "use crate::nn::Dense;"),
        (
            "ops/unary.rs",
            "use crate::{tensor::Tensor, nn::{Dense, ReLU}};",
        ),
        ("ops/unary.rs", "use crate::{a::{b::C}, nn::Dense};"),
        ("ops/pool/inner.rs", "use super::super::super::nn::Dense;"),
        ("ops/mod.rs", "use super::nn::Dense;"),
        (
            "tensor/create.rs",
            "fn f() { let _ = crate::graph::Graph::new(); }",
        ),
        ("tensor/create.rs", "fn f(layer: &crate::nn::Dense) {}"),
        (
            "tensor/create.rs",
            "macro_rules! m { () => { $crate::nn::Dense::new(1, 1) }; }",
        ),
        (
            "tensor/create.rs",
            "fn f() { vec![crate::model::Net::new(vec![])]; }",
        ),
        ("tensor/create.rs", "use crate::prelude::Dense;"),
        ("tensor/create.rs", "use crate::ConvOpts;"),
        (
            "tensor/create.rs",
            "mod inner { use super::super::super::graph::Graph; }",
        ),
        (
            "tensor/create.rs",
            "fn f() { let s = \"// not a comment\"; crate::nn::Dense::new(1, 1); }",
        ),
    ];
    for (file, code) in caught {
        let found = check(file, code);
        assert!(!found.is_empty(), "missed in {file}: {code}");
        assert!(found.iter().all(|p| p.contains("(layer")), "{found:?}");
    }
    // Downward, within a unit, outside the crate, in comments and strings: not problems.
    let fine = [
        (
            "nn/dense.rs",
            "use crate::{tensor::Tensor, ops::Axis, error::Result};",
        ),
        (
            "nn/dense.rs",
            "use super::module::Module; use self::inner::X; mod inner {}",
        ),
        (
            "nn/dense.rs",
            "use std::sync::Arc; use rand::Rng; use crate::Error;",
        ),
        (
            "ops/unary.rs",
            "// crate::nn::Dense\nfn f() { let _ = \"crate::nn::Dense\"; }",
        ),
        (
            "kernels/sgemm.rs",
            "use crate::kernels::isa::Isa; use super::float::Float;",
        ),
    ];
    for (file, code) in fine {
        assert_eq!(check(file, code), Vec::<String>::new(), "{file}: {code}");
    }
    assert_eq!(
        module_of_file(Path::new("io/checkpoint.rs")),
        vec!["io", "checkpoint"]
    );
    assert_eq!(
        unit_of(&["io".into(), "checkpoint".into()]).as_deref(),
        Some("io/checkpoint")
    );
}

/// The functions `#[isa_dispatch]` marks in `file`: its expansion calls target-feature code in
/// `unsafe` blocks, which the crate keeps inside `kernels/`.
fn dispatched(file: &syn::File) -> Vec<String> {
    struct Marked(Vec<String>);
    impl<'ast> Visit<'ast> for Marked {
        fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
            if f.attrs.iter().any(|a| {
                a.path()
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "isa_dispatch")
            }) {
                self.0.push(f.sig.ident.to_string());
            }
            visit::visit_item_fn(self, f);
        }
    }
    let mut marked = Marked(Vec::new());
    marked.visit_file(file);
    marked.0
}

#[test]
fn isa_dispatch_is_used_only_inside_kernels() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut outside = Vec::new();
    let mut inside = 0;
    for file in &files {
        let rel = file.strip_prefix(src()).expect("under src/");
        let code = syn::parse_file(&fs::read_to_string(file).expect("readable")).expect("parses");
        let found = dispatched(&code);
        if rel.starts_with("kernels") {
            inside += found.len();
        } else {
            outside.extend(found.iter().map(|f| format!("{}: {f}", rel.display())));
        }
    }
    assert!(
        outside.is_empty(),
        "#[isa_dispatch] outside kernels/: {outside:?}"
    );
    assert!(
        inside > 0,
        "no #[isa_dispatch] found at all: the check reads nothing"
    );
    let sample = syn::parse_file("#[isa_dispatch]\nfn add(a: &[f32]) {}").expect("parses");
    assert_eq!(dispatched(&sample), ["add"]);
}
