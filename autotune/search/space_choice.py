"""Which space ``autotune run`` searches by default (:func:`default_space`), and ``autotune space``,
which prints it."""

from __future__ import annotations

import argparse

from autotune.config.compat import Machine
from autotune.search.space import SearchSpace, load_space
from autotune.workloads.stock import stock_config

OWN_SPACES = ("gr00t_n16", "gr00t_n17")
"""Workloads with a shipped space of their own (``search_spaces/<workload>.yaml``), their default on a
GPU; on a CPU theirs is ``quick``."""


def shipped_space(workload: str, machine: Machine) -> str | None:
    """The shipped space ``run`` searches by default for ``workload`` here; None: the auto space."""
    if workload not in OWN_SPACES:
        return None
    return workload if machine.cuda else "quick"


def default_space(asked: str | SearchSpace | None, base, machine: Machine) -> SearchSpace:
    """The space asked for (by name or file, or read already; validated against the workload's
    regions), or by default: a GR00T workload's own spaces for it (``gr00t_n16`` or ``gr00t_n17`` on
    GPU, ``quick`` on CPU), for any other workload the space made from its region map and the machine
    (:func:`autotune.search.auto_space.auto_space`)."""
    from autotune.search.auto_space import auto_space, check_space_regions, workload_facts

    facts = workload_facts(base)
    asked = asked or shipped_space(base.workload, machine)
    if asked is None:
        return auto_space(facts, machine)
    space = asked if isinstance(asked, SearchSpace) else load_space(asked)
    check_space_regions(space, facts)
    return space


def print_space(args: argparse.Namespace) -> int:
    """``autotune space``: the space made from the workload's regions and this machine, as YAML."""
    import dataclasses

    import yaml

    from autotune.search.auto_space import auto_space_data, workload_facts
    from autotune.workloads import get_workload

    machine = Machine.current(world_size=args.nproc)
    if args.cpu:
        machine = dataclasses.replace(machine, cuda=False, capability=None)
    shipped = shipped_space(args.workload, machine)
    if shipped is not None:  # what run searches: the file itself, its comments included
        from autotune.search.space import spaces_dir

        if args.preset is not None:  # the file serves every preset: the name is checked on its own
            get_workload(args.workload).check_preset(args.preset)

        print(f"# autotune space --workload {args.workload}: search_spaces/{shipped}.yaml, the "
              "default of `autotune run` here; `autotune run --space FILE` searches an edited copy.")  # fmt: skip
        print((spaces_dir() / f"{shipped}.yaml").read_text(), end="")
        return 0
    base = stock_config(args.workload, args.preset, cuda=machine.cuda)
    if args.synthetic:
        base.data.source = "synthetic"
    data = auto_space_data(workload_facts(base), machine)
    print(
        f"# autotune space --workload {args.workload} (preset {base.preset}); `autotune run --space FILE` searches a "
        "file of it.\n# Knobs marked `requires: cuda` are dropped on a machine without a GPU."
    )

    class Plain(yaml.SafeDumper):  # each knob spelled out, no &anchors
        def ignore_aliases(self, data):
            return True

    print(
        yaml.dump(data, Dumper=Plain, sort_keys=False, default_flow_style=None, width=120), end=""
    )
    return 0
