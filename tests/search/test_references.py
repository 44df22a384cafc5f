"""``run --reference KEY=VALUE[,KEY=VALUE...]``: its values, and its refusals on one line naming it."""

from __future__ import annotations

import pytest

from autotune.cli import main
from autotune.config import TrainConfig
from autotune.errors import ConfigError
from autotune.search.references import reference_config


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("checkpointing.regions=[dit,vision]", "checkpointing.regions", ["dit", "vision"]),
        ("optimizer.betas=[0.9,0.95],optimizer.impl=fused", "optimizer.betas", [0.9, 0.95]),
        ("optimizer.impl=fused, checkpointing.regions=[dit, vision]", "optimizer.impl", "fused"),
        ("model.freeze=['a,b', \"c,d\"]", "model.freeze", ["a,b", "c,d"]),
    ],
)
def test_a_comma_inside_a_value_is_the_value_s(text, key, value):
    """The value was split at every comma: ``[dit,vision]`` was ``[dit`` (not YAML)."""
    cfg = reference_config(TrainConfig(), text)
    section, name = key.split(".")
    assert getattr(getattr(cfg, section), name) == value


def test_pairs_split_outside_brackets_braces_and_quotes_only():
    from autotune.search.references import split_pairs

    assert split_pairs("a={x: 1, y: 2},b=it's,c=[1,[2,3]]") == [
        "a={x: 1, y: 2}",
        "b=it's",
        "c=[1,[2,3]]",
    ]


def test_several_pairs_each_apply():
    cfg = reference_config(TrainConfig(), "optimizer.betas=[0.9,0.95],checkpointing.regions=[dit]")
    assert cfg.optimizer.betas == [0.9, 0.95] and cfg.checkpointing.regions == ["dit"]


def test_a_bare_comma_still_separates_pairs():
    with pytest.raises(ConfigError, match=r"^--reference: '0.95' is not KEY=VALUE"):
        reference_config(TrainConfig(), "optimizer.betas=0.9,0.95")


def test_a_value_nested_past_the_stack_is_one_line_naming_its_key():
    """A RecursionError traceback of YAML's composer before."""
    with pytest.raises(ConfigError, match=r"^--reference: 'compile.regions': the value nests"):
        reference_config(TrainConfig(), "compile.regions=" + "[" * 20_000)


def test_a_key_that_is_no_knob_lists_only_the_allowed_keys():
    """``workload`` was refused, listed among the keys allowed."""
    with pytest.raises(ConfigError, match=r"^--reference: 'workload': not a knob") as err:
        reference_config(TrainConfig(), "workload=other")
    allowed = str(err.value).split("allowed at this level: ")[1]
    for key in ("workload", "preset", "schema_version", "provenance"):
        assert repr(key) not in allowed
    assert "'data'" in allowed


def _error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_a_reference_outside_the_space_names_the_reference_not_stock(tmp_path, capsys):
    """The error blamed the space file and called the reference's value stock."""
    space = tmp_path / "s.yaml"
    space.write_text(
        "knobs:\n"
        "  optimizer.impl: {}\n"
        "  checkpointing.regions: {type: categorical, choices: [[], [dit]]}\n"
    )
    reference = "checkpointing.regions=[dit,vision]"
    argv = ["run", "--space", str(space), "--synthetic", "--reference", reference]
    line = _error(capsys, [*argv, "--out", str(tmp_path / "run")])
    assert line == (
        f"autotune: error: --reference {reference!r}: checkpointing.regions: ['dit', 'vision'] "
        f"is outside search space 's' ({space}); allowed: [[], ['dit']]"
    )
    assert not (tmp_path / "run" / "study.journal").exists()


def test_a_reference_value_outside_a_range_names_the_reference_and_the_range(tmp_path, capsys):
    from autotune.search.space import spaces_dir

    argv = ["run", "--synthetic", "--reference", "ddp.bucket_cap_mb=500"]
    line = _error(capsys, [*argv, "--out", str(tmp_path / "run")])
    assert line == (
        "autotune: error: --reference 'ddp.bucket_cap_mb=500': ddp.bucket_cap_mb: 500.0 is outside "
        f"search space 'quick' ({spaces_dir() / 'quick.yaml'}); allowed: a number in [25, 400]"
    )
