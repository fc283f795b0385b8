#!/usr/bin/env bash
# Install the Autobahn|Testsuite fuzzing client (wstest) for CPython 2.7, idempotently.
#
# It is Python 2.7 software: the interpreter is pyenv's 2.7 (RINGLOOP_PYTHON2 overrides), the
# packages go to that interpreter's user site (pip --user), pinned by autobahn-constraints.txt
# to the set that installs and runs here. Prints the wstest command as its last line, so
# `make` and tests/ws/autobahn.py can use it without relying on PATH. Run again, it only
# checks. Exit 1 with one line naming the problem when there is no usable Python 2.7.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

find_python2() {
    if [ -n "${RINGLOOP_PYTHON2:-}" ]; then echo "$RINGLOOP_PYTHON2"; return; fi
    if command -v pyenv >/dev/null 2>&1; then
        # `pyenv which python2.7` answers only when a 2.7 is the active version: ask with
        # each installed 2.7 made active for this one call, newest first.
        for v in $(pyenv versions --bare 2>/dev/null | grep '^2\.7' | sort -rV); do
            if p="$(PYENV_VERSION="$v" pyenv which python2.7 2>/dev/null)"; then echo "$p"; return; fi
        done
    fi
    command -v python2.7 || true
}

py2="$(find_python2)"
if [ -z "$py2" ] || ! "$py2" -c 'import sys; assert sys.version_info[:2] == (2, 7)' 2>/dev/null; then
    echo "install_autobahn.sh: no CPython 2.7 found (pyenv install 2.7.18, or set RINGLOOP_PYTHON2)" >&2
    exit 1
fi
wstest="$("$py2" -m site --user-base)/bin/wstest"
want="$(sed -n 's/^autobahntestsuite==//p' "$here/autobahn-constraints.txt")"
have="$("$py2" -c 'import pkg_resources; print(pkg_resources.get_distribution("autobahntestsuite").version)' 2>/dev/null || true)"
if [ "$have" != "$want" ] || [ ! -x "$wstest" ]; then
    echo "installing autobahntestsuite $want for $py2 (pip --user)" >&2
    "$py2" -m pip install -q --user --disable-pip-version-check --no-warn-script-location \
        -c "$here/autobahn-constraints.txt" "autobahntestsuite==$want" >&2
fi
"$wstest" --autobahnversion >/dev/null
echo "$wstest"
