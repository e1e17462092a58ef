"""Regenerates ``tests/data/nvfuser_direct_api.json``: the names nvFuser's ``nvfuser_direct`` module binds.

The test ``tests/test_api_names.py`` checks every nvFuser name the lowering uses (module
attributes, ``FusionDefinition`` methods, ``ops.<op>`` and their keyword arguments, ``DataType``
members) against this file, so a misspelt or removed name fails on a CPU and not first on a GPU.

The names are read from nvFuser's sources, not from an installed wheel (which needs a GPU build
of torch to import): the pybind11 bindings in ``python/python_direct/*.cpp`` and the Python
wrapper ``python/nvfuser_direct/__init__.py``. Run it on a checkout of NVIDIA/Fuser::

    git clone --depth 1 https://github.com/NVIDIA/Fuser /tmp/Fuser
    python packages/thunder-nvfuser/tools/nvfuser_direct_api.py /tmp/Fuser

or on a bare mirror with ``--git-dir /path/to/Fuser.git`` (reads ``HEAD`` with ``git show``).
With ``--wheel nvfuser_cu130_torch210-....whl`` it also checks the names against a published
wheel (no install, no import): every extracted name must end a string in the wheel's
``_C_DIRECT`` extension, and its ``nvfuser_direct/__init__.py`` must define the same
``FusionDefinition`` methods; the result is recorded under ``"wheel"``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

OUTPUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "nvfuser_direct_api.json"

_BINDINGS_DIR = "python/python_direct"
_INIT_PY = "python/nvfuser_direct/__init__.py"

_STRING = r'"(?P<name>[A-Za-z_][A-Za-z0-9_]*)"'
_ARG = re.compile(r'py::arg\(\s*"(\w+)"\s*\)')
_DEFINE = re.compile(r"^#define\s+(\w+)\(", re.M)
_OPS_DEF = re.compile(r"\bops\s*\.\s*def\(\s*" + _STRING)
_ENUM_DATATYPE = re.compile(r'py::enum_<PrimDataType>\(\s*nvfuser\s*,\s*"DataType"')
_VALUE = re.compile(r'\.value\(\s*"(\w+)"')


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _strip_raw_strings(text: str) -> str:
    # docstrings R"(...)" can contain anything, including 'py::arg("x")' in examples
    return re.sub(r'R"\((.*?)\)"', '""', text, flags=re.S)


def _macro_bodies(text: str) -> dict[str, str]:
    """``#define NAME(...) body`` with line continuations joined."""
    bodies = {}
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _DEFINE.match(lines[i])
        if m is None:
            i += 1
            continue
        body = [lines[i]]
        while lines[i].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            body.append(lines[i])
        bodies[m.group(1)] = "\n".join(body)
        i += 1
    return bodies


def _remove_macros(text: str, bodies: dict[str, str]) -> str:
    for body in bodies.values():
        text = text.replace(body, "")
    return text


def parse_ops(ops_cpp: str) -> dict[str, list[str]]:
    """``{op name: sorted keyword argument names over all overloads}`` from ``ops.cpp``."""
    text = _strip_raw_strings(_strip_comments(ops_cpp))
    bodies = _macro_bodies(text)
    macro_args = {name: set(_ARG.findall(body)) for name, body in bodies.items()}
    code = _remove_macros(text, bodies)
    macro_call = re.compile(r"\b(" + "|".join(map(re.escape, bodies)) + r")\(\s*" + _STRING) if bodies else None
    calls = list(macro_call.finditer(code)) if macro_call is not None else []
    sites = sorted(
        [(m.start(), m.group("name"), macro_args[m.group(1)]) for m in calls]
        + [(m.start(), m.group("name"), None) for m in _OPS_DEF.finditer(code)]
    )
    ops: dict[str, set[str]] = {}
    for k, (start, name, args) in enumerate(sites):
        if args is None:  # a direct ops.def: its py::args run until the next binding site
            end = sites[k + 1][0] if k + 1 < len(sites) else len(code)
            args = set(_ARG.findall(code[start:end]))
        ops.setdefault(name, set()).update(args)
    return {name: sorted(args) for name, args in sorted(ops.items())}


def _statement_end(text: str, start: int) -> int:
    """The index of the ``;`` ending the C++ statement at ``start`` (outside parentheses, braces and strings)."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c == '"':
            i = text.index('"', i + 1)
            while text[i - 1] == "\\":
                i = text.index('"', i + 1)
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == ";" and depth == 0:
            return i
        i += 1
    return len(text)


def parse_module_functions(sources: dict[str, str]) -> dict[str, list[str]]:
    """``{name: keyword argument names}`` of functions bound with ``nvfuser.def("name", ...)``, chained or not."""
    functions: dict[str, set[str]] = {}
    for text in sources.values():
        text = _strip_raw_strings(_strip_comments(text))
        for m in re.finditer(r"\bnvfuser\s*\.\s*def\(", text):
            statement = text[m.start() : _statement_end(text, m.start())]
            sites = list(re.finditer(r"\.\s*def\(\s*\"(\w+)\"", statement))
            for k, site in enumerate(sites):
                end = sites[k + 1].start() if k + 1 < len(sites) else len(statement)
                functions.setdefault(site.group(1), set()).update(_ARG.findall(statement[site.start() : end]))
    return {name: sorted(args) for name, args in sorted(functions.items())}


def parse_datatype(enum_cpp: str) -> list[str]:
    """The members of ``DataType`` (``py::enum_<PrimDataType>(nvfuser, "DataType")``)."""
    text = _strip_comments(enum_cpp)
    m = _ENUM_DATATYPE.search(text)
    if m is None:
        raise ValueError("enum.cpp: no DataType enum")
    end = text.index(";", m.end())
    return sorted(_VALUE.findall(text[m.end() : end]))


def parse_python_wrapper(init_py: str) -> tuple[list[str], dict[str, list[str]]]:
    """Top-level names of ``nvfuser_direct/__init__.py`` and the methods (with parameters) of its ``FusionDefinition``."""
    tree = ast.parse(init_py)
    names: set[str] = set()
    methods: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:  # its own modules, not typing or torch
            names.update(a.asname or a.name for a in node.names if a.name != "*")
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if isinstance(node, ast.ClassDef) and node.name == "FusionDefinition":
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    a = item.args
                    params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg != "self"]
                    if a.vararg is not None:
                        params.append("*" + a.vararg.arg)
                    if a.kwarg is not None:
                        params.append("**" + a.kwarg.arg)
                    methods[item.name] = params
            # attributes set in __init__ (self.ops = ..., ...)
            for item in ast.walk(node):
                if isinstance(item, ast.Assign):
                    for t in item.targets:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            methods.setdefault(t.attr, [])
    return sorted(names), dict(sorted(methods.items()))


def extract(read) -> dict:
    """The API description; ``read(path)`` returns the text of a file of the Fuser checkout (or ``None``)."""
    listing = read.listing(_BINDINGS_DIR)
    cpp = {p: read(p) for p in listing if p.endswith(".cpp")}
    ops = parse_ops(cpp[f"{_BINDINGS_DIR}/ops.cpp"])
    names, fd_methods = parse_python_wrapper(read(_INIT_PY))
    functions = parse_module_functions(cpp)
    return {
        "source": read.describe(),
        "module": sorted(set(functions) | set(names) | {"DataType", "ops"}),
        "functions": functions,
        "FusionDefinition": fd_methods,
        "ops": ops,
        "DataType": parse_datatype(cpp[f"{_BINDINGS_DIR}/enum.cpp"]),
    }


def check_wheel(api: dict, wheel: Path) -> dict:
    """Checks ``api`` against a wheel's ``_C_DIRECT`` strings and its ``__init__.py``; returns the findings."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        [ext] = [n for n in names if n.startswith("nvfuser_direct/_C_DIRECT") and n.endswith(".so")]
        binary = z.read(ext)
        init_py = z.read("nvfuser_direct/__init__.py").decode()
    wanted = set(api["ops"]) | set(api["functions"]) | set(api["DataType"])
    wanted |= {a for args in [*api["ops"].values(), *api["functions"].values()] for a in args}
    # a NUL-terminated string, possibly the tail of a longer one (linkers share string tails)
    missing = sorted(n for n in wanted if n.encode() + b"\0" not in binary)
    _, methods = parse_python_wrapper(init_py)
    return {
        "wheel": wheel.name,
        "names_missing_in_extension": missing,
        "same_fusion_definition_methods": methods == api["FusionDefinition"],
    }


class _Dir:
    def __init__(self, root: Path):
        self.root = root

    def __call__(self, path: str) -> str:
        return (self.root / path).read_text()

    def listing(self, folder: str) -> list[str]:
        return [f"{folder}/{p.name}" for p in sorted((self.root / folder).iterdir())]

    def describe(self) -> str:
        try:
            rev = subprocess.run(
                ["git", "-C", str(self.root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            rev = "unknown"
        return f"NVIDIA/Fuser@{rev}"


class _Git:
    def __init__(self, git_dir: Path, rev: str):
        self.git_dir, self.rev = git_dir, rev

    def _git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(self.git_dir), *args], capture_output=True, text=True, check=True
        ).stdout

    def __call__(self, path: str) -> str:
        return self._git("show", f"{self.rev}:{path}")

    def listing(self, folder: str) -> list[str]:
        return sorted(self._git("ls-tree", "--name-only", f"{self.rev}:{folder}").split())

    def describe(self) -> str:
        return f"NVIDIA/Fuser@{self._git('rev-parse', self.rev).strip()}"


class _Listing(_Git):
    def listing(self, folder: str) -> list[str]:
        return [f"{folder}/{name}" for name in super().listing(folder)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", nargs="?", type=Path, help="a working tree of NVIDIA/Fuser")
    parser.add_argument("--git-dir", type=Path, help="a (bare) git repository of NVIDIA/Fuser instead")
    parser.add_argument("--rev", default="HEAD", help="the revision to read with --git-dir (default HEAD)")
    parser.add_argument("--wheel", type=Path, help="a downloaded nvfuser-cu*-torch* wheel to check the names against")
    parser.add_argument("-o", "--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    if (args.checkout is None) == (args.git_dir is None):
        parser.error("give a checkout or --git-dir")
    if args.git_dir is not None:
        reader = _Listing(args.git_dir, args.rev)
    else:
        reader = _Dir(args.checkout)
    api = extract(reader)
    if args.wheel is not None:
        api["wheel"] = check_wheel(api, args.wheel)
        print(f"checked against {args.wheel.name}: {api['wheel']}", file=sys.stderr)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(api, indent=1, sort_keys=False) + "\n")
    print(f"wrote {args.output}: {len(api['ops'])} ops, {len(api['module'])} module names", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
