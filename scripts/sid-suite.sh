#!/usr/bin/env bash
# sid-suite.sh — build ringloop and run pytest in the current venv; meant to run inside the sid
# chroot (`scripts/sid-chroot.sh run --python 3.14 -- bash scripts/sid-suite.sh [PYTEST ARGS]`,
# what `make test-py314` / `make test-py315` do), but works in any activated venv.
#
# Installs requirements-dev.txt and examples/pdf_ingest/requirements.txt (tests/watch runs the
# example), as the Makefile's venv has them, into the venv when they changed (a stamp in the
# venv), builds the native module with maturin (cargo's own cache makes an unchanged build
# quick), then runs pytest with RINGLOOP_REQUIRE=1 on the given paths (default: the whole suite). Exits with pytest's
# status, except that "no tests collected" (5) is reported as an error by name.
set -euo pipefail
: "${VIRTUAL_ENV:?run inside a venv (scripts/sid-chroot.sh run does that)}"
cd "$(dirname "$0")/.."

py=$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
stamp=$VIRTUAL_ENV/.ringloop-deps
reqs=(requirements-dev.txt examples/pdf_ingest/requirements.txt)
want=$(cat "${reqs[@]}" | sha1sum | cut -c1-40)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "sid-suite: installing ${reqs[*]} into the $py venv" >&2
    python -m pip install -q "${reqs[@]/#/-r}"
    echo "$want" >"$stamp"
fi
echo "sid-suite: building ringloop for Python $py" >&2
maturin develop --release -q
# Built as what Python says it is, not the host's .so beside it (maturin puts both in python/).
python -c 'import ringloop._core as c, sys; assert f"cpython-{sys.version_info[0]}{sys.version_info[1]}" in c.__file__, c.__file__'

set +e
RINGLOOP_REQUIRE=1 python -m pytest -q -rxX -p no:cacheprovider "$@"
status=$?
set -e
if [ "$status" = 5 ]; then
    echo "sid-suite: pytest collected no tests on Python $py ($*): that is a failure" >&2
    exit 1
fi
exit "$status"
