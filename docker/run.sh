#!/usr/bin/env bash
# Start the Colab runtime container on a TPU VM with this checkout bind-mounted, for VS Code Remote-SSH +
# notebooks with %autoreload 2. Usage: PROJECT=/path/to/tunix_agentic docker/run.sh [--build]
set -euo pipefail
PROJECT=${PROJECT:-$(cd "$(dirname "$0")/.." && pwd)}
NAME=${NAME:-tunix_agentic}
IMAGE=${IMAGE:-tunix_agentic:colab-tpu}

if [ ! -f "$PROJECT/settings.ini" ] || [ ! -d "$PROJECT/nbs" ] || [ ! -d "$PROJECT/tunix_agentic" ]; then
    echo "run.sh: PROJECT=$PROJECT is not a tunix_agentic checkout (expected settings.ini, nbs/ and" \
         "tunix_agentic/ there); set PROJECT to your clone, e.g. PROJECT=\$HOME/tunix_agentic" >&2
    exit 2
fi
if [ "${1:-}" = "--build" ]; then
    docker build -t "$IMAGE" "$PROJECT/docker"
fi
docker stop "$NAME" >/dev/null 2>&1 || true
exec docker run --rm --privileged --net=host \
    -v /dev:/dev -v /run:/run -v /var/lib/cloud:/var/lib/cloud \
    -v "$PROJECT":/workspace/tunix_agentic \
    -e TPU_NAME=local \
    --name "$NAME" \
    -w /workspace \
    "$IMAGE"
