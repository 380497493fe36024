#!/usr/bin/env bash
# Runs the suites that exercise the hand-written kernels once per kernel path this CPU
# supports (FERROGRAD_ISA=portable, avx2, avx512; see `ferrograd::Isa`), and fails if a
# supported path was not run or did not pass. `cargo test --workspace --release` covers the
# best path only; this covers the others. Arguments are passed to every `cargo test` (CI
# passes the features of its other builds, `--features pictures`, so as to build the crate once).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo_options=("$@")

suites=(--test ops --test training --lib)
run() { cargo test --release -q -p ferrograd "${cargo_options[@]}" "$@"; }

supported="$(run --test ops -- --ignored --exact kernel_path::supported_paths --nocapture |
    sed -n 's/^SUPPORTED //p')"
[ -n "$supported" ] || { echo "kernel paths: none reported" >&2; exit 1; }
echo "kernel paths this CPU supports: $supported"
ran=()
declare -A digest
for isa in $supported; do
    echo "== kernel path $isa"
    said="$(FERROGRAD_ISA="$isa" run --test ops -- --exact \
        kernel_path::the_requested_path_is_the_one_that_runs --nocapture 2>&1)" || true
    echo "$said" | grep -q "kernel path: $isa " || {
        echo "$said" >&2
        echo "kernel paths: the run for $isa did not report running on it" >&2
        exit 1
    }
    out="$(FERROGRAD_ISA="$isa" run "${suites[@]}" 2>&1)" || {
        echo "$out" | tail -n 60 >&2
        echo "kernel paths: the suites failed on $isa" >&2
        exit 1
    }
    echo "$out" | grep -E '^test result' | awk '{p += $4; f += $6} END {print "  " p " passed, " f " failed"}'
    digest["$isa"]="$(FERROGRAD_ISA="$isa" run --test ops -- --ignored --exact \
        kernel_path::result_digest --nocapture | sed -n 's/^DIGEST //p')"
    echo "  digest of products and gradients: ${digest[$isa]}"
    ran+=("$isa")
done
echo "kernel paths run: ${ran[*]}"
for isa in portable avx2 avx512; do
    [[ " ${ran[*]} " == *" $isa "* ]] || echo "kernel paths not on this CPU (not run): $isa"
done
# AVX2 and AVX-512 compute every element by the same chain of operations: the same bits.
if [ -n "${digest[avx2]:-}" ] && [ -n "${digest[avx512]:-}" ] &&
   [ "${digest[avx2]}" != "${digest[avx512]}" ]; then
    echo "kernel paths: avx2 and avx512 give different bits" >&2
    exit 1
fi
