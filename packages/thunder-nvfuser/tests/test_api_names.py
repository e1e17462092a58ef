"""Every nvFuser name the executor uses exists in nvFuser's real ``nvfuser_direct`` bindings.

The names used are collected from the package's own code (its syntax tree, and the op names its
registered lowerings close over), never listed by hand here. The names nvFuser has come from
``data/nvfuser_direct_api.json``, extracted from nvFuser's sources (pybind11 bindings and the
``nvfuser_direct`` Python wrapper) by ``tools/nvfuser_direct_api.py``; rerun that tool on a newer
NVIDIA/Fuser checkout to recheck against it.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest
from nvfuser_standin import API

import thunder_nvfuser
from thunder_nvfuser import lowering

PACKAGE = Path(thunder_nvfuser.__file__).parent
SOURCES = {name: PACKAGE / f"{name}.py" for name in ("lowering", "executor", "runtime")}
TOOL = Path(__file__).resolve().parents[1] / "tools" / "nvfuser_direct_api.py"

# how the code names nvFuser's objects: the module, a FusionDefinition, its ops namespace
_MODULE_VARS = {"nv"}
_FD_VARS = {"fd"}


def _is_fd(node: ast.AST) -> bool:
    """``fd`` or ``<anything>.fd``."""
    return (isinstance(node, ast.Name) and node.id in _FD_VARS) or (
        isinstance(node, ast.Attribute) and node.attr in _FD_VARS
    )


def _is_ops(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "ops" and _is_fd(node.value)


class _Uses(ast.NodeVisitor):
    """Collects ``(kind, name, keywords, line)`` for every use of an nvFuser name in one file."""

    def __init__(self, path: Path):
        self.path = path
        self.uses: list[tuple[str, str, tuple[str, ...], int]] = []
        self.dynamic_ops: list[ast.Call] = []

    def _add(self, kind: str, name: str, node: ast.AST, keywords=()) -> None:
        self.uses.append((kind, name, tuple(keywords), node.lineno))

    def visit_Call(self, node: ast.Call) -> None:
        keywords = [k.arg for k in node.keywords if k.arg is not None]
        f = node.func
        if isinstance(f, ast.Attribute) and _is_ops(f.value):
            self._add("op", f.attr, node, keywords)
        elif isinstance(f, ast.Attribute) and _is_fd(f.value):
            self._add("fd", f.attr, node, keywords)
        elif isinstance(f, ast.Name) and f.id == "getattr" and node.args:
            target, name = node.args[0], node.args[1] if len(node.args) > 1 else None
            constant = name.value if isinstance(name, ast.Constant) else None
            if isinstance(target, ast.Name) and target.id in _MODULE_VARS and constant is not None:
                self._add("module", constant, node)
            elif _is_ops(target):
                self.dynamic_ops.append(node)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id in _MODULE_VARS:
            self._add("module", node.attr, node)
        elif isinstance(node.value, ast.Attribute) and node.value.attr == "DataType":
            self._add("DataType", node.attr, node)
        elif node.attr != "ops" and _is_fd(node.value) and not isinstance(getattr(node, "_parent", None), ast.Call):
            self._add("fd-attr", node.attr, node)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return  # the module's own public names
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        # DataType members are looked up by name (getattr(DataType, "Float")): every capitalised
        # identifier-like string in the lowering is one
        if self.path.name == "lowering.py" and isinstance(node.value, str) and re.fullmatch(r"[A-Z]\w*", node.value):
            self._add("DataType", node.value, node)


def _collect() -> tuple[list[tuple[str, str, tuple[str, ...], str]], list[str]]:
    uses, dynamic = [], []
    for path in SOURCES.values():
        tree = ast.parse(path.read_text())
        for parent in ast.walk(tree):  # mark callee attributes so they are not counted twice
            if isinstance(parent, ast.Call):
                parent.func._parent = parent
        visitor = _Uses(path)
        visitor.visit(tree)
        uses += [(kind, name, kws, f"{path.name}:{line}") for kind, name, kws, line in visitor.uses]
        for call in visitor.dynamic_ops:
            # a dynamic op name must be the closure variable op_name of a registered lowering
            name = call.args[1] if len(call.args) > 1 else None
            assert isinstance(name, ast.Name) and name.id == "op_name", (
                f"{path.name}:{call.lineno}: getattr on fd.ops with a name this test cannot collect"
            )
            dynamic.append(f"{path.name}:{call.lineno}")
    return uses, dynamic


def _closure_op_names() -> dict[str, str]:
    """``{op name: prim id}`` for the lowerings that pick their op by a closed-over ``op_name``."""
    names = {}
    for prim_id, lw in lowering.LOWERINGS.items():
        code, cells = lw.lower.__code__, lw.lower.__closure__ or ()
        for var, cell in zip(code.co_freevars, cells):
            if var == "op_name":
                names[cell.cell_contents] = prim_id
    return names


USES, DYNAMIC = _collect()


def test_the_collection_sees_the_lowering():
    kinds = {kind for kind, *_ in USES}
    assert {"op", "fd", "module", "DataType"} <= kinds
    ops = {name for kind, name, *_ in USES if kind == "op"}
    assert len(ops) > 15 and {"cast", "broadcast_in_dim", "where"} <= ops
    assert DYNAMIC, "the unary, binary and reduction lowerings pick their op by name"
    closure = _closure_op_names()
    assert {"add", "exp", "sum"} <= set(closure)


def test_api_file_is_from_nvfuser_sources():
    assert API["source"].startswith("NVIDIA/Fuser@")
    assert {"FusionDefinition", "DataType", "ops", "define_tensor", "compute_tensor_descriptor"} <= set(API["module"])
    assert len(API["ops"]) > 100
    # the names were also found in a published wheel's compiled extension (tools/nvfuser_direct_api.py --wheel)
    assert API["wheel"]["wheel"].startswith("nvfuser_cu130_torch210-")
    assert API["wheel"]["names_missing_in_extension"] == []
    assert API["wheel"]["same_fusion_definition_methods"] is True


def test_every_op_and_keyword_exists():
    problems = []
    for kind, name, keywords, where in USES:
        if kind != "op":
            continue
        if name not in API["ops"]:
            problems.append(f"{where}: ops.{name} does not exist")
        elif set(keywords) - set(API["ops"][name]):
            problems.append(f"{where}: ops.{name} has no keyword {sorted(set(keywords) - set(API['ops'][name]))}")
    for name, prim_id in _closure_op_names().items():
        if name not in API["ops"]:
            problems.append(f"lowering of {prim_id}: ops.{name} does not exist")
    assert not problems, "\n".join(problems)


def test_every_fusion_definition_call_exists_with_its_keywords():
    problems = []
    methods = API["FusionDefinition"]
    for kind, name, keywords, where in USES:
        if kind not in ("fd", "fd-attr"):
            continue
        if name not in methods:
            problems.append(f"{where}: FusionDefinition.{name} does not exist")
            continue
        params = methods[name]
        if "**kwargs" in params:
            # a pass-through to the module function of the same name (define_tensor, define_scalar), or
            # to the Fusion object's method (add_output), whose keywords this file does not hold: none allowed
            params = API["functions"].get(name, [])
        unknown = set(keywords) - set(params)
        if unknown:
            problems.append(f"{where}: FusionDefinition.{name} has no keyword {sorted(unknown)}")
    assert not problems, "\n".join(problems)


def test_every_module_name_and_datatype_member_exists():
    problems = []
    for kind, name, _, where in USES:
        if kind == "module" and name not in API["module"]:
            problems.append(f"{where}: nvfuser_direct.{name} does not exist")
        if kind == "DataType" and name not in API["DataType"]:
            problems.append(f"{where}: DataType.{name} does not exist")
    assert not problems, "\n".join(problems)
    assert set(lowering._DTYPE_NAMES.values()) <= set(API["DataType"])


def test_a_wrong_name_would_be_caught(tmp_path):
    """The checks fail on a misspelt op, keyword or DataType member (not vacuous)."""
    bad = tmp_path / "lowering.py"
    bad.write_text(
        "def f(ctx, a):\n"
        "    x = ctx.fd.ops.broadcast_in_dims(a, shape=[1])\n"
        "    y = ctx.fd.ops.reshape(a, shape=[1])\n"
        "    return ctx.fd.define_tensor(shape=[-1], contiguity=[True], dtype=ctx.DataType.Float32)\n"
    )
    visitor = _Uses(bad)
    tree = ast.parse(bad.read_text())
    for parent in ast.walk(tree):
        if isinstance(parent, ast.Call):
            parent.func._parent = parent
    visitor.visit(tree)
    found = {(kind, name, kws) for kind, name, kws, _ in visitor.uses}
    assert ("op", "broadcast_in_dims", ("shape",)) in found and "broadcast_in_dims" not in API["ops"]
    assert ("op", "reshape", ("shape",)) in found and "shape" not in API["ops"]["reshape"]
    assert ("DataType", "Float32", ()) in found and "Float32" not in API["DataType"]
    assert ("fd", "define_tensor", ("shape", "contiguity", "dtype")) in found


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("nvfuser_direct_api", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_extraction_tool_reads_bindings(tool):
    ops_cpp = r"""
#define MY_UNARY(NAME, OP)                 \
  ops.def(NAME, [](TensorView* v) { return OP(v); }, py::arg("arg"));
void bindOps(py::module_& ops) {
  MY_UNARY("exp", exp)
  // ops.def("commented_out", ...)
  ops.def(
      "pad",
      pad_fn,
      py::arg("arg"),
      py::arg("pad_widths"),
      R"(Docs that mention py::arg("not_an_arg").)",
      py::arg("value").none(true) = py::none());
  ops.def("pad", other_fn, py::arg("arg"), py::arg("mode"));
}
"""
    assert tool.parse_ops(ops_cpp) == {"exp": ["arg"], "pad": ["arg", "mode", "pad_widths", "value"]}
    ir_cpp = r"""
void bindDefineTensor(py::module& nvfuser) {
  nvfuser
      .def("define_tensor", [](int x) { return f(x); }, py::arg("shape"), py::arg("contiguity"))
      .def("define_tensor", [](int x) { return g(x); }, py::arg("sizes"));
  nvfuser.def("define_scalar", [](int v) { return h(v); }, py::arg("value"), py::arg("dtype") = 1);
}
"""
    assert tool.parse_module_functions({"ir.cpp": ir_cpp}) == {
        "define_scalar": ["dtype", "value"],
        "define_tensor": ["contiguity", "shape", "sizes"],
    }
    enum_cpp = 'py::enum_<PrimDataType>(nvfuser, "DataType", py::module_local())\n.value("Float", X)\n.value("Int", Y);'
    assert tool.parse_datatype(enum_cpp) == ["Float", "Int"]


def test_extraction_tool_checks_a_wheel(tool, tmp_path):
    import zipfile

    init_py = "class FusionDefinition:\n    def execute(self, inputs, *, device=None):\n        pass\n"
    wheel = tmp_path / "nvfuser_cu130_torch210-0.0.1-cp312-cp312-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("nvfuser_direct/__init__.py", init_py)
        z.writestr("nvfuser_direct/_C_DIRECT.cpython-312-x86_64-linux-gnu.so", b"\0ELF\0add\0Float\0arg\0")
    api = {"ops": {"add": [], "sub": ["arg"]}, "functions": {}, "DataType": ["Float"]}
    api["FusionDefinition"] = {"execute": ["inputs", "device"]}
    assert tool.check_wheel(api, wheel) == {
        "wheel": wheel.name,
        "names_missing_in_extension": ["sub"],
        "same_fusion_definition_methods": True,
    }
