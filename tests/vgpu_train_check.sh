#!/bin/sh
# Runs vgpu-train and checks its contract: exit 0, a last line of JSON with the keys that
# docs/strategies.md lists for vgpu-train, and (with MIN_ACCURACY) test_accuracy at or above
# the bar.
# usage: vgpu_train_check.sh VGPU_TRAIN MIN_ACCURACY|- [vgpu-train flags...]
train="$1"
min="$2"
shift 2
out=$("$train" "$@")
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: vgpu-train exited $rc" >&2
  exit 1
fi
last=$(printf '%s\n' "$out" | tail -n 1)
for key in strategy devices epochs batch test_accuracy samples_per_s peak_bytes; do
  case "$last" in
    *"\"$key\":"*) ;;
    *) echo "FAIL: the last line lacks \"$key\": $last" >&2; exit 1 ;;
  esac
done
[ "$min" = "-" ] && exit 0
acc=$(printf '%s\n' "$last" | sed -n 's/.*"test_accuracy":\([0-9.eE+-]*\).*/\1/p')
if awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a + 0 >= m + 0) }'; then
  echo "PASS: test_accuracy $acc >= $min"
else
  echo "FAIL: test_accuracy '$acc' below the bar $min" >&2
  exit 1
fi
