"""Worst-case optimal joins: sorted tries (``trie``), leapfrog triejoin (``leapfrog``),
and the per-rule join plan with its variable order (``plan``)."""
