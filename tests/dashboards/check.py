"""Evaluates every query of Grafana dashboards against a Prometheus server that scraped karpenter-rs
through a scenario, and fails unless each has data.

For each dashboard (a Grafana dashboard JSON, or the test-data file of Karpenter's dashboards'
expressions, tests/dashboards/karpenter-dashboards.json):
  - every `label_values(metric, label)` template variable must have values (a label that does not
    exist has none); `--expect NAME=VALUE` also requires VALUE among the variable's values;
  - every panel expression, with each query variable replaced by the alternation of all its values
    (Grafana's "All" without a custom all-value, so a label missing from a series never matches
    `=~".*"` by accident), each custom variable by each of its options in turn and
    `$__rate_interval` by 1m, must return at least one finite sample over the scenario's time range
    (a range query from --start to now).
Expressions that only select metrics of other exporters (node exporter's `node_*`) are reported
and skipped: they are not karpenter-rs's to expose.
Exit status 1 with every failure listed; 0 with a summary.
"""

import argparse
import json
import math
import re
import sys
import time
import urllib.parse
import urllib.request

LABEL_VALUES = re.compile(r"^\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$")
VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
# Metric names an expression selects: identifiers followed by `{`, `[` or used bare, minus PromQL
# keywords and functions (a coarse scan, only used to recognise other exporters' metrics).
IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
FOREIGN_PREFIXES = ("node_",)


def get(prometheus, path, **params):
    url = f"{prometheus}{path}?{urllib.parse.urlencode(params, doseq=True)}"
    with urllib.request.urlopen(url, timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {body}")
    return body["data"]


def dashboards(path):
    """(name, variables, panels) of a Grafana dashboard JSON or of the test-data file."""
    data = json.load(open(path))
    if "dashboards" in data:
        for d in data["dashboards"]:
            yield d["name"], d["variables"], d["panels"]
        return
    variables = []
    for v in data.get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        variables.append({"name": v["name"], "type": v.get("type"), "query": q})
    panels = []

    def walk(o, title=None):
        if isinstance(o, dict):
            title = o.get("title", title)
            for t in o.get("targets") or []:
                if isinstance(t, dict) and isinstance(t.get("expr"), str):
                    panels.append({"panel": title, "expr": t["expr"]})
            for k, v in o.items():
                if k != "targets":
                    walk(v, title)
        elif isinstance(o, list):
            for x in o:
                walk(x, title)

    walk(data.get("panels", []))
    yield data.get("title", path), variables, panels


def strip_comment(expr):
    # A `#` starts a comment in PromQL (outside strings; these expressions have none inside).
    return "\n".join(line.split("#", 1)[0] for line in expr.splitlines())


def foreign(expr):
    names = {m for m in IDENT.findall(re.sub(r'"[^"]*"', "", expr))}
    ours = [n for n in names if n.startswith(("karpenter_", "controller_runtime_", "process_"))]
    theirs = [n for n in names if n.startswith(FOREIGN_PREFIXES)]
    return bool(theirs) and not ours


def expansions(expr, values, customs):
    """The expression with every variable replaced, once per combination of custom options."""
    # A query variable in an equality matcher (`="$controller"`) is a single-value variable:
    # each of its values in turn, as with a custom variable's options.
    singles = {n: values[n] for n in values if re.search(rf'[^=!~]="\$\{{?{n}\b', expr)}
    choices = dict(customs, **singles)
    used = [n for n in choices if re.search(rf"\$\{{?{n}\b", expr)]
    combos = [{}]
    for n in used:
        combos = [dict(c, **{n: option}) for c in combos for option in choices[n]]
    for combo in combos:

        def replace(m):
            name = m.group(1) or m.group(2)
            if name in combo:
                return combo[name]
            if name == "__rate_interval" or name == "__interval":
                return "1m"
            if name in values:
                return "|".join(promql_regex_escape(v) for v in values[name])
            raise KeyError(f"unknown variable ${name}")

        yield combo, VARIABLE.sub(replace, expr)


def promql_regex_escape(value):
    """`value` as a regex matching itself, inside a PromQL string literal (a backslash is `\\`)."""
    return "".join("\\\\" + c if c in ".+*?()|[]{}^$\\" else c for c in value)


def has_data(result, allow_nan):
    """Some sample of some series; finite unless `allow_nan`."""
    for series in result:
        for _, v in series.get("values", []):
            if allow_nan or math.isfinite(float(v)):
                return True
    return False


# histogram_quantile(0, ...) is NaN whenever the lowest bucket is empty (PromQL interpolates 0/0),
# for any exporter: for it a series is enough.
QUANTILE_ZERO = re.compile(r"histogram_quantile\(\s*0\s*,")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--start", type=float, required=True, help="unix time the scenario started")
    ap.add_argument("--expect", action="append", default=[], help="VARIABLE=VALUE the variable must offer")
    ap.add_argument("dashboards", nargs="+")
    args = ap.parse_args()
    expected = dict(e.split("=", 1) for e in args.expect)
    end = time.time()
    failures, checked, skipped = [], 0, []
    for path in args.dashboards:
        for name, variables, panels in dashboards(path):
            values, customs = {}, {}
            for v in variables:
                if v["type"] == "custom":
                    customs[v["name"]] = [o.strip() for o in (v["query"] or "").split(",") if o.strip()]
                    continue
                if v["type"] != "query":
                    continue
                m = LABEL_VALUES.match(v["query"] or "")
                if not m:
                    failures.append(f"{name}: variable ${v['name']}: cannot read query {v['query']!r}")
                    continue
                metric, label = m.groups()
                found = get(args.prometheus, f"/api/v1/label/{label}/values", **{"match[]": metric, "start": args.start, "end": end})
                found = [x for x in found if x != ""]
                checked += 1
                if not found:
                    failures.append(f"{name}: variable ${v['name']} = label_values({metric}, {label}) has no values")
                    found = ["__none__"]
                want = expected.get(v["name"])
                if want is not None and want not in found:
                    failures.append(f"{name}: variable ${v['name']} offers {found}, not {want!r}")
                values[v["name"]] = found
            for p in panels:
                expr = strip_comment(p["expr"])
                if foreign(expr):
                    skipped.append(f"{name} / {p['panel']}: {' '.join(expr.split())}")
                    continue
                for combo, query in expansions(expr, values, customs):
                    checked += 1
                    where = f"{name} / {p['panel']}" + (f" {combo}" if combo else "")
                    try:
                        data = get(args.prometheus, "/api/v1/query_range", query=query, start=args.start, end=end, step="2s")
                    except Exception as e:  # a query Prometheus refuses is a failure, not a crash
                        failures.append(f"{where}: {' '.join(query.split())}: {e}")
                        continue
                    if not has_data(data["result"], allow_nan=bool(QUANTILE_ZERO.search(query))):
                        failures.append(f"{where}: no data: {' '.join(query.split())}")
    for s in skipped:
        print(f"skipped (another exporter's metrics): {s}")
    if failures:
        print(f"{len(failures)} of {checked} dashboard queries failed:", file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        sys.exit(1)
    print(f"dashboards: all {checked} queries and variables have data ({len(skipped)} skipped)")


if __name__ == "__main__":
    main()
