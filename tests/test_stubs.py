"""python/loaderx/_native.pyi names exactly what the extension exports."""

import ast
import inspect
import pathlib

from loaderx import _native

STUB = pathlib.Path(inspect.getfile(_native)).with_name("_native.pyi")
KEPT_DUNDERS = {"__dlpack__", "__dlpack_device__", "__len__", "__next__", "__iter__", "__new__"}


def stub_names():
    tree = ast.parse(STUB.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.FunctionDef):
            out[node.name] = None
        elif isinstance(node, ast.AnnAssign):
            out[node.target.id] = None
    return out


def module_names():
    out = {}
    for name in dir(_native):
        if name.startswith("__"):
            continue
        obj = getattr(_native, name)
        if isinstance(obj, type):
            members = set(vars(obj)) if not issubclass(obj, Exception) else set()
            out[name] = {m for m in members if not m.startswith("__") or m in KEPT_DUNDERS}
        else:
            out[name] = None
    return out


def test_stub_matches_the_extension():
    assert stub_names() == module_names()
