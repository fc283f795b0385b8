#!/usr/bin/env bash
# sid-chroot.sh — CPython 3.14 and 3.15 from Debian's own packages, for a Debian bookworm host.
#
# Bookworm ships Python 3.11 only; Debian sid has python3.14 and python3.15 but needs its newer
# libc, so they run in a sid chroot made with debootstrap (Debian's binary packages only, nothing
# compiled). The host's Rust toolchain (~/.cargo, ~/.rustup) and this checkout are bind-mounted
# into it at the same absolute paths, so the extension builds inside exactly as outside.
#
# Interface (stable: make targets and other scripts call these):
#
#   scripts/sid-chroot.sh ensure
#       Make the chroot if it is missing (as root: installs debootstrap with apt-get if needed).
#       Cached in ${RINGLOOP_SID_CHROOT:-/var/cache/ringloop/sid}: a second call returns at
#       once. The chroot is built in a temporary directory and renamed into place when complete,
#       so an interrupted build never leaves a chroot that looks usable.
#
#   scripts/sid-chroot.sh run [--python 3.14|3.15] -- CMD...
#       Run CMD in the chroot, in this checkout's directory (same absolute path as outside), with
#       a venv for that Python activated (default 3.14). The venv lives in the chroot under
#       /opt/ringloop/<checkout-key>/py<version> (outside the checkout; one per checkout, so
#       worktrees do not share one) and is created with an up-to-date pip on first use.
#       CARGO_TARGET_DIR defaults to target/sid-py<version> so the host's own build is not
#       invalidated by a build for another interpreter. Calls `ensure` first. Exit status: CMD's.
#
#   scripts/sid-chroot.sh pythons
#       Print the Python versions installed in the chroot, one per line (3.14, maybe 3.15).
#
# Mounts (/proc, /sys, /dev, /dev/pts, /tmp, ~/.cargo, ~/.rustup, the checkout, httpwg's
# install root (RINGLOOP_HTTPWG), and the host's Python 2.7 with ~/.local for Autobahn's
# wstest when there is one) are made in a
# private mount namespace (unshare --mount) that exists only while the command runs: they vanish
# with its last process even if the script is killed, never show in the host's mount table, and
# `rm -rf` of the cache can never reach through a leftover bind mount into the host.
#
# Environment: RINGLOOP_SID_CHROOT (the chroot's directory), RINGLOOP_SID_MIRROR (default
# http://deb.debian.org/debian).
set -euo pipefail

CHROOT=${RINGLOOP_SID_CHROOT:-/var/cache/ringloop/sid}
MIRROR=${RINGLOOP_SID_MIRROR:-http://deb.debian.org/debian}
STAMP=.ringloop-sid-complete
# The EXTRA_PACKAGES a chroot has (a cached chroot gets those added since it was made).
EXTRAS_STAMP=.ringloop-sid-extras
CHECKOUT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
SELF="$CHECKOUT/scripts/$(basename "${BASH_SOURCE[0]}")"
# Python versions wanted in the chroot; each is installed only if sid has it.
PYTHONS=(3.14 3.15)
# What the build and the test suite need besides Python: a C linker for rustc, the headers of
# libc, wrk and curl for the server tests, procps (ps) for helpers that look at processes.
EXTRA_PACKAGES=(ca-certificates gcc libc6-dev wrk curl procps git)

die() { echo "sid-chroot: $*" >&2; exit 2; }

need_root() {
    [ "$(id -u)" = 0 ] || die "must run as root (debootstrap, chroot and mounts need it)"
}

# Run "$@" inside root directory $1 with the host's mounts bound in. Called inside a private
# mount namespace (see `in_namespace`), so nothing here needs unmounting.
mount_and_chroot() {
    local root=$1; shift
    mkdir -p "$root/proc" "$root/sys" "$root/dev" "$root/tmp"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"          # with /dev/pts and /dev/shm under it
    mount --bind /tmp "$root/tmp"
    # httpwg (the HTTP/2 conformance suite's binary, built on the host by make test: a
    # bookworm binary runs on sid's newer libc), where RINGLOOP_HTTPWG names it.
    local d wg=""
    [ -n "${RINGLOOP_HTTPWG:-}" ] && wg=$(dirname "$(dirname "$RINGLOOP_HTTPWG")")
    for d in "$HOME/.cargo" "$HOME/.rustup" "$CHECKOUT" ${wg:+"$wg"}; do
        [ -d "$d" ] || continue
        mkdir -p "$root$d"
        mount --bind "$d" "$root$d"
    done
    # Autobahn's wstest (tests/ws) is Python 2.7 software and sid has no Python 2.7: the host's
    # (RINGLOOP_PYTHON2, or pyenv's newest 2.7) and its user site, where install_autobahn.sh
    # puts wstest, are bound in at the same paths, and RINGLOOP_PYTHON2 names it in there.
    local py2 prefix
    py2=$(host_python2)
    if [ -n "$py2" ]; then
        prefix=$(dirname "$(dirname "$(readlink -f "$py2")")")
        for d in "$prefix" "$HOME/.local"; do
            [ -d "$d" ] || continue
            mkdir -p "$root$d"
            mount --bind "$d" "$root$d"
        done
        export RINGLOOP_PYTHON2=$py2
    fi
    # Name resolution and the host's CA bundle (pip reaches PyPI through it) as of now.
    cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    cp -L /etc/hosts "$root/etc/hosts" 2>/dev/null || true
    if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
        mkdir -p "$root/etc/ssl/certs"
        cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    fi
    # A clean environment, but the knobs of the build and the suite pass through.
    local keep=() var
    while IFS= read -r var; do
        keep+=("$var=${!var}")
    done < <(compgen -e | grep -E '^(RINGLOOP_|CARGO_|MATURIN_|PYTEST_|RUSTFLAGS$)' || true)
    exec chroot "$root" /usr/bin/env -i \
        HOME="$HOME" TERM="${TERM:-dumb}" LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 "${keep[@]}" \
        PATH="$HOME/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        "$@"
}

# The host's CPython 2.7 (see mount_and_chroot), or nothing.
host_python2() {
    local p
    for p in "${RINGLOOP_PYTHON2:-}" $(ls -d "$HOME"/.pyenv/versions/2.7*/bin/python2.7 2>/dev/null | sort -rV); do
        [ -n "$p" ] && [ -x "$p" ] && { echo "$p"; return; }
    done
    return 0
}

# Run "$@" (a subcommand of this script) in a new private mount namespace.
in_namespace() {
    unshare --mount --propagation private -- "$SELF" "$@"
}

apt_in() {   # apt_in ROOT ARGS...: apt-get inside a chroot being built
    local root=$1; shift
    in_namespace _chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get -q -y "$@"
}

build() {
    need_root
    local parent tmp
    parent=$(dirname "$CHROOT")
    mkdir -p "$parent"
    if ! command -v debootstrap >/dev/null; then
        echo "sid-chroot: installing debootstrap (apt-get)" >&2
        # Wait for another apt-get (another worktree's test installing a package) to finish.
        local apt=(apt-get -q -y -o DPkg::Lock::Timeout=600)
        DEBIAN_FRONTEND=noninteractive "${apt[@]}" install debootstrap >/dev/null \
            || { "${apt[@]}" update >/dev/null && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install debootstrap >/dev/null; } \
            || die "could not install debootstrap with apt-get"
    fi
    # Leftovers of an interrupted build: never used, removed now (they hold no mounts, see above).
    rm -rf "$CHROOT".tmp.*
    tmp=$(mktemp -d "$CHROOT.tmp.XXXXXX")
    chmod 755 "$tmp"             # mktemp's 0700 would shut out apt's _apt user and non-root users
    echo "sid-chroot: debootstrap sid into $tmp (a few minutes)" >&2
    # debootstrap mounts /proc and /sys in the target itself: keep those in a namespace too.
    unshare --mount --propagation private -- \
        debootstrap --variant=minbase sid "$tmp" "$MIRROR" >"$tmp.log" 2>&1 \
        || { tail -n 30 "$tmp.log" >&2; die "debootstrap failed (log: $tmp.log)"; }
    # The mirror's sid Release file can be past its Valid-Until; sid is a moving target anyway.
    printf 'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\n' \
        >"$tmp/etc/apt/apt.conf.d/99ringloop"
    apt_in "$tmp" update >/dev/null
    local pkgs=("${EXTRA_PACKAGES[@]}") v
    for v in "${PYTHONS[@]}"; do
        if in_namespace _chroot "$tmp" apt-cache show "python$v-venv" >/dev/null 2>&1; then
            pkgs+=("python$v" "python$v-dev" "python$v-venv")
            # CPython's own test package (tests/conformance runs its test_asyncio mixins).
            if in_namespace _chroot "$tmp" apt-cache show "libpython$v-testsuite" >/dev/null 2>&1; then
                pkgs+=("libpython$v-testsuite")
            fi
        else
            echo "sid-chroot: sid has no python$v-venv; skipping $v" >&2
        fi
    done
    echo "sid-chroot: apt-get install ${pkgs[*]}" >&2
    apt_in "$tmp" install "${pkgs[@]}" >"$tmp.log" 2>&1 \
        || { tail -n 30 "$tmp.log" >&2; die "apt-get install failed in the chroot (log: $tmp.log)"; }
    apt_in "$tmp" clean
    rm -f "$tmp.log"
    echo "${EXTRA_PACKAGES[*]}" >"$tmp/$EXTRAS_STAMP"
    date -u +%FT%TZ >"$tmp/$STAMP"
    rm -rf "$CHROOT"             # an old chroot without the stamp (interrupted by hand)
    mv "$tmp" "$CHROOT"
    echo "sid-chroot: ready in $CHROOT" >&2
}

extras_current() {
    [ "$(cat "$CHROOT/$EXTRAS_STAMP" 2>/dev/null)" = "${EXTRA_PACKAGES[*]}" ]
}

# A cached chroot made with fewer EXTRA_PACKAGES: install the list (apt-get skips those it has).
# With the package lists it was made with first; sid moves on, so on a miss, update and retry.
add_extras() {
    echo "sid-chroot: apt-get install ${EXTRA_PACKAGES[*]} (into the cached chroot)" >&2
    { apt_in "$CHROOT" install "${EXTRA_PACKAGES[@]}" \
        || { apt_in "$CHROOT" update && apt_in "$CHROOT" install "${EXTRA_PACKAGES[@]}"; }; } \
        >"$CHROOT.extras.log" 2>&1 \
        || { tail -n 30 "$CHROOT.extras.log" >&2; die "apt-get install failed in the chroot (log: $CHROOT.extras.log)"; }
    apt_in "$CHROOT" clean
    rm -f "$CHROOT.extras.log"
    echo "${EXTRA_PACKAGES[*]}" >"$CHROOT/$EXTRAS_STAMP"
}

ensure() {
    [ -f "$CHROOT/$STAMP" ] && extras_current && return 0
    need_root
    mkdir -p "$(dirname "$CHROOT")"
    # One builder at a time (two worktrees may ask at once); the second finds the stamp.
    exec 9>"$CHROOT.lock"
    flock 9
    [ -f "$CHROOT/$STAMP" ] || build
    extras_current || add_extras
    exec 9>&-
}

pythons() {
    local v
    for v in "${PYTHONS[@]}"; do
        [ -x "$CHROOT/usr/bin/python$v" ] && echo "$v"
    done
    return 0
}

run() {
    local py=3.14
    while [ $# -gt 0 ]; do
        case $1 in
            --python) [ $# -ge 2 ] || die "--python needs a version (3.14, 3.15)"; py=$2; shift 2 ;;
            --python=*) py=${1#--python=}; shift ;;
            --) shift; break ;;
            *) die "run: unknown option '$1' (usage: run [--python 3.14] -- CMD...)" ;;
        esac
    done
    [ $# -gt 0 ] || die "run: no command (usage: run [--python 3.14] -- CMD...)"
    ensure
    [ -x "$CHROOT/usr/bin/python$py" ] \
        || die "python$py is not in the chroot (has: $(pythons | tr '\n' ' '))"
    in_namespace _run "$py" "$@"
}

# Inside the namespace: mounts, then the venv, then CMD in the checkout's directory.
_run() {
    local py=$1; shift
    local key venv
    key=$(printf '%s' "$CHECKOUT" | sha1sum | cut -c1-12)
    venv=/opt/ringloop/$key/py$py
    mount_and_chroot "$CHROOT" /bin/bash -c '
        set -e
        py=$1 venv=$2 checkout=$3; shift 3
        if [ ! -x "$venv/bin/python" ]; then
            python$py -m venv "$venv"
            "$venv/bin/python" -m pip install -q --upgrade pip
        fi
        export VIRTUAL_ENV=$venv PATH=$venv/bin:$PATH
        export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$checkout/target/sid-py$py}
        cd "$checkout"
        exec "$@"
    ' sid-run "$py" "$venv" "$CHECKOUT" "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
    ensure) ensure ;;
    run) run "$@" ;;
    pythons) ensure; pythons ;;
    _chroot) root=$1; shift; mount_and_chroot "$root" "$@" ;;   # internal, in a namespace
    _run) _run "$@" ;;                                           # internal, in a namespace
    *) die "usage: $0 ensure | run [--python 3.14] -- CMD... | pythons" ;;
esac
