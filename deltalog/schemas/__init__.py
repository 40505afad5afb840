"""Relation schemas in every form the project needs, from one engine declaration.

Submodules: ``relation`` (Arrow schema, Spark schema, Dagster table schema, rows <-> Arrow).
"""
