#!/usr/bin/env python3
"""Import graph of src/: cycles between files and edges that go up the layer
order (base < model, numerics < score < estimate < config < run < diagnose < report <
tensors). Test modules count unless --no-tests is given. Prints the cycles,
the folder-level edges and every upward edge; exits 1 when there is a file
cycle or an upward edge.

    python3 tools/import_graph.py [--no-tests]
"""
import re,glob,sys,os
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
def modpath(f):
    p=f[4:-3].split('/')
    if p[-1]=='mod': p=p[:-1]
    return '::'.join(p)
mods={modpath(f):f for f in glob.glob('src/**/*.rs',recursive=True) if not f.endswith(('main.rs','cli.rs','lib.rs'))}
def resolve(path):
    parts=path.split('::')
    for n in range(len(parts),0,-1):
        c='::'.join(parts[:n])
        if c in mods: return c
    return None
edges={}
for m,f in mods.items():
    txt=open(f).read()
    strip_tests = '--no-tests' in sys.argv
    if strip_tests and '#[cfg(test)]' in txt: txt=txt[:txt.index('#[cfg(test)]')]
    txt=re.sub(r'//[^\n]*','',txt)
    deps=set()
    for g in re.finditer(r'crate::((?:[a-z_0-9]+::)*)\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}',txt):
        base=g.group(1)
        for part in re.split(r',(?![^{]*\})',g.group(2)):
            part=part.strip().split(' as ')[0]
            if part: 
                r=resolve(base+re.split(r'::\{',part)[0]) 
                if r: deps.add(r)
    for d in re.findall(r'crate::((?:[a-z_0-9]+)(?:::[a-z_0-9]+)*)',txt):
        r=resolve(d)
        if r: deps.add(r)
    for d in re.findall(r'\bsuper::([a-z_0-9]+)',txt):
        parent='::'.join(m.split('::')[:-1]) if not f.endswith('mod.rs') else '::'.join(m.split('::')[:-1])
        r=resolve((parent+'::' if parent else '')+d)
        if r: deps.add(r)
    deps.discard(m)
    # parent module relation is not an import
    edges[m]={d for d in deps if not m.startswith(d+'::') }
# cycles via DFS (SCC)
idx={};low={};st=[];on=set();sccs=[];c=[0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in edges.get(v,()):
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v:break
        if len(comp)>1: sccs.append(comp)
for v in list(edges):
    if v not in idx: sc(v)
print('file-level cycles:',sccs)
top=lambda m:m.split('::')[0]
fe={}
for a,ds in edges.items():
    for d in ds:
        if top(a)!=top(d): fe.setdefault(top(a),set()).add(top(d))
for a in sorted(fe): print(' ',a,'->',' '.join(sorted(fe[a])))
print('folder cycles:',[(a,b) for a in fe for b in fe[a] if a<b and a in fe.get(b,())])
order=['base','model','numerics','score','estimate','config','run','diagnose','report','tensors']
for a,ds in sorted(edges.items()):
    for d in ds:
        ta,td=top(a),top(d)
        if ta in order and td in order and order.index(td)>order.index(ta): print('  UP:',a,'->',d)
        if ta in ('model','numerics') and td in ('model','numerics') and ta!=td: print('  SIDE:',a,'->',d)
bad = bool(sccs) or any(
    top(a) in order and top(d) in order and (order.index(top(d)) > order.index(top(a)) or {top(a), top(d)} == {'model', 'numerics'})
    for a, ds in edges.items() for d in ds)
sys.exit(1 if bad else 0)
