import re,glob,sys,collections,statistics
out=sys.argv[1]
agg=collections.defaultdict(list)
for f in sorted(glob.glob(out+'/*.log')):
    n=f.split('/')[-1][:-4]; v,b,i=n.split('-')
    lines=open(f).read().splitlines()
    # per-row producer cost in picks 3..8 (warm-up end and measured start) vs picks 20..40 (steady)
    def rate(sel):
        prod=busy=0
        for ln in sel:
            m=dict(re.findall(r'(\w+)=([\d.]+)',ln))
            prod+=int(m['produced']); busy+=float(m['busy'].rstrip('ms'))
        return busy/prod*1000 if prod else float('nan')
    early=rate(lines[2:8]); steady=rate(lines[20:40])
    agg[(b,v)].append((early,steady))
for k in sorted(agg):
    e=[x[0] for x in agg[k]]; s=[x[1] for x in agg[k]]
    print(k, 'early us/row median %.0f'%statistics.median(e), [round(x) for x in e], 'steady %.0f'%statistics.median(s))
