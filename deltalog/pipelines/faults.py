"""Fault injection for the crash tests: ``DELTALOG_FAULT=point`` (or ``point@stratum``) makes
the process SIGKILL itself when a stratum run reaches that point (of that stratum only).

The points, in the order a run passes them: after its inputs are read, after the first of its
table commits, after all of them, in the middle of saving the engine state (a segment
written, the manifest not yet), after the state is saved. And ``mid_compaction``: while a
save writes a sorted run or an array anew in place of one it opened with its deltas."""

import os
import signal

FAULT_ENV = "DELTALOG_FAULT"
FAULT_POINTS = ("after_read", "mid_commit", "after_commit", "mid_state", "after_state")


def fault(point: str, stratum: int) -> None:
    """Kill this process here when ``DELTALOG_FAULT`` names ``point`` (of ``stratum``)."""
    if os.environ.get(FAULT_ENV) in (point, f"{point}@{stratum}"):
        os.kill(os.getpid(), signal.SIGKILL)
