#!/usr/bin/env bash
# Installs what the `mpi` feature needs: Open MPI (library, headers, mpicc and mpirun) from
# Debian's packages, and libclang for the bindings the `mpi` crate generates at build time.
set -euo pipefail
if command -v mpicc >/dev/null && command -v mpirun >/dev/null && ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1; then
    echo "setup-mpi: Open MPI and libclang already installed"
    exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenmpi-dev openmpi-bin libclang-dev
mpirun --version | head -1
