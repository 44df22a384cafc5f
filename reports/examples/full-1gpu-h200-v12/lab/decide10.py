"""Read the suite's rows; give gelu_epilogue its remedy if it pays, drop attended's if it loses."""
import json, re, sys
suite, space = sys.argv[1], sys.argv[2]
rows = {r["name"]: r for r in json.load(open(suite))["table"]}
for n, r in rows.items():
    print(n, r["samples_per_s"], r["step_time_ms"], r["parity_passed"], r["loss_rel_diff"], r["grad_norm_rel_diff"])
base = rows.get("full-1gpu-h200-v11/best")
att = rows.get("full-1gpu-h200-v11/best+attended")
ae = rows.get("full-1gpu-h200-v11/best+attended_epilogue")
text = open(space).read()
def ok(r): return r is not None and r["step_time_ms"] and r["parity_passed"]
if ok(base) and ok(att) and att["step_time_ms"] > base["step_time_ms"] * 1.003:
    text = text.replace("model.attended_kv_only: {type: bool, group: model, remedy: true}",
                        "model.attended_kv_only: {type: bool, group: model}")
    print("decision: attended loses: no remedy")
ref = att if ok(att) else base
if ok(ref) and ok(ae) and ae["step_time_ms"] < ref["step_time_ms"] * 0.997:
    text = text.replace("model.gelu_epilogue: {type: bool, group: model}",
                        "model.gelu_epilogue: {type: bool, group: model, remedy: true}")
    print("decision: epilogue pays: remedy")
else:
    print("decision: epilogue: no remedy")
open(space, "w").write(text)
