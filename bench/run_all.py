"""Run every benchmark module in sequence: ``python -m bench.run_all [--quick]``.

Each module in ``MODULES`` exposes ``main(argv) -> int``; adding a benchmark is one line.
"""

import argparse
import importlib
from collections.abc import Sequence

MODULES: tuple[str, ...] = (
    "bench.eval_vs_duckdb",
    "bench.maintain_vs_recompute",
    "bench.recursion_vs_peers",
    "bench.wide_recursion",
    "bench.state_io",
    "bench.partitioned",
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run_all", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    status = 0
    for n, name in enumerate(MODULES):
        if n:
            print()
        module = importlib.import_module(name)
        status = module.main(["--quick"] if args.quick else []) or status
    return status


if __name__ == "__main__":
    raise SystemExit(main())
