"""A small HTML reader for the tests: elements with their attributes, and the text."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser


class Probe(HTMLParser):
    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(document)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def find(self, tag: str | None = None, **attrs: str) -> list[dict[str, str]]:
        found = []
        for name, element in self.elements:
            if tag is not None and name != tag:
                continue
            if all(element.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                found.append(element)
        return found

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def svgs(document: str) -> dict[str, ET.Element]:
    """Every inline plot <svg> by its data-plot, parsed as XML (which also proves its
    escaping is sound)."""
    plots: dict[str, ET.Element] = {}
    for element in _all_svgs(document):
        if element.get("data-plot") is not None:
            plots[element.get("data-plot", "")] = element
    return plots


def timelines(document: str) -> list[ET.Element]:
    """Every violation's timeline <svg data-timeline>, in page order, parsed as XML."""
    return [element for element in _all_svgs(document) if element.get("data-timeline") is not None]


def _all_svgs(document: str) -> list[ET.Element]:
    return [ET.fromstring(match.group(0)) for match in re.finditer(r"<svg\b.*?</svg>", document, flags=re.S)]


SVG = "{http://www.w3.org/2000/svg}"
