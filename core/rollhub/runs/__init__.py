"""A run's files and figures: the run directory's layout, its manifest, summaries and
plots, held-out evaluation, intervals and comparisons between runs."""
