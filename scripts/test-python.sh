#!/usr/bin/env bash
# Builds the Python package from crates/ferrograd-py into a virtualenv (target/pyenv by
# default, or $PYENV) and runs its pytest suite. Needs python3 >= 3.9 with venv and pip; the
# build tools (maturin) and numpy/pytest come from PyPI.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${PYENV:-$root/target/pyenv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "maturin>=1.9.4,<2" numpy pytest "ruff==0.17.6" \
    onnx onnxruntime safetensors
# Lint and format, by the settings in the package's pyproject.toml (ruff pinned: its format
# changes between versions).
(cd "$root/crates/ferrograd-py" && "$venv/bin/ruff" check python tests examples &&
    "$venv/bin/ruff" format --check python tests examples)
# A release wheel, built by maturin as pip would build it for any user, then installed.
rm -rf "$root/target/wheels"
(cd "$root/crates/ferrograd-py" && "$venv/bin/maturin" build --release --quiet --out "$root/target/wheels")
"$venv/bin/pip" install --quiet --force-reinstall --no-deps "$root"/target/wheels/ferrograd-*.whl
cd "$root"
"$venv/bin/python" -m pytest -q crates/ferrograd-py/tests "$@"
