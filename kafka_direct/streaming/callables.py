"""User functions that may or may not take the batch time first.

``foreachRDD(f)`` accepts ``f(rdd)`` and ``f(time, rdd)``. Which one is decided from the
function's signature (so ``functools.partial`` objects, bound methods and callable objects
work), or said explicitly with ``withTime=True/False`` where the signature is ambiguous.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from kafka_direct.errors import ConfigurationError

__all__ = ["with_time"]


def _accepts(signature: inspect.Signature, count: int) -> bool:
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True


def _required_positional(signature: inspect.Signature) -> int:
    return sum(1 for p in signature.parameters.values()
               if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
               and p.default is p.empty)


def with_time(func: Any, arity: int, withTime: bool | None, what: str
              ) -> Callable[..., Any]:
    """``func`` as a function of ``(time, *args)`` whatever form it was written in.

    Args:
        func: The user's function, taking ``arity`` arguments or the time and those.
        arity: How many arguments besides the time (1 for ``foreachRDD``, 2 for
            ``transformWith``).
        withTime: True or False to say which form ``func`` has; None decides from its
            signature: exactly ``arity + 1`` required positional parameters means the time
            comes first.
        what: The operation, for error messages.

    Raises:
        ConfigurationError: ``func`` is not callable or takes neither form.
    """
    if not callable(func):
        raise ConfigurationError(f"{what} needs a function, got {func!r}")
    if withTime is None:
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError):
            withTime = False  # a builtin without a signature: assume the plain form
        else:
            required = _required_positional(signature)
            if required == arity + 1 or (required < arity + 1 and not _accepts(signature, arity)
                                         and _accepts(signature, arity + 1)):
                withTime = True
            elif _accepts(signature, arity):
                withTime = False
            else:
                raise ConfigurationError(
                    f"{what} takes a function of {arity} argument(s) or of the batch time and "
                    f"{arity} argument(s); {func!r} takes neither")
    if withTime:
        return func  # type: ignore[no-any-return]

    def without_time(_time: Any, *args: Any) -> Any:
        return func(*args)

    return without_time
