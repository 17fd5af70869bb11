#!/usr/bin/env bash
# Run every fuzz test of the module briefly with coverage-guided input
# (FUZZTIME each, default 5s), after the seed corpora under testdata/fuzz/
# have already run as plain tests. A new Fuzz function is picked up here
# without a list to edit. New failing inputs land in testdata/fuzz/ of
# their package: check them in with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-5s}"
found=0
while IFS=: read -r file _ decl; do
	name="${decl#func }"
	name="${name%%(*}"
	dir="./$(dirname "$file")"
	echo "-- $name ($dir, $fuzztime)"
	# Go's fuzzing engine may end a run with a bare "context deadline
	# exceeded" when -fuzztime runs out while a worker is busy (a race in
	# its coordinator, go.dev/issue/75804, fixed in Go 1.27; no failing
	# input is written then): such a run is tried once more; a real
	# failure writes its input under testdata/fuzz and fails at once.
	if ! out=$(go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir" 2>&1); then
		echo "$out"
		if grep -q 'context deadline exceeded' <<<"$out" && ! grep -q 'Failing input written' <<<"$out"; then
			echo "-- $name: the engine's deadline flake; once more"
			go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir"
		else
			exit 1
		fi
	else
		echo "$out"
	fi
	found=$((found + 1))
done < <(grep -rn --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*(' internal cmd client api 2>/dev/null | sed 's|^\./||' | sort)
if [ "$found" -eq 0 ]; then
	echo "fuzz: no fuzz tests found" >&2
	exit 1
fi
echo "== $found fuzz tests ran"
