"""The package layout's import rules, checked by parsing every module (ast), not by importing it.

The core (`shared/cnnvideo`) is a library: it imports no role (`cnnvideo.master`, `.worker`, `.trainer`)
and no tool (`cnnvideo.tools`). Roles import no tool either, so the direction is tools -> roles -> core.
"""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = ("cnnvideo.master", "cnnvideo.worker", "cnnvideo.trainer")
TOOLS = ("cnnvideo.tools",)
# `python -m cnnvideo` must keep working, and the CLI is a tool: __main__ is a two-line shim that only
# delegates to it (it runs as a program, nothing in the library imports it)
EXEMPT = {"shared/cnnvideo/__main__.py": "the `python -m cnnvideo` shim delegates to cnnvideo.tools.cli"}


def imported_modules(source: str, package: str):
    """Every module name `source` imports (relative imports resolved against `package`), and
    `importlib.import_module("...")` calls with a literal name."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names.append(mod)
            names += ["%s.%s" % (mod, a.name) for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                names.append(node.args[0].value)
    return names


def _violations(folder: str, package: str, forbidden):
    bad = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
        for name in sorted(files):
            if not name.endswith(".py") or name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, ROOT)
            if rel in EXEMPT:
                continue
            sub = os.path.relpath(dirpath, os.path.join(ROOT, folder))
            pkg = package if sub == "." else package + "." + sub.replace(os.sep, ".")
            with open(path) as fh:
                for mod in imported_modules(fh.read(), pkg):
                    if any(mod == f or mod.startswith(f + ".") for f in forbidden):
                        bad.append("%s imports %s" % (rel, mod))
    return bad


def test_checker_sees_every_import_form():
    """The parser flags absolute, relative, lazy (in a function) and import_module imports (so the rules can fail)."""
    src = ("import cnnvideo.master.role\nfrom ..tools import cli\n"
           "def f():\n    from cnnvideo.worker import runloop\n    importlib.import_module('cnnvideo.trainer.main')\n")
    mods = imported_modules(src, "cnnvideo.rpc")
    assert "cnnvideo.master.role" in mods and "cnnvideo.tools.cli" in mods
    assert "cnnvideo.worker.runloop" in mods and "cnnvideo.trainer.main" in mods


def test_core_imports_no_role_and_no_tool():
    """Nothing under shared/cnnvideo imports cnnvideo.master, .worker, .trainer or .tools."""
    assert _violations("shared/cnnvideo", "cnnvideo", ROLES + TOOLS) == []


def test_roles_import_no_tool():
    """services/master, worker, trainer import nothing from cnnvideo.tools."""
    for role in ("master", "worker", "trainer"):
        assert _violations("services/" + role, "cnnvideo." + role, TOOLS) == []


def test_main_shim_only_delegates():
    """The exempt __main__ stays a shim: it imports only the tools CLI."""
    with open(os.path.join(ROOT, "shared/cnnvideo/__main__.py")) as fh:
        mods = imported_modules(fh.read(), "cnnvideo")
    assert mods == ["cnnvideo.tools.cli", "cnnvideo.tools.cli.main"]


def _module_graph():
    """{module: modules it imports} over the core and the roles, every import counted (lazy ones too)."""
    files = {}
    for folder, package in [("shared/cnnvideo", "cnnvideo")] + [
            ("services/" + r, "cnnvideo." + r) for r in ("master", "worker", "trainer")]:
        for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
            sub = os.path.relpath(dirpath, os.path.join(ROOT, folder))
            pkg = package if sub == "." else package + "." + sub.replace(os.sep, ".")
            for name in names:
                if name.endswith(".py") and not name.endswith(("_pb2.py", "_pb2_grpc.py")):
                    files[pkg if name == "__init__.py" else pkg + "." + name[:-3]] = (os.path.join(dirpath, name), pkg)
    graph = {}
    for mod, (path, pkg) in files.items():
        with open(path) as fh:
            deps = set()
            for dep in imported_modules(fh.read(), pkg):
                while dep and dep not in files:  # `from a.b import name` -> the module a.b
                    dep = dep.rpartition(".")[0]
                if dep and dep != mod:
                    deps.add(dep)
        graph[mod] = deps
    return graph


def import_cycles(graph):
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_cycle_finder_finds_a_lazy_cycle():
    """A cycle closed only by an import inside a function is still a cycle (so the rule below can fail)."""
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    """No module of the core or the roles reaches itself through imports, counting imports inside functions."""
    graph = _module_graph()
    assert "cnnvideo.model.engines.ort_engine" in graph  # the walk saw the tree
    assert import_cycles(graph) == []


def test_master_role_is_glue():
    """services/master/role.py stays glue (at most 300 lines): setup, sending, receiving, recovery, finishing and
    the live page are parts beside it."""
    with open(os.path.join(ROOT, "services", "master", "role.py")) as fh:
        lines = fh.read().count("\n")
    assert lines <= 300, "services/master/role.py has %d lines" % lines
    for part in ("setup", "sending", "receiving", "recovery", "finishing", "view"):
        assert os.path.isfile(os.path.join(ROOT, "services", "master", part + ".py")), part


# The core's layers, lowest first: a module may import its own part and the parts of lower layers, never a part of
# its own layer or a higher one. The typed config is at the bottom: config_types (the dataclasses), then the rules
# no part owns (config_rules), the cameras (config_cameras) and the renames. Each part checks its own keys against
# the typed config (its `from_config.check_config`); config_validation runs those checks and config (the loader) runs
# config_validation, so these two are on top and no part imports them (test_parts_read_only_the_typed_config).
CORE_LAYERS = [
    ("errors", "config_types", "cpucap", "hostnet", "tcrules"),
    ("config_upgrade",),
    ("config_cameras", "config_rules", "cluster"),
    ("video", "wire", "events"),
    ("artifacts",),
    ("model", "plan"),
    ("results", "rpc"),
    ("config_validation",),
    ("config",),
]


def core_part(module: str) -> str:
    """The part of the core a module belongs to: its subpackage (`cnnvideo.plan.pool` -> plan) or its top-level
    module (`cnnvideo.cpucap` -> cpucap)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(graph, layers=CORE_LAYERS):
    """'a imports b' for every import of a core module into a part of its own layer or a higher one."""
    rank = {part: i for i, names in enumerate(layers) for part in names}
    bad = []
    for mod, deps in sorted(graph.items()):
        src = core_part(mod)
        if src not in rank:
            continue
        for dep in sorted(deps):
            dst = core_part(dep)
            if dst in rank and dst != src and rank[dst] >= rank[src]:
                bad.append("%s imports %s" % (mod, dep))
    return bad


def test_layer_rule_flags_an_upward_and_a_sideways_arrow():
    """The layer check can fail: model importing plan (same layer) and wire importing rpc (upward) are flagged."""
    graph = {"cnnvideo.model.executor": {"cnnvideo.plan.profiling"}, "cnnvideo.wire.tls": {"cnnvideo.rpc.net"},
             "cnnvideo.plan.pool": {"cnnvideo.wire.protocol", "cnnvideo.plan.plan"}}
    assert layer_violations(graph) == ["cnnvideo.model.executor imports cnnvideo.plan.profiling",
                                       "cnnvideo.wire.tls imports cnnvideo.rpc.net"]


def test_core_imports_only_downward():
    """Every part of the core is in a layer, and no core module imports a part of its own layer or above (imports
    inside functions count): the engines read the CPU cap from cpucap, not from plan/, and TLS sits in rpc/."""
    graph = {m: d for m, d in _module_graph().items() if m.startswith("cnnvideo.") and
             core_part(m) not in ("master", "worker", "trainer")}
    known = {p for names in CORE_LAYERS for p in names} | {"", "__main__"}
    assert sorted({core_part(m) for m in graph} - known) == []
    assert layer_violations(graph) == []


CONFIG_BOTTOM = ("config_types", "config_upgrade", "config_cameras", "config_rules")


def test_parts_read_only_the_typed_config():
    """The config sits at the bottom of the core: the modules of the config below the loader import nothing but each
    other and errors, and no part of the core imports the loader (config) or the checks' runner (config_validation):
    a part reads the typed config (config_types and the rules below it) and checks its own keys itself."""
    graph = _module_graph()
    bad = []
    for mod, deps in sorted(graph.items()):
        part = core_part(mod)
        for dep in sorted(deps):
            if part in CONFIG_BOTTOM and core_part(dep) not in CONFIG_BOTTOM + ("errors",):
                bad.append("%s imports %s" % (mod, dep))
            if (mod.startswith("cnnvideo.") and part not in ("config", "config_validation", "master", "worker",
                                                             "trainer")
                    and core_part(dep) in ("config", "config_validation")):
                bad.append("%s imports %s" % (mod, dep))
    assert bad == []


def test_every_part_with_config_keys_checks_them():
    """config_validation runs each part's own check: model, plan, video, events, results (and rpc's tls)."""
    for part in ("model", "plan", "video", "events", "results"):
        path = os.path.join(ROOT, "shared", "cnnvideo", part, "from_config.py")
        with open(path) as fh:
            assert "def check_config(" in fh.read(), part
    with open(os.path.join(ROOT, "shared", "cnnvideo", "config_validation.py")) as fh:
        mods = imported_modules(fh.read(), "cnnvideo")
    for part in ("model", "plan", "video", "events", "results"):
        assert "cnnvideo.%s.from_config" % part in mods, part
