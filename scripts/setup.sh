#!/usr/bin/env bash
# Create .venv (Python 3.11+, the machine's python3) and install the pinned requirements.
# Re-running is cheap: the install is skipped while requirements.txt is unchanged. Also installs
# Debian's bubblewrap, which the code sandbox runs untrusted code under, and libseccomp2, the library
# that builds the sandbox's seccomp filter.
#   --tests   also install what only the tests need: requirements-tests.txt (transformers on PyTorch's
#             CPU build, the reference of the model parity tests) and Debian's Chromium (the browser
#             test drives it with Playwright; Playwright's own browser download is never used).
#   --cuda    also install the NVIDIA GPU build of the same JAX (requirements-cuda.txt: CUDA 12 from
#             pip, about 3 GB; needs only the driver), then print the devices JAX finds.
#   --tpu     also install the TPU build of the same JAX (requirements-tpu.txt), then print the devices.
set -euo pipefail
with_tests=0
accelerator=""
for arg in "$@"; do
  case "$arg" in
    --tests) with_tests=1 ;;
    --cuda) accelerator=cuda ;;
    --tpu) accelerator=tpu ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown option $arg (try --help)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing requirements.txt into .venv (a minute or two the first time)"
  .venv/bin/python -m pip install --disable-pip-version-check -q --upgrade pip
  .venv/bin/python -m pip install --disable-pip-version-check -q -r requirements.txt
  echo "$want" > "$stamp"
fi
test_stamp=.venv/.requirements-tests.sha256
test_want=$(sha256sum requirements-tests.txt | cut -d' ' -f1)
if [ "$with_tests" = 1 ] && [ "$(cat "$test_stamp" 2>/dev/null)" != "$test_want" ]; then
  echo "setup: installing requirements-tests.txt into .venv (PyTorch CPU, transformers, ruff, pytest-xdist)"
  .venv/bin/python -m pip install --disable-pip-version-check -q -r requirements-tests.txt
  echo "$test_want" > "$test_stamp"
fi
# the code sandbox (trainers/sandbox) runs untrusted code under bubblewrap, with a seccomp filter that
# libseccomp builds (loaded through pyseccomp, found as ctypes finds it); without either a code_tests
# reward is refused before a run starts, and everything else works
sandbox_packages=""
command -v bwrap >/dev/null 2>&1 || sandbox_packages=" bubblewrap"
.venv/bin/python -c "import ctypes.util, sys; sys.exit(ctypes.util.find_library('seccomp') is None)" ||
  sandbox_packages="$sandbox_packages libseccomp2"
if [ -n "$sandbox_packages" ]; then
  echo "setup: installing Debian's$sandbox_packages for the code sandbox"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  # shellcheck disable=SC2086  # the list splits into package names
  $SUDO apt-get install -y -q $sandbox_packages >/dev/null 2>&1 ||
    { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q $sandbox_packages >/dev/null; } ||
    echo "setup: could not install$sandbox_packages: code_tests rewards will be refused on this machine" >&2
fi
if [ "$with_tests" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  echo "setup: installing Debian's chromium for the browser test"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get install -y -q chromium >/dev/null 2>&1 || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q chromium >/dev/null; }
fi
if [ -n "$accelerator" ]; then
  acc_stamp=.venv/.requirements-$accelerator.sha256
  acc_want=$(sha256sum "requirements-$accelerator.txt" | cut -d' ' -f1)
  if [ "$(cat "$acc_stamp" 2>/dev/null)" != "$acc_want" ]; then
    echo "setup: installing requirements-$accelerator.txt into .venv (the $accelerator build of JAX)"
    sed 's/\[[^]]*\]//' requirements.txt > .venv/constraints.txt  # every pin kept (pip's constraints take no extras)
    .venv/bin/python -m pip install --disable-pip-version-check -q -r "requirements-$accelerator.txt" \
      -c .venv/constraints.txt
    echo "$acc_want" > "$acc_stamp"
  fi
  .venv/bin/python -m trainers devices
fi
echo "setup: ready (.venv/bin/python)"
