# Sourced by scripts/demo and scripts/test: installs the Debian packages the build needs
# (only those missing), then configures and builds a CMake preset.
set -euo pipefail
VGPU_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VGPU_PACKAGES=(build-essential cmake ninja-build pkg-config libabsl-dev libgtest-dev libgmock-dev
  libbenchmark-dev libopenblas-dev zlib1g-dev clang libclang-rt-dev dataset-fashion-mnist
  librsvg2-bin locales ccache openmpi-bin libopenmpi-dev python3)

vgpu_install_packages() {
  local missing=()
  for p in "${VGPU_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "vgpu: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# vgpu_configure PRESET: configure a preset; with ccache installed, compiles go through it
# (paths relative to the checkout's parent folder, so clones share the cache).
vgpu_configure() {
  local preset="$1" launcher=()
  cd "$VGPU_ROOT"
  if command -v ccache >/dev/null 2>&1; then
    export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(dirname "$VGPU_ROOT")}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  cmake --preset "$preset" "${launcher[@]}" >/dev/null
}

# vgpu_build PRESET: configure and build.
vgpu_build() {
  local preset="$1"
  vgpu_configure "$preset"
  cmake --build --preset "$preset" -j "$(nproc)"
}
