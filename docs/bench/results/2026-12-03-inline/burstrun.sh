#!/bin/bash
out=${OUT:-/tmp/burst}
for i in $(seq 1 ${N:-5}); do
  for v in ${VARIANTS:-diag diag3}; do
    b=binp; n=$v-$b-$i; rm -f $out/$n.log
    flock /tmp/bench.lock bash -c "/tmp/burst.sh ${MS:-100} & bp=\$!; TPC_DIAG_LOG=$out/$n.log /tmp/$v/$b/tpcoord bench e2e --json --combos pool+logspace+rank0 --tokens 512 --nproc 4 --batch 32 --forward-time 20ms --cpus 0-1 > $out/$n.json 2>$out/$n.err; kill \$bp; wait \$bp 2>/dev/null"
    echo "$(date +%T) $n"
  done
done
