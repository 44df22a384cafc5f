"""GR00T's ``meta/modality.json``: which columns of a LeRobot dataset are state, action, views and
instruction, read as Isaac-GR00T defines it, or inferred from ``meta/info.json``.

::

    {"state":  {"<sub-key>": {"start": 0, "end": 5, "original_key": "observation.state"}, ...},
     "action": {"<sub-key>": {"start": 0, "end": 6, "original_key": "action"}, ...},
     "video":  {"<view>": {"original_key": "observation.images.<view>"}, ...},
     "annotation": {"human.task_description": {"original_key": "task_index"}}}

Each state/action sub-key is columns ``[start, end)`` of its ``original_key`` (default
``observation.state`` / ``action``); the model's vector is the sub-keys concatenated in file
order. Views are taken in file order. Upstream's other per-key fields (``absolute``,
``rotation_type``, ``dtype``, ``range``) are accepted and not used; autotune adds
``normalization`` (``min_max``, upstream's default, or ``mean_std``) per sub-key.
Without the file: one sub-key per vector (``observation.state``, ``action``), every
``observation.images.*`` video a view, the task as the instruction.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.data.files import get, printable_names
from autotune.errors import DataError, short_repr

STATE, ACTION, TASK_INDEX = "observation.state", "action", "task_index"
IMAGE_PREFIX = "observation.images."
NORMALIZATIONS = ("min_max", "mean_std")
SECTIONS = ("state", "action", "video", "annotation")
_DEFAULT_SOURCE = {"state": STATE, "action": ACTION}
INSTRUCTION = "human.task_description"


@dataclass(frozen=True)
class KeySlice:
    """One sub-key: columns ``[start, end)`` of feature ``source``, and how they are normalised."""

    name: str
    start: int
    end: int
    normalization: str = "min_max"
    source: str = STATE

    @property
    def width(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class View:
    name: str
    key: str
    """The video feature of info.json (``observation.images.<name>``)."""


@dataclass(frozen=True)
class Modality:
    state: tuple[KeySlice, ...]
    action: tuple[KeySlice, ...]
    views: tuple[View, ...]
    instruction: str = TASK_INDEX
    """Column of task indices whose task is the instruction."""
    inferred: bool = False
    """True when there is no modality.json and this was inferred from info.json."""

    @property
    def state_dim(self) -> int:
        return sum(k.width for k in self.state)

    @property
    def action_dim(self) -> int:
        return sum(k.width for k in self.action)

    @property
    def video_keys(self) -> list[str]:
        return [v.key for v in self.views]

    def to_json(self) -> dict:
        def part(keys):
            return {k.name: {"start": k.start, "end": k.end, "original_key": k.source,
                             "normalization": k.normalization} for k in keys}  # fmt: skip

        return {
            "state": part(self.state),
            "action": part(self.action),
            "video": {v.name: {"original_key": v.key} for v in self.views},
            "annotation": {INSTRUCTION: {"original_key": self.instruction}},
        }


def read_modality(raw: object, features: dict, path: Path) -> Modality:
    if not isinstance(raw, dict):
        raise DataError(f"{path}: not a JSON object with {list(SECTIONS[:3])}")
    unknown = [k for k in raw if k not in SECTIONS]
    if unknown:
        raise DataError(f"{path}: unknown key {short_repr(unknown[0])}; allowed: {list(SECTIONS)}")
    sections = [(part, raw[part]) for part in SECTIONS if isinstance(raw.get(part), dict)]
    printable_names(((f"a key of {part}", name) for part, keys in sections for name in keys), path)
    return Modality(
        state=_slices(raw, "state", features, path),
        action=_slices(raw, "action", features, path),
        views=_views(get(raw, "video", path, dict), features, path),
        instruction=_instruction(raw.get("annotation"), features, path),
    )


def infer_modality(features: dict, path: Path) -> Modality:
    """The obvious mapping of info.json's features (``path`` is info.json, for errors)."""

    def whole(part: str) -> tuple[KeySlice, ...]:
        source = _DEFAULT_SOURCE[part]
        return (KeySlice(part, 0, vector_dim(features, source, path), "min_max", source),)

    views = tuple(View(k.removeprefix(IMAGE_PREFIX), k) for k, f in features.items()
                  if k.startswith(IMAGE_PREFIX) and isinstance(f, dict) and f.get("dtype") == "video")  # fmt: skip
    if not views:
        stored = [
            k for k, f in features.items() if isinstance(f, dict) and f.get("dtype") == "image"
        ]
        hint = (
            f" ({stored[0]} is stored as images in parquet; autotune reads video features)"
            if stored
            else ""
        )
        raise DataError(f"{path}: no 'observation.images.*' video feature{hint}")
    return Modality(whole("state"), whole("action"), views, TASK_INDEX, inferred=True)


def describe_inferred(modality: Modality, path: Path, root: Path) -> str:
    """The one-line notice that ``modality.json`` was inferred, and how to write it out."""
    return (
        f"{path}: missing; inferred from meta/info.json: state {modality.state_dim} dims "
        f"({STATE}), action {modality.action_dim} dims ({ACTION}), views "
        f"{', '.join(v.name for v in modality.views)}, the task as the instruction "
        f"(`autotune data modality {root} --write` writes it)"
    )


def vector_dim(features: dict, key: str, path: Path) -> int:
    feat = get(features, key, path, dict, "features.")
    shape = get(feat, "shape", path, list, f"features.{key}.")
    if len(shape) != 1 or not isinstance(shape[0], int) or shape[0] < 1:
        raise DataError(f"{path}: features.{key}.shape is {shape}, not [D] with D >= 1")
    if not str(feat.get("dtype", "")).startswith("float"):
        raise DataError(
            f"{path}: features.{key}.dtype is {feat.get('dtype')!r}; expected a float vector"
        )
    return shape[0]


def _slices(raw: dict, part: str, features: dict, path: Path) -> tuple[KeySlice, ...]:
    keys = []
    for name, spec in get(raw, part, path, dict).items():
        where = f"{part}.{name}."
        start, end = get(spec, "start", path, int, where), get(spec, "end", path, int, where)
        source = _original_key(spec, _DEFAULT_SOURCE[part], path, where)
        norm = spec.get("normalization", "min_max")
        if source not in features:
            raise DataError(
                f"{path}: {where}original_key {short_repr(source)} "
                "is not a feature of meta/info.json"
            )
        dim = vector_dim(features, source, path.parent / "info.json")
        if not 0 <= start < end <= dim:
            raise DataError(
                f"{path}: {part}.{name} spans [{start}, {end}); {source} has {dim} columns"
            )
        if norm not in NORMALIZATIONS:
            raise DataError(
                f"{path}: {where}normalization {short_repr(norm)} "
                f"is not one of {list(NORMALIZATIONS)}"
            )
        keys.append(KeySlice(name, start, end, norm, source))
    if not keys:
        raise DataError(f"{path}: {part!r} names no sub-keys")
    return tuple(keys)


def _views(raw: dict, features: dict, path: Path) -> tuple[View, ...]:
    views = []
    for name, spec in raw.items():
        key = _original_key(spec, IMAGE_PREFIX + name, path, f"video.{name}.")
        if not isinstance(features.get(key), dict) or features[key].get("dtype") != "video":
            raise DataError(
                f"{path}: video.{name}: {short_repr(key)} is not a video feature of meta/info.json"
            )
        views.append(View(name, key))
    if not views:
        raise DataError(f"{path}: declares no video keys")
    return tuple(views)


def _instruction(raw: object, features: dict, path: Path) -> str:
    """The column of the instruction: the task-description annotation, else the first one."""
    if not raw:
        return TASK_INDEX
    if not isinstance(raw, dict):
        raise DataError(f"{path}: 'annotation' is {short_repr(raw)}, not an object")
    name = next((n for n in raw if n.endswith("task_description")), next(iter(raw)))
    column = _original_key(raw[name], f"annotation.{name}", path, f"annotation.{name}.")
    if column not in features:
        raise DataError(
            f"{path}: annotation.{name}: column {short_repr(column)} "
            "is not a feature of meta/info.json"
        )
    return column


def _original_key(spec: object, default: str, path: Path, where: str) -> str:
    """``spec``'s ``original_key`` (``default`` where it has none): a feature name, so a string."""
    key = (spec.get("original_key") if isinstance(spec, dict) else None) or default
    if not isinstance(key, str):
        raise DataError(
            f"{path}: {where}original_key is {key!r}; allowed: the name of a feature of meta/info.json"
        )
    return key
