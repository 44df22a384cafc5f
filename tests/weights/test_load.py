"""``load_upstream`` of a checkpoint in the upstream layout (written here from the upstream key list):
every key loads, ignored families are reported, and what does not fit is named on one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from autotune.errors import ConfigError, DataError
from autotune.weights import (
    fingerprint,
    load_name_map,
    load_upstream,
    read_layout,
    upstream_tensors,
    write_checkpoint,
)
from autotune.workloads import get_workload
from autotune.workloads.gr00t_n16 import get_preset
from tests.asuser import as_nobody, reachable_folder
from tests.weights.upstream import upstream_shapes, write_upstream

ROOT = Path(__file__).resolve().parents[2]

TINY = get_preset("tiny")


def tiny_model():
    return get_workload("gr00t_n16").build_model("tiny", "cpu")


def test_every_key_of_an_upstream_checkpoint_loads_bit_exact(tmp_path):
    extra = {
        "backbone.model.language_model.lm_head.weight": (TINY.vocab_size, TINY.llm_hidden),
        "action_head.mask_token": (1, 1, TINY.dit_width),
    }
    source = write_upstream(tmp_path / "up", TINY, extra=extra)
    model = tiny_model()
    report = load_upstream(model, tmp_path / "up", "gr00t_n16", "tiny")
    assert report.loaded == len(upstream_shapes(TINY)) == sum(1 for _ in model.parameters())
    assert set(report.ignored) == set(extra)
    bound = load_name_map("gr00t_n16").bind(model)
    for name, p in model.named_parameters():
        key, transform = bound.to_upstream[name]
        assert torch.equal(p, transform.to_replica(source[key]).float()), name
    # and back: the model's tensors in the upstream layout are the file's (bf16 ones after storing in bf16)
    back = upstream_tensors(model, "gr00t_n16")
    assert all(torch.equal(back[k].to(source[k].dtype), source[k]) for k in back)


def test_a_missing_key_is_named_on_one_line(tmp_path):
    gone = "action_head.model.transformer_blocks.1.attn1.to_q.weight"
    write_upstream(tmp_path / "up", TINY, drop=(gone,))
    with pytest.raises(ConfigError, match=rf"1 missing keys \('{gone}'\)") as err:
        load_upstream(tiny_model(), tmp_path / "up", "gr00t_n16", "tiny")
    assert "\n" not in str(err.value)


def test_a_misshapen_and_an_unexpected_key_are_named(tmp_path):
    bad = "backbone.model.mlp1.1.weight"
    write_upstream(
        tmp_path / "up", TINY, reshape={bad: (3, 4)}, extra={"action_head.extra_head.weight": (2,)}
    )
    model = tiny_model()
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(
        ConfigError,
        match=rf"1 unexpected keys \('action_head.extra_head.weight'\); "
        rf"1 misshapen keys \('{bad}' is \[3, 4\], the model needs \[64, 256\]\)",
    ):
        load_upstream(model, tmp_path / "up", "gr00t_n16", "tiny")
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # nothing half-loaded


def test_a_cut_shard_and_a_missing_index_are_data_errors(tmp_path):
    write_upstream(tmp_path / "up", TINY)
    shard = sorted((tmp_path / "up").glob("model-*.safetensors"))[1]
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(DataError, match=rf"{shard.name}: not a readable safetensors file"):
        read_layout(tmp_path / "up")
    with pytest.raises(
        DataError, match="neither model.safetensors.index.json nor model.safetensors"
    ):
        read_layout(tmp_path)


def test_written_shards_hold_every_tensor_once(tmp_path):
    tensors = upstream_tensors(tiny_model(), "gr00t_n16")
    index = write_checkpoint(tensors, tmp_path / "out", max_shard_bytes=1_000_000)
    layout = read_layout(tmp_path / "out")
    assert set(layout) == set(tensors) == set(index["weight_map"])
    assert len({i.path for i in layout.values()}) == len(set(index["weight_map"].values())) > 1
    with pytest.raises(DataError, match="not an empty folder"):
        write_checkpoint(tensors, tmp_path / "out")


@pytest.mark.parametrize("name", ["../outside.safetensors", "/dev/zero", "sub/../../x.safetensors"])
def test_an_index_naming_a_file_outside_its_folder_is_refused_before_it_is_opened(tmp_path, name):
    write_upstream(tmp_path / "up", TINY)
    index = tmp_path / "up" / "model.safetensors.index.json"
    shard = sorted((tmp_path / "up").glob("model-*.safetensors"))[0]
    shard.rename(tmp_path / "outside.safetensors")
    data = json.loads(index.read_text())
    data["weight_map"] = {k: name if v == shard.name else v for k, v in data["weight_map"].items()}
    index.write_text(json.dumps(data))
    for read in (read_layout, fingerprint):
        with pytest.raises(DataError) as err:
            read(tmp_path / "up")
        assert str(err.value) == (
            f"{index}: shard {name!r} is not a file name; allowed: a shard beside the index, "
            "such as model-00001-of-00002.safetensors"
        )


def test_a_folder_with_both_an_index_and_a_single_file_is_refused(tmp_path):
    """transformers reads the single file, the index's readers the shards: which is meant is unclear."""
    write_upstream(tmp_path / "up", TINY)
    (tmp_path / "up" / "model.safetensors").write_bytes(b"")
    with pytest.raises(DataError, match="holds both model.safetensors.index.json and model.safe"):
        read_layout(tmp_path / "up")


def _rewrite(folder, key: str, change) -> None:
    """The shard of ``key`` written again with ``change(tensor)`` in its place."""
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = folder / index["weight_map"][key]
    tensors = load_file(shard)
    tensors[key] = change(tensors[key])
    save_file(tensors, shard)


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool])
def test_a_key_of_an_integer_or_boolean_dtype_is_named_before_anything_loads(tmp_path, dtype):
    key = "action_head.model.transformer_blocks.1.attn1.to_q.weight"
    write_upstream(tmp_path / "up", TINY)
    _rewrite(tmp_path / "up", key, lambda t: t.to(dtype))
    name = {torch.int32: "I32", torch.bool: "BOOL"}[dtype]
    with pytest.raises(ConfigError) as err:
        load_upstream(tiny_model(), tmp_path / "up", "gr00t_n16", "tiny")
    assert str(err.value).endswith(
        f"1 keys of a dtype that is not floating point ({key!r} is {name})"
    )


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_key_holding_nan_or_inf_is_named(tmp_path, value):
    key = "action_head.model.transformer_blocks.1.attn1.to_q.weight"
    write_upstream(tmp_path / "up", TINY)
    _rewrite(tmp_path / "up", key, lambda t: t.index_fill(0, torch.tensor([3]), value))
    with pytest.raises(DataError) as err:
        load_upstream(tiny_model(), tmp_path / "up", "gr00t_n16", "tiny")
    assert str(err.value) == (
        f"{tmp_path / 'up'}: 1 keys hold NaN or infinite values ({key!r}) (in the file, or past the "
        "range of the parameter's dtype); the model would train on them"
    )


def test_the_current_folder_empty_takes_the_checkpoint_and_stays_the_same_folder(
    tmp_path, monkeypatch
):
    """``--out .``: the folder the shell stands in is written into, not replaced by another one."""
    tensors = upstream_tensors(tiny_model(), "gr00t_n16")
    out = tmp_path / "out"
    out.mkdir()
    inode = out.stat().st_ino
    monkeypatch.chdir(out)
    index = write_checkpoint(tensors, ".", max_shard_bytes=1_000_000)
    assert out.stat().st_ino == inode
    assert set(read_layout(out)) == set(index["weight_map"]) == set(tensors)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left


def test_a_file_given_for_the_checkpoint_folder_is_named_as_not_a_folder(tmp_path):
    """``--init-from up/model.safetensors`` (the file, not its folder): what a job reads first is
    the fingerprint, and it says what to give instead."""
    write_upstream(tmp_path / "up", TINY)
    given = sorted((tmp_path / "up").glob("model-*.safetensors"))[0]
    for read in (fingerprint, read_layout):
        with pytest.raises(DataError) as err:
            read(given)
        assert str(err.value) == (
            f"{given}: not a folder (give the checkpoint's folder, which holds "
            "model.safetensors.index.json)"
        )


def test_a_tensor_under_both_spellings_of_an_aliased_prefix_is_refused(tmp_path):
    """N1.5's ``backbone.eagle_model.`` reads as N1.6's ``backbone.model.``: a checkpoint holding
    both would give one parameter two tensors, and which one loads would be the files' order."""
    key = "backbone.model.mlp1.0.weight"
    old = "backbone.eagle_model.mlp1.0.weight"
    write_upstream(tmp_path / "up", TINY, extra={old: upstream_shapes(TINY)[key]})
    model = tiny_model()
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(ConfigError) as err:
        load_upstream(model, tmp_path / "up", "gr00t_n16", "tiny")
    assert str(err.value).endswith(f"1 keys held twice, under two spellings ({key!r} and {old!r})")
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_a_shard_the_index_names_and_that_is_not_there_is_named_by_the_index(tmp_path):
    """What a job reads first is the fingerprint: it names the missing shard as the layout does."""
    write_upstream(tmp_path / "up", TINY)
    shard = sorted((tmp_path / "up").glob("model-*.safetensors"))[1]
    shard.unlink()
    for read in (fingerprint, read_layout):
        with pytest.raises(DataError) as err:
            read(tmp_path / "up")
        assert str(err.value) == (
            f"{tmp_path / 'up' / 'model.safetensors.index.json'}: shard {shard.name!r} is missing"
        )


def test_written_shards_are_as_readable_as_the_index(tmp_path):
    """safetensors writes a file only its owner may read: a teammate could open the index of an
    export and none of its shards."""
    write_checkpoint(
        upstream_tensors(tiny_model(), "gr00t_n16"), tmp_path / "out", max_shard_bytes=10**6
    )
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "out").iterdir()}
    assert set(modes.values()) == {modes["model.safetensors.index.json"]}, modes


def test_a_key_with_control_characters_is_named_escaped(tmp_path):
    """A key of a checkpoint someone hands over that rewrites the terminal's line (``\\r``, an
    escape sequence) is shown escaped: the error line says what is wrong, not what the key says."""
    key = "x\r\x1b[2Kautotune: checkpoint OK"
    write_upstream(tmp_path / "up", TINY, extra={key: (2,)})
    with pytest.raises(ConfigError) as err:
        load_upstream(tiny_model(), tmp_path / "up", "gr00t_n16", "tiny")
    assert str(err.value).endswith(f"1 unexpected keys ({key!r})")
    assert not [c for c in str(err.value) if ord(c) < 0x20 or ord(c) == 0x7F]


NOT_A_FILE = {
    "folder": (os.mkdir, "is a folder, not a file"),
    "fifo": (os.mkfifo, "not a regular file (a device, pipe or socket); expected a file"),
    "/dev/zero": (
        lambda path: os.symlink("/dev/zero", path),
        "not a regular file (a device, pipe or socket); expected a file",
    ),
}


@pytest.mark.parametrize("what", NOT_A_FILE)
@pytest.mark.parametrize("which", ["shard", "index"])
def test_a_shard_or_an_index_that_is_not_a_file_is_named_so(tmp_path, which, what):
    """Not as missing (a shard), nor as a folder holding neither an index nor a single file."""
    write_upstream(tmp_path / "up", TINY)
    path = (
        sorted((tmp_path / "up").glob("model-*.safetensors"))[1]
        if which == "shard"
        else tmp_path / "up" / "model.safetensors.index.json"
    )
    if which == "index":  # the shards it named: a folder of them is no other checkpoint
        for shard in (tmp_path / "up").glob("model-*.safetensors"):
            shard.unlink()
    path.unlink()
    make, said = NOT_A_FILE[what]
    make(path)
    for read in (fingerprint, read_layout):
        with pytest.raises(DataError) as err:
            read(tmp_path / "up")
        assert str(err.value) == f"{path}: {said}"


PROBE = """
import sys
from autotune.weights import fingerprint, read_layout
for read in (fingerprint, read_layout):
    try:
        read(sys.argv[1])
        print("read")
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}")
"""


@pytest.mark.parametrize("which", ["shard", "index"])
def test_a_shard_or_an_index_its_user_may_not_read_is_named_with_the_os_error(which):
    """Not as a file that is not there (a shard), nor as a file that is not an index."""
    with reachable_folder() as root:
        write_upstream(root / "up", TINY)
        for f in (root / "up").iterdir():  # safetensors writes 0600: readable by all but one
            f.chmod(0o644)
        path = (
            sorted((root / "up").glob("model-*.safetensors"))[1]
            if which == "shard"
            else root / "up" / "model.safetensors.index.json"
        )
        path.chmod(0o600)
        done = subprocess.run([*as_nobody(), sys.executable, "-c", PROBE, str(root / "up")],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    refused = f"DataError: {path}: cannot be read (Permission denied)"
    # the fingerprint reads the index, not the shards (their names and sizes)
    assert done.stdout.splitlines() == ["read" if which == "shard" else refused, refused], (
        done.stderr
    )
