"""The planner's rules go by one numbering: docs/recommend.md's "How stages are placed", and the code that
holds each rule says which one it is."""

from __future__ import annotations

import re

from ..conftest import REPO

# rule number -> (a word of its title in the docs, the module that holds it, the words its docstring opens with)
RULES = {
    4: ("int8", "placement.py", "Rule 4: the stage's precision"),
    6: ("hybrid", "search.py", "Rule 6, the hybrid"),
    7: ("batch", "sizing.py", "Rule 7: the largest batch"),
    8: ("timeout", "sizing.py", "Rule 8: candidate"),
    9: ("fallback", "placement.py", "Rule 9: a capped share"),
}


def test_each_rule_has_the_same_number_in_the_docs_and_in_the_code():
    text = (REPO / "docs" / "recommend.md").read_text(encoding="utf-8")
    section = text.split("## How stages are placed", 1)[1].split("\n## ", 1)[0]
    titles = {int(n): title.lower() for n, title in re.findall(r"^(\d+)\. \*\*(.+?)\*\*", section, re.M)}
    assert sorted(titles) == list(range(1, 10))
    for number, (word, module, opening) in RULES.items():
        assert word in titles[number], (number, titles[number])
        code = (REPO / "loadprobe" / "plan" / module).read_text(encoding="utf-8")
        assert f'"""{opening}' in code, (number, module)
    # the module docstrings name the same ranges
    assert "Rules 1-5 and 9" in (REPO / "loadprobe" / "plan" / "placement.py").read_text(encoding="utf-8")
    assert "Rules 7 and 8" in (REPO / "loadprobe" / "plan" / "sizing.py").read_text(encoding="utf-8")
