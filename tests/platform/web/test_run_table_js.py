"""platform/static/web/run_table_format.js under Node: the runs table's live cells are written the
way the server's template filters write them, and the page's poll asks the API for the same query."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from web.templatetags.web_tags import duration_s, number, percent, when

SCRIPT = Path(__file__).resolve().parents[3] / "platform" / "static" / "web" / "run_table_format.js"
NUMBERS = [
    0.0,
    1.0,
    0.25,
    -0.2,
    1234.5,
    12345.0,
    9999.6,
    1235.5,
    0.125,
    2.5,
    -1234.5,
    0.0001234,
    0.00001234,
    123456789.0,
    -3.14159,
    1e-10,
    2.5e20,
    0.1 + 0.2,
    100.0,
    1.0 / 3.0,
]
DURATIONS = [2.5, 0, 5, 59.6, 65, 3599, 3725.2, 90061]
FRACTIONS = [0, None, 0.5, 1 / 3, 1.7, -0.2]


def _node(expression: str):
    """Evaluate `expression` with the script's functions bound to F; its JSON value."""
    node = shutil.which("node")
    assert node, "Node.js is needed for the JS tests (Debian: apt-get install nodejs)"
    program = f"const F = require({json.dumps(str(SCRIPT))}); console.log(JSON.stringify({expression}));"
    result = subprocess.run([node, "-e", program], capture_output=True, text=True, timeout=30, check=True)
    return json.loads(result.stdout)


def test_cells_read_like_the_server_filters():
    js = _node(
        f"[{json.dumps(NUMBERS)}.map((v) => F.formatNumber(v)), {json.dumps(DURATIONS)}.map(F.formatDuration),"
        f" {json.dumps(FRACTIONS)}.map(F.percent), F.formatNumber(null), F.formatDuration(null)]"
    )
    numbers, durations, fractions, no_number, no_duration = js
    assert numbers == [number(v) for v in NUMBERS]
    by_hand = {
        1234.5: "1234",
        1235.5: "1236",
        -1234.5: "-1234",
        12345.0: "1.234e+04",
        9999.6: "1e+04",
        0.0001234: "0.0001234",
        0.00001234: "1.234e-05",
        0.25: "0.25",
        2.5e20: "2.5e+20",
    }  # ties to even
    assert {v: numbers[NUMBERS.index(v)] for v in by_hand} == by_hand
    assert durations == [duration_s(s) for s in DURATIONS]
    assert durations[0] == "2s" and durations[5:] == ["59m 59s", "1h 02m 05s", "25h 01m 01s"]
    assert fractions == [percent(f) for f in FRACTIONS] == ["0", "0", "50.0", "33.3", "100.0", "0.0"]
    assert no_number == "-" and no_duration == "-"


def test_api_query_keeps_the_filters_and_pages_by_offset():
    query = _node('F.apiQuery("?status=running&config=grpo.beta%3A0&config=data.task%3Ax&page=3&sort=-step", 50)')
    assert query == "status=running&config=grpo.beta%3A0&config=data.task%3Ax&sort=-step&limit=50&offset=100"
    assert _node('F.apiQuery("", 50)') == "limit=50&offset=0"
    assert _node('F.apiQuery("?page=x", 20)') == "limit=20&offset=0"


def test_row_order_and_compare_address():
    assert _node('[F.sameOrder([3, 2], ["3", "2"]), F.sameOrder([3, 2], [2, 3]), F.sameOrder([1], [1, 2])]') == [
        True,
        False,
        False,
    ]
    assert _node(
        '[F.compareUrl("/runs/compare/", [4, 9, 2], 20), F.compareUrl("/runs/compare/", [4], 20),'
        ' F.compareUrl("/runs/compare/", [1, 2, 3], 2)]'
    ) == ["/runs/compare/?runs=4,9,2", None, None]


TIMES = [
    "2026-12-02T07:29:41.123456+00:00",
    "2026-12-02T07:29:41Z",
    "2026-12-31T23:59:59-02:00",  # another zone: written in UTC, the next day
    "2026-01-05T00:00:00+05:30",
]


def test_times_read_like_the_server_filter():
    """The one date format of the pages: the scripts' cells (formatWhen) say what |when says."""
    js = _node(
        f"[{json.dumps(TIMES)}.map(F.formatWhen), F.formatWhen(null), F.formatWhen(\"\"), F.formatWhen(\"soon\")]"
    )
    times, none, empty, text = js
    assert times == [when(t) for t in TIMES]
    assert times[:3] == ["2026-12-02 07:29:41 UTC", "2026-12-02 07:29:41 UTC", "2027-01-01 01:59:59 UTC"]
    assert times[3] == "2026-01-04 18:30:00 UTC"
    assert (none, empty, text) == ("-", "-", "soon") == (when(None), when(""), when("soon"))
    assert when(None, "never") == "never"
