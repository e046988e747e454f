import json,glob,re,sys,collections
out=sys.argv[1] if len(sys.argv)>1 else '/tmp/ab'
res=collections.defaultdict(list)
for f in glob.glob(out+'/*.json'):
    n=f.split('/')[-1][:-5]
    v,b,i=n.split('-')
    for l in open(f):
        if not l.strip(): continue
        d=json.loads(l)
        if d.get('kind')=='combo':
            # discarded over the whole log
            disc=0; picks=0
            try:
                for ln in open(f[:-5]+'.log'):
                    m=re.search(r'discarded=(\d+)',ln); disc+=int(m.group(1)) if m else 0; picks+=1
            except FileNotFoundError: pass
            res[(b,v)].append((int(i),round(d['output_tokens_per_s']),d['step_median_ms']['sample'],d.get('noise_pool',{}).get('rows_inline'),disc,picks))
for k in sorted(res):
    rs=sorted(res[k])
    print(k, 'tok/s', [r[1] for r in rs], 'inline', [r[3] for r in rs], 'discarded', [r[4] for r in rs])
