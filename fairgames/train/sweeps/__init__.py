"""Runs of runs on Hydra's launchers: a tuned run's grid and its choice on validation
(:mod:`.tune`), a multirun's table and frontier (:mod:`.sweep`), and independent jobs such
as reproduction cells (:mod:`.launch`)."""
