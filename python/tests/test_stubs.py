"""The stubs (_native.pyi, __init__.pyi) are generated from the built
module by tools/gen_stubs.py: the checked-in ones must be what it writes
now, and, read back independently, name every name, pyclass attribute and
function parameter (names, kinds, defaults) of the modules."""

import ast
import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import dsa_recall as d
from dsa_recall import _native
from conftest import REPO

PACKAGE = REPO / "python" / "dsa_recall"
GEN = REPO / "tools" / "gen_stubs.py"


def test_the_checked_in_stubs_are_the_generated_ones():
    r = subprocess.run([sys.executable, str(GEN), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_stale_stub_is_caught(tmp_path):
    for name in ("_native.pyi", "__init__.pyi"):
        shutil.copy(PACKAGE / name, tmp_path / name)
    text = (tmp_path / "_native.pyi").read_text()
    (tmp_path / "_native.pyi").write_text(text.replace("def presets() -> Any:", "def presets(extra: Any) -> Any:"))
    r = subprocess.run([sys.executable, str(GEN), "--check", "--stubs", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1
    assert "-def presets(extra: Any) -> Any:" in r.stdout and "+def presets() -> Any:" in r.stdout
    assert "1 stub(s) differ from the built module" in r.stderr


def _stub(name):
    """(functions, classes, variables) of a .pyi: name → ast node; names
    re-exported (`from X import N as N`) count as classes."""
    tree = ast.parse((PACKAGE / name).read_text())
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for n in tree.body:
        if isinstance(n, ast.ImportFrom) and n.module != "typing" and n.level == 1:
            classes.update({a.asname: None for a in n.names if a.asname})
    variables = {n.target.id: n for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return functions, classes, variables


def _default(node):
    return ast.literal_eval(node)


def _stub_parameters(fn):
    """[(name, kind, default or inspect.Parameter.empty)] of a stub function."""
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [inspect.Parameter.empty] * (len(positional) - len(a.defaults)) + [_default(x) for x in a.defaults]
    out = [(p.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, dflt) for p, dflt in zip(positional, defaults)]
    if a.vararg:
        out.append((a.vararg.arg, inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.empty))
    for p, dflt in zip(a.kwonlyargs, a.kw_defaults):
        out.append((p.arg, inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.empty if dflt is None else _default(dflt)))
    if a.kwarg:
        out.append((a.kwarg.arg, inspect.Parameter.VAR_KEYWORD, inspect.Parameter.empty))
    return out


def _parameters(fn, skip_self=False):
    params = list(inspect.signature(fn).parameters.values())
    if skip_self:
        params = params[1:]
    return [(p.name, p.kind, p.default) for p in params]


def _annotated(cls_node):
    """The annotated attributes of a stub class, in order."""
    return [n.target.id for n in cls_node.body if isinstance(n, ast.AnnAssign)]


def _same_parameters(stub, real):
    """Names, kinds and defaults equal; a stub's `...` default stands for any."""
    if [(n, k) for n, k, _ in stub] != [(n, k) for n, k, _ in real]:
        return False
    return all(s is ... and r is not inspect.Parameter.empty or s == r for (_, _, s), (_, _, r) in zip(stub, real))


def test_native_stub_names_are_the_modules_names():
    functions, classes, variables = _stub("_native.pyi")
    public = {n for n in dir(_native) if not n.startswith("_")} | {"__version__"}
    assert set(functions) | set(classes) | set(variables) == public


def test_native_stub_signatures_are_the_modules():
    functions, _, _ = _stub("_native.pyi")
    for name, node in functions.items():
        assert _same_parameters(_stub_parameters(node), _parameters(getattr(_native, name))), name


def test_native_stub_classes_have_the_pyclass_attributes():
    _, classes, _ = _stub("_native.pyi")
    for name, node in classes.items():
        cls = getattr(_native, name)
        if issubclass(cls, Exception):
            assert [b.id for b in node.bases] == [cls.__base__.__name__], name
            continue
        getters = {k for k, v in vars(cls).items() if inspect.isdatadescriptor(v) and not k.startswith("__")}
        assert set(_annotated(node)) == getters, name


def test_package_stub_covers_the_public_api():
    functions, classes, variables = _stub("__init__.pyi")
    declared = set(functions) | set(classes) | set(variables)
    assert set(d.__all__) <= declared, set(d.__all__) - declared
    for name, node in functions.items():
        assert _same_parameters(_stub_parameters(node), _parameters(getattr(d, name))), name
    for name, node in classes.items():
        cls = getattr(d, name)
        if node is None:
            continue
        if hasattr(cls, "_fields"):
            assert tuple(_annotated(node)) == cls._fields, name
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                assert _same_parameters(_stub_parameters(item)[1:], _parameters(cls.__init__, skip_self=True)), name
