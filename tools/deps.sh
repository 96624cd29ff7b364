#!/usr/bin/env bash
# Installs what the build and tests need that `go` does not fetch itself, only when missing.
# Usage: tools/deps.sh build|test|generate
# Debian packages come from apt-get (run as root, as on CI); nothing else is downloaded here.
set -euo pipefail
want=(libzmq3-dev pkg-config)
case "${1:-build}" in
  build) ;;
  test) want+=(nginx prometheus protobuf-compiler libprotobuf-dev python3-jinja2 dnsmasq-base redis-server) ;; # protoc: make check; python3-jinja2: pkg/chat's golden check (tools/chat/gen.py); dnsmasq-base: the DNS discovery e2e (internal/harness StartDNS); redis-server: the Responses store (testutil.StartRedis)
  generate) want+=(protobuf-compiler libprotobuf-dev) ;; # libprotobuf-dev: the well-known types
  *) echo "usage: $0 build|test|generate" >&2; exit 2 ;;
esac
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# nginx and prometheus start system services on install on some images; the tests start their own.
if [ "${1:-}" = test ]; then
  systemctl stop nginx prometheus redis-server >/dev/null 2>&1 || true
fi
