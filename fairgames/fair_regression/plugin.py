"""What paper 003's family adds to a run (imported by :mod:`fairgames.families`):
``algorithm=reduction``, its reduction as a run method (:class:`~.method.ReductionMethod`), and
the rules of its config."""

from fairgames.train.config.checks import register_validator
from fairgames.train.method import register_method

from .method import ReductionMethod, check_reduction

register_method(ReductionMethod())
register_validator("algorithm", check_reduction)
