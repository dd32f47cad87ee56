"""What the command-line scripts share: a Hydra app whose config errors — Hydra's own
(composition, override syntax, a key not in the config) and the library's — end in one
message and exit status 2 (``scripts/train.py``, ``scripts/filter.py``).

Example:
    >>> def app():
    ...     raise ValueError("bad value")
    >>> try:
    ...     one_message(app, (ValueError,))
    ... except SystemExit as e:
    ...     print(e.code)
    2
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from hydra.errors import ConfigCompositionException, OverrideParseException
from omegaconf.errors import OmegaConfBaseException

FULL_ERROR = "HYDRA_FULL_ERROR"
# Hydra's own errors (an unknown group option or key, an override that does not parse, a value
# of the wrong type); a script adds the library's.
HYDRA_ERRORS = (ConfigCompositionException, OverrideParseException, OmegaConfBaseException)


def one_message(main: Callable[[], Any], errors: tuple[type[BaseException], ...],
                message: Callable[[BaseException], str] | None = None) -> None:
    """Run the Hydra app ``main`` with every error of ``errors`` as one message (``message``'s
    text, default :func:`hydra_message`) and exit status 2.

    Hydra reports its own errors itself and exits with 1; with ``HYDRA_FULL_ERROR`` set it
    re-raises them instead, so that they are caught here. Any other exception keeps its
    traceback. A user's own ``HYDRA_FULL_ERROR=1`` adds the traceback to a config error's
    message. (With the variable forced, an exception in a job prints its whole traceback,
    Hydra's frames included, rather than Hydra's trimmed one.)
    """
    user_setting = os.environ.get(FULL_ERROR)
    os.environ[FULL_ERROR] = "1"
    try:
        main()
    except errors as e:
        if user_setting == "1":
            traceback.print_exc()
        print(f"error: {(message or hydra_message)(e)}", file=sys.stderr)
        sys.exit(2)
    finally:
        if user_setting is None:
            os.environ.pop(FULL_ERROR, None)
        else:
            os.environ[FULL_ERROR] = user_setting


def hydra_message(e: BaseException) -> str:
    """Hydra's message and, as Hydra prints it, its OmegaConf cause's (the key and type)."""
    cause = e.__cause__
    text = str(e)
    if isinstance(cause, OmegaConfBaseException) and str(cause) not in text:
        text = f"{text}\n{cause}"
    return text
