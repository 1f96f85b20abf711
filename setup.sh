#!/usr/bin/env bash
# Installs everything edgeprof needs on a Debian/Ubuntu machine into ./.venv:
# Debian packages (GNU time, tcmalloc/gperftools) and the Python package with its deps.
set -euo pipefail
cd "$(dirname "$0")"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
APT_PACKAGES="time libgoogle-perftools4"
PY="${PYTHON:-python3}"

if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup.sh: needs Python >= 3.11 as '$PY' (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
if ! "$PY" -c 'import ensurepip, venv' 2>/dev/null; then
    APT_PACKAGES="$APT_PACKAGES python3-venv"
fi
missing=""
for p in $APT_PACKAGES; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup.sh: installing Debian packages:$missing" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test]'
echo "setup.sh: ready (.venv/bin/python, .venv/bin/snakemake)" >&2
