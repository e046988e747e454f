#!/bin/bash
# two busy loops, one per core, for $1 ms out of every 250-450 ms, until killed
ms=${1:-100}
trap 'pkill -P $$; exit' TERM EXIT
while :; do
  for c in 0 1; do taskset -c $c timeout $(printf '0.%03d' $ms) sh -c 'while :; do :; done' & done
  wait
  sleep $(printf '0.%03d' $((150 + RANDOM % 200)))
done
