"""Static analysis of a parsed program (``analyze``: the passes in order, and
``load_program``: parse + analyze), one module per pass (``predicates``, ``safety``,
``typecheck``, ``stratify``), the analyzed program's types (``program``), and the
containment of relations the program guarantees (``containment``)."""
