#!/usr/bin/env bash
# Install (or remove) sglang-sentinel as systemd services on a Debian/Ubuntu host.
#
#   sudo apt-get install -y python3-venv polkitd dbus     # Ubuntu < 23.04: policykit-1 for polkitd
#   sudo deploy/install.sh                                  # from a checkout of this repository
#   sudoedit /etc/sentinel/config.toml                      # then: systemctl start sentinel
#   sudo deploy/install.sh --uninstall [--purge]
#
# What it does (every step is idempotent):
#   - users sentinel and sglang (sysusers.d: deploy/sentinel.sysusers)
#   - /opt/sentinel/.venv with this checkout installed; README and docs under /opt/sentinel
#   - /opt/sglang/.venv, an empty venv for SGLang (install SGLang into it yourself)
#   - /etc/sentinel/config.toml from deploy/config.example.toml if there is none (root:sentinel 0640)
#   - /var/lib/sentinel (sentinel 0750) and /var/lib/sglang (sglang 0750)
#   - /etc/sglang/launch.env (SGLang's launch flags, SGLANG_ARGS) from deploy/sglang-launch.env
#     if there is none (the flags of an older sglang.service's ExecStart= move there): an upgrade
#     never touches it. sglang.service also reads /var/lib/sentinel/sglang-fallback.env when it
#     exists: sentinel writes it only while [server.fallback] runs a known-good set of flags
#   - the polkit rule that lets sentinel start/stop/restart/reset-failed sglang.service, nothing else
#   - sentinel.service and sglang.service in /etc/systemd/system; sentinel.service enabled.
#     sglang.service is not enabled: sentinel starts it (Wants=) and is its only restarter.
#   Units and the polkit rule are replaced on upgrade; one that was edited since install.sh wrote it
#   (its sha256 differs from the one recorded in /opt/sentinel/installed.sha256) is kept next to
#   it as FILE.dpkg-old first, and said so. Changes to a unit belong in a drop-in (systemctl edit).
#
# Options:
#   --root DIR     install into DIR instead of / (a throwaway root for CI, an image being built):
#                  nothing on the running system is touched, no service is started; the venvs
#                  are built at their final paths under DIR (a venv cannot be moved).
#   --start        also start sentinel.service now (not with --root)
#   --no-venv      skip the venvs (units and users only; the package is installed some other way)
#   --from SOURCE  what goes into /opt/sentinel/.venv: a wheel file (sglang_sentinel-X.Y.Z-py3-none-any.whl),
#                  a version (0.3.0: sglang-sentinel==0.3.0 from the index) or a checkout (default: this one)
#   --uninstall    stop and disable the units, remove units, polkit rule, /opt/sentinel and the
#                  fallback flags file /var/lib/sentinel/sglang-fallback.env (a later install must
#                  not start SGLang with a fallback's flags before sentinel decides again);
#   --purge        with --uninstall: also /etc/sentinel, /var/lib/sentinel and the sentinel user.
#                  /opt/sglang, /etc/sglang, /var/lib/sglang and the sglang user are always kept (model caches,
#                  an SGLang install that took an hour).
#   PYTHON=python3.11  the interpreter the venv is made with (default python3)
#   PIP_ARGS="..."     extra arguments for pip install (an index, --no-index --find-links ...)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
root=""
uninstall=0
purge=0
start=0
venv=1
from=""
while [ $# -gt 0 ]; do
    case "$1" in
        --root) root=${2:?--root needs a directory}; shift 2 ;;
        --root=*) root=${1#--root=}; shift ;;
        --uninstall) uninstall=1; shift ;;
        --purge) purge=1; shift ;;
        --start) start=1; shift ;;
        --no-venv) venv=0; shift ;;
        --from) from=${2:?--from needs a wheel, a version or a directory}; shift 2 ;;
        --from=*) from=${1#--from=}; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
root=${root:-${DESTDIR:-}}
[ -z "$root" ] || root=$(mkdir -p "$root" && cd "$root" && pwd)
if [ -n "$root" ] && [ "$start" = 1 ]; then
    echo "install.sh: --start and --root do not go together" >&2; exit 2
fi
PY=${PYTHON:-python3}
say() { printf 'install.sh: %s\n' "$*"; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

# The host's Python first, before anything is written: sglang-sentinel needs 3.11 or newer
# (Ubuntu 22.04's python3 is 3.10). Exit 2, nothing touched.
if [ "$uninstall" = 0 ] && [ "$venv" = 1 ]; then
    if ! command -v "$PY" >/dev/null 2>&1; then
        printf 'install.sh: no %s found. Install Python 3.11 or newer (Debian/Ubuntu: apt-get install -y python3.11 python3.11-venv) and run again with PYTHON=python3.11, or run the container image instead (Dockerfile, scripts/build-image)\n' "$PY" >&2
        exit 2
    fi
    pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo unknown)
    if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        printf 'install.sh: %s is Python %s; sglang-sentinel needs 3.11 or newer. Install one (Ubuntu 22.04: apt-get install -y python3.11 python3.11-venv, from universe) and run again with PYTHON=python3.11, or run the container image instead (Dockerfile, scripts/build-image). Nothing was installed.\n' "$PY" "$pyver" >&2
        exit 2
    fi
fi
# What pip installs: a wheel file, a version from the index, or a checkout.
case "$from" in
    "") pkg=$src ;;
    *.whl) [ -f "$from" ] || { echo "install.sh: --from $from: no such wheel" >&2; exit 2; }
           pkg=$(cd "$(dirname "$from")" && pwd)/$(basename "$from") ;;
    [0-9]*) pkg="sglang-sentinel==$from" ;;
    *) [ -f "$from/pyproject.toml" ] || { echo "install.sh: --from $from: not a wheel, a version or a checkout" >&2; exit 2; }
       pkg=$(cd "$from" && pwd) ;;
esac
[ "$(id -u)" = 0 ] || die "run as root (it creates users and writes /etc)"

units="$root/etc/systemd/system"
polkit="$root/etc/polkit-1/rules.d/50-sentinel.rules"
sysusers="$root/usr/lib/sysusers.d/sglang-sentinel.conf"

# systemctl for the running system, or offline on the root directory.
sysctl() { if [ -n "$root" ]; then systemctl --root="$root" "$@"; else systemctl "$@"; fi; }

if [ "$uninstall" = 1 ]; then
    if [ -z "$root" ]; then
        systemctl disable --now sentinel.service 2>/dev/null || true
        systemctl stop sglang.service 2>/dev/null || true
    else
        sysctl disable sentinel.service 2>/dev/null || true
    fi
    rm -f "$units/sentinel.service" "$units/sglang.service" "$polkit"
    # sentinel's fallback flags (sglang.service's optional EnvironmentFile=): its decision stays in
    # /var/lib/sentinel (without --purge), and a sentinel that restores it writes them again.
    rm -f "$root/var/lib/sentinel/sglang-fallback.env"
    rm -rf "$root/opt/sentinel"
    if [ "$purge" = 1 ]; then
        rm -rf "$root/etc/sentinel" "$root/var/lib/sentinel" "$sysusers"
        if grep -q '^sentinel:' "$root/etc/passwd" 2>/dev/null; then
            if [ -n "$root" ]; then userdel --prefix "$root" sentinel; else userdel sentinel; fi
        fi
    fi
    [ -n "$root" ] || systemctl daemon-reload
    say "removed; kept /opt/sglang, /etc/sglang, /var/lib/sglang and the sglang user$([ "$purge" = 1 ] || echo ', /etc/sentinel, /var/lib/sentinel and the sentinel user')"
    exit 0
fi

# --- preconditions: say which Debian package is missing instead of failing half-way ---------
missing=()
"$PY" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v systemd-sysusers >/dev/null || missing+=(systemd)
if [ -z "$root" ]; then
    # systemctl as the sentinel user goes through D-Bus and polkit.
    [ -x /usr/lib/polkit-1/polkitd ] || [ -x /usr/libexec/polkitd ] || missing+=(polkitd)
    command -v dbus-daemon >/dev/null || command -v dbus-broker >/dev/null || missing+=(dbus)
fi
if [ ${#missing[@]} -gt 0 ]; then
    die "missing: ${missing[*]} (apt-get install -y ${missing[*]})"
fi

# --- users ------------------------------------------------------------------------------------
install -D -m 0644 "$here/sentinel.sysusers" "$sysusers"
install -d -m 0755 "$root/etc"
if [ -n "$root" ]; then
    systemd-sysusers --root="$root" "$sysusers"
else
    systemd-sysusers "$sysusers"
fi
uid_of() { awk -F: -v u="$1" '$1 == u { print $3 }' "$root/etc/passwd"; }
gid_of() { awk -F: -v u="$1" '$1 == u { print $4 }' "$root/etc/passwd"; }
s_uid=$(uid_of sentinel); s_gid=$(gid_of sentinel)
g_uid=$(uid_of sglang); g_gid=$(gid_of sglang)
[ -n "$s_uid" ] && [ -n "$g_uid" ] || die "users sentinel/sglang were not created"

# --- directories ------------------------------------------------------------------------------
install -d -m 0755 "$root/opt/sentinel" "$root/opt/sglang" "$units" "$root/etc/polkit-1/rules.d"
install -d -m 0750 -o 0 -g "$s_gid" "$root/etc/sentinel"
install -d -m 0750 -o "$s_uid" -g "$s_gid" "$root/var/lib/sentinel"
install -d -m 0750 -o "$g_uid" -g "$g_gid" "$root/var/lib/sglang"
install -d -m 0755 "$root/etc/sglang"
# An sglang.service from before launch.env carried the flags in ExecStart= (where the README of
# that time had the operator edit them): they move into launch.env instead of being lost.
old_flags() {
    [ -f "$units/sglang.service" ] || return 0
    sed -e ':a' -e '/\\$/{N;s/\\\n//;ba' -e '}' "$units/sglang.service" |
        sed -n 's/^ExecStart=[^ ]* -m sglang\.launch_server[[:space:]]*//p' | tr -s ' \t' '  ' | sed 's/ *$//'
}
if [ ! -e "$root/etc/sglang/launch.env" ]; then
    flags=$(old_flags)
    case "$flags" in
        ''|*'$SGLANG_ARGS'*|*'"'*|*'\'*)
            install -m 0644 "$here/sglang-launch.env" "$root/etc/sglang/launch.env"
            say "wrote /etc/sglang/launch.env (SGLang's launch flags, for SGLang 0.5.9): edit the flags there" ;;
        *)
            { echo "# Launch flags of sglang.service, moved here from its ExecStart= by install.sh."
              echo "# Edit them here (systemd EnvironmentFile= syntax); upgrades keep this file."
              printf 'SGLANG_ARGS="%s"\n' "$flags"; } > "$root/etc/sglang/launch.env"
            chmod 0644 "$root/etc/sglang/launch.env"
            say "moved the launch flags of the installed sglang.service into /etc/sglang/launch.env" ;;
    esac
fi
if [ ! -e "$root/etc/sentinel/config.toml" ]; then
    install -m 0640 -o 0 -g "$s_gid" "$here/config.example.toml" "$root/etc/sentinel/config.toml"
    say "wrote /etc/sentinel/config.toml from the example: review [server] before starting"
fi

# --- venvs ------------------------------------------------------------------------------------
if [ "$venv" = 1 ]; then
    [ -x "$root/opt/sentinel/.venv/bin/python" ] || "$PY" -m venv "$root/opt/sentinel/.venv"
    # shellcheck disable=SC2086  # PIP_ARGS is a list of words
    "$root/opt/sentinel/.venv/bin/python" -m pip install -q --disable-pip-version-check \
        ${PIP_ARGS:-} "$pkg"
    [ -x "$root/opt/sglang/.venv/bin/python" ] || "$PY" -m venv "$root/opt/sglang/.venv"
    "$root/opt/sentinel/.venv/bin/sentinel" --version >/dev/null
fi
install -m 0644 "$src/README.md" "$root/opt/sentinel/README.md"
rm -rf "$root/opt/sentinel/docs" && cp -r "$src/docs" "$root/opt/sentinel/docs"

# --- units and polkit ---------------------------------------------------------------------------
# dpkg's conffile rule: a file as install.sh wrote it (sha256 recorded) is replaced silently; one
# edited since (or from an install.sh that recorded nothing) is kept as FILE.dpkg-old first.
manifest="$root/opt/sentinel/installed.sha256"
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
recorded() { [ -f "$manifest" ] && awk -v f="$1" '$2 == f { print $1 }' "$manifest"; }
conffile() {  # conffile SOURCE DEST (DEST relative to the root, as recorded)
    local src_file=$1 rel=$2 dst="$root$2" new old
    new=$(sha_of "$src_file")
    if [ -e "$dst" ]; then
        old=$(sha_of "$dst")
        if [ "$old" != "$new" ] && [ "$old" != "$(recorded "$rel")" ]; then
            cp -p "$dst" "$dst.dpkg-old"
            say "$rel was changed since it was installed: kept as $rel.dpkg-old, installed the new one (put unit changes in a drop-in: systemctl edit ${rel##*/})"
        fi
    fi
    install -m 0644 "$src_file" "$dst"
    { [ -f "$manifest" ] && awk -v f="$rel" '$2 != f' "$manifest"; printf '%s %s\n' "$new" "$rel"; } > "$manifest.new"
    mv "$manifest.new" "$manifest"
}
conffile "$here/sentinel.service" /etc/systemd/system/sentinel.service
conffile "$here/sglang.service" /etc/systemd/system/sglang.service
conffile "$here/sentinel-polkit.rules" /etc/polkit-1/rules.d/50-sentinel.rules
if [ -n "$root" ]; then
    sysctl enable sentinel.service
else
    systemctl daemon-reload
    systemctl enable sentinel.service
    # polkitd reads rules.d on change; a restart makes sure on old versions.
    systemctl try-restart polkit.service 2>/dev/null || true
    if [ "$start" = 1 ]; then systemctl start sentinel.service; fi
fi
if [ "$venv" = 1 ] && [ ! -e "$root/opt/sglang/.venv/bin/sglang" ] && \
   ! "$root/opt/sglang/.venv/bin/python" -c 'import sglang' 2>/dev/null; then
    say "SGLang is not installed yet: /opt/sglang/.venv/bin/pip install 'sglang[all]' (the version sglang.service's flags are for)"
fi
say "installed into ${root:-/}; check with: systemd-analyze verify${root:+ --root=$root} /etc/systemd/system/sentinel.service /etc/systemd/system/sglang.service"
