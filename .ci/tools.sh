#!/usr/bin/env bash
# Installs the build and test tools Conveyor needs, each only when missing or at the wrong
# version. Everything comes from the package registries (crates.io, npm, Debian): nothing here
# downloads a prebuilt binary. Versions are the ones in Cargo.lock / end2end/package.json.
set -euo pipefail
cd "$(dirname "$0")/.."

LEPTOS_VERSION=0.3.11
BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/{getline; gsub(/[^0-9.]/,""); print; exit}' Cargo.lock 2>/dev/null || true)
BINDGEN_VERSION=${BINDGEN_VERSION:-0.2.130}
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '\033[1m[tools]\033[0m %s\n' "$*"; }

# Copies a crate's published source out of the registry cache so its lockfile can be adjusted.
crate_source() {
  local name=$1 version=$2 dir
  cargo info "$name@$version" >/dev/null 2>&1 || true
  dir=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$name-$version" 2>/dev/null | head -n1)
  [ -n "$dir" ] || { echo "cannot fetch $name $version from crates.io" >&2; exit 1; }
  local work
  work=$(mktemp -d)/"$name-$version"
  cp -r "$dir" "$work"
  echo "$work"
}

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  log "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

if [ "$(cargo-leptos --version 2>/dev/null | awk '{print $2}')" != "$LEPTOS_VERSION" ]; then
  log "building cargo-leptos $LEPTOS_VERSION (no_downloads); takes several minutes once"
  src=$(crate_source cargo-leptos "$LEPTOS_VERSION")
  # Its lockfile pins cargo-util-schemas 0.14.2, which needs a newer rustc than ours.
  (cd "$src" && cargo update -p cargo-util-schemas --precise 0.14.1 &&
    CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
      cargo install --path . --locked --features no_downloads)
fi

if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$BINDGEN_VERSION" ]; then
  log "building wasm-bindgen-cli $BINDGEN_VERSION"
  src=$(crate_source wasm-bindgen-cli "$BINDGEN_VERSION")
  # Its lockfile wants webpki-roots 1.0.11, which the registry mirror lacks.
  (cd "$src" && { cargo update -p webpki-roots --precise 1.0.10 || true; } &&
    CARGO_PROFILE_RELEASE_LTO=false cargo install --path . --locked)
fi

SQLX_VERSION=$(awk '/^name = "sqlx"$/{getline; gsub(/[^0-9.]/,""); print; exit}' Cargo.lock)
if [ "$(cargo sqlx --version 2>/dev/null | awk '{print $2}')" != "$SQLX_VERSION" ]; then
  log "building sqlx-cli $SQLX_VERSION (checks the queries' offline data, .sqlx/)"
  cargo install sqlx-cli --version "$SQLX_VERSION" --no-default-features \
    --features postgres,rustls --locked
fi

if [ ! -x /usr/bin/chromium ]; then
  log "installing Debian chromium"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi

if [ ! -x end2end/node_modules/.bin/playwright ] || [ ! -x end2end/node_modules/.bin/wasm-opt ] ||
  [ end2end/package-lock.json -nt end2end/node_modules/.package-lock.json ]; then
  log "installing Playwright and binaryen (wasm-opt) from npm, without browser downloads"
  (cd end2end && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund)
fi
log "tools ready"
