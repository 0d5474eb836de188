#!/usr/bin/env bash
# Makes sure the Debian packages named as arguments are installed: installs the missing ones
# when run as root, otherwise names them and fails. Used by run.sh and tests/run.sh.
set -euo pipefail
missing=()
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
if [ "$(id -u)" = 0 ]; then
    echo "need-packages: installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
    echo "need-packages: missing ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
    exit 1
fi
