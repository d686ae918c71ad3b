#!/usr/bin/env bash
# Start the Colab runtime container on a TPU VM with this checkout bind-mounted, for VS Code
# Remote-SSH and notebooks that autoreload.
# Usage: PROJECT=/path/to/tunix_agentic docker/run.sh [--build]
# (--build: build the image first; needed once, and again after settings.ini's requirements change)
set -euo pipefail
PROJECT=${PROJECT:-$(cd "$(dirname "$0")/.." && pwd)}
NAME=${NAME:-tunix_agentic}
IMAGE=${IMAGE:-tunix_agentic:colab-tpu}

if [ ! -f "$PROJECT/settings.ini" ] || [ ! -d "$PROJECT/nbs" ] \
        || [ ! -d "$PROJECT/tunix_agentic" ]; then
    echo "run.sh: PROJECT=$PROJECT is not a tunix_agentic checkout (expected settings.ini," \
         "nbs/ and tunix_agentic/ there); set PROJECT to your clone," \
         "e.g. PROJECT=\$HOME/tunix_agentic" >&2
    exit 2
fi
if [ "${1:-}" = "--build" ]; then
    docker build -f "$PROJECT/docker/Dockerfile" -t "$IMAGE" "$PROJECT"
fi
docker stop "$NAME" >/dev/null 2>&1 || true
# HOST_UID/HOST_GID: the entrypoint runs the runtime as you, so files in the mount stay yours
# The code sandbox (tunix_agentic.tools.sandbox) isolates each model-written call in fresh user, mount,
# network, PID, IPC and UTS namespaces and refuses to run without them. Docker's defaults block that
# (its seccomp profile refuses unshare/clone of namespaces, mount and keyctl without CAP_SYS_ADMIN,
# AppArmor's docker-default refuses mount, masked /proc paths refuse a fresh /proc). --privileged,
# which the TPU needs anyway, lifts all three; the security-opts say which the sandbox relies on, so
# they stay if --privileged is ever dropped. Hosts that restrict unprivileged user namespaces
# (Ubuntu >= 23.10: kernel.apparmor_restrict_unprivileged_userns=1) still block the non-root runtime
# user; the sandbox then refuses with an error naming what is missing.
exec docker run --rm --privileged --net=host \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --security-opt systempaths=unconfined \
    -v /dev:/dev -v /run:/run -v /var/lib/cloud:/var/lib/cloud \
    -v "$PROJECT":/workspace/tunix_agentic \
    -e TPU_NAME=local \
    -e HOST_UID="$(id -u)" -e HOST_GID="$(id -g)" \
    --name "$NAME" \
    -w /workspace \
    "$IMAGE"
