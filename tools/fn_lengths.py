#!/usr/bin/env python3
"""Lists Rust functions longer than a limit (issue 27: at most 8 over 80 lines)
and source files longer than a limit (none over 900 lines).

A function's length counts the lines from its `fn` line to its closing brace,
tests included (`#[cfg(test)]` modules are skipped: test bodies are tables).
Braces inside strings, chars and comments are ignored.

A file's length is its number of lines. Test files (named tests.rs, or in a
folder named tests/) are left out of both counts, as inline `#[cfg(test)]`
modules are left out of the function count: a file's tests go to its
sibling tests.rs (`#[cfg(test)] mod tests;`), and only the code is held to
the limits.

    python3 tools/fn_lengths.py [--limit 80] [--max-count 8] [--max-file-lines 900] [paths...]

Exits 1 when more than --max-count functions exceed the limit, or when any
file other than a test file has more than --max-file-lines lines.
"""
import argparse
import pathlib
import re
import sys

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")


def strip(line, state):
    """Removes string, char and comment text; state carries block comments and strings across lines."""
    out = []
    i = 0
    while i < len(line):
        c = line[i]
        if state["block"]:
            if line.startswith("*/", i):
                state["block"] -= 1
                i += 2
            elif line.startswith("/*", i):
                state["block"] += 1
                i += 2
            else:
                i += 1
            continue
        if state["str"]:
            if c == "\\" and not state["raw"]:
                i += 2
                continue
            if c == '"' and line.startswith('"' + "#" * state["hashes"], i):
                state["str"] = False
                i += 1 + state["hashes"]
            else:
                i += 1
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] += 1
            i += 2
            continue
        m = re.match(r'(b?r)(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            state.update(str=True, raw=True, hashes=len(m.group(2)))
            i += len(m.group(0))
            continue
        if c == '"':
            state.update(str=True, raw=False, hashes=0)
            i += 1
            continue
        m = re.match(r"b?'(\\.[^']*|[^\\'])'", line[i:])
        if m:
            i += len(m.group(0))
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    lines = path.read_text().splitlines()
    state = {"block": 0, "str": False, "raw": False, "hashes": 0}
    clean = [strip(l, state) for l in lines]
    skip_until = -1
    found = []
    for n, line in enumerate(clean):
        if n <= skip_until:
            continue
        if re.match(r"^\s*#\[cfg\(test\)\]", line):
            # skip the following item (a test module) by brace matching; an
            # item without a body (`mod tests;`) ends at its semicolon
            depth, started = 0, False
            for m in range(n + 1, len(clean)):
                if not started and ";" in clean[m] and "{" not in clean[m]:
                    skip_until = m
                    break
                depth += clean[m].count("{") - clean[m].count("}")
                started = started or "{" in clean[m]
                if started and depth <= 0:
                    skip_until = m
                    break
            continue
        m = FN.match(line)
        if not m:
            continue
        depth, started = 0, False
        for e in range(n, len(clean)):
            text = clean[e]
            if not started and ";" in text and "{" not in text:
                break  # a declaration without a body
            depth += text.count("{") - text.count("}")
            started = started or "{" in text
            if started and depth <= 0:
                found.append((e - n + 1, str(path), n + 1, m.group(7)))
                break
    return found


def is_test_file(path):
    """A test file: named tests.rs, or in a folder named tests/."""
    return path.name == "tests.rs" or "tests" in path.parts[:-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--max-count", type=int, default=8)
    ap.add_argument("--max-file-lines", type=int, default=900)
    ap.add_argument("paths", nargs="*", default=["src", "python/src"])
    a = ap.parse_args()
    rows, sizes = [], []
    for p in a.paths:
        for f in sorted(pathlib.Path(p).rglob("*.rs")):
            if is_test_file(f):
                continue
            rows += functions(f)
            sizes.append((len(f.read_text().splitlines()), str(f)))
    long = sorted((r for r in rows if r[0] > a.limit), reverse=True)
    for length, path, line, name in long:
        print(f"{length:5} {path}:{line} {name}")
    print(f"{len(long)} functions over {a.limit} lines (allowed: {a.max_count})")
    big = sorted((s for s in sizes if s[0] > a.max_file_lines), reverse=True)
    for lines, path in big:
        print(f"{lines:5} {path}")
    print(f"{len(big)} files over {a.max_file_lines} lines, test files aside (allowed: 0)")
    return 1 if len(long) > a.max_count or big else 0


if __name__ == "__main__":
    sys.exit(main())
