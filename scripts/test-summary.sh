#!/bin/bash
# Prints one closing line for everything `make test` ran: the Go tests
# (from gotestsum's JSON files in out/) and the node polkit tests (TAP).
set -euo pipefail
cd "$(dirname "$0")/.."
pass=0 fail=0 skip=0
count() { grep -h -o "\"Action\":\"$1\",\"Package\":\"[^\"]*\",\"Test\"" out/gotest-*.json 2>/dev/null | wc -l; }
if ls out/gotest-*.json >/dev/null 2>&1; then
	pass=$(count pass) fail=$(count fail) skip=$(count skip)
fi
if [ -f out/polkit.tap ]; then
	pass=$((pass + $(awk '/^# pass /{print $3}' out/polkit.tap)))
	fail=$((fail + $(awk '/^# fail /{print $3}' out/polkit.tap)))
fi
# Subtests count as tests. One word and a colon, then the counts: the plain
# closing line CI reads.
echo "tests: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
