"""The package's layout: no import cycle among croupier's own modules, the rooms' import rules
(docs/architecture.md, "The Python package's rooms"), the paths kept for users, every module
imports in a fresh interpreter, and none is over 400 lines. No croupier process is started."""
import ast
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "python" / "croupier"


def _module_name(path: pathlib.Path) -> str:
    """croupier/map/pool.py -> "map.pool", croupier/map/__init__.py -> "map", and the package's
    own croupier/__init__.py -> "__init__" (the API)."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__init__"


FILES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
MODULES = sorted(FILES)

# The rooms: subpackages, each one part of the architecture. A module of a room may import the
# room's own modules and the modules and rooms named here, nothing else of croupier's (not
# another room, not an adapter, not the API in croupier/__init__.py). Each room's __init__.py
# says the same.
SHARED = {"errors", "job", "launcher", "client", "columns", "object_store", "runtime"}
ROOMS = {
    "map": SHARED,
    "stream": SHARED,
    "lm": SHARED,
    "runtime": {"errors"},
}
# The framework adapters: public modules that only users (and each other) import.
ADAPTERS = {"torch", "tf", "jax", "ray", "ray_process"}
# Paths that the docs showed before their modules moved into a room, kept as one-line modules
# that re-export what the docs show: {kept path: (the module now, the names)}.
KEPT = {
    "pipeline": ("map.pipeline", ["Pipeline", "record_rng", "batch_rng"]),
    "pool": ("map.pool", ["default_workers", "max_worker_deaths"]),
    "tf_pipeline": ("map.tf_pipeline", ["record_seed"]),
}


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or
            (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _resolve(dotted: str) -> str:
    """The module of croupier's that importing croupier.<dotted> names: the longest prefix of it
    that is a module (croupier.map.pool.WorkerPool -> "map.pool")."""
    parts = dotted.split(".")
    while parts:
        if ".".join(parts) in FILES:
            return ".".join(parts)
        parts.pop()
    return ""


def imports_of(path: pathlib.Path, package: str = "") -> set:
    """The croupier modules that `path` imports anywhere (at the top, in a function, in a try),
    except under `if TYPE_CHECKING:`, which the interpreter never runs. A name taken from the
    package itself that is not a module (`from croupier import Consumer`, or `import croupier`
    alone) is an import of "__init__", the API. The extension module is not counted."""
    found = set()
    if not package and path.parent != PACKAGE:  # the package `path` is in, for relative imports
        package = _module_name(path if path.name == "__init__.py" else path.parent)

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
                if parts[0] != "croupier":
                    continue
                if len(parts) == 1:
                    found.add("__init__")
                elif _resolve(".".join(parts[1:])):
                    found.add(_resolve(".".join(parts[1:])))

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.level:  # relative: from . import x, from .x import y
                base = package.split(".") if package else []
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                parts = ["croupier"] + base + (node.module.split(".") if node.module else [])
            elif node.module:
                parts = node.module.split(".")
            else:
                return
            if parts[0] != "croupier":
                return
            inner = ".".join(parts[1:])
            for alias in node.names:  # from croupier.map import pool: pool may be a module
                name = f"{inner}.{alias.name}" if inner else alias.name
                if name in FILES:
                    found.add(name)
                elif inner and _resolve(inner):
                    found.add(_resolve(inner))
                elif not inner and alias.name != "_croupier":
                    found.add("__init__")

    Visitor().visit(ast.parse(path.read_text(), str(path)))
    return found


def _room_of(module: str) -> str:
    return next((r for r in ROOMS if module == r or module.startswith(r + ".")), "")


def _allowed(module: str, allowed: set) -> bool:
    """Whether `module` is one of `allowed` or in one of the rooms it names."""
    return module in allowed or _room_of(module) in allowed


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
    graph = {m: imports_of(FILES[m]) - {m} for m in MODULES}
    assert "consumer" in graph["cluster"] and "map.pool" in graph["map.producer"] and \
        "runtime.at_exit" in graph["stream.source"], \
        "the graph was read"
    cycle = find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(f"{m}.py" for m in cycle)


def test_the_reader_sees_every_kind_of_import_a_rule_must_catch(tmp_path):
    fake = tmp_path / "pool.py"
    fake.write_text("import croupier\nfrom croupier import Consumer, errors, _croupier\n"
                    "from croupier.map import pipeline\nfrom croupier.tf import dataset\n"
                    "from . import zygote\nimport croupier.client\n"
                    "if TYPE_CHECKING:\n    from croupier import consumer\n")
    assert imports_of(fake, package="map") == {"__init__", "errors", "map.pipeline", "tf",
                                               "map.zygote", "client"}


def test_each_room_imports_only_itself_and_what_its_rule_allows():
    broken = {}
    for m in MODULES:
        room = _room_of(m)
        if not room:
            continue
        outside = {n for n in imports_of(FILES[m]) - {m} if _room_of(n) != room}
        bad = {n for n in outside if not _allowed(n, ROOMS[room])}
        if bad:
            broken[m] = sorted(bad)
    assert not broken, f"imports a room may not make (the rules: ROOMS above): {broken}"


def test_no_module_imports_the_packages_api():
    # croupier/__init__.py imports the package's modules to give their names: one of them
    # importing it back (`from croupier import Consumer`, `import croupier`) is a cycle in waiting.
    broken = [m for m in MODULES if m != "__init__" and "__init__" in imports_of(FILES[m])]
    assert not broken, broken


def test_a_rooms_init_holds_its_rule_and_imports_nothing():
    for room in ROOMS:
        tree = ast.parse(FILES[room].read_text())
        doc = ast.get_docstring(tree) or ""
        assert "may import" in doc, f"croupier/{room}/__init__.py says what the room may import"
        assert [type(n).__name__ for n in tree.body] == ["Expr"], \
            f"croupier/{room}/__init__.py is its docstring alone"


def test_the_shared_modules_import_only_each_other():
    shared = [m for m in MODULES if _allowed(m, SHARED)]
    assert "runtime.processes" in shared and "client" in shared
    broken = {m: sorted(n for n in imports_of(FILES[m]) - {m} if not _allowed(n, SHARED))
              for m in shared}
    assert not {m: n for m, n in broken.items() if n}, broken


def test_nothing_but_an_adapter_imports_an_adapter():
    broken = {m: sorted(imports_of(FILES[m]) & ADAPTERS) for m in MODULES if m not in ADAPTERS}
    assert not {m: n for m, n in broken.items() if n}, broken


def test_the_kept_paths_are_one_line_and_give_the_rooms_objects():
    import importlib
    for old, (new, names) in KEPT.items():
        lines = [line for line in FILES[old].read_text().splitlines()
                 if line.strip() and not line.startswith('"""')]
        assert len(lines) == 1 and lines[0].startswith(f"from croupier.{new} import"), (old, lines)
        if old == "tf_pipeline":
            try:
                import tensorflow  # noqa: F401
            except ModuleNotFoundError:
                continue
        kept, moved = (importlib.import_module(f"croupier.{m}") for m in (old, new))
        for name in names:
            assert getattr(kept, name) is getattr(moved, name), (old, name)


def test_the_loggers_keep_the_names_the_docs_give():
    from croupier.map import cache_dirs, pipeline, record_cache, record_threads
    assert pipeline.log.name == record_threads.log.name == "croupier.pipeline"
    assert record_cache._log.name == cache_dirs._log.name == "croupier.record_cache"


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
    sizes = {m: len(FILES[m].read_text().splitlines()) for m in MODULES}
    assert not {m: n for m, n in sizes.items() if n > 400}, sorted(sizes.items(),
                                                                    key=lambda mn: -mn[1])[:3]
