#!/usr/bin/env python3
"""Import graph of src/: which module uses which, every edge counted.

An edge A -> B is a path in A's code naming module B or an item of it. A
path is resolved the way rustc resolves it, from the module the code is in
(a file's module, or an inline `mod` block inside it):

* `crate::…` from the crate root;
* `super::…` from the module above, `super::super::…` (and deeper) from
  the one above that, and so on; `self::…` from the module itself;
* a name the module has in scope: its own children (`child::item`), a
  module it imported with `use`, or a child of a module it glob-imported
  (`use super::*` in a test module brings the file's children in).

Grouped imports are expanded (`use crate::a::{b, c::{d, e}}`). When a path
names an item that its module only re-exports (`pub use crate::b::X` in
module a, or the crate root's `pub use` in lib.rs), the path is an edge to
the module that re-exports it and to the module the item comes from
(`use crate::a::X` is an edge to a and to b), following chains of
re-exports. A module's `mod` lines and its `pub use` of its own children
(re-exports of what it declares) are not edges, but its own code naming
an item it re-exports from a child is. Child -> parent edges count
like any other, so a parent that calls into a child while the child imports
from the parent is a cycle. `error` is a module like the others, at the
bottom of the layer order: it may use no other module.

Test code counts: `#[cfg(test)]` items and modules (inline `mod tests {…}`)
and test files (a file declared by `#[cfg(test)] mod name;`, such as a
sibling `tests.rs`, and the files below it). A file's test code is part of
its module: a test file's edges are those of the module that declares it,
as an inline test module's are, so moving tests out of a file neither
hides nor adds a cycle. `--no-tests` leaves test code out.

Layer order (a module uses only modules of its own folder or earlier ones):
error < base < model, numerics < score < estimate < config < run <
diagnose < report < tensors < commands. The binary (main.rs, cli.rs,
cli/) is outside the graph.

Prints how many edges each kind of path found, the file-level cycles (each
with one closed path through it and the kind of each step), the
folder-level edges, every upward or sideways edge and the counts of
child -> parent edges and of edges into and out of `error`; exits 1 when
there is a cycle, an upward edge or a forbidden one (report -> estimate:
report reads what run produced, never the estimators).

    python3 tools/import_graph.py [--no-tests]
"""
import glob
import os
import re
import sys

os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
ORDER = ['error', 'base', 'model', 'numerics', 'score', 'estimate', 'config', 'run', 'diagnose', 'report', 'tensors', 'commands']
SIDEWAYS = {'model', 'numerics'}
# Edges the order allows but the design does not: report draws what run
# produced (its cells and their types) and never reaches past run into the
# estimators.
FORBIDDEN = {('report', 'estimate')}
# How a path reached its module, in the order the counts print.
KINDS = ['crate', 'super', 'super::super', 'self', 'child', 'use-alias', 're-export']


def modpath(f):
    p = f[4:-3].split('/')
    if p[-1] == 'mod':
        p = p[:-1]
    return '::'.join(p)


def parent(m):
    return '::'.join(m.split('::')[:-1])


def join(a, b):
    return a + '::' + b if a else b


files = [f for f in sorted(glob.glob('src/**/*.rs', recursive=True))
         if f not in ('src/main.rs', 'src/cli.rs', 'src/lib.rs') and not f.startswith('src/cli/')]
mods = {modpath(f): f for f in files}

# ---------------------------------------------------------------- lexing


CHAR = re.compile(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'")
RAW = re.compile(r'b?r(#*)"')


def strip(text):
    """The text with comments, strings and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)

    def blank(s):
        out.append(re.sub(r'[^\n]', ' ', s))

    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            blank(text[i:j])
            i = j
        elif text.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith('/*', j):
                    depth, j = depth + 1, j + 2
                elif text.startswith('*/', j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(text[i:j])
            i = j
        elif c in 'rb' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')) and RAW.match(text, i):
            m = RAW.match(text, i)
            end = text.find('"' + m.group(1), m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(text[i:m.end() - 1] + '"')
            blank(text[m.end():j - 1 - len(m.group(1))])
            out.append('"' + m.group(1))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            out.append('"')
            blank(text[i + 1:j])
            out.append('"')
            i = j + 1
        elif c == "'" and CHAR.match(text, i):
            m = CHAR.match(text, i)
            out.append("' '" + ' ' * (len(m.group(0)) - 3))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def match_brace(text, i):
    """Index just past the brace that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == '{':
            depth += 1
        elif text[j] == '}':
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


CFG_TEST = re.compile(r'#\[\s*cfg\s*\(\s*test\s*\)\s*\]')
ATTR = re.compile(r'\s*#\[')
INLINE_MOD = re.compile(r'\bmod\s+(\w+)\s*\{')
FILE_MOD = re.compile(r'\bmod\s+(\w+)\s*;')


def item_end(text, i):
    """Where the item starting at i (after its attributes) ends."""
    while True:
        m = ATTR.match(text, i)
        if not m:
            break
        depth, j = 0, m.end() - 1
        while j < len(text):
            depth += {'[': 1, ']': -1}.get(text[j], 0)
            j += 1
            if depth == 0:
                break
        i = j
    semi, brace = text.find(';', i), text.find('{', i)
    if brace < 0 or (0 <= semi < brace):
        return semi + 1
    return match_brace(text, brace)


def regions(m, text):
    """The file's code split into (scope, is_test, text) pieces: the file's
    own module and each inline `mod` block (its scope `file::name`), with
    `#[cfg(test)]` items marked; other pieces' characters blanked."""
    spans = [(g.start(), match_brace(text, g.end() - 1), g.group(1)) for g in INLINE_MOD.finditer(text)]
    tests = [(g.start(), item_end(text, g.end())) for g in CFG_TEST.finditer(text)]
    cuts = sorted({0, len(text)} | {x for a, b, _ in spans for x in (a, b)} | {x for t in tests for x in t})
    pieces = {}
    for a, b in zip(cuts, cuts[1:]):
        scope = m
        for s0, s1, name in sorted(spans):
            if s0 <= a < s1:
                scope = join(scope, name)
        key = (scope, any(t0 <= a < t1 for t0, t1 in tests))
        piece = pieces.setdefault(key, [' '] * len(text))
        piece[a:b] = text[a:b]
    return [(scope, is_test, ''.join(chars)) for (scope, is_test), chars in pieces.items()]


# ---------------------------------------------------------------- use trees

USE = re.compile(r'(?<![\w:])(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]+);')


def use_pairs(body):
    """(segments, bound name) pairs of a use tree, `a as b` understood."""
    body = re.sub(r'\s+as\s+', ' as ', body.strip())
    out = []

    def parse(prefix, text):
        text = text.strip()
        brace = text.find('{')
        if brace >= 0 and text.endswith('}'):
            head = [p for p in text[:brace].split('::') if p]
            inner, depth, start = text[brace + 1:-1], 0, 0
            parts = []
            for k, ch in enumerate(inner):
                depth += {'{': 1, '}': -1}.get(ch, 0)
                if ch == ',' and depth == 0:
                    parts.append(inner[start:k])
                    start = k + 1
            parts.append(inner[start:])
            for part in parts:
                if part.strip():
                    parse(prefix + head, part)
            return
        alias = None
        if ' as ' in text:
            text, alias = [x.strip() for x in text.split(' as ')]
        segs = prefix + [p.strip() for p in text.split('::') if p.strip()]
        if segs and segs[-1] == '*':
            out.append((segs[:-1], '*'))
        elif segs and segs[-1] == 'self':
            out.append((segs[:-1], alias or segs[-2] if len(segs) > 1 else None))
        elif segs:
            out.append((segs, alias or segs[-1]))

    parse([], body)
    return out


PATH = re.compile(r'(?<![\w:$])\$?((?:crate|super|self|[a-z_][a-z0-9_]*)(?:\s*::\s*[A-Za-z_]\w*)+)')

# ---------------------------------------------------------------- scopes


class Scope:
    def __init__(self, name, file_module):
        self.name = name  # module path (a file's module or an inline block)
        self.file_module = file_module
        self.children = {}  # declared `mod` children: name -> module
        self.uses = []  # (segments, bound name, is_pub, is_test)
        self.aliases = {}  # names a `use` bound to a module
        self.globs = []  # modules glob-imported
        self.paths = []  # (segments, is_test) outside use statements
        self.texts = []  # (code outside use statements, is_test)


scopes = {}
test_files = set()
for m, f in mods.items():
    text = strip(open(f).read())
    for g in CFG_TEST.finditer(text):
        fm = FILE_MOD.match(text, re.compile(r'\s*(?:pub(?:\([^)]*\))?\s+)?').match(text, g.end()).end())
        if fm and join(m, fm.group(1)) in mods:
            test_files.add(join(m, fm.group(1)))
    for scope, is_test, piece in regions(m, text):
        sc = scopes.setdefault(scope, Scope(scope, m))
        if scope == m:
            for name in FILE_MOD.findall(piece):
                if join(m, name) in mods:
                    sc.children[name] = join(m, name)
        for u in USE.finditer(piece):
            for segs, bound in use_pairs(u.group(2)):
                sc.uses.append((segs, bound, bool(u.group(1)), is_test))
        rest = USE.sub(lambda u: ' ' * len(u.group(0)), piece)
        sc.texts.append((rest, is_test))
        for p in PATH.findall(rest):
            sc.paths.append(([s.strip() for s in p.split('::')], is_test))
# A file below a test file is test code too.
test_files |= {m for m in mods if any(m.startswith(t + '::') for t in test_files)}

# The crate root's re-exports (lib.rs).
root = scopes.setdefault('', Scope('', ''))
root_text = strip(open('src/lib.rs').read())
for name in FILE_MOD.findall(root_text):
    if name in mods:
        root.children[name] = name
for u in USE.finditer(root_text):
    for segs, bound in use_pairs(u.group(2)):
        root.uses.append((segs, bound, bool(u.group(1)), False))


def names(scope, seen=()):
    """Name -> (module, kind) for the modules a scope can name by one word:
    its children, the modules its `use` lines bound, and through a glob
    import a module's children (and, from inside it, the names it bound)."""
    sc = scopes.get(scope)
    if sc is None or scope in seen:
        return {}
    out = {}
    for g in sc.globs:
        for n, found in names(g, seen + (scope,)).items():
            if found[1] == 'child' or scope.startswith(g + '::'):
                out.setdefault(n, found)
    for n, mod in sc.aliases.items():
        out[n] = (mod, 'use-alias')
    for n, mod in sc.children.items():
        out[n] = (mod, 'child')
    return out


def reexports(module):
    """Item name -> (module it comes from, its name there) for a module's `pub use`."""
    sc = scopes.get(module)
    out = {}
    if sc is None:
        return out
    for segs, bound, is_pub, _ in sc.uses:
        if is_pub and bound != '*':
            r = walk(segs, module)
            if r:
                out[bound] = (r[0], r[2])
    return out


def walk(segs, scope):
    """(module, kind, item) a path reaches from a scope, before re-exports; None outside the crate."""
    if not segs:
        return None
    head = segs[0]
    if head in ('crate', '$crate'):
        cur, i, kind = '', 1, 'crate'
    elif head == 'super':
        i = 0
        cur = scope
        while i < len(segs) and segs[i] == 'super':
            cur, i = parent(cur), i + 1
        kind = 'super' if i == 1 else 'super::super'
    elif head == 'self':
        cur, i, kind = scope, 1, 'self'
    else:
        found = names(scope).get(head)
        if not found:
            return None
        (cur, kind), i = found, 1
    while i < len(segs) and join(cur, segs[i]) in mods:
        cur, i = join(cur, segs[i]), i + 1
    while cur and cur not in mods:  # an inline module: its file's
        cur = parent(cur)
    return cur, kind, segs[i] if i < len(segs) else None


def resolve(segs, scope):
    """Every (module, kind) a path is an edge to: its module, then the
    modules each re-export of the item leads to."""
    r = walk(segs, scope)
    if not r:
        return []
    cur, kind, item = r
    out = [(cur, kind)] if cur else []
    seen = set()
    while item and (cur, item) not in seen:
        seen.add((cur, item))
        ex = reexports(cur).get(item)
        if not ex:
            break
        cur, item = ex
        if cur:
            out.append((cur, 're-export'))
    return out


# Modules bound by `use` and glob imports, resolved until nothing changes
# (a `use` may go through another one's name).
for _ in range(4):
    for sc in scopes.values():
        for segs, bound, _, _ in sc.uses:
            r = walk(segs, sc.name)
            if not r or not r[0] or r[2] is not None:
                continue  # outside the crate, the root, or an item
            if bound == '*':
                if r[0] not in sc.globs:
                    sc.globs.append(r[0])
            else:
                sc.aliases[bound] = r[0]


# ---------------------------------------------------------------- edges

strip_tests = '--no-tests' in sys.argv


def owner(m):
    """The module whose code a file is: a test file's is the module that
    declares it, so that tests in a sibling file count as an inline test
    module would."""
    while m in test_files:
        m = parent(m)
    return m


edges = {m: set() for m in mods if m not in test_files}
kinds = {}  # (a, b) -> set of kinds
tested = {}  # (a, b) -> True when found only in test code so far


def add(a, b, kind, is_test):
    if not b or b not in mods:
        return
    a, b = owner(a), owner(b)
    if b == a:
        return
    edges[a].add(b)
    kinds.setdefault((a, b), set()).add(kind)
    tested[(a, b)] = tested.get((a, b), True) and is_test


for sc in scopes.values():
    a = sc.file_module
    if a not in mods:
        continue
    file_test = a in test_files
    if strip_tests and file_test:
        continue
    for segs, bound, is_pub, is_test in sc.uses:
        if strip_tests and is_test:
            continue
        r = walk(segs, sc.name)
        # A parent's re-export of what it declares is a declaration; the
        # parent's own code naming the item it re-exports is an edge.
        if is_pub and r and r[0].startswith(a + '::'):
            word = re.compile(r'(?<![\w:.])' + re.escape(bound) + r'\b')
            for text, in_test in sc.texts:
                if not (strip_tests and in_test) and word.search(text):
                    add(a, r[0], r[1], in_test or file_test)
            continue
        for b, kind in resolve(segs, sc.name):
            add(a, b, kind, is_test or file_test)
    for segs, is_test in sc.paths:
        if strip_tests and is_test:
            continue
        for b, kind in resolve(segs, sc.name):
            add(a, b, kind, is_test or file_test)

counts = {k: sum(1 for ks in kinds.values() if k in ks) for k in KINDS}
only = {k: sum(1 for ks in kinds.values() if ks == {k}) for k in KINDS}
files_note = f"; {len(test_files)} test file{'' if len(test_files) == 1 else 's'}, counted as their modules"
print(f'edges: {len(kinds)}' + ('' if strip_tests else f' ({sum(tested.values())} only in test code{files_note})'))
print('edges by kind of path (an edge counts once for each kind that finds it; "only": no other kind finds it):')
for k in KINDS:
    print(f'  {k:13} {counts[k]:4}   only {only[k]}')

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


def cycle_in(comp):
    """One closed path through a component, by breadth-first search."""
    start, members = comp[0], set(comp)
    prev, queue = {start: None}, [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v] & members):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def step(a, b):
    return f"{'/'.join(sorted(kinds[(a, b)]))}{', test code' if tested[(a, b)] else ''}"


print('file-level cycles:', sccs)
for comp in sccs:
    path = cycle_in(comp)
    print('  cycle: ' + path[0] + ''.join(f' -> {b} ({step(a, b)})' for a, b in zip(path, path[1:])))


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
            print('  UP:', a, '->', d, f'({step(a, d)})')
            bad = True
        if ta in SIDEWAYS and td in SIDEWAYS and ta != td:
            print('  SIDE:', a, '->', d, f'({step(a, d)})')
            bad = True
        if (ta, td) in FORBIDDEN:
            print('  FORBIDDEN:', a, '->', d, f'({step(a, d)})')
            bad = True
child_parent = sorted((a, d) for a, ds in edges.items() for d in ds if a.startswith(d + '::'))
print(f'child -> parent edges: {len(child_parent)}' + ''.join(f'\n  {a} -> {d}' for a, d in child_parent))
into_error = sorted(a for a, ds in edges.items() if 'error' in ds)
print(f"edges into error: {len(into_error)}; out of error: {sorted(edges.get('error', ()))}")
sys.exit(1 if bad else 0)
