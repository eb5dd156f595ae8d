"""python/croupier/_croupier.pyi against the built extension module: the same names (stubtest
checks that too, in `make typecheck`), and for every function and method the same argument
names, order, keyword-only marker and defaults as its pybind11 binding. pybind11 functions carry
no inspect signature, so stubtest cannot compare arguments; their docstrings' first line is the
signature, which this test reads. No process is started."""
import ast
import pathlib

import croupier._croupier as native

STUB = pathlib.Path(__file__).resolve().parent.parent / "python" / "croupier" / "_croupier.pyi"


def _split_top_level(text: str) -> list:
    """`text` cut at the commas outside brackets and quotes."""
    parts, depth, start, quote = [], 0, 0, ""
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def binding_signature(obj: object) -> list:
    """[(name, default or None)] of a pybind11 function, "*" for its keyword-only marker and
    "**name" for its **kwargs, read off the first line of its docstring."""
    first = (obj.__doc__ or "").lstrip().splitlines()[0]
    inside = first[first.index("(") + 1:first.rindex(") ->")]
    out = []
    for part in _split_top_level(inside):
        if part == "*" or part.startswith("**"):
            out.append(part.split(":")[0])
            continue
        name, _, rest = part.partition(":")
        default = rest.rpartition(" = ")[2] if " = " in rest else None
        out.append((name.strip(), default))
    return [p for p in out if p[0] != "self"]


def stub_signature(fn: ast.FunctionDef) -> list:
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = [(p.arg, None if d is None else ast.unparse(d)) for p, d in zip(positional, defaults)]
    if a.kwonlyargs:
        out.append("*")
        out += [(p.arg, None if d is None else ast.unparse(d))
                for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg is not None:
        out.append("**" + a.kwarg.arg)
    return [p for p in out if p[0] != "self"]


def _same_default(stub: str, binding: str) -> bool:
    if stub is None or binding is None:
        return stub is binding
    try:
        return ast.literal_eval(stub) == ast.literal_eval(binding)
    except ValueError:
        return stub == binding


def _functions():
    """(qualified name, stub FunctionDef, runtime object) of every function and method of the
    stub that pybind11 defines (properties and overloads are not functions of this kind)."""
    tree = ast.parse(STUB.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            yield node.name, node, getattr(native, node.name)
        elif isinstance(node, ast.ClassDef) and hasattr(native, node.name):
            cls = getattr(native, node.name)
            for fn in node.body:
                if not isinstance(fn, ast.FunctionDef):
                    continue
                decorators = {ast.unparse(d) for d in fn.decorator_list}
                if decorators & {"property", "overload"}:
                    continue
                if fn.name.startswith("__") and fn.name != "__init__":
                    continue
                runtime = cls.__dict__.get(fn.name)
                if isinstance(runtime, staticmethod):
                    runtime = runtime.__func__
                if runtime is None or not (runtime.__doc__ or "").lstrip().startswith(
                        fn.name + "("):
                    continue  # no binding of its own (a class without a constructor)
                yield f"{node.name}.{fn.name}", fn, runtime


def test_the_reader_reads_a_pybind11_signature():
    class F:
        __doc__ = ("f(self: X, a: typing.SupportsInt, b: dict[str, tuple[int, int]] = {}, *, "
                   "c: str = 'x, y') -> None\n\nText.")
    assert binding_signature(F) == [("a", None), ("b", "{}"), "*", ("c", "'x, y'")]


def test_every_function_of_the_stub_has_its_bindings_arguments():
    checked, wrong = 0, []
    for name, fn, runtime in _functions():
        stub, binding = stub_signature(fn), binding_signature(runtime)
        names = [p if isinstance(p, str) else p[0] for p in stub]
        if names != [p if isinstance(p, str) else p[0] for p in binding] or not all(
                isinstance(s, str) or _same_default(s[1], b[1]) for s, b in zip(stub, binding)):
            wrong.append(f"{name}: stub {stub}, binding {binding}")
        checked += 1
    assert not wrong, "\n".join(wrong)
    assert checked >= 60, f"only {checked} functions were compared"


def test_every_name_of_the_module_is_in_the_stub():
    tree = ast.parse(STUB.read_text())
    typed = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    typed |= {t.id for n in tree.body if isinstance(n, ast.AnnAssign)
              for t in [n.target] if isinstance(t, ast.Name)}
    public = {n for n in dir(native) if not n.startswith("__")}
    assert public <= typed, sorted(public - typed)
