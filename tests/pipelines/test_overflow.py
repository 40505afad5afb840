"""Rule arithmetic past 64 bits in a pipeline: the engine computes with unbounded integers,
the Delta table cannot store the result; the run fails with a DL error naming the
predicate, its rules and the value, and commits nothing to any table."""

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from deltalog.engine.errors import VALUE_OUT_OF_RANGE, DataError
from deltalog.pipelines import delta_io
from deltalog.pipelines.run import StratumRun
from tests.local import write_pipeline

PROGRAM = """\
.decl n(x: int)
small(x, y) :- n(x), y = x + 1.
big(x, y) :- n(x), y = x * 4611686018427387904.
"""
BINDING = """\
[edb]
n = "o/edb/n"
[idb]
small = "o/idb/small"
big = "o/idb/big"
"""


def test_overflow_is_a_clear_error_and_commits_nothing(tmp_path: Path):
    spec = write_pipeline(tmp_path, "o", PROGRAM, BINDING)
    root = tmp_path / "warehouse"
    uri = spec.table_uri(root, "n")
    write_deltalake(
        uri, pa.table({"x": pa.array([1], pa.int64())}), configuration=delta_io.CDF_CONFIG
    )
    for i in range(len(spec.program.strata)):
        StratumRun(root, spec, i).materialize()  # 1 * 2**62 fits
    write_deltalake(uri, pa.table({"x": pa.array([3], pa.int64())}), mode="append")
    index = spec.stratum_of("big")
    before = delta_io.table_version(spec.table_uri(root, "big"))
    with pytest.raises(DataError) as err:
        StratumRun(root, spec, index).materialize()
    assert err.value.code == VALUE_OUT_OF_RANGE
    text = str(err.value)
    assert "'big'" in text and str(3 * 2**62) in text and "program.dl:3:" in text
    assert delta_io.table_version(spec.table_uri(root, "big")) == before
