#!/usr/bin/env bash
# Learner benchmark entry: runs the compiled bench (npm run build:bench puts it in dist-bench/).
# Arguments pass through, e.g. bench/learner/run.sh --rounds 5 --steps 30
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ ! -f dist-bench/bench/learner/run.js ]]; then
  echo "dist-bench/bench/learner/run.js is missing: run 'npm run build:bench' first" >&2
  exit 1
fi
exec node dist-bench/bench/learner/run.js "$@"
