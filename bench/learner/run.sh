#!/usr/bin/env bash
# Learner benchmark entry: runs the compiled bench (npm run build puts it in dist/).
# Arguments pass through, e.g. bench/learner/run.sh --rounds 5 --steps 30
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ ! -f dist/bench/learner/run.js ]]; then
  echo "dist/bench/learner/run.js is missing: run 'npm run build' first" >&2
  exit 1
fi
exec node dist/bench/learner/run.js "$@"
