"""``bench.json`` (raw numbers) and ``bench.md`` (the ratios, as tables) from a benchmark report."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["render_markdown", "write_report"]


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_f(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _statuses(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "–"


def _variant_rows(variants: Mapping[str, Any]) -> list[list[Any]]:
    return [
        [
            name,
            v["latency"].get("p50"),
            v["latency"].get("p99"),
            v["latency"].get("mean"),
            v["frames_per_s"],
            _statuses(v["sensor_status"]),
        ]
        for name, v in variants.items()
    ]


_VARIANT_HEADER = ("variant", "p50 ms", "p99 ms", "mean ms", "frames/s", "sensor statuses")


def _with_interval(r: Mapping[str, Any], key: str) -> str:
    """``0.86 (0.80–0.93)``: the ratio and its 95 % interval, bold when the interval excludes 1."""
    value, interval = r.get(key), r.get(f"{key}_ci95")
    if value is None:
        return "–"
    if not interval:
        return f"{value:.2f}"
    lo, hi = interval
    text = f"{value:.2f} ({lo:.2f}–{hi:.2f})"
    return f"**{text}**" if lo > 1 or hi < 1 else text


def _headline(sections: Mapping[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []

    def add(label: str, r: Mapping[str, Any]) -> None:
        rows.append([label, *(_with_interval(r, key) for key in ("latency_p50", "latency_p99", "throughput"))])

    dispatch = sections.get("dispatch", {})
    for key, r in dispatch.get("ratios", {}).items():
        variant = key.removesuffix("_over_sequential")
        label = "concurrent runtime" if variant == "concurrent" else "concurrent runtime, all gRPC"
        add(f"{label} / sequential sync client", r)
    cameras = sections.get("cameras", {})
    if "ratios" in cameras:
        add("one batched camera request / one request per camera", cameras["ratios"]["batched_over_per_camera"])
    pipelining = sections.get("pipelining", {})
    for key, per_k in pipelining.get("ratios", {}).items():
        if key.startswith("channels_"):
            hi, lo = key.removeprefix("channels_").split("_over_")
            for k, r in per_k.items():
                add(f"{hi} channels / {lo} channel(s), {k.replace('in_flight=', 'K=')}", r)
        else:
            k1 = key.removeprefix("in_flight_over_")
            for channels, per in per_k.items():
                for k, r in per.items():
                    if k != f"in_flight={k1}":
                        add(f"{k.replace('in_flight=', 'K=')} / K={k1} frames in flight, {channels}", r)
    return rows


def _interval(value: float | None, ci: Sequence[float] | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" + (f" ({ci[0]:.2f}–{ci[1]:.2f})" if ci else "")


def _reproducibility(report: Mapping[str, Any]) -> list[str]:
    rows = report.get("reproducibility")
    if not rows:
        return []
    runs = len(rows[0]["values"])
    agreeing = sum(1 for r in rows if r["agree_within_noise"])
    judged = sum(1 for r in rows if r["agree_within_noise"] is not None)
    lines = [
        "## Reproducibility: the whole comparison run " + str(runs) + " times",
        "",
        "The same suite, same server and frames, run again after the first. Runs agree within noise on a "
        "ratio when their 95 % intervals overlap (the difference between runs is no larger than each run's "
        "own frame-to-frame variation); spread = (max - min) / mean of the runs' values. "
        f"**{agreeing} of {judged} ratios agree within noise.**",
        "",
    ]
    table = [
        [
            r["ratio"],
            *(_interval(v, ci) for v, ci in zip(r["values"], r["ci95"], strict=True)),
            "–" if r["relative_spread"] is None else f"{100 * r['relative_spread']:.0f} %",
            {True: "yes", False: "**no**", None: "–"}[r["agree_within_noise"]],
        ]
        for r in rows
    ]
    return [*lines, *_table(("ratio", *(f"run {i + 1}" for i in range(runs)), "spread", "agree"), table)]


def render_markdown(report: Mapping[str, Any]) -> str:
    """The human summary: context, headline ratios, transport per size, per-variant details."""
    env = report.get("environment", {})
    server = report.get("server", {})
    inp = report.get("input", {})
    sections: Mapping[str, Any] = report.get("sections", {})
    load = env.get("load_average", [None])[0]
    versions = env.get("versions", {})
    where = "embedded" if server.get("embedded") else f"external, {server.get('url')}"
    lines = [
        "# perception bench" + (" (quick)" if report.get("quick") else ""),
        "",
        f"Measured {env.get('date')} on {env.get('cpus')} CPUs ({env.get('processor')}), 1-min load average "
        f"{_f(load)} at start and {_f(env.get('load_average_end'))} at end; Triton "
        f"{server.get('triton_version') or '?'} ({where}); perception {versions.get('perception-fusion')}, "
        f"tritonclient {versions.get('tritonclient')}.",
        "",
    ]
    if inp:
        sensors = ", ".join(
            f"{n} ({s['kind']} → {s['model']}, {s['transport']})" for n, s in inp.get("sensors", {}).items()
        )
        lines += [
            f"Input: `{inp.get('drive')}`, {inp.get('frames')} frames ({inp.get('distinct_frames')} distinct); "
            f"sensors: {sensors}.",
            "",
        ]
    lines += [
        "Variants ran in one process against one server, interleaved (rotating order, frame by frame or chunk by "
        "chunk, with a settle pause after each), so load from other processes hits them alike: read the ratios; "
        "absolute times depend on the machine's load. Every runtime awaited every sensor (no budget cut), "
        "fusion off.",
        "",
        "## Ratios",
        "",
        "Latency ratio < 1 and throughput ratio > 1 mean the first variant is better. In brackets: 95 % "
        "paired-bootstrap interval over the measured frames (chunks for throughput with `Runtime.run`); **bold** "
        "when it excludes 1, i.e. the difference is larger than this run's noise.",
        "",
        *_table(("comparison", "latency p50", "latency p99", "throughput"), _headline(sections)),
    ]
    transport = sections.get("transport", {})
    if transport.get("cases"):
        lines += [
            "## Transport: system shared memory / gRPC",
            "",
            f"`{transport.get('model')}` model, one request in flight, transports alternating; client round trip.",
            "",
        ]
        rows = [
            [
                c["points"],
                round(c["bytes"] / 1e6, 2),
                c["grpc"]["round_trip"].get("p50"),
                c["shm"]["round_trip"].get("p50"),
                _with_interval(c, "shm_over_grpc_p50"),
                _with_interval(c, "shm_over_grpc_p99"),
                c.get("grpc_over_shm_p50"),
            ]
            for c in transport["cases"]
        ]
        header = ("points", "MB", "gRPC p50 ms", "shm p50 ms", "shm/gRPC p50", "shm/gRPC p99", "shm speed-up p50")
        lines += _table(header, rows)
    dispatch = sections.get("dispatch", {})
    if "variants" in dispatch:
        lines += ["## Sequential vs concurrent dispatch (one frame at a time)", ""]
        lines += _table(_VARIANT_HEADER, _variant_rows(dispatch["variants"]))
        names = list(dispatch["variants"])
        sensor_names = sorted({s for v in dispatch["variants"].values() for s in v.get("sensors", {})})
        if sensor_names:
            lines += [
                "Each sensor's time, p50 ms: its request alone (sequential) or from the frame's start to its "
                "answer (concurrent; includes preprocessing and waiting for CPU the other requests use). "
                "Concurrency can bring a frame down to its slowest sensor only while the models have idle CPUs "
                "(or GPUs) to run on; CPU-bound models on a busy machine mostly compete for the same cores.",
                "",
            ]
            rows = [
                [s, *(dispatch["variants"][n].get("sensors", {}).get(s, {}).get("p50") for n in names)]
                for s in sensor_names
            ]
            lines += _table(("sensor", *names), rows)
    cameras = sections.get("cameras", {})
    if "variants" in cameras:
        lines += ["## Camera requests", "", "`cameras done`: until the last camera answered.", ""]
        rows = [
            [*row[:5], v["cameras_done"].get("p50"), row[5]]
            for row, v in zip(_variant_rows(cameras["variants"]), cameras["variants"].values(), strict=True)
        ]
        lines += _table((*_VARIANT_HEADER[:5], "cameras done p50 ms", "sensor statuses"), rows)
    pipelining = sections.get("pipelining", {})
    if "variants" in pipelining:
        lines += [
            "## Channels and frames in flight (`Runtime.run`, overflow block)",
            "",
            f"Latency from admission to result; chunks of {pipelining.get('chunk')} frames per variant in turn.",
            "",
        ]
        rows = [
            [v["channels"], v["in_flight"], *row[1:]]
            for row, v in zip(_variant_rows(pipelining["variants"]), pipelining["variants"].values(), strict=True)
        ]
        lines += _table(("channels", "in flight", *_VARIANT_HEADER[1:]), rows)
    lines += _reproducibility(report)
    skipped = [(name, s["skipped"]) for name, s in sections.items() if "skipped" in s]
    if skipped:
        lines += ["## Skipped", ""] + [f"- **{name}**: {why}" for name, why in skipped] + [""]
    timing = ", ".join(f"{name} {s.get('wall_s')} s" for name, s in sections.items())
    lines += [f"Wall time: {report.get('wall_s')} s ({timing}).", ""]
    return "\n".join(lines)


def write_report(report: Mapping[str, Any], out_dir: Path, stem: str = "bench") -> tuple[Path, Path]:
    """Write ``<stem>.json`` and ``<stem>.md`` into ``out_dir`` (created); returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(report), encoding="utf-8")
    return json_path, md_path
