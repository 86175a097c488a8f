#!/bin/sh
# Runs every C test program given (paths), each to completion, saying how
# long each took ("-- NAME took N s"), then prints one summary line
# "ctests: N passed, N failed" (checks summed over the programs; a program
# that ends without its own summary line counts as one failure). Exits
# non-zero if any program failed.
# Env: TETHER_TEST_URL (required by the programs), RUNNER (e.g. "valgrind -q").
passed=0
failed=0
bad=""
out="${TMPDIR:-/tmp}/tether-ctest.$$"
for prog in "$@"; do
    name=$(basename "$prog")
    echo "== $name"
    start=$(date +%s)
    ${RUNNER:-} "$prog" >"$out" 2>&1
    status=$?
    cat "$out"
    echo "-- $name took $(($(date +%s) - start)) s"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1)
    if [ -n "$line" ]; then
        p=${line%% passed*}
        f=${line#*passed, }
        f=${f%% failed*}
        passed=$((passed + p))
        failed=$((failed + f))
    else
        echo "$name: ended without a summary line (status $status)"
        failed=$((failed + 1))
    fi
    if [ "$status" -ne 0 ]; then
        bad="$bad $name"
        if [ -n "$line" ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); fi
    fi
done
rm -f "$out"
[ -n "$bad" ] && echo "C test programs that failed:$bad"
echo "ctests: $passed passed, $failed failed"
[ -z "$bad" ]
