"""Static analysis: arity, types, safety, stratification (``check``), and the result a
program is evaluated from (``AnalyzedProgram``)."""

from engine.analysis.check import AnalyzedProgram, RelationSchema, Stratum, analyze

__all__ = ["AnalyzedProgram", "RelationSchema", "Stratum", "analyze"]
