#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Installs everything building, testing, benchmarking and fuzzing need on Debian 12.
# Does nothing (and needs no network) when every package is already installed.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libboost1.81-dev libfmt-dev libssl-dev openssl
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  redis-server redis-tools
  clang libclang-rt-14-dev clang-format
  iptables iproute2
  doxygen
  dpkg-dev file
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
