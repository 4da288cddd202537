"""Checking ``[plugins.<name>]`` tables: unknown tables, and each plugin's own settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

    from rollhub.config import RollhubConfig
    from rollhub.plugins import PluginHost

__all__ = ["check_config"]


def check_config(host: PluginHost, config: RollhubConfig) -> None:
    """Validate plugin settings: unknown ``[plugins.<name>]`` tables and each plugin's own.

    A pydantic ``ValidationError`` raised by a plugin's ``rollhub_check_config`` becomes a
    :class:`ConfigError` naming ``plugins.<plugin>.<field>``.

    :raises ConfigError: naming the table or field and the fix.
    """
    from pydantic import ValidationError

    from rollhub.errors import ConfigError

    for table in sorted(config.plugins.model_extra or {}):
        record = host.plugins.get(table)
        if record is not None and record.error is not None:
            raise ConfigError(
                f"[plugins.{table}] configures plugin {table!r}, which failed to load: "
                f"{record.error.error}; fix or reinstall it (see 'rollhub plugins')",
                field=f"plugins.{table}",
            )
        if record is None or record.source == "builtin":
            loaded = sorted(
                n
                for n, r in host.plugins.items()
                if r.error is None and r.source in ("entry point", "config")
            )
            raise ConfigError(
                f"[plugins.{table}] configures a plugin that is not loaded; loaded plugins: "
                f"{', '.join(loaded) or 'none'} (install the plugin, add its module to "
                f"[plugins] modules, or remove the table)",
                field=f"plugins.{table}",
            )
    caller = host.hook.rollhub_check_config
    given = {"config": config, "registry": host.registry}
    for impl in reversed(caller.get_hookimpls()):
        try:
            impl.function(**{a: given[a] for a in impl.argnames})
        except ValidationError as exc:
            raise ConfigError(
                _settings_error(impl.plugin_name, exc), field=_settings_field(impl.plugin_name, exc)
            ) from None


def _settings_field(plugin: str, exc: ValidationError) -> str:
    loc = ".".join(str(p) for p in exc.errors()[0]["loc"])
    return f"plugins.{plugin}.{loc}" if loc else f"plugins.{plugin}"


def _settings_error(plugin: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        field = f"plugins.{plugin}.{loc}" if loc else f"plugins.{plugin}"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown key {field!r}; remove it or check its spelling")
        elif err["type"] == "missing":
            parts.append(f"{field}: required; add it to [plugins.{plugin}]")
        else:
            parts.append(f"{field}: {err['msg']} (got {err.get('input')!r})")
    return "; ".join(parts)
