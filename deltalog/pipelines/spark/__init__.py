"""Everything this project runs on Spark.

``session``: the one way Spark is started, and relations in and out of DataFrames;
``compiler``: ``recompute``, a whole program compiled to DataFrame operations and run to its
fixpoint; ``plan``: the order each rule body runs in; ``columns``: rule expressions and
comparisons as Columns with the engine's semantics.
"""
