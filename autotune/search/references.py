"""``--reference``: the stock configuration with some knobs changed, measured as a trial of its own."""

from __future__ import annotations


def reference_config(base, text: str, flag: str = "--reference"):
    """``base`` with ``key=value`` pairs applied (values in YAML: ``[all]``, ``true``, ``8``); the
    errors name ``flag``, the option ``text`` came from."""
    import yaml

    from autotune.errors import ConfigError
    from autotune.search.knob_entry import check_key
    from autotune.search.knobs import apply_values

    values = {}
    for pair in split_pairs(text):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag}: {pair!r} is not KEY=VALUE (e.g. compile.regions=[all])")
        try:
            values[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or type(exc).__name__
            raise ConfigError(
                f"{flag}: {pair!r}: the value is not YAML ({problem}); e.g. compile.regions=[all]"
            ) from None
        except RecursionError:  # the composer recurses per level: no knob's value nests so deep
            raise ConfigError(
                f"{flag}: {key.strip()!r}: the value nests lists or mappings deeper than can be "
                "read; e.g. compile.regions=[all]"
            ) from None
    for key in values:
        try:
            check_key(key)
        except ConfigError as exc:
            raise ConfigError(f"{flag}: {key!r}: {exc}") from None
    try:
        return apply_values(base, values)
    except ConfigError as exc:
        raise ConfigError(f"{flag} {text!r}: {exc}") from None


OPENS = "=[{,:"
"""What a quote follows where it opens a YAML string (a value's start, an item's), not an apostrophe."""


def split_pairs(text: str) -> list[str]:
    """``a=1,b=[x,y]`` -> ``["a=1", "b=[x,y]"]``: a comma inside brackets, braces or quotes is the
    value's (a list of regions, of betas), any other separates two ``key=value`` pairs."""
    pairs, start, depth, quote = [], 0, 0, ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"" and text[:i].rstrip()[-1:] in ("", *OPENS):
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            pairs.append(text[start:i])
            start = i + 1
    return [*pairs, text[start:]]


def check_references(opts) -> None:
    """A reference may change only knobs of the space: a trial is rebuilt from its knob values."""
    from autotune.config import to_dict
    from autotune.errors import ConfigError, short_repr
    from autotune.search.knobs import off_steps
    from autotune.search.params import config_of_params, trial_config

    space = opts.space
    for text, cfg in opts.references:
        if (found := space.outside(cfg)) is not None:
            knob, value = found
            raise ConfigError(
                f"--reference {text!r}: {knob.key}: {short_repr(value)} is outside search space "
                f"{space.name!r} ({space.path}){off_steps(knob, value)}; allowed: "
                f"{knob.values_text()}"
            )
        rebuilt = config_of_params(opts, space.stock_params(cfg))
        if to_dict(rebuilt) != to_dict(trial_config(cfg, {})):
            raise ConfigError(
                f"--reference {text!r}: changes a setting that is not a knob of search space "
                f"{opts.space.name!r} (on this machine); allowed: {[k.key for k in opts.space.knobs]}"
            )
