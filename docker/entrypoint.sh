#!/usr/bin/env bash
# Container start: make the bind-mounted checkout the package Python imports, turn autoreload on in
# IPython, then run the Colab runtime (or the command given) as the host user.
#
# The image already holds every dependency (installed at build from settings.ini). Here, once per
# container, the checkout is installed editable without dependencies (seconds, also after `--rm`).
# Whether that is needed is decided by docker/container.py's `installed` check, which asks pip's
# metadata and imports the package from /workspace: a plain `import tunix_agentic` there succeeds on
# the empty namespace package the mounted folder looks like, and skipped the install before.
set -euo pipefail
: "${PROJECT_DIR:=/workspace/tunix_agentic}"
: "${TUNIX_AGENTIC_HOME:=/opt/tunix_agentic}"       # what the image installed (Dockerfile)
: "${PYTHON:=python3}"
: "${JUPYTER_PORT:=8080}"
helper="$TUNIX_AGENTIC_HOME/container.py"
say() { echo "tunix_agentic: $*" >&2; }

if [ ! -f "$PROJECT_DIR/settings.ini" ] || [ ! -f "$PROJECT_DIR/tunix_agentic/__init__.py" ]; then
    say "no checkout at $PROJECT_DIR (settings.ini or tunix_agentic/__init__.py missing);" \
        "mount your clone with -v \$PROJECT:$PROJECT_DIR (docker/run.sh does)"
    exit 1
fi
"$PYTHON" "$helper" python-ok || exit 1

# Requirements changed since the image was built: install them now (pip skips what is there)
if [ -f "$TUNIX_AGENTIC_HOME/requirements.txt" ]; then
    extras=${TUNIX_AGENTIC_EXTRAS:-tpu,dev}
    wanted=$("$PYTHON" "$helper" requirements "$PROJECT_DIR/settings.ini" "$extras")
    if [ "$wanted" != "$(cat "$TUNIX_AGENTIC_HOME/requirements.txt")" ]; then
        say "settings.ini's requirements changed since the image was built; installing them" \
            "(docker/run.sh --build makes that part of the image)"
        "$PYTHON" -m pip install -q -r <(printf '%s\n' "$wanted")
    fi
fi

if reason=$("$PYTHON" "$helper" installed "$PROJECT_DIR" 2>&1); then
    say "using the checkout at $PROJECT_DIR (installed editable)"
else
    say "$reason; installing $PROJECT_DIR editable (no dependencies: the image has them)"
    # compat mode puts the checkout on sys.path through a .pth file, so the real package is found
    # even from /workspace, where the folder alone would import as an empty namespace package
    "$PYTHON" -m pip install -q --no-deps --no-build-isolation \
        --config-settings editable_mode=compat -e "$PROJECT_DIR"
    reason=$("$PYTHON" "$helper" installed "$PROJECT_DIR" 2>&1) || {
        say "the editable install did not take: $reason"; exit 1; }
fi

# Run as the host user (docker/run.sh passes HOST_UID and HOST_GID), so files written into the mount
# stay theirs. AS_ROOT=1 keeps root.
run_as=()
home=${HOME:-/root}
owner_uid=0
owner_gid=0
if [ "$(id -u)" = 0 ] && [ -n "${HOST_UID:-}" ] && [ "${HOST_UID}" != 0 ] \
        && [ "${AS_ROOT:-0}" != 1 ]; then
    gid=${HOST_GID:-$HOST_UID}
    getent group "$gid" >/dev/null || groupadd --gid "$gid" tunix
    user=$(getent passwd "$HOST_UID" | cut -d: -f1 || true)
    if [ -z "$user" ]; then
        useradd --uid "$HOST_UID" --gid "$gid" --create-home --shell /bin/bash tunix
        user=tunix
    fi
    home=$(getent passwd "$user" | cut -d: -f6)
    # the editable install above ran as root and wrote the egg-info into the checkout
    for made in "$PROJECT_DIR"/*.egg-info; do
        if [ -e "$made" ]; then chown -R "$HOST_UID:$gid" "$made"; fi
    done
    run_as=(setpriv "--reuid=$HOST_UID" "--regid=$gid" --init-groups --)
    owner_uid=$HOST_UID
    owner_gid=$gid
    export HOME="$home" USER="$user"
fi

# A cgroup of the runtime's own, delegated to its user, so the code sandbox can bound each call's
# memory. In the container's cgroup namespace every process starts in the root cgroup, which hands
# no controller to child groups while it holds processes: the sandbox's default isolation refused.
# Here the others move to init/, and this shell (then the runtime it becomes) to tunix/runtime.
if [ "$(id -u)" = 0 ]; then
    if made=$("$PYTHON" "$helper" delegate "${CGROUP_ROOT:-/sys/fs/cgroup}" "$$" \
            "$owner_uid" "$owner_gid" 2>&1); then
        say "$made"
    else
        say "no cgroup for the code sandbox ($made): its default isolation will refuse to run" \
            "code; docker/run.sh's --privileged gives a writable one"
    fi
fi

# autoreload in every IPython kernel of this user, from an IPython startup file
startup="${IPYTHONDIR:-$home/.ipython}/profile_default/startup"
mkdir -p "$startup"
cp "$TUNIX_AGENTIC_HOME/00-tunix-agentic-autoreload.py" "$startup/"
if [ ${#run_as[@]} -gt 0 ]; then
    chown -R "$HOST_UID:${HOST_GID:-$HOST_UID}" "${IPYTHONDIR:-$home/.ipython}"
fi

if [ "$#" -gt 0 ]; then exec "${run_as[@]}" "$@"; fi
cat >&2 <<EOF
tunix_agentic: starting the Colab runtime (Jupyter) on port $JUPYTER_PORT of this machine.
  It prints its URL with a token below (http://127.0.0.1:.../?token=...). From your laptop:
    ssh -L $JUPYTER_PORT:localhost:$JUPYTER_PORT YOUR_TPU_VM
  then open http://localhost:$JUPYTER_PORT/?token=THE_TOKEN, or in colab.research.google.com use
  Connect > Connect to a local runtime with that URL. VS Code: see docker/README.md.
EOF
exec "${run_as[@]}" /datalab/run.sh
