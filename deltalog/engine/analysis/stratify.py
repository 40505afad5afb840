"""Analysis pass 4: stratification over the predicate dependency graph (Tarjan's strongly
connected components); recursion through negation or an aggregate is DL202."""

from collections import defaultdict
from collections.abc import Iterable

from deltalog.engine.analysis.common import location
from deltalog.engine.analysis.program import Stratum
from deltalog.engine.errors import NOT_STRATIFIABLE, AnalysisError
from deltalog.engine.syntax.ast import Atom, Negation, Program, Rule


def _sccs(nodes: Iterable[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components, dependencies before dependents."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))
    return out


def _path(edges: dict[str, set[str]], start: str, goal: str, within: set[str]) -> list[str]:
    """A shortest path start -> goal inside ``within`` (breadth first)."""
    prev: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(edges.get(node, ())):
                if nxt == goal:
                    path = [goal, node]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return path[::-1]
                if nxt in within and nxt not in seen:
                    seen.add(nxt)
                    prev[nxt] = node
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    return [start, goal]


def stratify(program: Program, idb: set[str]) -> tuple[list[Stratum], dict[str, frozenset[str]]]:
    # edges: head -> body predicate ("depends on"); negative when through ! or an aggregate.
    deps: dict[str, set[str]] = defaultdict(set)
    negative: dict[tuple[str, str], Rule] = {}
    for rule in program.rules:
        h = rule.head.pred
        for item in rule.body:
            if isinstance(item, Atom):
                deps[h].add(item.pred)
                if rule.aggregate is not None:
                    negative.setdefault((h, item.pred), rule)
            elif isinstance(item, Negation):
                deps[h].add(item.atom.pred)
                negative.setdefault((h, item.atom.pred), rule)
    idb_edges = {h: {b for b in bs if b in idb} for h, bs in deps.items()}
    comps = _sccs(idb, idb_edges)
    by_head: dict[str, list[Rule]] = defaultdict(list)
    for rule in program.rules:
        by_head[rule.head.pred].append(rule)
    strata: list[Stratum] = []
    for comp in comps:
        members = set(comp)
        for (h, b), rule in negative.items():
            if h in members and b in members:
                cycle = [h, h] if h == b else [h, *_path(idb_edges, b, h, members)]
                kind = "an aggregate" if rule.aggregate is not None else "negation"
                raise AnalysisError(
                    "program is not stratifiable: "
                    f"'{h}' depends on '{b}' through {kind} inside the cycle "
                    + " -> ".join(cycle),
                    location(rule.loc, program.file),
                    NOT_STRATIFIABLE,
                )
        recursive = len(comp) > 1 or comp[0] in idb_edges.get(comp[0], set())
        rules = tuple(r for p in comp for r in by_head[p])
        strata.append(Stratum(tuple(comp), rules, recursive))
    return strata, {h: frozenset(bs) for h, bs in deps.items()}


