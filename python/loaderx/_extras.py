"""The one check that an optional package is installed, and the one wording of
how to install it: an extra of the loaderx checkout (never the published
package of the same name)."""

from __future__ import annotations

import importlib

from .errors import MissingDependencyError


def require_extra(module: str, needs: str, extra: str, note: str = "") -> None:
    """Imports `module`, or raises MissingDependencyError: `needs` says who needs
    what ("loaderx.ray needs ray"), `extra` is the checkout's extra that
    installs it, `note` is appended to the message."""
    try:
        importlib.import_module(module)
    except ImportError as e:  # pragma: no cover - the extra has it
        raise MissingDependencyError(
            f"{needs}: run `pip install -e '.[{extra}]'` in the loaderx checkout{note}",
            name=module.split(".")[0],
        ) from e
