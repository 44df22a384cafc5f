"""This process's place among a run's processes, read from torchrun's environment.

``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` are input like a flag: a launcher that exported them,
or a shell that kept them from another job, hands them to every command and every trial process
that autotune starts with one process. :func:`ranks_from_env` reads them and refuses a value
torch would fail on later, deep in its start, with a traceback (an integer that is not one, a rank
outside the world, a world of several processes with no rendezvous address).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from autotune.errors import ConfigError, short_repr

UNSET = (
    "torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/PORT; unset them to run one process"
)

PLACE = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)
"""The variables torchrun gives each process it starts: a process autotune starts gets them from
its own torchrun or not at all, never from the shell that started autotune."""


@dataclass(frozen=True)
class Ranks:
    rank: int
    world: int
    local: int


def _integer(env: Mapping[str, str], name: str, default: int, low: int, high: int | None) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    if high is None:
        allowed = f"an integer from {low}"
    else:
        allowed = str(low) if high == low else f"an integer from {low} to {high}"
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(
            f"environment variable {name}={short_repr(raw)} is not an integer; allowed: {allowed} ({UNSET})"
        ) from None
    if value < low or (high is not None and value > high):
        raise ConfigError(
            f"environment variable {name}={value} is out of range; allowed: {allowed} ({UNSET})"
        )
    return value


def ranks_from_env(env: Mapping[str, str] | None = None) -> Ranks:
    """``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (0, 1, 0 where unset); :class:`ConfigError` naming the
    variable for a value that is not an integer in range, or for several processes without
    ``MASTER_ADDR``/``MASTER_PORT`` (torchrun sets both; without them torch's rendezvous fails)."""
    env = os.environ if env is None else env
    world = _integer(env, "WORLD_SIZE", 1, 1, None)
    rank = _integer(env, "RANK", 0, 0, world - 1)
    local = _integer(env, "LOCAL_RANK", 0, 0, None)
    if world > 1:
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not env.get(name, "").strip():
                raise ConfigError(
                    f"environment variable WORLD_SIZE={world} asks for {world} processes, but {name} "
                    f"is not set; allowed: start them with torchrun or --nproc {world} ({UNSET})"
                )
    return Ranks(rank, world, local)


def rank_or_zero() -> int:
    """This process's rank for choosing who writes (a worker before it has a place to report a
    bad environment: :func:`ranks_from_env` refuses it inside, where the failure is recorded)."""
    try:
        return ranks_from_env().rank
    except ConfigError:
        return 0
