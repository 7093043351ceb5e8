#!/usr/bin/env bash
# The main job on the embedded default: replay the bundled drive end to end through the real
# embedded Triton server (camera, lidar and radar models), fuse, and print a short summary.
# Outputs go to out/ (detections.jsonl, report.json). Extra arguments go to `perception replay`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_bootstrap.sh"

DRIVE="$(ls replay_data/*.mcap 2>/dev/null | head -n 1 || true)"
if [ -z "$DRIVE" ]; then
    echo "no bundled drive in replay_data/; showing the embedded server's models instead" >&2
    exec perception server --once
fi
exec perception replay "$DRIVE" --config launch/replay.yaml --rate max --out out --compare-modes --no-progress "$@"
