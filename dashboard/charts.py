"""Small server-side SVG charts: bars (stacked) and a line, no JavaScript, no network.

Built as an element tree, so every label is escaped by the serializer. Each
bar or point has a `<title>` (a tooltip), and the chart an `aria-label`.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 720, 220
#: Room for the y axis labels (left), the legend (top) and the x labels (bottom).
LEFT, TOP, BOTTOM, RIGHT = 56, 40, 24, 8
HIGHLIGHT = "#c62828"
TEXT = {"font-size": "11", "font-family": "system-ui, sans-serif", "fill": "currentColor"}


@dataclass(frozen=True)
class Series:
    """One named series of values, one per label."""

    name: str
    values: Sequence[float]
    colour: str


def nice_ceiling(value: float) -> float:
    """The axis maximum: 1, 2 or 5 times a power of ten, at least `value`."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.2g}"


def _svg(title: str) -> ET.Element:
    svg = ET.Element(
        "svg",
        {
            "xmlns": "http://www.w3.org/2000/svg",
            "viewBox": f"0 0 {WIDTH} {HEIGHT}",
            "role": "img",
            "aria-label": title,
            "class": "chart",
        },
    )
    ET.SubElement(svg, "title").text = title
    return svg


def _text(parent: ET.Element, x: float, y: float, content: str, **attributes: str) -> None:
    ET.SubElement(
        parent, "text", {"x": f"{x:.1f}", "y": f"{y:.1f}", **TEXT, **attributes}
    ).text = content


def _axes(svg: ET.Element, labels: Sequence[str], top_value: float, unit: str) -> None:
    """Gridlines at 0, half and the top, their values, and the first and last label."""
    plot_height = HEIGHT - TOP - BOTTOM
    for fraction in (0, 0.5, 1):
        y = HEIGHT - BOTTOM - fraction * plot_height
        ET.SubElement(
            svg,
            "line",
            {"x1": str(LEFT), "x2": str(WIDTH - RIGHT), "y1": f"{y:.1f}", "y2": f"{y:.1f}",
             "stroke": "#999", "stroke-opacity": "0.4"},
        )  # fmt: skip
        _text(svg, LEFT - 4, y + 4, _number(top_value * fraction), **{"text-anchor": "end"})
    _text(svg, LEFT, TOP - 8, unit)
    if labels:
        _text(svg, LEFT, HEIGHT - 6, labels[0].split(" ")[0])
        _text(svg, WIDTH - RIGHT, HEIGHT - 6, labels[-1].split(" ")[0], **{"text-anchor": "end"})


def _legend(svg: ET.Element, entries: Sequence[tuple[str, str]]) -> None:
    x = float(LEFT)
    for name, colour in entries:
        ET.SubElement(
            svg, "rect", {"x": f"{x:.1f}", "y": "6", "width": "10", "height": "10", "fill": colour}
        )
        _text(svg, x + 14, 15, name)
        x += 24 + 7 * len(name)


def _empty(svg: ET.Element) -> None:
    _text(svg, WIDTH / 2, HEIGHT / 2, "nothing yet", **{"text-anchor": "middle"})


def _serialize(svg: ET.Element) -> SafeString:
    return mark_safe(ET.tostring(svg, encoding="unicode"))  # noqa: S308 (escaped by ElementTree)


def bar_chart(
    labels: Sequence[str],
    series: Sequence[Series],
    *,
    title: str,
    unit: str,
    highlight: Sequence[bool] = (),
    highlight_label: str = "",
) -> SafeString:
    """Stacked bars, one per label; a highlighted bar (e.g. a failed run) is drawn in red."""
    svg = _svg(title)
    totals = [sum(s.values[i] for s in series) for i in range(len(labels))]
    top_value = nice_ceiling(max(totals, default=0))
    _axes(svg, labels, top_value, unit)
    legend = [(s.name, s.colour) for s in series]
    _legend(svg, legend + ([(highlight_label, HIGHLIGHT)] if any(highlight) else []))
    if not any(totals):
        _empty(svg)
        return _serialize(svg)
    slot = (WIDTH - LEFT - RIGHT) / max(len(labels), 1)
    scale = (HEIGHT - TOP - BOTTOM) / top_value
    for i, label in enumerate(labels):
        y = float(HEIGHT - BOTTOM)
        bar = ET.SubElement(svg, "g", {"class": "bar"})
        parts = ", ".join(f"{_number(s.values[i])} {s.name}" for s in series if s.values[i])
        ET.SubElement(bar, "title").text = f"{label}: {parts or 0}"
        for s in series:
            height = s.values[i] * scale
            y -= height
            colour = HIGHLIGHT if i < len(highlight) and highlight[i] else s.colour
            ET.SubElement(
                bar,
                "rect",
                {"x": f"{LEFT + i * slot + slot * 0.1:.1f}", "y": f"{y:.1f}",
                 "width": f"{slot * 0.8:.1f}", "height": f"{height:.1f}", "fill": colour},
            )  # fmt: skip
    return _serialize(svg)


def line_chart(
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str,
    unit: str,
    colour: str = "#1565c0",
) -> SafeString:
    """A line over the labels, with its peak named in the legend."""
    svg = _svg(title)
    top_value = nice_ceiling(max(values, default=0))
    _axes(svg, labels, top_value, unit)
    if not any(values):
        _legend(svg, [(unit, colour)])
        _empty(svg)
        return _serialize(svg)
    peak = max(range(len(values)), key=values.__getitem__)
    _legend(svg, [(f"{unit}, peak {_number(values[peak])} at {labels[peak]}", colour)])
    step = (WIDTH - LEFT - RIGHT) / max(len(values) - 1, 1)
    scale = (HEIGHT - TOP - BOTTOM) / top_value
    points = " ".join(
        f"{LEFT + i * step:.1f},{HEIGHT - BOTTOM - value * scale:.1f}"
        for i, value in enumerate(values)
    )
    ET.SubElement(
        svg, "polyline", {"points": points, "fill": "none", "stroke": colour, "stroke-width": "1.5"}
    )
    return _serialize(svg)
