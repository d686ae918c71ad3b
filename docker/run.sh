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
exec docker run --rm --privileged --net=host \
    -v /dev:/dev -v /run:/run -v /var/lib/cloud:/var/lib/cloud \
    -v "$PROJECT":/workspace/tunix_agentic \
    -e TPU_NAME=local \
    -e HOST_UID="$(id -u)" -e HOST_GID="$(id -g)" \
    --name "$NAME" \
    -w /workspace \
    "$IMAGE"
