"""A team's own quality rules on an EDB table: a Great Expectations suite, named in
``pipeline.toml``'s ``[expectations]`` section (``edge = "expectations/edge.json"``, a path
in the pipeline folder) in GX's own JSON form::

    {"expectations": [
      {"type": "expect_column_values_to_be_between",
       "kwargs": {"column": "src", "min_value": 0}},
      {"type": "expect_column_values_to_match_regex",
       "kwargs": {"column": "label", "regex": "^n[0-9]+$"}}]}

The file is data: read with ``json``, its shape and column names checked against the
declaration when the pipeline loads (DL401 naming the file), before GX is imported. GX is
imported only when a table with a suite is validated, so pipelines without one never pay
for it.

Row-wise expectations (GX's column map, column pair map and multicolumn map expectations:
value ranges, sets, regexes, ...) can judge a change by its inserted rows alone: the
blocking ``valid_input`` check validates only those (O(change)). The others (row counts,
uniqueness over the whole table, means, ...) need the whole table and are validated by the
scheduled check job, which also writes GX Data Docs. A failed expectation is a problem of
the table like the declaration's own (``deltalog.pipelines.quality.Problem``): it names the
expectation, how many rows failed and an offending row.
"""

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from deltalog.engine.analysis.program import RelationSchema
from deltalog.engine.errors import NotSupportedError
from deltalog.pipelines import delta_io
from deltalog.pipelines.quality import Problem
from deltalog.pipelines.state_store import warehouse_key

# kwargs of an expectation that name columns (GX's own names)
_COLUMN_KEYS = ("column", "column_A", "column_B")
_COLUMN_LIST_KEYS = ("column_list",)


@dataclass(frozen=True)
class Suite:
    """One table's expectations, as read from its file."""

    path: Path
    expectations: tuple[Mapping[str, Any], ...]  # {"type": ..., "kwargs": {...}}


def load_suite(path: Path, schema: RelationSchema) -> Suite:
    """The suite in ``path`` for a table of ``schema``; ValueError with what is wrong
    (the caller names the file)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError("file not found") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"not valid JSON: {err}") from None
    items = data.get("expectations") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise ValueError('expected {"expectations": [{"type": ..., "kwargs": {...}}, ...]}')
    names = [c.name for c in schema.columns]
    out = []
    for i, item in enumerate(items, 1):
        kind = item.get("type") if isinstance(item, dict) else None
        kwargs = item.get("kwargs", {}) if isinstance(item, dict) else None
        if not isinstance(kind, str) or not kind.startswith("expect_") or not isinstance(
                kwargs, dict):
            raise ValueError(f"expectation {i}: needs a \"type\" (expect_...) and \"kwargs\"")
        cols = [kwargs[k] for k in _COLUMN_KEYS if k in kwargs]
        cols += [c for k in _COLUMN_LIST_KEYS for c in kwargs.get(k, [])]
        for col in cols:
            if col not in names:
                raise ValueError(f"expectation {i} ({kind}): no column {col!r} in "
                                 f"'{schema.name}' (columns: {', '.join(names)})")
        out.append({"type": kind, "kwargs": dict(kwargs)})
    return Suite(path, tuple(out))


_CONTEXT: Any = None  # the process's GX context, made on first use
_RUNS = 0


DOCS_DIR = "_deltalog/data_docs"  # under the warehouse: <pipeline>/<table>/index.html


@dataclass(frozen=True)
class TableReport:
    """A whole table version validated against its suite: what failed, and where the Data
    Docs of the validation are."""

    version: int
    rows: int
    problems: list[Problem]
    docs: Path

    @property
    def summary(self) -> str:
        if not self.problems:
            return f"{self.rows} rows at version {self.version} meet every expectation"
        return (f"{len(self.problems)} expectation(s) failed at version {self.version}: "
                + "; ".join(p.what for p in self.problems[:3]))


def docs_dir(root: str | Path, pipeline: str, pred: str,
             state_root: str | Path | None = None) -> Path:
    """Where the Data Docs of ``pred``'s whole-table validation go (local files): under a
    local warehouse, else under the state root (the local folder a warehouse on object
    storage names), in the warehouse's own folder there."""
    if delta_io.is_remote(root):
        if state_root is None:
            raise NotSupportedError(
                f"the warehouse {root} is on object storage and Data Docs are local files: "
                "set the warehouse resource's state_root or $DELTALOG_STATE", str(root))
        base = Path(state_root) / warehouse_key(root) / DOCS_DIR
    else:
        base = Path(root) / DOCS_DIR
    return base / pipeline / pred


def validate_table(uri: str, pred: str, suite: Suite, docs: Path) -> TableReport:
    """Every expectation of ``suite`` on the current version of ``pred``'s table at
    ``uri``, with GX Data Docs written into ``docs``."""
    version = delta_io.table_version(uri)
    table = delta_io.read_arrow(uri, version)
    problems = validate(suite, pred, table, change_only=False, docs=docs)
    return TableReport(version, table.num_rows, problems, docs)


def _gx() -> Any:
    """Great Expectations, imported (lazily: seconds to import, only for suites).

    GX imports ``pyspark.sql.connect``, whose import ends the process with status 0 when
    the main module has neither a spec nor a file and the interpreter is not interactive
    (it takes that for its own doctest run, and its optional dependencies are missing):
    ``python -c``, a notebook's kernel, a test worker. For that import only, such a
    process is marked interactive (``sys.ps1``), which is what pyspark checks."""
    if sys.modules.get("great_expectations") is not None:
        return sys.modules["great_expectations"]
    main = sys.modules.get("__main__")
    mark = (main is not None and getattr(main, "__spec__", None) is None
            and not hasattr(main, "__file__") and not hasattr(sys, "ps1"))
    if mark:
        sys.ps1 = ">>> "
    try:
        import great_expectations as gx
    except ImportError as err:
        raise NotSupportedError(
            "the pipeline names an expectation suite, and Great Expectations is not "
            f"installed here ({err}): install deltalog with its 'gx' extra "
            "(pip install 'deltalog[gx]'), or remove the [expectations] entry",
            "great_expectations",
        ) from None
    finally:
        if mark:
            del sys.ps1
    return gx


def _row_wise(kind: str) -> bool:
    _gx()
    from great_expectations.expectations.expectation import (
        ColumnMapExpectation,
        ColumnPairMapExpectation,
        MulticolumnMapExpectation,
    )
    from great_expectations.expectations.registry import get_expectation_impl

    impl = get_expectation_impl(kind)
    return issubclass(impl, ColumnMapExpectation | ColumnPairMapExpectation
                      | MulticolumnMapExpectation)


def validate(suite: Suite, pred: str, table: pa.Table, change_only: bool,
             docs: Path | None = None) -> list[Problem]:
    """The failed expectations of ``suite`` on ``table`` (a whole table version, or with
    ``change_only`` the rows a change inserted: then only the row-wise expectations).
    With ``docs`` (a folder), GX's Data Docs of this validation are written there
    (``docs/index.html``)."""
    gx = _gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.exceptions import ExpectationNotFoundError
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    problems: list[Problem] = []
    chosen = []
    for item in suite.expectations:
        try:
            if change_only and not _row_wise(item["type"]):
                continue
        except ExpectationNotFoundError:
            problems.append(Problem(None, None, f"expectation {item['type']} (in "
                                    f"{suite.path.name}) is not a Great Expectations one"))
            continue
        chosen.append(item)
    if not chosen or (table.num_rows == 0 and change_only):
        return problems
    global _CONTEXT, _RUNS
    if _CONTEXT is None:  # one per process: each ephemeral context makes a temporary folder
        _CONTEXT = gx.get_context(mode="ephemeral")
        _CONTEXT.variables.progress_bars = ProgressBarsConfig(globally=False,
                                                              metric_calculations=False)
    context = _CONTEXT
    _RUNS += 1
    name = f"deltalog_{pred}_{_RUNS}"
    gx_suite = gx.ExpectationSuite(name=name)
    for item in chosen:
        gx_suite.add_expectation_configuration(
            ExpectationConfiguration(type=item["type"], kwargs=item["kwargs"]))
    gx_suite = context.suites.add(gx_suite)
    frame = table.to_pandas()
    complete = {"result_format": "COMPLETE"}
    try:
        rows = (context.data_sources.add_pandas(name).add_dataframe_asset(pred)
                .add_batch_definition_whole_dataframe("rows"))
        if docs is None:
            result = rows.get_batch(batch_parameters={"dataframe": frame}).validate(
                gx_suite, result_format=complete)
        else:
            result = _with_docs(gx, context, name, rows, gx_suite, frame, docs)
    finally:
        context.suites.delete(name)
        if name in context.data_sources.all():
            context.data_sources.delete(name)
    for one in result.results:
        if not one.success:
            problems.append(_problem(one, frame, suite.path.name))
    return problems


def _with_docs(gx: Any, context: Any, name: str, rows: Any, suite: Any, frame: Any,
               docs: Path) -> Any:
    """Validate through a GX checkpoint whose action writes Data Docs into ``docs``."""
    from great_expectations.checkpoint import UpdateDataDocsAction

    site = f"deltalog_{docs.resolve()}"
    if site not in context.get_site_names():
        context.add_data_docs_site(site, {
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": str(docs.resolve())},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        })
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name=name, data=rows, suite=suite))
    checkpoint = context.checkpoints.add(gx.Checkpoint(
        name=name, validation_definitions=[definition],
        actions=[UpdateDataDocsAction(name="docs", site_names=[site])],
        result_format={"result_format": "COMPLETE"}))
    try:
        run = checkpoint.run(batch_parameters={"dataframe": frame})
    finally:
        context.checkpoints.delete(name)
        context.validation_definitions.delete(name)
    return next(iter(run.run_results.values()))


def _problem(one: Any, frame: Any, file: str) -> Problem:
    config = one.expectation_config
    kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
    shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    name = f"expectation {config.type}({shown}) of {file}"
    column = kwargs.get("column")
    failed = [info.get("exception_message") for info in (one.exception_info or {}).values()
              if isinstance(info, dict) and info.get("raised_exception")]
    if one.exception_info and one.exception_info.get("raised_exception"):
        failed.append(one.exception_info.get("exception_message"))
    if failed:
        return Problem(column, None, f"{name} could not be evaluated: {failed[0]}")
    res = one.result or {}
    index: Sequence[int] = res.get("unexpected_index_list") or []
    row = None
    if index:
        first = index[0]
        position = first if isinstance(first, int) else None
        if position is not None and 0 <= position < len(frame):
            row = {k: _plain(v) for k, v in frame.iloc[position].to_dict().items()}
    count = res.get("unexpected_count")
    of = f" on {count} of {res.get('element_count')} rows" if count is not None else ""
    observed = res.get("observed_value")
    seen = f" (observed {observed!r})" if observed is not None and count is None else ""
    return Problem(column, row, f"{name} failed{of}{seen}")


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value
