"""What every benchmark module shares: a wall-clock timer, the process's peak memory, a
printer for aligned tables, and the allocator settings of the product's own processes.
Measurements only; no benchmark logic lives here."""

import re
import resource
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from deltalog.pipelines.malloc import tune_malloc

# Every benchmark process runs the engine with the allocator settings the CLI and every
# pipeline run use (see deltalog.pipelines.malloc).
tune_malloc()

T = TypeVar("T")

# A cell printed right-aligned: 1,234 or 0.25 or 12.5x (a ratio).
_NUMBER = re.compile(r"-?[\d,]*\.?\d+x?")


def timed(fn: Callable[[], T], repeat: int = 1) -> tuple[T, float]:
    """Run ``fn`` ``repeat`` times; the last result and the best wall-clock time in seconds
    (``time.perf_counter``)."""
    best = float("inf")
    result: T
    for _ in range(max(repeat, 1)):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return result, best


def timed_adaptive(fn: Callable[[], T], budget: float = 1.0, repeat: int = 3) -> tuple[T, float]:
    """Like ``timed``, but repeats (best of ``repeat``) only when one run is shorter than
    ``budget`` seconds: short runs are noisy, long ones are not worth running twice."""
    result, first = timed(fn)
    if first >= budget or repeat <= 1:
        return result, first
    result, rest = timed(fn, repeat - 1)
    return result, min(first, rest)


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (ru_maxrss is KiB on Linux,
    bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Aligned columns: text left, numbers right, a dashed rule under the header."""
    cells = [[str(h) for h in headers], *[[_cell(c) for c in row] for row in rows]]
    numeric = [
        bool(rows) and all(_NUMBER.fullmatch(row[i]) for row in cells[1:])
        for i in range(len(headers))
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        parts = [
            c.rjust(w) if numeric[i] else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def write_pipeline(folder: Path, text: str) -> Any:
    """A pipeline in ``folder`` (named as the folder) running the program ``text``, every
    EDB and IDB predicate bound to a table ``<name>/edb/<pred>`` or ``<name>/idb/<pred>``."""
    from deltalog.engine.analysis.analyze import load_program
    from deltalog.pipelines.spec import load_pipeline

    prog = load_program(text)
    name = folder.name
    folder.mkdir(parents=True)
    (folder / "program.dl").write_text(text, encoding="utf-8")
    lines = ["[edb]", *(f'{p} = "{name}/edb/{p}"' for p in sorted(prog.edb)),
             "", "[idb]", *(f'{p} = "{name}/idb/{p}"' for p in sorted(prog.idb))]
    (folder / "pipeline.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return load_pipeline(folder)
