"""The name map between a workload's parameters and an upstream checkpoint's keys, kept as data.

A table (``<workload>.yaml`` beside this module) has one row per key family: a replica pattern, an
upstream pattern, an optional reordering (``transforms.py``) and the upstream source the name was
read from. :func:`load_name_map` reads it; :meth:`NameMap.bind` expands it for one built model into a
:class:`BoundMap`: every parameter's upstream key, and the reverse. The first row whose replica
pattern matches a parameter wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml
from torch import nn

from autotune.errors import ConfigError, WorkloadError
from autotune.weights.transforms import Transform, make_transform

HERE = Path(__file__).parent
_PLACEHOLDER = re.compile(r"\{(\w+)(?::([\w|]+))?(?:\+(\w+))?\}")
_FIXED = {"i": r"\d+", "w": "weight|bias"}


@dataclass(frozen=True)
class Row:
    replica: str
    upstream: str
    transform: Transform
    source: str
    pattern: re.Pattern = field(repr=False, compare=False)

    def upstream_name(self, match: re.Match, counts: dict[str, int]) -> str:
        values = match.groupdict()

        def fill(m: re.Match) -> str:
            name, _, plus = m.groups()
            if plus is None:
                return values[name]
            return str(int(values[name]) + counts[plus])

        return _PLACEHOLDER.sub(fill, self.upstream)


@dataclass(frozen=True)
class Ignored:
    pattern: re.Pattern
    why: str


def _regex(template: str, where: str) -> re.Pattern:
    parts, pos = [], 0
    for m in _PLACEHOLDER.finditer(template):
        name, choices, plus = m.groups()
        if plus is not None:
            raise ConfigError(
                f"{where}: {template!r}: an offset ({{{name}+{plus}}}) belongs on the upstream side"
            )
        parts.append(re.escape(template[pos : m.start()]))
        parts.append(f"(?P<{name}>{choices or _FIXED.get(name, '.+')})")
        pos = m.end()
    parts.append(re.escape(template[pos:]))
    return re.compile("".join(parts) + r"\Z")


@dataclass(frozen=True)
class BoundMap:
    """The table expanded for one model: replica name -> (upstream key, transform), and back."""

    to_upstream: dict[str, tuple[str, Transform]]
    to_replica: dict[str, str]
    ignored: tuple[Ignored, ...]
    aliases: dict[str, str]

    def canonical(self, key: str) -> str:
        """An upstream key with its aliased prefix (if any) replaced by the one this map writes."""
        for old, new in self.aliases.items():
            if key.startswith(old):
                return new + key[len(old) :]
        return key

    def why_ignored(self, key: str) -> str | None:
        return next((i.why for i in self.ignored if i.pattern.match(key)), None)


@dataclass(frozen=True)
class NameMap:
    workload: str
    path: Path
    counts: dict[str, str]
    """Offset name -> the dotted path of a module list in the model whose length it is."""
    rows: tuple[Row, ...]
    ignored: tuple[Ignored, ...]
    aliases: dict[str, str]

    def bind(self, model: nn.Module, names: list[str] | None = None) -> BoundMap:
        """Expand the table for ``model``'s parameters (or ``names``); every one must match a row."""
        counts = {k: len(model.get_submodule(path)) for k, path in self.counts.items()}
        names = [n for n, _ in model.named_parameters()] if names is None else names
        forward: dict[str, tuple[str, Transform]] = {}
        unmapped = []
        for name in names:
            for row in self.rows:
                m = row.pattern.match(name)
                if m:
                    forward[name] = (row.upstream_name(m, counts), row.transform)
                    break
            else:
                unmapped.append(name)
        if unmapped:
            raise WorkloadError(f"{self.path}: no row maps the parameters {_listed(unmapped)}")
        reverse = {up: name for name, (up, _) in forward.items()}
        if len(reverse) != len(forward):
            raise WorkloadError(f"{self.path}: two parameters map to one upstream key")
        return BoundMap(forward, reverse, self.ignored, self.aliases)


def _listed(items: list[str], most: int = 4) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


@cache
def load_name_map(workload: str) -> NameMap:
    """The table of ``workload`` (``autotune/weights/<workload>.yaml``)."""
    path = HERE / f"{workload}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in HERE.glob("*.yaml"))
        raise WorkloadError(
            f"workload {workload!r} has no upstream name map; maps exist for {known}"
        )
    data = yaml.safe_load(path.read_text())
    rows = []
    for n, r in enumerate(data["rows"]):
        where = f"{path}: rows[{n}]"
        missing = {m.group(1) for m in _PLACEHOLDER.finditer(r["upstream"])} - {
            m.group(1) for m in _PLACEHOLDER.finditer(r["replica"])
        }
        if missing:
            raise WorkloadError(
                f"{where}: the upstream pattern uses {sorted(missing)}, which the replica pattern lacks"
            )
        rows.append(
            Row(
                r["replica"],
                r["upstream"],
                make_transform(r.get("transform"), where),
                r["source"],
                _regex(r["replica"], where),
            )
        )
    ignored = tuple(
        Ignored(_regex(i["upstream"], f"{path}: ignore"), i["why"]) for i in data.get("ignore", [])
    )
    return NameMap(
        workload,
        path,
        dict(data.get("counts", {})),
        tuple(rows),
        ignored,
        dict(data.get("aliases", {})),
    )
