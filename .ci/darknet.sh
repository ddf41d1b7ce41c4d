# Sourced by .ci/run: make Debian's darknet package (/usr/bin/darknet, /usr/lib/darknet/libdarknet.so, cfgs and
# sample images under /usr/share/darknet) available for the darknet runtime's tests (tests/runtimes/darknet/,
# tests/ops/yolo/). Installs it with apt-get when missing (non-interactive, as root or with passwordless sudo,
# bounded in time); on any failure says why and returns 0 (those tests then skip, naming
# "apt-get install darknet").
install_darknet() {
  if [ -f /usr/lib/darknet/libdarknet.so ] && command -v darknet >/dev/null 2>&1; then
    echo "ci: darknet present ($(dpkg-query -W -f='${Version}' darknet 2>/dev/null || echo 'version unknown'))"
    return 0
  fi
  local sudo_cmd=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo_cmd="sudo -n"
    else
      echo "ci: darknet missing and no root or passwordless sudo to install it; darknet tests skip"
      return 0
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "ci: darknet missing and apt-get is not available to install it; darknet tests skip"
    return 0
  fi
  echo "ci: installing darknet (Debian) for the darknet runtime tests"
  local start=$SECONDS
  # apt-get update once: skipped when another .ci script (chromium.sh) refreshed the lists in the last hour
  local fresh
  fresh=$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -60 2>/dev/null | head -n 1)
  if ! { { [ -n "$fresh" ] || timeout 600 $sudo_cmd apt-get update -qq; } &&
         timeout 900 $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq darknet >/dev/null; }; then
    echo "ci: apt-get could not install darknet (see the CI log above); darknet tests skip"
    return 0
  fi
  echo "ci: darknet $(dpkg-query -W -f='${Version}' darknet) installed in $((SECONDS - start)) s"
}

# `bash .ci/darknet.sh` (make darknet) runs it directly
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  install_darknet
fi
