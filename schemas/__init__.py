"""Relation schemas in every form the project needs, from one engine declaration.

Submodules: ``relation`` (Arrow schema, Dagster table schema, rows <-> Arrow). The Spark form
lives with the Spark session helpers in ``pipelines.spark_session``.
"""
