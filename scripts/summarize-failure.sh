#!/usr/bin/env bash
# Runs a command with its output teed to a log; when it fails, prints the lines that say why
# (compiler errors, panics, failed tests, disk space) once more at the end, where CI's tail shows
# them. Usage: scripts/summarize-failure.sh LOG COMMAND...
set -uo pipefail
log="$1"
shift
mkdir -p "$(dirname "$log")"
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
    echo
    echo "==== why it failed (from $log) ===="
    grep -nE "^error|panicked at|^---- |FAILED|failed,|No space left|Killed|signal: |LLVM ERROR|internal compiler error" "$log" | tail -60
    echo "==== disk: $(df -h . | tail -1)"
fi
exit "$rc"
