"""A study continues only under the settings its measurements were made with: another batch size,
``--synthetic``, an edited ``--base``, another window or another kind of machine is one line naming
the setting, its stored and its new value, and the run folder is left as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.config import load_config, save_config
from autotune.search.space import load_space
from autotune.workloads.stock import stock_config
from tests.studies import study_options

pytestmark = pytest.mark.slow

RUN = ["run", "--space", "quick", "--confirm-rounds", "0", "--converge-after", "0", "--warmup", "1",
       "--profile-steps", "0", "--seed", "1", "--trials", "1"]  # fmt: skip
SETTINGS = ["--synthetic", "--steps", "1", "--batch-size", "2"]
QUICK = load_space("quick")


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> tuple[Path, Path]:
    """A one-trial study from a ``--base`` file: (the base file, the run folder)."""
    folder = tmp_path_factory.mktemp("study")
    base = folder / "base.yaml"
    save_config(stock_config("gr00t_n16", "tiny", cuda=False), base)
    out = folder / "run"
    assert main([*RUN, *SETTINGS, "--base", str(base), "--out", str(out)]) == 0
    return base, out


def _copy(study, tmp_path: Path) -> tuple[Path, Path]:
    base, out = study
    return Path(shutil.copy(base, tmp_path / "base.yaml")), Path(
        shutil.copytree(out, tmp_path / "run")
    )


def _files(out: Path) -> dict[str, bytes]:
    """The folder's files, less the lock (the refused run held it) and the journal, which Optuna's
    ``create_study`` appends an entry to before it finds the study exists (the trials are compared)."""
    keep = {"run.lock", "study.journal"}
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    return {k: v for k, v in files.items() if k not in keep} | {
        "trials": repr(_trials(out)).encode()
    }


def _trials(out: Path) -> list[tuple]:
    import optuna

    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "study.journal"))
    )
    study = optuna.load_study(study_name="gr00t_n16-tiny-quick-base", storage=storage)
    return [(t.number, t.state, t.params, t.values, t.user_attrs) for t in study.trials]


@pytest.mark.parametrize(
    "settings, named",
    [
        (
            ["--synthetic", "--steps", "1", "--batch-size", "4"],
            "--batch-size 2, this command gives 4",
        ),
        (
            ["--steps", "1", "--batch-size", "2"],
            "--synthetic 'synthetic', this command gives 'lerobot'",
        ),
        (["--synthetic", "--steps", "2", "--batch-size", "2"], "--steps 1, this command gives 2"),
    ],
    ids=["batch-size", "synthetic", "steps"],
)
def test_another_measuring_setting_is_refused_and_nothing_is_touched(
    study, tmp_path, capsys, settings, named
):
    base, out = _copy(study, tmp_path)
    before = _files(out)
    capsys.readouterr()
    assert main([*RUN, *settings, "--base", str(base), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"autotune: error: {out}: study 'gr00t_n16-tiny-quick-base' was measured with {named}; continue "
        "it with the same setting, or give another --out for a new study\n"
    )
    assert _files(out) == before


def test_an_edited_base_is_refused_naming_its_key(study, tmp_path, capsys):
    base, out = _copy(study, tmp_path)
    cfg = load_config(base)
    cfg.optimizer.lr = 3e-4
    save_config(cfg, base)
    before = _files(out)
    capsys.readouterr()
    assert main([*RUN, *SETTINGS, "--base", str(base), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"autotune: error: {out}: study 'gr00t_n16-tiny-quick-base' was measured with the base "
        "configuration's optimizer.lr 0.0001, this command gives 0.0003; continue it with the same "
        "setting, or give another --out for a new study\n"
    )
    assert _files(out) == before


def _edited_space(tmp_path: Path, edit) -> Path:
    """The printed space (``autotune space``), edited by ``edit`` and saved under its own name."""
    import yaml

    from autotune.search.space import spaces_dir

    data = yaml.safe_load((spaces_dir() / "quick.yaml").read_text())
    edit(data["knobs"])
    path = tmp_path / "my.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "edit, change",
    [
        (lambda k: k.pop("checkpointing.regions"), "knobs.checkpointing.regions: removed"),
        (
            lambda k: k["ddp.bucket_cap_mb"].update(high=800),
            "knobs.ddp.bucket_cap_mb: high 400 then, 800 now",
        ),
    ],
    ids=["knob-removed", "range-widened"],
)
def test_an_edited_copy_of_the_space_under_its_name_is_refused(
    study, tmp_path, capsys, edit, change
):
    """The README's way to change a space (print it, edit it, pass it back) keeps its name, so its
    study and default folder: the trials of the two spaces would be mixed in one study."""
    base, out = _copy(study, tmp_path)
    space = _edited_space(tmp_path, edit)
    before = _files(out)
    capsys.readouterr()
    run = [a if a != "quick" else str(space) for a in RUN]
    assert main([*run, *SETTINGS, "--base", str(base), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"autotune: error: {space}: {change}, but study 'gr00t_n16-tiny-quick-base' was measured "
        "with its space as it was; continue it with that space, or give another --out (or another "
        "name:) for a new study\n"
    )
    assert _files(out) == before


def _set_machine(out: Path, machine: str) -> None:
    """Write the study's stored measuring settings as the tuner of another machine would have."""
    import json

    import optuna

    from autotune.search import settings

    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / "study.journal"))
    )
    study = optuna.load_study(study_name="gr00t_n16-tiny-quick-base", storage=storage)
    stored = json.loads(study.user_attrs[settings.KEY])
    assert stored[settings.MACHINE]  # this machine's model, recorded by the run
    stored[settings.MACHINE] = machine
    study.set_user_attr(settings.KEY, json.dumps(stored, sort_keys=True))


def test_a_study_carried_to_another_kind_of_machine_is_refused_naming_both(study, tmp_path, capsys):
    from autotune.config.compat import cpu_model

    base, out = _copy(study, tmp_path)
    _set_machine(out, "NVIDIA H200")
    before = _files(out)
    capsys.readouterr()
    assert main([*RUN, *SETTINGS, "--base", str(base), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"autotune: error: {out}: study 'gr00t_n16-tiny-quick-base' was measured on 'NVIDIA H200', "
        f"this machine is {cpu_model()!r}; continue it on the kind of machine it was measured on, or "
        "give another --out for a new study\n"
    )
    assert _files(out) == before


def test_a_study_from_before_machines_were_recorded_continues_on_any(tmp_path):
    import json
    from types import SimpleNamespace

    import optuna

    from autotune.errors import ConfigError
    from autotune.search import settings

    def opts(machine: str) -> SimpleNamespace:
        base = stock_config("gr00t_n16", "tiny", cuda=False)
        return SimpleNamespace(
            base=base, steps=1, warmup=1, nproc=1, out=tmp_path, machine=machine, space=QUICK
        )

    study = optuna.create_study(direction="maximize", study_name="s")
    settings.record(study, opts("NVIDIA H200"))
    study.tell(study.ask(), 1.0)
    settings.check_unchanged(study, opts("NVIDIA H200"))
    with pytest.raises(
        ConfigError, match="was measured on 'NVIDIA H200', this machine is 'NVIDIA A100'"
    ):
        settings.check_unchanged(study, opts("NVIDIA A100"))
    stored = json.loads(study.user_attrs[settings.KEY])
    del stored[settings.MACHINE]
    study.set_user_attr(settings.KEY, json.dumps(stored))
    settings.check_unchanged(study, opts("NVIDIA A100"))


def test_the_same_settings_continue_the_study(study, tmp_path, capsys):
    base, out = _copy(study, tmp_path)
    assert main([*RUN[:-1], "2", *SETTINGS, "--base", str(base), "--out", str(out)]) == 0
    assert [t[0] for t in _trials(out)] == [0, 1]  # trial 1 ran in the same study


def test_a_study_with_nothing_measured_takes_the_new_settings(tmp_path):
    """Its trials stopped or failed before measuring anything: no measurement to pair wrongly."""
    from types import SimpleNamespace

    import optuna

    from autotune.errors import ConfigError
    from autotune.search import settings

    def opts(steps: int) -> SimpleNamespace:
        base = stock_config("gr00t_n16", "tiny", cuda=False)
        return SimpleNamespace(
            base=base, steps=steps, warmup=1, nproc=1, out=tmp_path, machine="", space=QUICK
        )

    study = optuna.create_study(direction="maximize", study_name="s")
    settings.record(study, opts(3))
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    settings.check_unchanged(study, opts(1))  # nothing measured: the new settings are kept
    study.tell(study.ask(), 1.0)
    settings.check_unchanged(study, opts(1))
    with pytest.raises(ConfigError, match="was measured with --steps 1, this command gives 3"):
        settings.check_unchanged(study, opts(3))


def test_a_study_whose_creator_stopped_before_queueing_stock_is_given_it(tmp_path):
    """A run stopped (Ctrl-C, a full disk, its database gone) between creating the study and
    recording its settings and stock trial, or between failing its stock trial and queueing it
    again: the next run does what it left, so that the study measures its baseline and checks its
    settings; a run after it queues nothing more."""
    import optuna

    from autotune.search import settings
    from autotune.search.journal import open_journal
    from autotune.search.study import open_study
    from autotune.search.trials import QUEUED_AGAIN_FROM, STOCK, store
    from autotune.train.trial.record import INTERRUPTED, TrialRecord

    out = tmp_path / "run"
    opts = study_options([*RUN, *SETTINGS, "--out", str(out)])
    out.mkdir()
    storage = open_journal(out / "study.journal")
    optuna.create_study(study_name=opts.study_name, storage=storage, direction="maximize")
    study = open_study(opts)
    (stock,) = study.get_trials(deepcopy=False)
    assert stock.state == optuna.trial.TrialState.WAITING and stock.user_attrs == {STOCK: True}
    assert settings.KEY in study.user_attrs
    assert len(open_study(opts).get_trials(deepcopy=False)) == 1

    # stopped after telling its interrupted stock trial, before queueing it again
    trial = study.ask()
    store(trial, TrialRecord.failed(INTERRUPTED, "the tuner was stopped by SIGINT"))
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    again = open_study(opts).get_trials(deepcopy=False)[-1]
    assert again.state == optuna.trial.TrialState.WAITING and again.user_attrs == {
        STOCK: True,
        QUEUED_AGAIN_FROM: 0,
    }
