#!/usr/bin/env python3
"""Writes the type stubs of the Python package from the built module:
python/dsa_recall/_native.pyi (the compiled module) and __init__.pyi (the
package), by introspection — names, signatures (``__text_signature__`` of
the compiled functions, ``inspect.signature`` with the source's annotations
of the Python ones), docstrings, class attributes and properties — so that
nothing is written twice.

    python tools/gen_stubs.py            # rewrite the two stubs
    python tools/gen_stubs.py --check    # exit 1, with a diff, when they are stale

Run it with the Python that has the package installed (tools/python_tests.sh's
venv; python/tests/test_stubs.py runs --check). The compiled module's
parameters and attributes carry no types in its signatures: they are
``Any`` there; the package's wrappers, which users call, carry their
source's annotations.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "python" / "dsa_recall"
INDENT = "    "


def _doc(obj, indent: str) -> list:
    """The object's own docstring as stub lines (none when it has none)."""
    doc = obj.__doc__ if isinstance(obj.__doc__, str) else None
    if not doc:
        return []
    doc = inspect.cleandoc(doc).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    lines = doc.splitlines()
    if len(lines) == 1:
        return [f'{indent}"""{lines[0]}"""']
    return [f'{indent}"""{lines[0]}'] + [f"{indent}{x}" if x else "" for x in lines[1:]] + [f'{indent}"""']


def _default(value) -> str:
    """A default as source text; `...` for what a literal cannot spell."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, (tuple, list)) and all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
        return repr(value)
    return "..."


def _annotation(a, typed: bool) -> str:
    """Annotation text as the source spells it (the package's are strings:
    it uses `from __future__ import annotations`), unquoted."""
    if not typed or a is inspect.Parameter.empty:
        return "Any"
    if hasattr(a, "__forward_arg__"):
        a = a.__forward_arg__
    text = a if isinstance(a, str) else inspect.formatannotation(a)
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return text


def _signature(fn, typed: bool, method: bool = False) -> str:
    """`(params) -> ret` of a function; parameters of the compiled module untyped (Any)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return "(self, *args: Any, **kwargs: Any) -> Any" if method else "(*args: Any, **kwargs: Any) -> Any"
    parts = []
    star_done = False
    for i, p in enumerate(sig.parameters.values()):
        if method and i == 0:
            # self (the compiled module's methods spell it `$self`)
            parts.append("self")
            continue
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        name = p.name
        if p.kind is p.VAR_POSITIONAL:
            name, star_done = "*" + name, True
        elif p.kind is p.VAR_KEYWORD:
            name = "**" + name
        text = f"{name}: {_annotation(p.annotation, typed)}"
        if p.default is not p.empty:
            text += f" = {_default(p.default)}"
        parts.append(text)
    ret = _annotation(sig.return_annotation, typed)
    return f"({', '.join(parts)}) -> {ret}"


def _value_type(v) -> str:
    if isinstance(v, str):
        return "str"
    if isinstance(v, tuple) and all(isinstance(x, str) for x in v):
        return "Tuple[str, ...]"
    return "Any"


def _function(name: str, fn, typed: bool, indent: str = "", method: bool = False) -> list:
    # A dunder's docstring is Python's generic one ("Return len(self).").
    doc = [] if name.startswith("__") else _doc(fn, indent + INDENT)
    head = f"{indent}def {name}{_signature(fn, typed, method)}:"
    return [head] + doc + [f"{indent}{INDENT}..."] if doc else [head + " ..."]


def _native_class(name: str, cls) -> list:
    if issubclass(cls, BaseException):
        return [f"class {name}({cls.__base__.__name__}):"] + (_doc(cls, INDENT) or [f"{INDENT}..."])
    out = ["@final", f"class {name}:"] + _doc(cls, INDENT)
    # Sorted: the compiled class's dict order is not its source's.
    members = sorted((a, v) for a, v in vars(cls).items() if not a.startswith("__") or a == "__len__")
    body = []
    for attr, v in members:
        if inspect.isdatadescriptor(v):
            body.append(f"{INDENT}{attr}: Any")
            body += [f"{INDENT}{line.strip()}" if line else "" for line in _doc(v, "")]
    for attr, v in members:
        if inspect.isdatadescriptor(v):
            continue
        if isinstance(inspect.getattr_static(cls, attr), staticmethod):
            body.append(f"{INDENT}@staticmethod")
            body += _function(attr, getattr(cls, attr), False, INDENT)
        elif callable(v):
            body += _function(attr, v, False, INDENT, method=True)
    return out + (body or [f"{INDENT}..."])


def native_stub(native) -> str:
    lines = [
        "# The compiled module dsa_recall._native, generated by tools/gen_stubs.py from",
        "# the built module (do not edit; python/tests/test_stubs.py checks it).",
        "# Use the wrappers in dsa_recall instead.",
        "from typing import Any, Tuple, final",
        "",
    ]
    names = sorted(n for n in dir(native) if not n.startswith("_")) + ["__version__"]
    variables = [n for n in names if not callable(getattr(native, n))]
    for n in sorted(variables, key=lambda n: (n != "__version__", n)):
        lines.append(f"{n}: {_value_type(getattr(native, n))}")
    for n in names:
        obj = getattr(native, n)
        if isinstance(obj, type):
            lines += [""] + _native_class(n, obj)
    lines.append("")
    for n in names:
        obj = getattr(native, n)
        if callable(obj) and not isinstance(obj, type):
            lines += _function(n, obj, False)
    return "\n".join(lines) + "\n"


def _py_class(name: str, cls) -> list:
    bases = getattr(cls, "__orig_bases__", None) or cls.__bases__
    base_names = []
    for b in bases:
        if b is object:
            continue
        if getattr(b, "__name__", "") == "NamedTuple" or (isinstance(b, type) and issubclass(b, tuple) and hasattr(cls, "_fields")):
            base_names.append("NamedTuple")
        else:
            base_names.append(getattr(b, "__name__", repr(b)))
    head = f"class {name}({', '.join(base_names)}):" if base_names else f"class {name}:"
    body = _doc(cls, INDENT)
    for attr, ann in getattr(cls, "__annotations__", {}).items():
        if not attr.startswith("_"):
            body.append(f"{INDENT}{attr}: {_annotation(ann, True)}")
    for attr, v in vars(cls).items():
        if attr.startswith("_") and attr not in ("__init__", "__len__", "__getitem__", "__contains__", "__iter__", "__bool__"):
            continue
        if hasattr(cls, "_fields") and attr in cls._fields:
            continue
        if isinstance(v, property):
            ret = _annotation(inspect.signature(v.fget).return_annotation, True)
            doc = _doc(v.fget, INDENT * 2)
            body += [f"{INDENT}@property", f"{INDENT}def {attr}(self) -> {ret}:"] + (doc + [f"{INDENT * 2}..."] if doc else [])
            if not doc:
                body[-1] += " ..."
        elif inspect.isfunction(v):
            body += _function(attr, v, True, INDENT, method=True)
    return [head] + (body or [f"{INDENT}..."])


def package_stub(package) -> str:
    native = package._native
    lines = [
        "# The package dsa_recall (docs/PYTHON.md), generated by tools/gen_stubs.py from",
        "# the built package (do not edit; python/tests/test_stubs.py checks it).",
        "from os import PathLike",
        "from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union",
        "",
        "import numpy as np",
        "",
        "from . import _native",
    ]
    reexports = []
    body = []
    for n in package.__all__:
        obj = getattr(package, n)
        module = getattr(obj, "__module__", "")
        if isinstance(obj, type) and getattr(native, n, None) is obj:
            reexports.append(f"from ._native import {n} as {n}")
        elif isinstance(obj, type) and module != package.__name__:
            reexports.append(f"from .{module.rsplit('.', 1)[-1]} import {n} as {n}")
        elif isinstance(obj, type):
            body += ["", ""] + _py_class(n, obj)
        elif callable(obj):
            body += ["", ""] + _function(n, obj, True)
    lines += reexports + ["", f"__version__: str"]
    for n in ("ELEMENT_FORMATS", "DEFAULT_REPLAY_VARIANTS"):
        lines.append(f"{n}: {_value_type(getattr(package, n))}")
    return "\n".join(lines + body) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the checked-in stubs instead of writing them")
    ap.add_argument("--stubs", type=Path, default=PACKAGE_DIR, help="the folder of the stubs (default: python/dsa_recall)")
    args = ap.parse_args()
    import dsa_recall
    from dsa_recall import _native

    stale = 0
    for name, text in (("_native.pyi", native_stub(_native)), ("__init__.pyi", package_stub(dsa_recall))):
        path = args.stubs / name
        old = path.read_text() if path.exists() else ""
        if old == text:
            continue
        if args.check:
            stale += 1
            diff = difflib.unified_diff(old.splitlines(True), text.splitlines(True), f"{name} (checked in)", f"{name} (generated)")
            sys.stdout.writelines(list(diff)[:80])
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"gen_stubs: {stale} stub(s) differ from the built module; run `python tools/gen_stubs.py` and commit them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
