#!/usr/bin/env bash
# Installs everything edgeprof needs on a Debian/Ubuntu machine into ./.venv:
# Debian packages (GNU time, tcmalloc/gperftools, qemu + busybox for the vm backend, gcc for
# the uml guest's preload (engine/sandbox/ascend.c),
# mmdebstrap for the real-Caffe reference), the
# Python package with its deps and the workflow, test and slurm extras (Snakemake, pytest,
# the SLURM executor plugin), the vm backend's guest (kernel + initramfs, cached) and the
# real-Caffe reference the tests compare the caffe runtime with (a Debian bullseye chroot
# with libcaffe-dev, cached; root only, else the tests marked caffe skip and say why).
# tests/integration/slurm/test_slurm.py apt-gets SLURM itself (slurm-wlm, munge, mariadb-server, slurmdbd).
set -euo pipefail
cd "$(dirname "$0")"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
APT_PACKAGES="time libgoogle-perftools4 qemu-system-x86 busybox-static mmdebstrap patchelf gcc libc6-dev"
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
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        $missing >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[workflow,test,slurm]'
# The guest for the vm backend: a Debian backports kernel package fetched with apt-get
# download (never installed on this host) and a busybox initramfs; cached, built once.
.venv/bin/python -m engine.sandbox build
.venv/bin/python -m engine.realcaffe build
echo "setup.sh: ready (.venv/bin/python, .venv/bin/snakemake)" >&2
