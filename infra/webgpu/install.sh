#!/usr/bin/env bash
# System libraries for the WebGPU backend (@tensorflow/tfjs-backend-webgpu on
# Dawn, from the npm package `webgpu`): the Vulkan loader and, for machines
# without a GPU (CI), Mesa's software Vulkan driver lavapipe.
#
# Dawn needs Vulkan 1.1 features that bookworm's Mesa 22.3 lavapipe lacks, so
# mesa-vulkan-drivers comes from bookworm-backports (Mesa 25). Everything comes
# from Debian's apt archive; nothing else is downloaded.
#
#   infra/webgpu/install.sh          install what is missing (idempotent); exit 3 when not root
#                                    and no passwordless sudo (nothing installed, message says what to run)
#   infra/webgpu/install.sh check    exit 0 when everything is present, 1 otherwise
#
# Environment: SRPO_WEBGPU_SOFTWARE=0 skips lavapipe (machines with a GPU
#   driver of their own only need the loader); SRPO_SKIP_WEBGPU=1 skips
#   everything (machines that cannot have Vulkan; the WebGPU spec is then
#   skipped too); SRPO_APT_MIRROR (default: the Debian archive this machine's
#   apt sources already use) for the backports source.
set -euo pipefail

log() { echo "[webgpu] $*" >&2; }

MIN_MESA_MAJOR=25
SOFTWARE="${SRPO_WEBGPU_SOFTWARE:-1}"
# The backports suite lives in the same archive as the machine's main suite.
default_mirror() {
  local uri
  uri=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v -- '-security' | head -n1)
  [[ -n "$uri" ]] || uri=$(grep -hE '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v -- '-security' | head -n1)
  echo "$uri"
}
MIRROR="${SRPO_APT_MIRROR:-$(default_mirror)}"
BACKPORTS_LIST=/etc/apt/sources.list.d/srpo-bookworm-backports.list

installed_version() { dpkg-query -W -f='${db:Status-Status} ${Version}\n' "$1" 2>/dev/null | awk '$1 == "installed" { print $2 }'; }

loader_ok() { [[ -n "$(installed_version libvulkan1)" ]] || ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1 '; }

lavapipe_ok() {
  local v
  v=$(installed_version mesa-vulkan-drivers)
  [[ -n "$v" ]] || return 1
  # Debian versions look like 25.0.7-2~bpo12+1 (epoch-free for Mesa).
  local major=${v%%.*}
  [[ "$major" =~ ^[0-9]+$ ]] && ((major >= MIN_MESA_MAJOR))
}

all_ok() { loader_ok && { [[ "$SOFTWARE" == 0 ]] || lavapipe_ok; }; }

if [[ "${SRPO_SKIP_WEBGPU:-0}" == 1 ]]; then
  log "SRPO_SKIP_WEBGPU=1: not installing the Vulkan loader or lavapipe"
  exit 0
fi

if [[ "${1:-}" == check ]]; then
  if all_ok; then log "Vulkan loader$([[ "$SOFTWARE" == 0 ]] || echo ' and lavapipe') present"; exit 0; fi
  log "missing: $(loader_ok || echo 'libvulkan1 ')$([[ "$SOFTWARE" == 0 ]] || lavapipe_ok || echo "mesa-vulkan-drivers>=$MIN_MESA_MAJOR")"
  exit 1
fi

if all_ok; then
  log "Vulkan loader and driver already present ($(installed_version mesa-vulkan-drivers || true)); nothing to do"
  exit 0
fi

LOG_TAG=webgpu
. "$(dirname "$0")/../lib/privileged.sh"
privileged "the Vulkan loader and lavapipe (optional: the WebGPU backend)" "$(cd "$(dirname "$0")" && pwd)/install.sh" || exit 3

. /etc/os-release
packages=(libvulkan1)
target=()
if [[ "$SOFTWARE" != 0 ]]; then
  packages+=(mesa-vulkan-drivers)
  if [[ "${VERSION_CODENAME:-}" == bookworm ]]; then
    if ! grep -rqsE '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      log "adding bookworm-backports ($MIRROR) to apt sources"
      echo "deb $MIRROR bookworm-backports main" | $SUDO tee "$BACKPORTS_LIST" >/dev/null
    fi
    target=(-t bookworm-backports)
  fi
fi

log "apt-get update"
$SUDO apt-get update -qq
log "installing ${packages[*]} ${target[*]}"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${target[@]}" "${packages[@]}" >&2

if ! all_ok; then
  log "installed, but mesa-vulkan-drivers is $(installed_version mesa-vulkan-drivers || echo absent); Dawn needs Mesa >= $MIN_MESA_MAJOR"
  exit 1
fi
log "ready: libvulkan1 $(installed_version libvulkan1), mesa-vulkan-drivers $(installed_version mesa-vulkan-drivers || echo '(skipped)')"
