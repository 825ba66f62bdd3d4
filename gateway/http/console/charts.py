"""Server-side SVG charts (no JavaScript, no CDN): lines over days, and horizontal bars.

Each series is drawn as a `<polyline>` or `<rect>`s carrying `data-series` and `data-values`
attributes with the exact numbers, so a browser test can read what was drawn. Labels are escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

WIDTH, HEIGHT = 720, 240
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 64, 16, 28, 40
PALETTE = ("#2b6cb0", "#c05621", "#2f855a", "#805ad5", "#b83280", "#718096", "#d69e2e", "#319795")


def line_chart(
    title: str, labels: Sequence[str], series: Mapping[str, Sequence[float]], unit: str = "$"
) -> str:
    """One polyline per series over `labels` (x), a shared y axis from 0 to the maximum."""
    top = max((v for values in series.values() for v in values), default=0.0) or 1.0
    plot_w = WIDTH - PAD_LEFT - PAD_RIGHT
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    step = plot_w / max(len(labels) - 1, 1)
    parts = [_frame(title, top, unit)]
    for i, (name, values) in enumerate(sorted(series.items())):
        points = " ".join(
            f"{PAD_LEFT + j * step:.1f},{PAD_TOP + plot_h * (1 - v / top):.1f}"
            for j, v in enumerate(values)
        )
        data = ",".join(f"{v:.8g}" for v in values)
        parts.append(
            f'<polyline class="series" data-series="{escape(name)}" data-values="{data}" '
            f'points="{points}" fill="none" stroke="{PALETTE[i % len(PALETTE)]}" '
            'stroke-width="2"/>'
        )
    parts += _x_labels(labels, step)
    parts.append(_legend(list(sorted(series))))
    return _svg(title, parts)


def bar_chart(title: str, bars: Sequence[tuple[str, float]], unit: str = "$") -> str:
    """Horizontal bars, one per (label, value), longest first as given."""
    height = PAD_TOP + PAD_BOTTOM + 22 * max(len(bars), 1)
    top = max((v for _, v in bars), default=0.0) or 1.0
    plot_w = WIDTH - 200 - PAD_RIGHT
    parts = [f'<text x="4" y="12" class="title">{escape(title)}</text>']
    for i, (label, value) in enumerate(bars):
        y = PAD_TOP + 22 * i
        width = max(plot_w * value / top, 1.0) if value > 0 else 0.0
        parts.append(
            f'<text x="4" y="{y + 14}" class="label">{escape(label[:28])}</text>'
            f'<rect class="bar" data-series="{escape(label)}" data-values="{value:.8g}" '
            f'x="200" y="{y + 2}" width="{width:.1f}" height="16" '
            f'fill="{PALETTE[i % len(PALETTE)]}"/>'
            f'<text x="{204 + width:.1f}" y="{y + 14}" class="value">{unit}{value:,.4g}</text>'
        )
    return _svg(title, parts, height)


def _frame(title: str, top: float, unit: str) -> str:
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    ticks = []
    for k in range(5):
        value = top * k / 4
        y = PAD_TOP + plot_h * (1 - k / 4)
        ticks.append(
            f'<line x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            'stroke="#e2e8f0"/>'
            f'<text x="{PAD_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
            f"{unit}{value:,.3g}</text>"
        )
    return f'<text x="4" y="12" class="title">{escape(title)}</text>' + "".join(ticks)


def _x_labels(labels: Sequence[str], step: float) -> list[str]:
    every = max(len(labels) // 8, 1)
    return [
        f'<text x="{PAD_LEFT + j * step:.1f}" y="{HEIGHT - PAD_BOTTOM + 16}" '
        f'text-anchor="middle" class="tick">{escape(label[5:] if len(label) == 10 else label)}'
        "</text>"
        for j, label in enumerate(labels)
        if j % every == 0
    ]


def _legend(names: list[str]) -> str:
    items = []
    for i, name in enumerate(names[:8]):
        x = PAD_LEFT + 110 * i
        items.append(
            f'<rect x="{x}" y="{HEIGHT - 14}" width="10" height="10" '
            f'fill="{PALETTE[i % len(PALETTE)]}"/>'
            f'<text x="{x + 14}" y="{HEIGHT - 5}" class="tick">{escape(name[:14])}</text>'
        )
    return "".join(items)


def _svg(title: str, parts: list[str], height: int = HEIGHT) -> str:
    return (
        f'<svg class="chart" role="img" aria-label="{escape(title)}" '
        f'xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}">' + "".join(parts) + "</svg>"
    )
