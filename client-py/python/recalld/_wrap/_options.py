"""The wrapper's options: set on `wrap(...)`, overridden per call with `recalld={...}`."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Dict, Mapping, Optional, Union

from .._args import Now, decorate_args, report_args

__all__ = ["Options"]


@dataclass(frozen=True)
class Options:
    """What a wrapped call tells recalld.

    - `memory`: the memory id (one conversation). None sends the call to the model untouched.
    - `ceiling`: the token ceiling of the assembled request (stored on the memory).
    - `agent`, `user`: who is talking, stored with the memory.
    - `now`: the time of the call (Unix seconds or a datetime); None uses the daemon's clock.
    - `dry_run`: decorate without storing anything and do not report; the model's reply is
      returned as it came.
    - `history`: `"full"` (the request holds the history, default) or `"delta"`.
    - `pass_through`: when the daemon cannot be reached, call the model unchanged and log a
      warning instead of raising `RecalldConnectionError`.
    """

    memory: Optional[str] = None
    ceiling: Optional[int] = None
    agent: Optional[str] = None
    user: Optional[str] = None
    now: Optional[Now] = None
    dry_run: bool = False
    history: Optional[str] = None
    pass_through: bool = False

    def merged(self, per_call: Union[None, "Options", Mapping[str, Any]]) -> "Options":
        """These options with the per-call ones on top (a mapping names only what changes)."""
        if per_call is None:
            return self
        if isinstance(per_call, Options):
            changes = {f.name: getattr(per_call, f.name) for f in fields(Options)}
            changes = {k: v for k, v in changes.items() if v != getattr(Options(), k)}
        else:
            known = {f.name for f in fields(Options)}
            unknown = set(per_call) - known
            if unknown:
                raise TypeError(f"unknown recalld option(s): {', '.join(sorted(unknown))}")
            changes = dict(per_call)
        return replace(self, **changes)

    def decorate_args(self, request: Dict[str, Any]) -> Dict[str, Any]:
        assert self.memory is not None
        return decorate_args(
            self.memory, request, self.now, self.dry_run, self.ceiling, self.agent, self.user, self.history
        )

    def report_args(self, response: Dict[str, Any]) -> Dict[str, Any]:
        assert self.memory is not None
        return report_args(self.memory, response, self.now)
