"""Fault injection for the crash tests: ``DELTALOG_FAULT=point`` (or ``point@stratum``) makes
the process SIGKILL itself when a stratum run reaches that point (of that stratum only).

The points, in the order a run passes them: after its inputs are read, after the first of its
table commits, after all of them, in the middle of saving the engine state (a segment
written, the manifest not yet), after the state is saved. And ``mid_compaction``: while a
save writes a sorted run or an array anew in place of one it opened with its deltas.

In a partitioned run's tasks (first attempts only; ``point@K`` for partition K):
``partition_after_save`` kills the task's Python worker after it saved its partition, and
``executor_after_save`` kills the Spark executor running it (its JVM), as a lost machine."""

import os
import signal

FAULT_ENV = "DELTALOG_FAULT"
FAULT_POINTS = ("after_read", "mid_commit", "after_commit", "mid_state", "after_state")


def fault(point: str, stratum: int) -> None:
    """Kill this process here when ``DELTALOG_FAULT`` names ``point`` (of ``stratum``)."""
    if os.environ.get(FAULT_ENV) in (point, f"{point}@{stratum}"):
        os.kill(os.getpid(), signal.SIGKILL)


TASK_FAULTS = ("partition_after_save", "executor_after_save")


def task_fault(value: str, partition: int) -> None:
    """In a partitioned run's task: kill the Python worker, or its executor, when
    ``value`` (the driver's ``DELTALOG_FAULT``) names a task fault point of ``partition``."""
    for point in TASK_FAULTS:
        if value in (point, f"{point}@{partition}"):
            if point == "executor_after_save":
                _kill_executor()
            os.kill(os.getpid(), signal.SIGKILL)


def _kill_executor() -> None:
    """SIGKILL the executor JVM this Python worker runs under (its parent or grandparent),
    when there is one apart from the driver (local mode's tasks run in the driver's JVM)."""
    pid = os.getpid()
    for _ in range(3):
        pid = _parent(pid)
        if pid <= 1:
            return
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            return
        if b"CoarseGrainedExecutorBackend" in cmdline:
            os.kill(pid, signal.SIGKILL)
            return


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0
