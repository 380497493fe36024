#!/usr/bin/env bash
# Runs ferrograd's command and a peer's alternately, ROUNDS times, in one session, and prints
# each round's figures side by side: for RESULT lines (bench_layers, torch_layers.py) the best
# time of each case and the ratio ferrograd / peer; for epoch lines (the training examples and
# scripts) the seconds of each epoch. Machines and even minutes differ: compare within a round.
#
#   bench/pairs.sh ROUNDS "FERROGRAD COMMAND" "PEER COMMAND"
#   bench/pairs.sh 3 "target/release/examples/bench_layers" "VENV/bin/python bench/torch_layers.py"
set -euo pipefail
[ $# -eq 3 ] || { sed -n '2,8p' "$0" >&2; exit 2; }
rounds="$1" ours="$2" peer="$3"

best() { sed -n 's/^RESULT [^ ]* \([^ ]*\) .*min=\([0-9.]*\).*/\1 \2/p'; }
epochs() { sed -n 's/^Epoch \([0-9]*\) .* \([0-9.]*\) s (.*/\1 \2/p'; }

for round in $(seq 1 "$rounds"); do
    a="$(bash -c "$ours" 2>/dev/null)"
    b="$(bash -c "$peer" 2>/dev/null)"
    echo "== round $round"
    if [ -n "$(echo "$a" | best)" ]; then
        join <(echo "$a" | best | sort) <(echo "$b" | best | sort) |
            awk '{printf "  %-16s ferrograd %9.3f ms  peer %9.3f ms  ratio %.2f\n", $1, $2, $3, $2 / $3}'
    else
        join <(echo "$a" | epochs | sort) <(echo "$b" | epochs | sort) |
            awk '{printf "  epoch %-3s ferrograd %7.2f s  peer %7.2f s  ratio %.2f\n", $1, $2, $3, $2 / $3}'
    fi
done
