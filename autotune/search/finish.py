"""The end of ``autotune run``: the winner confirmed, best.yaml, run.json and the report written
(:func:`finish_study`), or the one error line of a study that cannot go on (:func:`stop_study`)."""

from __future__ import annotations

from pathlib import Path


def write_study_report(opts):
    """``report.html`` of the finished study; a report that cannot be made is a warning, not a failure."""
    from autotune.errors import AutotuneError
    from autotune.report import write_report

    try:
        return write_report(opts.out, study_name=opts.study_name, storage=opts.storage)
    except AutotuneError as exc:
        print(f"warning: no report: {exc}")
    except Exception as exc:  # noqa: BLE001  the study and best.yaml stand; `autotune report` can retry
        print(
            f"warning: no report ({type(exc).__name__}: {exc}); rebuild it with: python -m autotune report {opts.out}"
        )
    return None


def speedup_line(best: Path, stock_out_of_memory: bool = False) -> str:
    """``1.42x stock, confirmed`` or ``1.42x stock in the study, not confirmed`` from best.yaml;
    ``stock_out_of_memory``: stock did not fit the memory budget, so no speed-up over it exists."""
    from autotune.config import load_config

    prov = load_config(best).provenance
    speedup = prov.get("speedup_vs_stock")
    if speedup is None and stock_out_of_memory:
        return "stock does not fit the memory budget: no speed-up over it to state"
    if speedup is None:
        return "no stock measurement to compare with"
    if prov.get("trial") == prov.get("stock_trial"):
        return "the stock configuration: nothing measured faster" + (
            ", confirmed" if prov.get("confirmed") else ""
        )
    return f"{speedup:.2f}x stock, " + ("confirmed" if prov.get("confirmed") else "not confirmed")


def stop_study(opts, study, why: str) -> None:
    """End a study that cannot go on: trials.csv, run.json and the report written, then ``why`` as
    the one error line."""
    from autotune.errors import TrialError
    from autotune.search.output import write_run_info, write_trials

    write_trials(opts, study)
    write_run_info(opts, finished=True)
    report = write_study_report(opts)
    if report is not None:
        print(f"report: {report}")
    raise TrialError(why, "stock")


def finish_study(opts, study, converged=None, deadline: float | None = None) -> None:
    """trials.csv, the winner confirmed against stock (``--confirm-rounds``, no run starting that would
    end after ``deadline``), parity.json and best.yaml (left as they are when the study has not
    changed since best.yaml was written), then run.json and report.html, also when no trial gave a best."""
    from autotune.errors import AutotuneError
    from autotune.search.confirm import confirm, previous, write_confirmation
    from autotune.search.output import (
        best_is_current,
        write_best,
        write_parity,
        write_run_info,
        write_trials,
    )

    write_trials(opts, study)
    ended = True
    try:
        if best_is_current(opts, study):
            best = opts.out / "best.yaml"
            print(
                f"nothing new in study {opts.study_name!r} since {best} was written: left as it is (options such as "
                "--memory-budget apply to the trials still to run: raise --trials to run more)"
            )
        else:
            confirmation = None
            # confirm() keeps a former confirmation of the same trials itself
            if opts.confirm_rounds:
                confirmation = confirm(
                    opts,
                    study,
                    opts.confirm_rounds,
                    deadline=deadline,
                    report=lambda line: print(line, flush=True),
                )
                if confirmation is not None:
                    write_confirmation(opts.out, confirmation)
                    print(confirmation.line(), flush=True)
            # --confirm-rounds 0 measures nothing again; a confirmation of the same trials stands
            elif (confirmation := previous(opts.out, study, 1)) is not None:
                print(f"confirmation of #{confirmation.trial} against stock kept from the last run "
                      f"of the study: {confirmation.line()}", flush=True)  # fmt: skip
            best = write_best(
                opts, study, write_parity(opts, study, confirmation), confirmation, converged
            )
    except (
        BaseException
    ):  # SIGINT, SIGTERM, best.yaml that cannot be written: the study did not end
        ended = False  # run.json keeps no finished_at, so the report says "running or interrupted"
        raise
    finally:  # a study without a winner still gets its report, which says why
        try:
            write_run_info(opts, finished=ended)
        except (OSError, AutotuneError):
            if ended:
                raise
            # run.json has said "not finished" since the run began; the error in flight (a full
            # disk that refused confirmation.json) is the one to tell, not run.json's after it
        report = write_study_report(opts)
        if report is not None:
            print(f"report: {report}")
    from autotune.config import load_config
    from autotune.search.finetune import finetune
    from autotune.search.fit import out_of_memory
    from autotune.search.trials import stock_trial

    stock = stock_trial(study)
    oom = stock is not None and out_of_memory(stock)
    print(f"best configuration: {best} ({speedup_line(best, oom)})")
    for line in finetune(best, load_config(best).provenance).lines():
        print(line, flush=True)
