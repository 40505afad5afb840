"""Example pipelines with real data: ``debian/`` (the bookworm package index and its
security and stable updates) and ``wordnet/`` (the WordNet 3.0 hypernym graph). Each is a
pipeline folder (``program.dl`` + ``pipeline.toml``) with its data snapshots and the
loaders that turn them into EDB tables; the library does not depend on them."""
