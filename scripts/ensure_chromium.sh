#!/usr/bin/env bash
# Installs Debian's headless Chromium for the report-rendering test if it is missing.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
$sudo_cmd apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq chromium >/dev/null
