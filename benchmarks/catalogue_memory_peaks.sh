#!/bin/bash
# Peak RSS (VmHWM, sampled every 0.3 s) of `keras-dml index RUN --images IMAGES --uri DB`
# and of its Milvus Lite child. Usage: benchmarks/catalogue_memory_peaks.sh RUN IMAGES DB
# (RUN and IMAGES as made by benchmarks/bench_catalogue_memory.py under its --scratch).
LOG=$(mktemp)
cd "$(dirname "$0")/.."
[ -e "$3" ] && { echo "$3 exists: give a new database path"; exit 1; }
PYTHONPATH=$PWD TF_CPP_MIN_LOG_LEVEL=3 nice -n 10 python -m keras_dml.cli index $1 --images $2 --uri $3 --chunk-size 2048  &
P=$!
while kill -0 $P 2>/dev/null; do
  for pid in $P $(cat /proc/$P/task/*/children 2>/dev/null); do
    h=$(grep VmHWM /proc/$pid/status 2>/dev/null | awk '{print $2}'); [ -n "$h" ] && echo "$pid $h" >> "$LOG"
  done
  sleep 0.3
done
wait $P; echo "exit status $?"
sort -k1,1 -k2,2n "$LOG" | awk '{m[$1]=$2} END {for (p in m) print "pid", p, "peak MB", int(m[p]/1024)}'
