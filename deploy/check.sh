#!/usr/bin/env bash
# Checks the deployment files in deploy/ against each other, the Dockerfile
# and the toolgate binary. Run from anywhere; CI runs it from the repo root.
#
#   bash deploy/check.sh
#
# Env:
#   TOOLGATE_PYTHON               python to use (default python3); PyYAML is
#                                 pip-installed into it if missing
#   TOOLGATE_BIN                  toolgate binary (default debug/toolgate under $CARGO_TARGET_DIR or target/,
#                                 built with `cargo build` when it is the default)
#   TOOLGATE_DOCKER_BUILD_PROFILE the profile the Dockerfile's build runs in here
#                                 (default release, as the image; tests/run.sh
#                                 uses dev, sharing the test build's dependencies)
#   TOOLGATE_SKIP_RELEASE_BUILD=1 don't run the Dockerfile's release build; only
#                                 check its command, its COPY sources and that
#                                 cargo can read the manifest from what it copies
#
# One line per check; exits non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/.."

py=${TOOLGATE_PYTHON:-python3}
command -v "$py" >/dev/null || { echo "FAIL python: $py not found" >&2; exit 1; }
if ! "$py" -c 'import yaml' 2>/dev/null; then
  "$py" -m pip install --quiet --disable-pip-version-check --no-input pyyaml >&2
fi
# Validates the rendered Kubernetes overlays against the API schemas it carries.
if [ "$("$py" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))' 2>/dev/null)" != 1.37.0 ]; then
  "$py" -m pip install --quiet --disable-pip-version-check --no-input kubernetes-validate==1.37.0 >&2
fi
if ! "$py" -c 'import tomllib' 2>/dev/null && ! "$py" -c 'import tomli' 2>/dev/null; then
  "$py" -m pip install --quiet --disable-pip-version-check --no-input tomli >&2
fi

bin=${TOOLGATE_BIN:-${CARGO_TARGET_DIR:-target}/debug/toolgate}
if [ -z "${TOOLGATE_BIN:-}" ]; then
  # A no-op when up to date; a stale binary would check the wrong code.
  cargo build --quiet --locked --bin toolgate
fi
[ -x "$bin" ] || { echo "FAIL toolgate binary: $bin is missing or not executable" >&2; exit 1; }

exec "$py" deploy/check_deploy.py --bin "$bin"
