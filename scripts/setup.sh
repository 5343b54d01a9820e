# Sourced by scripts/demo and scripts/test: installs the Debian packages the build needs
# (only those missing), then configures and builds a CMake preset.
set -euo pipefail
VGPU_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VGPU_PACKAGES=(build-essential cmake ninja-build pkg-config libabsl-dev libgtest-dev libgmock-dev
  libbenchmark-dev libopenblas-dev zlib1g-dev clang libclang-rt-dev dataset-fashion-mnist
  librsvg2-bin locales)

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

# vgpu_build PRESET: configure (once) and build.
vgpu_build() {
  local preset="$1"
  cd "$VGPU_ROOT"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$(nproc)"
}
