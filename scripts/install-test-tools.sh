#!/usr/bin/env bash
# The clients in other languages that the RPC servers' tests call them with (test/support/foreign-clients.ts):
# Python's grpcio on Debian's own python3 (PATH may hold another, a pyenv one without grpc), curl with HTTP/2, and
# nghttp. Debian packages, installed with apt-get when one is missing; a second run only checks, in well under a
# second. Run as root (CI) or with sudo available.
set -euo pipefail

missing=()
/usr/bin/python3 -c 'import grpc' 2>/dev/null || missing+=(python3-grpcio)
command -v nghttp >/dev/null 2>&1 || missing+=(nghttp2-client)
curl --version 2>/dev/null | grep -q 'HTTP2' || missing+=(curl)

if [ "${#missing[@]}" -eq 0 ]; then
  echo "test tools: python3-grpcio, nghttp2-client and curl already installed"
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
echo "test tools: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"

/usr/bin/python3 -c 'import grpc' && command -v nghttp >/dev/null && curl --version | grep -q 'HTTP2'
echo "test tools: installed"
