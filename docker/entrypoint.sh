#!/usr/bin/env bash
# Install the bind-mounted checkout editable with the TPU extra (once per container), then hand over to
# the Colab runtime's own start command (or whatever command was given).
set -euo pipefail
: "${PROJECT_DIR:=/workspace/tunix_agentic}"
if [ ! -f "$PROJECT_DIR/settings.ini" ]; then
    echo "tunix_agentic: no checkout at $PROJECT_DIR (settings.ini missing); mount it with" \
         "-v \$PROJECT:$PROJECT_DIR (see docker/run.sh)" >&2
    exit 1
fi
if ! python3 -c "import tunix_agentic" 2>/dev/null; then
    python3 -m pip install -q -e "$PROJECT_DIR[tpu,dev]"
fi
if [ "$#" -gt 0 ]; then exec "$@"; fi
# The Colab runtime image's default start script.
exec /datalab/run.sh
