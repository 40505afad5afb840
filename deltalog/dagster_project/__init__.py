"""deltalog's orchestration: Dagster assets, checks and resources built from pipeline specs.

Orchestration only: every asset body is a call into ``pipelines``. ``definitions`` holds the
``defs`` that ``dagster dev -m deltalog.dagster_project.definitions`` loads; ``defs/`` the
factories.
"""
