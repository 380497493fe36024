//! How PyTorch prints modules and their settings: Python's forms of floats, booleans and
//! size pairs, and the tree of a module's children.

/// `x` as Python's `repr` writes a float (`1e-05`, `0.1`, `1.0`): Rust's shortest form with
/// Python's exponent (a sign and at least two digits).
pub fn py_float(x: f64) -> String {
    let s = format!("{x:?}");
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = exp.strip_prefix('-').map_or(("+", exp), |d| ("-", d));
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// Python's `True` / `False`.
pub fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// A pair of sizes as PyTorch prints a convolution's: `(3, 5)`.
pub fn py_pair([h, w]: [usize; 2]) -> String {
    format!("({h}, {w})")
}

/// A pair as PyTorch prints a pooling layer's, which keeps what it was given: `2` for a
/// square, `(2, 3)` otherwise.
pub fn py_size([h, w]: [usize; 2]) -> String {
    if h == w {
        h.to_string()
    } else {
        py_pair([h, w])
    }
}

/// A module's name followed by its children, one per line, as PyTorch prints a tree.
pub fn tree_repr(name: &str, settings: &str, children: &[(String, String)]) -> String {
    if children.is_empty() {
        return format!("{name}({settings})");
    }
    let mut out = format!("{name}(");
    if !settings.is_empty() {
        out.push_str(&format!("\n  {settings}"));
    }
    for (n, body) in children {
        out.push_str(&format!("\n  ({n}): {}", body.replace('\n', "\n  ")));
    }
    out + "\n)"
}
