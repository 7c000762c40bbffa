#!/usr/bin/env bash
# Builds Floodgate's container image from a binary compiled on this machine,
# so no Go base image has to be pulled (deploy/Containerfile, BINARY=prebuilt).
#
#   deploy/build-image.sh [TAG]           # TAG defaults to floodgate:$VERSION
#   deploy/build-image.sh --binary-only DIR
#
# --binary-only only writes DIR/floodgate (static: CGO_ENABLED=0, -trimpath,
# -ldflags "-s -w -X main.version=$VERSION") and DIR/ca-certificates.crt;
# the Containerfile's source stage runs it too.
#
# Environment: VERSION (default: git describe, else "dev"); ENGINE (podman
# or docker; default: whichever is installed, podman first); GOOS/GOARCH to
# cross-compile (default: this machine's).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

if [[ -z "${VERSION:-}" ]]; then
	VERSION="$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)"
fi

binary() {
	local out="$1"
	mkdir -p "$out"
	(cd "$root" && CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w -X main.version=$VERSION" \
		-o "$out/floodgate" ./cmd/floodgate)
	local ca
	for ca in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
		if [[ -f "$ca" ]]; then
			cp "$ca" "$out/ca-certificates.crt"
			return
		fi
	done
	echo "build-image.sh: no CA certificate bundle found (install ca-certificates)" >&2
	exit 1
}

if [[ "${1:-}" == "--binary-only" ]]; then
	[[ -n "${2:-}" ]] || { echo "usage: $0 --binary-only DIR" >&2; exit 2; }
	binary "$2"
	exit 0
fi

tag="${1:-floodgate:$VERSION}"
engine="${ENGINE:-}"
if [[ -z "$engine" ]]; then
	for e in podman docker; do
		if command -v "$e" >/dev/null; then engine="$e"; break; fi
	done
fi
[[ -n "$engine" ]] || { echo "build-image.sh: neither podman nor docker is installed" >&2; exit 1; }

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
binary "$ctx"
"$engine" build -f "$root/deploy/Containerfile" --build-arg BINARY=prebuilt \
	--build-arg "VERSION=$VERSION" -t "$tag" "$ctx"
echo "built $tag (version $VERSION) with $engine"
