"""Read the suite's rows; give fused_frozen_qkv its remedy if it pays, and the 1-KiB cuBLASLt workspace
its own if the row with it beats the row without (both with the fused q/k/v), each with parity."""
import json
import sys

suite, space = sys.argv[1], sys.argv[2]
rows = {r["name"]: r for r in json.load(open(suite))["table"]}
for n, r in rows.items():
    print(n, r["samples_per_s"], r["step_time_ms"], r["parity_passed"], r["loss_rel_diff"], r["grad_norm_rel_diff"])
base = rows.get("full-1gpu-h200-v12/best")
fq = rows.get("full-1gpu-h200-v12/best+fused_qkv")
ws = rows.get("full-1gpu-h200-v12/best+fused_qkv_ws1")
text = open(space).read()


def ok(r):
    return r is not None and r["step_time_ms"] and r["parity_passed"]


def pays(new, old):
    return ok(new) and ok(old) and new["step_time_ms"] < old["step_time_ms"] * 0.997


if pays(fq, base):
    text = text.replace("model.fused_frozen_qkv: {type: bool, group: model}",
                        "model.fused_frozen_qkv: {type: bool, group: model, remedy: true}")
    print("decision: fused_frozen_qkv pays: remedy")
else:
    print("decision: fused_frozen_qkv: no remedy")
if pays(ws, fq):
    text = text.replace("kernels.cublaslt_workspace_kib: {type: categorical, choices: [null, 1], requires: cuda, group: compile}",
                        "kernels.cublaslt_workspace_kib: {type: categorical, choices: [null, 1], requires: cuda, group: compile, remedy: 1}")
    print("decision: cublaslt_workspace_kib 1 pays: remedy")
else:
    print("decision: cublaslt_workspace_kib: no remedy")
open(space, "w").write(text)
