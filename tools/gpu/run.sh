#!/usr/bin/env bash
# The GPU-day entry point (docs/gpu-day.md), run from the repository root.
#
#   bash tools/gpu/run.sh call1|call2|apex     # on the device machine: run that call's stages
#   bash tools/gpu/run.sh CALL --dry-run       # print a call's stages, commands and timeouts
#   bash tools/gpu/run.sh --dry-run            # check the whole plan (and the carried files)
#
# The stages, their timeouts and the carried paths are defined in tools/gpu/plan.py; the results
# land in $OUT (summary.json, results.tar.gz, logs.tar.gz).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py=${PYTHON:-python3}
if [ "${1:-}" = "--dry-run" ]; then
    shift
    exec "$py" tools/gpu/plan.py --dry-run "$@"
fi
exec "$py" tools/gpu/runner.py "$@"
