#!/bin/bash
# make test's stage runner: `scripts/test-stages.sh STAGE...` runs each make
# target named, in order, and goes on after a failure so that one run
# shows everything that is broken. Each stage's exit code, wall time and
# whether it wrote test results go to out/test-stages.tsv; then
# scripts/testsummary prints a line a stage and the closing line
#
#   tests: N passed, N failed, N skipped[; failed stages: a, b][; disallowed skips: N]
#
# counting every out/gotest-*.json and out/*.tap the stages wrote (nested
# make calls included), after a line for every skipped test and its skip
# message. With CI=true a skip test/allowed-skips.txt does not allow is a
# failure (a suite whose libvirtd, lab, Chromium or runc is missing must not
# pass by skipping). The exit code is non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
make=${MAKE:-make}
go=${GO:-go}
trap 'echo "test-stages: interrupted" >&2; exit 130' INT TERM

# Only this run's results count.
mkdir -p out
rm -f out/gotest-*.json out/*.tap
: >out/test-stages.tsv
for stage in "$@"; do
	# Results newer than this marker were written by this stage.
	marker=$(mktemp out/.stage-XXXXXX)
	start=$SECONDS
	echo "=== stage $stage"
	rc=0
	$make --no-print-directory "$stage" || rc=$?
	secs=$((SECONDS - start))
	wrote=none
	if [ -n "$(find out -maxdepth 1 -newer "$marker" \( -name 'gotest-*.json' -o -name '*.tap' \) -print -quit)" ]; then
		wrote=results
	fi
	rm -f "$marker"
	if [ "$rc" -eq 0 ]; then
		echo "=== stage $stage: ok (${secs}s)"
	else
		echo "=== stage $stage: FAILED (${secs}s)"
	fi
	printf '%s\t%d\t%d\t%s\n' "$stage" "$rc" "$secs" "$wrote" >>out/test-stages.tsv
done
echo "=== summary"
# Built, not `go run`: go run would print "exit status 1" after the
# closing line, which must be the last one.
"$go" build -o out/testsummary ./scripts/testsummary || exit 1
exec out/testsummary -allow test/allowed-skips.txt out
