"""Tables (markdown) and plots (PNG, matplotlib) of harness results: selector × K per dataset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.retrieval.metrics import ALL, Scores


def metric_names(ks: Sequence[int], coverage: bool, families: Sequence[str] | None = None) -> list[str]:
    """`<family>@<k>` per family and budget; families default to recall (and coverage)."""
    chosen = families or (("recall", "coverage") if coverage else ("recall",))
    return [f"{family}@{k}" for family in chosen for k in ks]


def _cell(value: float) -> str:
    return "–" if value != value else f"{value:.3f}"  # NaN: no question of that kind has the metric


def overall_table(results: Mapping[str, Scores], ks: Sequence[int], coverage: bool = True,
                  families: Sequence[str] | None = None) -> str:
    """One row per variant: the metrics over all questions, and the question count."""
    names = metric_names(ks, coverage, families)
    lines = ["| selection | " + " | ".join(names) + " | questions |", "|---|" + "---|" * (len(names) + 1)]
    for variant, s in results.items():
        cells = [_cell(s.mean(ALL, n)) for n in names]
        lines.append(f"| {variant} | " + " | ".join(cells) + f" | {s.counts.get(ALL, 0)} |")
    return "\n".join(lines)


def category_table(results: Mapping[str, Scores], metric: str) -> str:
    """One row per variant, one column per category, for one metric (n: questions that have it)."""
    first = next(iter(results.values())) if results else None
    cats = [c for c in first.categories() if first.count(c, metric)] if first else []
    lines = [f"| {metric} | " + " | ".join(f"{c} (n={first.count(c, metric)})" for c in cats) + " |",
             "|---|" + "---|" * len(cats)]
    for variant, s in results.items():
        lines.append(f"| {variant} | " + " | ".join(_cell(s.mean(c, metric)) for c in cats) + " |")
    return "\n".join(lines)


def write_markdown(path: Path, title: str, results: Mapping[str, Scores], ks: Sequence[int], coverage: bool,
                   notes: Sequence[str] = (), families: Sequence[str] | None = None) -> str:
    parts = [f"## {title}", "", *notes, "", overall_table(results, ks, coverage, families), ""]
    for name in metric_names(ks, coverage, families):
        parts += [category_table(results, name), ""]
    text = "\n".join(parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return text


def write_plot(path: Path, title: str, results: Mapping[str, Scores], ks: Sequence[int], coverage: bool,
               families: Sequence[str] | None = None) -> None:
    """Grouped bars: one group per metric@K, one bar per variant."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display here
    import matplotlib.pyplot as plt

    names = metric_names(ks, coverage, families)
    variants = list(results)
    width = 0.8 / max(len(variants), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(names) + 0.25 * len(variants)) + 2.5, 4.2))
    colours = plt.get_cmap("tab20")  # 20 distinct colours: more variants than tab10 holds
    for i, variant in enumerate(variants):
        values = [results[variant].mean(ALL, n) for n in names]
        ax.bar([x + i * width for x in range(len(names))], values, width, label=variant, color=colours(i % 20))
    ax.set_xticks([x + width * (len(variants) - 1) / 2 for x in range(len(names))], names)
    ax.set_ylim(0, 1)
    ax.set_ylabel("mean over questions")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # outside the bars
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
