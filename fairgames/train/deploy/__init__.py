"""Using a finished run: :func:`~.load.load_run` gives its solutions as predictors
(:mod:`.predictor`) that apply the run's preprocessing to new rows."""
