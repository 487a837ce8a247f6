"""Preparation of the real datasets the benchmarks run on (``docs/datasets.md``):
``vision`` (photographs) and ``tokens`` (GPT-2 tokens of documentation prose),
built from Debian packages (``debian``) and written with their provenance
(``outputs``)."""
