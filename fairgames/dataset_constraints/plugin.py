"""What paper 001's family adds to a run (imported by :mod:`fairgames.families`):
``algorithm=mm``, the ramp classifier trained by majorization–minimization
(:class:`~.method.MMMethod`), and the rules of its config."""

from fairgames.train.config.checks import register_validator
from fairgames.train.method import register_method

from .method import MMMethod, check_mm

# the algorithm group's option ``algorithm=mm`` (Hydra's ConfigStore): its own keys' defaults
register_method(MMMethod(), option={"name": MMMethod.name, "lam": None, "rounds": 8,
                                    "round_gap": 1e-6, "tol": 1e-6})
register_validator("algorithm", check_mm)
