#!/usr/bin/env bash
# Installs the Debian packages `make test` needs beyond Python, only those missing:
# Chromium (the run report is checked in it), gRPC C++ (the C++ world-server client) and headless
# Godot 3 (the Godot client's sample runs in it, through the edge).
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v godot3-server >/dev/null 2>&1 || missing+=(godot3-server)
if ! command -v grpc_cpp_plugin >/dev/null 2>&1 || ! pkg-config --exists grpc++ protobuf 2>/dev/null; then
  missing+=(libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev pkg-config)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "make test needs these Debian packages: ${missing[*]}" >&2
  echo "install them (sudo apt-get install ${missing[*]}) and run make test again" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
