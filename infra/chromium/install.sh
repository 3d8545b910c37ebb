#!/usr/bin/env bash
# Headless Chromium for the dashboard's browser test (driven by playwright-core, which
# downloads no browser of its own). Debian's `chromium` package, from the machine's own apt
# archive; nothing else is downloaded.
#
#   infra/chromium/install.sh          install when missing (idempotent); exit 3 when not root
#                                      and no passwordless sudo (nothing installed, message says what to run)
#   infra/chromium/install.sh check    exit 0 when a Chromium binary is present
#   infra/chromium/install.sh path     print the binary's path
#
# Environment: SRPO_CHROMIUM (a Chromium/Chrome binary to use instead);
#   SRPO_SKIP_BROWSER=1 skips the install (the browser test then skips unless
#   SRPO_REQUIRE_BROWSER=1, which CI sets).
set -euo pipefail

log() { echo "[chromium] $*" >&2; }

find_binary() {
  local c
  for c in "${SRPO_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser /usr/lib/chromium/chromium; do
    [[ -n "$c" && -x "$c" ]] && { echo "$c"; return 0; }
  done
  return 1
}

case "${1:-install}" in
  check)
    if b=$(find_binary); then log "present: $b"; exit 0; fi
    log "missing: chromium"; exit 1 ;;
  path)
    find_binary || { log "missing: chromium (run infra/chromium/install.sh)"; exit 1; } ;;
  install)
    if [[ "${SRPO_SKIP_BROWSER:-0}" == 1 ]]; then log "SRPO_SKIP_BROWSER=1: not installing"; exit 0; fi
    if b=$(find_binary); then log "already present: $b"; exit 0; fi
    LOG_TAG=chromium
    . "$(dirname "$0")/../lib/privileged.sh"
    privileged "Chromium (optional: the dashboard's browser test)" "apt-get install chromium" || exit 3
    log "apt-get install chromium (a few minutes)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >&2
    b=$(find_binary) || { log "chromium installed but no binary found"; exit 1; }
    log "ready: $b ($("$b" --version 2>/dev/null || echo 'version unknown'))"
    ;;
  *) log "usage: $0 [install|check|path]"; exit 2 ;;
esac
