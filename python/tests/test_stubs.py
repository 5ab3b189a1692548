"""The hand-written stubs (_native.pyi, __init__.pyi) against the modules
they describe: every name, every pyclass attribute and every function's
parameters (names, kinds, defaults) on both sides, so that a stub cannot
drift from the compiled module or the package."""

import ast
import inspect
from pathlib import Path

import dsa_recall as d
from dsa_recall import _native

PACKAGE = Path(d.__file__).resolve().parent


def _stub(name):
    """(functions, classes, variables) of a .pyi: name → ast node."""
    tree = ast.parse((PACKAGE / name).read_text())
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
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
        if hasattr(cls, "_fields"):
            assert tuple(_annotated(node)) == cls._fields, name
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                assert _same_parameters(_stub_parameters(item)[1:], _parameters(cls.__init__, skip_self=True)), name
