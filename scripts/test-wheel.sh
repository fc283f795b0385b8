#!/usr/bin/env bash
# Install the ringloop wheel built by `make wheel` for PYTHON into a fresh venv and run the
# smoke test of the three faces (scripts/wheel_smoke.py) with no Rust toolchain reachable.
#
#   scripts/test-wheel.sh PYTHON [DIST]      (DIST defaults to dist/)
#
# pip gets --no-index and --only-binary: it installs the wheel from DIST or fails, it never
# falls back to building the sdist (which would need cargo). The smoke test runs from a
# directory outside the checkout, with PATH cut down to the system's directories (cargo and
# rustc live in ~/.cargo/bin) and PYTHONPATH unset, and checks both before it starts.
set -euo pipefail

python=${1:?usage: scripts/test-wheel.sh PYTHON [DIST]}
here=$(cd "$(dirname "$0")" && pwd)
dist=$(cd "${2:-$here/../dist}" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/ringloop-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check \
    --no-index --only-binary :all: --find-links "$dist" ringloop
cp "$here/wheel_smoke.py" "$work/"
cd "$work"
env -u PYTHONPATH -u VIRTUAL_ENV PATH=/usr/local/bin:/usr/bin:/bin \
    "$work/venv/bin/python" wheel_smoke.py
