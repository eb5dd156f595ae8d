"""The package's layout: no import cycle among croupier's own modules, every module imports in a
fresh interpreter, and none is over 400 lines. No croupier process is started."""
import ast
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "python" / "croupier"
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py"))


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or
            (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def imports_of(path: pathlib.Path) -> set:
    """The croupier modules that `path` imports anywhere (at the top, in a function, in a try),
    except under `if TYPE_CHECKING:`, which the interpreter never runs."""
    found = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if _is_type_checking(node.test):
                for child in node.orelse:
                    self.visit(child)
            else:
                self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "croupier" and len(parts) > 1:
                    found.add(parts[1])

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.level:  # relative: from . import x, from .x import y
                parts = ["croupier"] + (node.module.split(".") if node.module else [])
            elif node.module:
                parts = node.module.split(".")
            else:
                return
            if parts[0] != "croupier":
                return
            if len(parts) > 1:
                found.add(parts[1])
            else:  # from croupier import x: x may be a module
                found.update(alias.name for alias in node.names)

    Visitor().visit(ast.parse(path.read_text(), str(path)))
    return found & set(MODULES)


def find_cycle(graph: dict) -> list:
    """A cycle of `graph` ({module: modules it imports}) as [a, b, ..., a], or []."""
    state = {}  # module: 1 on the current path, 2 done
    path = []

    def visit(m: str) -> list:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                cycle = visit(n)
                if cycle:
                    return cycle
        path.pop()
        state[m] = 2
        return []

    for m in sorted(graph):
        if m not in state:
            cycle = visit(m)
            if cycle:
                return cycle
    return []


def test_the_checker_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle_among_croupiers_modules():
    graph = {m: imports_of(PACKAGE / f"{m}.py") - {m} for m in MODULES}
    assert "cluster" in graph and "consumer" in graph["cluster"], "the graph was read"
    cycle = find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(f"{m}.py" for m in cycle)


def test_every_module_imports_in_a_fresh_interpreter():
    # Every module of the package, one after another in a new interpreter: what the graph above
    # cannot see (a name imported from a module that does not define it, an import that fails)
    # raises here. An adapter whose framework is not installed is passed over.
    code = """
import importlib, sys
frameworks = {"tensorflow", "torch", "jax", "ray"}
for name in sys.argv[1:]:
    try:
        importlib.import_module("croupier." + name)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in frameworks:
            raise
        print("skipped", name, e.name)
"""
    modules = [m for m in MODULES if m != "__init__"]  # the package itself, imported first
    done = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True,
                          text=True, timeout=300, cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr[-3000:]


def test_no_module_over_400_lines():
    # One idea a module (issue 37): a module that grows past this has taken a second job and
    # splits, its names re-exported where they were.
    sizes = {m: len((PACKAGE / f"{m}.py").read_text().splitlines()) for m in MODULES}
    assert not {m: n for m, n in sizes.items() if n > 400}, sorted(sizes.items(),
                                                                    key=lambda mn: -mn[1])[:3]
