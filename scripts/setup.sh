#!/usr/bin/env bash
# Create .venv (Python 3.11+, the machine's python3) and install the pinned requirements.
# Re-running is cheap: the install is skipped while requirements.txt is unchanged.
set -euo pipefail
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
echo "setup: ready (.venv/bin/python)"
