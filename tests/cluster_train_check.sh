#!/bin/sh
# Runs vgpu-train under mpirun and checks the cluster contract: exit 0, one JSON line per rank
# (ranks 0..NP-1 once each, "processes" NP), every rank's "params_checksum" equal, and every
# worker's test_accuracy at or above MIN_ACCURACY ("-" for no bar).
# usage: cluster_train_check.sh MPIEXEC NP VGPU_TRAIN MIN_ACCURACY [vgpu-train flags...]
# The mpirun environment (root, oversubscription, shared-memory transport) comes from CTest.
mpiexec="$1"
np="$2"
train="$3"
min="$4"
shift 4
out=$("$mpiexec" --oversubscribe -np "$np" "$train" --quiet "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne 0 ]; then
  echo "FAIL: mpirun -np $np vgpu-train exited $rc" >&2
  exit 1
fi
json=$(printf '%s\n' "$out" | grep '^{')
lines=$(printf '%s\n' "$json" | grep -c '"params_checksum"')
if [ "$lines" -ne "$np" ]; then
  echo "FAIL: $lines JSON lines for $np ranks" >&2
  exit 1
fi
field() {  # field KEY: the values of KEY, one per line
  printf '%s\n' "$json" | sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p"
}
ranks=$(field rank | sort -n | tr '\n' ' ')
want=$(seq 0 $((np - 1)) | tr '\n' ' ')
if [ "$ranks" != "$want" ]; then
  echo "FAIL: ranks '$ranks', expected '$want'" >&2
  exit 1
fi
if [ "$(field processes | sort -u)" != "$np" ]; then
  echo "FAIL: \"processes\" is not $np on every rank" >&2
  exit 1
fi
sums=$(field params_checksum | sort -u)
if [ "$(printf '%s\n' "$sums" | wc -l)" -ne 1 ] || [ -z "$sums" ]; then
  echo "FAIL: the ranks hold different parameters: $(echo $sums)" >&2
  exit 1
fi
echo "PASS: $np ranks, one parameter checksum $sums"
[ "$min" = "-" ] && exit 0
for acc in $(printf '%s\n' "$json" | grep -v '"job":"ps"' | sed -n 's/.*"test_accuracy":\([0-9.eE+-]*\).*/\1/p'); do
  if ! awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a + 0 >= m + 0) }'; then
    echo "FAIL: test_accuracy $acc below the bar $min" >&2
    exit 1
  fi
done
echo "PASS: every worker's test_accuracy >= $min"
