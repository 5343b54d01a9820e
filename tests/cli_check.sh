#!/bin/sh
# Runs one tool command line under a timeout and checks how it ended (issue 12's CLI tests).
# usage: cli_check.sh EXPECTED_EXIT MAX_STDERR_BYTES REGEX COMMAND [ARGS...]
# Fails on a timeout or a signal (exit >= 124), another exit status than EXPECTED_EXIT, more
# than MAX_STDERR_BYTES on stderr, or stdout+stderr not matching the extended REGEX.
expected="$1"
max_err="$2"
regex="$3"
shift 3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
timeout 60 "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
cat "$tmp/out" "$tmp/err" | head -c 4000
echo
if [ "$rc" -ge 124 ]; then
  echo "FAIL: exit $rc (timeout or signal)" >&2
  exit 1
fi
if [ "$rc" -ne "$expected" ]; then
  echo "FAIL: exit $rc, expected $expected" >&2
  exit 1
fi
err_bytes=$(wc -c <"$tmp/err")
if [ "$err_bytes" -gt "$max_err" ]; then
  echo "FAIL: $err_bytes bytes on stderr, at most $max_err" >&2
  exit 1
fi
if ! cat "$tmp/out" "$tmp/err" | tr '\n' ' ' | grep -Eq -- "$regex"; then
  echo "FAIL: the output does not match: $regex" >&2
  exit 1
fi
echo "PASS"
