"""``--storage`` URLs that cannot keep a study are refused on one line before anything is written."""

from __future__ import annotations

import pytest

from autotune.errors import ConfigError
from autotune.search.storage import open_storage
from tests.clirun import autotune, one_line_error


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_sqlite_database_in_memory_is_refused(tmp_path, url):
    """It ends with the run: no report could read the study, no run could continue it."""
    with pytest.raises(ConfigError, match=r"an SQLite database in memory ends with the run"):
        open_storage(url, tmp_path)
    out = tmp_path / "run"
    line = one_line_error(autotune("run", "--storage", url, "--out", out, "--trials", "1"))
    assert line.startswith(f"autotune: error: --storage {url}: an SQLite database in memory")
    assert not out.exists()


def test_a_missing_driver_of_another_database_does_not_suggest_postgres(tmp_path):
    with pytest.raises(ConfigError) as caught:
        open_storage("mysql://u:secret99@h/db", tmp_path)
    message = str(caught.value)
    assert "is not installed" in message and "postgres" not in message
    assert "secret99" not in message


def test_an_sqlite_file_keeps_the_study(tmp_path):
    import optuna

    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(storage=open_storage(url, tmp_path), study_name="s").optimize(
        lambda t: 1.0, n_trials=1
    )
    assert len(optuna.load_study(study_name="s", storage=open_storage(url, tmp_path)).trials) == 1


@pytest.mark.parametrize(
    "table, column",
    [("trial_user_attributes", "value_json"), ("trial_params", "distribution_json")],
)
@pytest.mark.parametrize(
    "value, why",
    [("{not json", "Expecting "), ("[" * 100_000 + "]" * 100_000, "maximum recursion depth")],
    ids=["cut", "nested"],
)
def test_a_stored_value_that_is_not_json_is_one_line_naming_the_storage(
    tmp_path, table, column, value, why
):
    """A row of the database changed by hand or a damaged disk: Optuna's reader fails deep inside
    its loading of the trials; the run gets one line naming the storage, and the row stays."""
    import sqlite3

    import optuna

    url = f"sqlite:///{tmp_path / 'study.db'}"

    def objective(trial):
        trial.set_user_attr("record", "{}")
        return trial.suggest_float("x", 0, 1)

    optuna.create_study(storage=open_storage(url, tmp_path), study_name="s").optimize(
        objective, n_trials=1
    )
    with sqlite3.connect(tmp_path / "study.db") as db:
        db.execute(f"UPDATE {table} SET {column} = ?", (value,))
    study = optuna.load_study(study_name="s", storage=open_storage(url, tmp_path))
    with pytest.raises(ConfigError) as caught:
        study.get_trials()
    assert str(caught.value).startswith(
        f"--storage {url}: the study there holds a value that is not JSON ({why}"
    ), caught.value
    with sqlite3.connect(tmp_path / "study.db") as db:
        assert db.execute(f"SELECT {column} FROM {table}").fetchall() == [(value,)]


@pytest.mark.parametrize(
    "column, value, why",
    [
        ("distribution_json", '{"name": "BetaDistribution", "attributes": {"a": 1}}',
         "ValueError: Unknown distribution class: BetaDistribution"),
        ("distribution_json", '{"type": "complex"}', "ValueError: Unknown distribution type: complex"),
        ("distribution_json", '{"name": "FloatDistribution", "attributes": {"low": 0, "hi": 1}}',
         "TypeError: FloatDistribution.__init__() got an unexpected keyword argument 'hi'"),
        ("distribution_json", "[1, 2]", "TypeError: list indices must be integers or slices, not str"),
        ("param_value", 7, "IndexError: tuple index out of range"),
    ],
    ids=["unknown-class", "unknown-type", "unknown-attribute", "a-list", "choice-past-the-choices"],
)  # fmt: skip
def test_a_stored_distribution_optuna_cannot_read_is_one_line_naming_the_storage(
    tmp_path, column, value, why
):
    """Valid JSON that is no distribution Optuna knows (or a categorical value past its choices):
    Optuna's ValueError (TypeError, IndexError) traceback from deep inside its loading of the
    trials; the run gets one line naming the storage, and the row stays."""
    import sqlite3

    import optuna

    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(storage=open_storage(url, tmp_path), study_name="s").optimize(
        lambda trial: len(trial.suggest_categorical("x", ["a", "bb"])), n_trials=1
    )
    with sqlite3.connect(tmp_path / "study.db") as db:
        db.execute(f"UPDATE trial_params SET {column} = ?", (value,))
    study = optuna.load_study(study_name="s", storage=open_storage(url, tmp_path))
    with pytest.raises(ConfigError) as caught:
        study.get_trials()
    assert str(caught.value) == (
        f"--storage {url}: the study there holds a parameter whose distribution (or value in it) "
        f"Optuna cannot read ({why}); it is left as it is: repair or delete that row of "
        "trial_params, or continue in another database"
    )
    with sqlite3.connect(tmp_path / "study.db") as db:
        assert db.execute(f"SELECT {column} FROM trial_params").fetchall() == [(value,)]
