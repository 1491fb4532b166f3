#!/usr/bin/env bash
# Set up a virtual environment (once) and run the gids demo: on the GPU if there is one, else in
# Numba's CUDA simulator. Extra arguments go to `gids demo` (see `gids demo --help`).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/gids ]; then
  python3 -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e .
fi
exec .venv/bin/gids demo "$@"
