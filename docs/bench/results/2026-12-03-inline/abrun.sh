#!/bin/bash
# alternate old (diag) and new (diag2), purego 512 and native 128
out=${OUT:-/tmp/ab}
for i in $(seq 1 ${N:-6}); do
  for b in binp bin; do
    for v in ${VARIANTS:-diag diag2}; do
      tok=512; [ $b = bin ] && tok=128
      n=$v-$b-$i; rm -f $out/$n.log
      TPC_DIAG_LOG=$out/$n.log flock /tmp/bench.lock /tmp/$v/$b/tpcoord bench e2e --json --combos pool+logspace+rank0 --tokens $tok --nproc 4 --batch 32 --forward-time 20ms --cpus 0-1 > $out/$n.json 2>$out/$n.err
      echo "$(date +%T) $n"
    done
  done
done
