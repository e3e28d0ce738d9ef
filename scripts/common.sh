# Shared by demo.sh and test.sh: install what a fresh Debian/Ubuntu machine lacks, then build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# libboost-dev also builds retnet-serve (Boost.Beast); python3-numpy runs the reference scripts' test; the
# server test (tests/server/run.sh) also needs node and npm, and installs Chromium itself when it
# runs as root.
# libhiredis-dev builds the Redis session store; redis-server and haproxy run ctest ServerCluster and
# scripts/cluster.sh.
RETNET_PACKAGES="cmake g++ make pkg-config libeigen3-dev nlohmann-json3-dev libboost-dev libpcre2-dev libgtest-dev libgmock-dev libbenchmark-dev python3-numpy libhiredis-dev redis-server haproxy"

install_dependencies() {
  local missing=()
  for p in $RETNET_PACKAGES "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # Debian's nodejs and npm only when no npm is on the PATH: a NodeSource nodejs brings its own
  # npm, which Debian's npm package conflicts with.
  command -v npm >/dev/null || missing+=(nodejs npm)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ]; then
    echo "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing packages; run:  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
}

build() {  # build DIR [cmake options...] [-- targets...]
  local dir=$1 options=() targets=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do options+=("$1"); shift; done
  [ $# -gt 0 ] && shift && targets=(--target "$@")
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "${options[@]}" >/dev/null
  cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
}
