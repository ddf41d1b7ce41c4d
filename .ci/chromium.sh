# Sourced by .ci/run: make Debian's chromium + chromium-driver available for the browser tests
# (tests/service/test_browser.py). Installs them with apt-get when missing (non-interactive, as root or with
# passwordless sudo, bounded in time). Exports REPLISCOPE_CHROMIUM and REPLISCOPE_CHROMEDRIVER on success; on any
# failure says why, exports REPLISCOPE_BROWSER_SKIP with the reason and returns 0 (the browser tests then skip
# with that reason).
find_chromium_binaries() {
  local c d
  CHROMIUM_BIN=""
  CHROMEDRIVER_BIN=""
  for c in chromium chromium-browser google-chrome; do
    if command -v "$c" >/dev/null 2>&1; then CHROMIUM_BIN=$(command -v "$c"); break; fi
  done
  for d in chromedriver /usr/lib/chromium/chromedriver; do
    if command -v "$d" >/dev/null 2>&1; then CHROMEDRIVER_BIN=$(command -v "$d"); break; fi
  done
}

install_chromium() {
  find_chromium_binaries
  if [ -z "$CHROMIUM_BIN" ] || [ -z "$CHROMEDRIVER_BIN" ]; then
    local sudo_cmd=""
    if [ "$(id -u)" != 0 ]; then
      if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo_cmd="sudo -n"
      else
        REPLISCOPE_BROWSER_SKIP="chromium/chromium-driver missing and no root or passwordless sudo to install them"
        export REPLISCOPE_BROWSER_SKIP
        echo "ci: $REPLISCOPE_BROWSER_SKIP; browser tests skip"
        return 0
      fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
      REPLISCOPE_BROWSER_SKIP="chromium/chromium-driver missing and apt-get is not available to install them"
      export REPLISCOPE_BROWSER_SKIP
      echo "ci: $REPLISCOPE_BROWSER_SKIP; browser tests skip"
      return 0
    fi
    echo "ci: installing chromium + chromium-driver for the browser tests"
    local start=$SECONDS
    if ! { timeout 600 $sudo_cmd apt-get update -qq &&
           timeout 900 $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
             chromium chromium-driver >/dev/null; }; then
      REPLISCOPE_BROWSER_SKIP="apt-get could not install chromium chromium-driver (see the CI log above)"
      export REPLISCOPE_BROWSER_SKIP
      echo "ci: $REPLISCOPE_BROWSER_SKIP; browser tests skip"
      return 0
    fi
    echo "ci: chromium installed in $((SECONDS - start)) s"
    find_chromium_binaries
  fi
  if [ -z "$CHROMIUM_BIN" ] || [ -z "$CHROMEDRIVER_BIN" ]; then
    REPLISCOPE_BROWSER_SKIP="chromium or chromedriver still not on PATH after installing"
    export REPLISCOPE_BROWSER_SKIP
    echo "ci: $REPLISCOPE_BROWSER_SKIP; browser tests skip"
    return 0
  fi
  export REPLISCOPE_CHROMIUM="$CHROMIUM_BIN" REPLISCOPE_CHROMEDRIVER="$CHROMEDRIVER_BIN"
  unset REPLISCOPE_BROWSER_SKIP
  echo "ci: browser tests use $("$CHROMIUM_BIN" --version 2>/dev/null | head -n 1) ($CHROMIUM_BIN, $CHROMEDRIVER_BIN)"
}
