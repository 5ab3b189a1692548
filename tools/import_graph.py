#!/usr/bin/env python3
"""Import graph of src/: which module uses which, every edge counted.

An edge A -> B is a path in A's code naming an item of module B:
`crate::…` paths (grouped imports included), `super::…` paths, and in a
parent module the paths through its own children (`child::item`). A
parent's `pub use child::…` re-exports and `mod` lines declare its
children and are not edges. Child -> parent edges count like any other, so
a parent that calls into a child while the child imports from the parent is
a cycle. `error` is a module like the others, at the bottom of the layer
order: it may use no other module.

Layer order (a module uses only modules of its own folder or earlier ones):
error < base < model, numerics < score < estimate < config < run <
diagnose < report < tensors < commands. The binary (main.rs, cli.rs,
cli/) is outside the graph.

Prints the file-level cycles, the folder-level edges, every upward or
sideways edge and the counts of child -> parent edges and of edges into and
out of `error`; exits 1 when there is a cycle or an upward edge.

    python3 tools/import_graph.py [--no-tests]
"""
import glob
import os
import re
import sys

os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
ORDER = ['error', 'base', 'model', 'numerics', 'score', 'estimate', 'config', 'run', 'diagnose', 'report', 'tensors', 'commands']
SIDEWAYS = {'model', 'numerics'}


def modpath(f):
    p = f[4:-3].split('/')
    if p[-1] == 'mod':
        p = p[:-1]
    return '::'.join(p)


files = [f for f in glob.glob('src/**/*.rs', recursive=True)
         if f not in ('src/main.rs', 'src/cli.rs', 'src/lib.rs') and not f.startswith('src/cli/')]
mods = {modpath(f): f for f in files}


def resolve(path):
    """The deepest module a path names (the rest is an item in it)."""
    parts = path.split('::')
    for n in range(len(parts), 0, -1):
        c = '::'.join(parts[:n])
        if c in mods:
            return c
    return None


def strip(text):
    text = re.sub(r'//[^\n]*', '', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return text


def paths(text, prefix):
    """Every path after `prefix::`, grouped imports expanded (`a::{b, c::d}`)."""
    out = []
    for g in re.finditer(prefix + r'::((?:[a-z_0-9]+::)*)\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}', text):
        base = g.group(1)
        for part in re.split(r',(?![^{]*\})', g.group(2)):
            part = part.strip().split(' as ')[0]
            if part:
                out.append(base + re.split(r'::\{', part)[0])
    # Plain paths; a path that opens a group is the group's prefix, counted above.
    out += re.findall(prefix + r'::((?:[a-z_0-9]+)(?:::[a-z_0-9]+)*)(?!::[a-z_0-9{])(?![a-z_0-9])', text)
    return out


def deps_of(m, f, text, in_tests):
    deps = set()
    for d in paths(text, 'crate'):
        r = resolve(d)
        if r:
            deps.add(r)
    # `super` of a file's own test module is the file's module.
    here = m if in_tests else '::'.join(m.split('::')[:-1])
    for d in paths(text, r'\bsuper'):
        r = resolve((here + '::' if here else '') + d)
        if r:
            deps.add(r)
    # `super::Item`: an item of the module above itself.
    if here in mods and re.search(r'\bsuper::[A-Z]', text):
        deps.add(here)
    # A parent's paths through its own children, re-exports and `mod` lines aside.
    children = set(re.findall(r'^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_0-9]+)\s*;', text, re.M))
    body = '\n'.join(l for l in text.split('\n')
                     if not re.match(r'\s*pub(\([a-z]+\))?\s+use\s', l) and not re.match(r'\s*(pub(\([a-z]+\))?\s+)?mod\s', l))
    for child in children:
        if re.search(r'(?<![:\w])' + child + r'::', body):
            r = resolve((m + '::' if m else '') + child)
            if r:
                deps.add(r)
    return deps


strip_tests = '--no-tests' in sys.argv
edges = {}
for m, f in mods.items():
    text = strip(open(f).read())
    cut = text.find('#[cfg(test)]')
    code, tests = (text, '') if cut < 0 else (text[:cut], text[cut:])
    deps = deps_of(m, f, code, False)
    if tests and not strip_tests:
        deps |= deps_of(m, f, tests, True)
    deps.discard(m)
    edges[m] = deps

# Cycles: strongly connected components.
idx, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)


def scc(v):
    idx[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in sorted(edges.get(v, ())):
        if w not in idx:
            scc(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))


for v in sorted(edges):
    if v not in idx:
        scc(v)
print('file-level cycles:', sccs)


def top(m):
    return m.split('::')[0]


folders = {}
for a, ds in edges.items():
    for d in ds:
        if top(a) != top(d):
            folders.setdefault(top(a), set()).add(top(d))
for a in sorted(folders):
    print(' ', a, '->', ' '.join(sorted(folders[a])))
folder_cycles = sorted((a, b) for a in folders for b in folders[a] if a < b and a in folders.get(b, ()))
print('folder cycles:', folder_cycles)

bad = bool(sccs) or bool(folder_cycles)
for a, ds in sorted(edges.items()):
    for d in sorted(ds):
        ta, td = top(a), top(d)
        if ta in ORDER and td in ORDER and ORDER.index(td) > ORDER.index(ta):
            print('  UP:', a, '->', d)
            bad = True
        if ta in SIDEWAYS and td in SIDEWAYS and ta != td:
            print('  SIDE:', a, '->', d)
            bad = True
child_parent = sorted((a, d) for a, ds in edges.items() for d in ds if a.startswith(d + '::'))
print(f'child -> parent edges: {len(child_parent)}' + ''.join(f'\n  {a} -> {d}' for a, d in child_parent))
into_error = sorted(a for a, ds in edges.items() if 'error' in ds)
print(f"edges into error: {len(into_error)}; out of error: {sorted(edges.get('error', ()))}")
sys.exit(1 if bad else 0)
