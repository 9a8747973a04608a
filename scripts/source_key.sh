#!/usr/bin/env bash
# The source key of a checkout's compiled extension: setup.py and everything under ssm_plugins/csrc, in C-locale
# order. gpu_check.sh uses a prebuilt _C only when the key recorded beside it (build_for_device.sh) equals this.
#   bash scripts/source_key.sh [CHECKOUT]
set -eu
cd "${1:-.}"
cat setup.py $(find ssm_plugins/csrc -type f | LC_ALL=C sort) | sha256sum | cut -c1-16
