"""Chat templates compiled for the per-turn path: transformers' own sandboxed environment
(its filters, globals and extensions) with three shortcuts that render the same text.

A window render of a tool session spent about half its time in the sandbox's attribute
checks and a third in the ``tojson`` of the tool schemas, rendered again on every call:

- ``message.role`` on a plain dict: the sandbox first tries the Python attribute, fails
  with an ``AttributeError`` and then reads the item. For an exact ``dict`` (or
  :class:`FrozenJson`) whose class has no such attribute, the item is read directly, which
  is what the sandbox ends up doing.
- whether an attribute is safe depends only on the object's type and the attribute's name
  (underscore names, a function's or generator's internals, the methods that mutate a
  list, dict, set or deque); the answer is kept per ``(type, name)``.
- :class:`FrozenJson` objects (the gateway's copy of a session's tool schemas, never
  mutated) keep their JSON text per ``tojson`` argument set; every other value is dumped
  as transformers dumps it.
"""

from __future__ import annotations

import copy
import json
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2

log = logging.getLogger(__name__)

__all__ = ["FrozenJson", "SharedTools", "compile_template", "freeze_tools"]


class FrozenJson(dict[str, Any]):
    """A dict that is never changed after it is built and keeps its ``tojson`` texts.

    Built only by :func:`freeze_tools` from a deep copy, so nothing else holds it; the
    sandbox forbids templates to mutate it.
    """

    __slots__ = ("_rollhub_json",)

    def __init__(self, value: dict[str, Any]) -> None:
        super().__init__(value)
        self._rollhub_json: dict[tuple[Any, ...], str] = {}


def freeze_tools(tools: list[dict[str, Any]] | None) -> list[Any] | None:
    """A private copy of a tool list whose schemas render their JSON once.

    Tools that are not dicts are copied as they are (the template decides what to do
    with them).
    """
    if not tools:
        return tools
    return [FrozenJson(copy.deepcopy(t)) if isinstance(t, dict) else t for t in tools]


class SharedTools:
    """One frozen copy (and one key string) per distinct tool list, shared by the sessions
    of a renderer: agents of one kind send the same schemas, so a session holds no copy
    of its own and their JSON is written once for all of them.

    Lists are told apart by their JSON in the order sent (a template dumps them in that
    order), not by the order-free key sessions match turns with.

    :param size: distinct tool lists kept (the least recently used go first).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._by_text: OrderedDict[str, tuple[str, list[Any] | None]] = OrderedDict()

    def get(self, tools: list[dict[str, Any]] | None, key: str) -> tuple[str, list[Any] | None]:
        """``(key, frozen tools)``: the shared equals of ``key`` and of ``tools``' copy."""
        text = json.dumps(tools, ensure_ascii=False, default=repr)
        hit = self._by_text.get(text)
        if hit is not None and hit[0] == key:
            self._by_text.move_to_end(text)
            return hit
        hit = self._by_text[text] = (key, freeze_tools(tools))
        if len(self._by_text) > self.size:
            self._by_text.popitem(last=False)
        return hit


#: attribute names a FrozenJson or dict has as a Python attribute (a superset of dict's)
_DICT_ATTRS = frozenset(dir(FrozenJson))


def compile_template(template: str) -> jinja2.Template | None:
    """The template compiled by transformers, with the shortcuts above; ``None`` when this
    transformers version has no compiler to reuse (callers fall back to
    ``apply_chat_template``)."""
    try:
        from transformers.utils.chat_template_utils import _cached_compile_jinja_template
    except ImportError:  # pragma: no cover - older or newer transformers: use the public API
        return None
    compiled = _cached_compile_jinja_template(template)  # a fresh environment of our own
    env = compiled.environment
    sandbox_getattr = env.getattr
    sandbox_is_safe = env.is_safe_attribute
    undefined = env.undefined
    safe: dict[tuple[type, str], bool] = {}

    def getattr_(obj: object, attribute: str) -> object:
        if (type(obj) is dict or type(obj) is FrozenJson) and attribute not in _DICT_ATTRS:
            try:
                return obj[attribute]
            except (TypeError, LookupError):
                return undefined(obj=obj, name=attribute)
        return sandbox_getattr(obj, attribute)

    def is_safe_attribute(obj: object, attr: str, value: object) -> bool:
        key = (type(obj), attr)
        known = safe.get(key)
        if known is None:
            known = safe[key] = sandbox_is_safe(obj, attr, value)
        return known

    dumps = env.filters["tojson"]

    def tojson(
        x: object,
        ensure_ascii: bool = False,
        indent: int | str | None = None,
        separators: Sequence[str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        if type(x) is not FrozenJson or type(separators) is list:
            return dumps(x, ensure_ascii, indent, separators, sort_keys)
        key = (ensure_ascii, indent, separators, sort_keys)
        text = x._rollhub_json.get(key)
        if text is None:
            text = x._rollhub_json[key] = dumps(x, ensure_ascii, indent, separators, sort_keys)
        return text

    env.getattr = getattr_
    env.is_safe_attribute = is_safe_attribute
    env.filters["tojson"] = tojson
    return compiled
