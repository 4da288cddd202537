"""A launched backend's settings: its own ``[plugins.<name>]`` table.

A backend launched by its own command (:class:`~rollhub.training.roles.LaunchedBackend`,
e.g. ``verl``, ``slime``) drives its own training loop; ``[trainer] name = "<name>"``
selects it, and how to launch it lives in the plugin's table, validated by the plugin::

    [trainer]
    name = "verl"

    [plugins.verl]
    reward_source = "rollhub"

The same keys were once options of ``[trainer]`` itself. That spelling still works, with
one warning per process and backend that names the new one; setting both is an error.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from rollhub.errors import ConfigError
from rollhub.validation import explain, first_loc

if TYPE_CHECKING:
    from rollhub.config import RollhubConfig

__all__ = ["launch_settings"]

M = TypeVar("M", bound=BaseModel)

#: backends whose ``[trainer]`` spelling was already warned about in this process
_warned: set[str] = set()


def launch_settings(config: RollhubConfig, name: str, model: type[M]) -> M:
    """Validate backend ``name``'s launch settings from ``[plugins.<name>]``.

    When ``[trainer] name = "<name>"`` carries options (the older spelling) they are used
    instead, with a :class:`FutureWarning` (once per process and backend) saying to move
    them to ``[plugins.<name>]``.

    :param config: the loaded config.
    :param name: the backend's plugin name, which is also its trainer's config name.
    :param model: the plugin's settings model (extra keys forbidden).
    :returns: the validated settings (the model's defaults when neither spelling is used).
    :raises ConfigError: a key is unknown or has a bad value (naming
        ``plugins.<name>.<key>``, or ``trainer.<key>`` for the older spelling), or both
        spellings are used at once.
    """
    table = config.plugins.settings(name)
    legacy = config.trainer.options if config.trainer.name == name else {}
    if legacy and table:
        raise ConfigError(
            f"[trainer] name = {name!r} has options ({', '.join(sorted(legacy))}) and "
            f"[plugins.{name}] is set too; move the [trainer] options into [plugins.{name}]",
            field=f"trainer.{min(legacy)}",
        )
    if legacy:
        _warn_legacy(name, legacy)
        return _validate(model, legacy, prefix="trainer", source=f"[trainer] ({name} settings)")
    return _validate(model, table, prefix=f"plugins.{name}", source=f"[plugins.{name}]")


def _validate(model: type[M], data: dict[str, Any], *, prefix: str, source: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(explain(exc, model, source, prefix=prefix),
                          field=first_loc(exc, prefix=prefix)) from None


def _warn_legacy(name: str, legacy: dict[str, Any]) -> None:
    if name in _warned:
        return
    _warned.add(name)
    keys = ", ".join(sorted(legacy))
    # FutureWarning, not DeprecationWarning: the reader is a config file's author, and
    # Python shows DeprecationWarning only for code run as __main__
    warnings.warn(
        f"the options of [trainer] name = {name!r} ({keys}) are deprecated; move them to "
        f"[plugins.{name}] and keep only name = {name!r} under [trainer]",
        FutureWarning,
        stacklevel=3,
    )
