# Sourced by the installers that need Debian packages (chromium, webgpu, postgres).
# Sets SUDO to "" (root), "sudo -n" (passwordless sudo) or fails with a message that names
# the command to run as root. `sudo -n`: a sudo that would ask for a password must fail at
# once, not hang a non-interactive setup or CI waiting on a prompt nobody sees.
#
#   privileged "what for" "command to run as root"   -> 0 and SUDO set, or 3 (not privileged)
privileged() {
  SUDO=""
  if [[ $(id -u) -eq 0 ]]; then return 0; fi
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; return 0; fi
  echo "[${LOG_TAG:-install}] not root and no passwordless sudo: $1 skipped; to install it, run as root: $2" >&2
  return 3
}
