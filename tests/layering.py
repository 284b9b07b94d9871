"""The import rules of docs/architecture.md as code: an AST walk over rmq/, kafka_bridge/ and labs/
that lists every import (module level, inside functions, under TYPE_CHECKING) and reports the
arrows that run the wrong way and the import cycles. tests/test_layering.py runs it."""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass

PACKAGES = ("rmq", "kafka_bridge", "labs")

#: Who may import whom, inside the project: (layer, layers it may import). A module belongs to the
#: longest layer prefix that names it; imports of modules outside the project are not limited here
#: except by THIRD_PARTY_HOMES.
ALLOWED: dict[str, set[str]] = {
    # rmq.common's decoders may call the C extension's pure functions (rmq.native; no I/O), so the
    # client, which imports only common and remoting, gets the batch decode of a pull body
    "rmq.common": {"rmq.common", "rmq.native"},
    "rmq.native": {"rmq.native", "rmq._native"},
    "rmq.config": {"rmq.config", "rmq.store.config", "rmq.broker.config"},
    "rmq.remoting": {"rmq.remoting", "rmq.common"},
    "rmq.store": {"rmq.store", "rmq.common", "rmq.native"},
    "rmq.broker": {"rmq.broker", "rmq.store", "rmq.common", "rmq.native", "rmq.config"},
    # the client's connections write small requests through rmq.native.ext.send_keep_gil
    "rmq.client": {"rmq.client", "rmq.common", "rmq.remoting", "rmq.native"},
    "rmq.namesrv": {"rmq.namesrv", "rmq.common", "rmq.remoting", "rmq.server.remoting_server"},
    "rmq.server": {"rmq.server", "rmq.broker", "rmq.store", "rmq.common", "rmq.remoting", "rmq.namesrv",
                   "rmq.config", "rmq.native", "rmq.plugins", "rmq.console"},
    # the web console reads broker services (and the ACL validator of rmq.server.acl)
    # (the standalone `rmq console -n` asks the cluster through the client's admin requests)
    "rmq.console": {"rmq.console", "rmq.broker", "rmq.store", "rmq.common", "rmq.plugins", "rmq.server.acl",
                    "rmq.client"},
    "rmq.admin": {"rmq.admin", "rmq.client", "rmq.common", "rmq.remoting", "rmq.store"},
    "rmq.bench": {"rmq"},
    "rmq": {"rmq"},  # the CLI, plugins: anything inside rmq
    "kafka_bridge.protocol": {"kafka_bridge.protocol"},
    "kafka_bridge.records": {"kafka_bridge.records", "rmq.native"},
    "kafka_bridge": {"kafka_bridge", "rmq"},
    "labs": {"labs", "kafka_bridge", "rmq"},
}

#: Codecs: bytes in, objects out. They open no socket and no file.
CODECS = ("rmq.remoting", "kafka_bridge.protocol", "kafka_bridge.records")
CODEC_FORBIDDEN_MODULES = {"socket", "asyncio", "ssl", "selectors", "mmap", "subprocess"}

#: Third-party packages that only some layers may import (the broker runs without them).
THIRD_PARTY_HOMES = {"pyspark": ("kafka_bridge.spark",), "py4j": ("kafka_bridge.spark",),
                     "aiohttp": ("rmq.console",), "jinja2": ("rmq.console",),
                     "prometheus_client": ("rmq.console", "kafka_bridge.plugin")}

#: Packages only the command line may import (benchmarks start servers: they sit above everything).
ONLY_FROM = {"rmq.bench": ("rmq.cli", "rmq.bench"),
             "kafka_bridge.bench": ("kafka_bridge.plugin", "kafka_bridge.bench")}

#: Optional parts that the rest of their package may import only inside a function (lazily).
LAZY_ONLY = {"kafka_bridge.spark": ("kafka_bridge.spark", "kafka_bridge.plugin")}


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # dotted module name, resolved (a project module, or the top name of another package)
    lineno: int
    top_level: bool  # executed when the importer is imported (not inside a function)


def _modules(root: str) -> dict[str, str]:
    mods = {}
    for pkg in PACKAGES:
        for dp, dn, fn in os.walk(os.path.join(root, pkg)):
            dn[:] = [d for d in dn if d != "__pycache__"]
            for f in fn:
                if f.endswith(".c"):  # a C extension module built from this source (rmq/_native.c)
                    mods[os.path.relpath(os.path.join(dp, f), root)[:-2].replace(os.sep, ".")] = os.path.join(dp, f)
                elif f.endswith(".py"):
                    path = os.path.join(dp, f)
                    mod = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                    mods[mod[:-len(".__init__")] if mod.endswith(".__init__") else mod] = path
    return mods


_PARSED: dict[str, ast.Module] = {}


def _parse(path: str) -> ast.Module:
    """The file's syntax tree; trees are kept by file text, so the tests' copies of the tree (one line
    added to one file) parse only that file again. Nothing here changes a tree."""
    text = open(path, encoding="utf-8").read()
    tree = _PARSED.get(text)
    if tree is None:
        tree = _PARSED[text] = ast.parse(text, path)
    return tree


def _imports_of(mod: str, path: str, mods: dict[str, str]) -> list[Import]:
    tree = _parse(path)
    is_pkg = path.endswith("__init__.py")
    out: list[Import] = []

    def resolve(name: str) -> str:
        # the longest project module that `name` is or lies in; else the top-level package name
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            cand = ".".join(parts[:i])
            if cand in mods:
                return cand
        return parts[0]

    def walk(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                walk(child, False)
                continue
            if isinstance(child, ast.Import):
                for a in child.names:
                    out.append(Import(mod, resolve(a.name), child.lineno, top))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = mod.split(".")
                    if not is_pkg:
                        base = base[:-1]
                    base = base[:len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                for a in child.names:
                    full = f"{target}.{a.name}"
                    out.append(Import(mod, full if full in mods else resolve(target), child.lineno, top))
            walk(child, top)

    walk(tree, True)
    return out


def _layer(mod: str, table) -> str | None:
    best = None
    for layer in table:
        if (mod == layer or mod.startswith(layer + ".")) and (best is None or len(layer) > len(best)):
            best = layer
    return best


def _within(mod: str, prefixes) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def collect(root: str) -> tuple[dict[str, str], list[Import]]:
    mods = _modules(root)
    imports = [imp for mod, path in sorted(mods.items()) if path.endswith(".py")
               for imp in _imports_of(mod, path, mods)]
    return mods, imports


def violations(root: str) -> list[str]:
    """Every forbidden import under `root`, as 'file:line: importer -> target (rule)'."""
    mods, imports = collect(root)
    out = []

    def report(imp: Import, why: str) -> None:
        rel = os.path.relpath(mods[imp.importer], root)
        out.append(f"{rel}:{imp.lineno}: {imp.importer} -> {imp.target} ({why})")

    for imp in imports:
        src, tgt = imp.importer, imp.target
        if tgt in mods and tgt != src:
            layer = _layer(src, ALLOWED)
            if layer is not None and not _within(tgt, ALLOWED[layer]):
                report(imp, f"{layer} may import only {', '.join(sorted(ALLOWED[layer]))}")
            for home, importers in ONLY_FROM.items():
                if _within(tgt, (home,)) and not _within(src, importers):
                    report(imp, f"{home} is imported only by {', '.join(importers)}")
            for part, lazy_ok in LAZY_ONLY.items():
                if _within(tgt, (part,)) and not _within(src, (part,)):
                    if not _within(src, lazy_ok) or imp.top_level:
                        report(imp, f"{part} is optional: import it inside a function of "
                                    f"{', '.join(lazy_ok)}")
        top = tgt.split(".")[0]
        if top in THIRD_PARTY_HOMES and not _within(src, THIRD_PARTY_HOMES[top]):
            report(imp, f"{top} is imported only in {', '.join(THIRD_PARTY_HOMES[top])}")
        if _within(src, CODECS) and top in CODEC_FORBIDDEN_MODULES:
            report(imp, "a codec opens no socket or file")
    for mod in mods:
        if _within(mod, CODECS) and mods[mod].endswith(".py"):
            tree = _parse(mods[mod])
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                    out.append(f"{os.path.relpath(mods[mod], root)}:{node.lineno}: {mod} calls open() "
                               f"(a codec opens no socket or file)")
    return out


def cycles(root: str) -> list[list[str]]:
    """Import cycles among project modules (every import counts, lazy and TYPE_CHECKING ones too;
    a module importing its own package's __init__ counts as well)."""
    mods, imports = collect(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for imp in imports:
        if imp.target in mods and imp.target != imp.importer:
            graph[imp.importer].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):  # iterative Tarjan
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found
