"""The product says what it does, not where a request came from: no code, config, doc, template or
test cites this project's own tracker by number (the word for a tracker entry, then a number; its
possessive; an "(item N)").
A sentence says what the code does instead. Another project's public issue is cited in its own
form, `owner/repo#N` or `Project#N` (verl#3987, huggingface/trl#1234), which this check allows."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".html", ".js", ".css", ".toml", ".sh", ".txt", ".ini", ".cfg", ".json"}
# the word and a number (with or without #), its possessive, "(item N)"; not the verb, not "verl#3987"
CITATION = re.compile(r"\bissue(?:'s\b|\s+#?\d+\b)|\(item \d+\)", re.IGNORECASE)


def citations(text: str) -> list[str]:
    """The tracker citations in `text`, as found."""
    return [m.group(0) for m in CITATION.finditer(text)]


def scanned_files() -> list[Path]:
    """The project's own files as git sees them: tracked, and untracked ones it does not ignore (no
    virtual environment, data folder or build output, wherever one was made)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    names = sorted(n for n in listed.split("\0") if n)
    return [ROOT / n for n in names if (Path(n).suffix in SUFFIXES or Path(n).name == "run") and (ROOT / n).is_file()]


WORD = "iss" + "ue"  # spelt in pieces, so that this file passes its own check
ITEM = "(" + "item 4)"


def test_the_pattern_finds_our_citations_and_allows_public_ones():
    assert citations(f"The tool-use demo ({WORD} 21, item 7): GRPO") == [f"{WORD} 21"]
    assert citations(f'"""{WORD.title()} 30, B6: on a CPU') == [f"{WORD.title()} 30"]
    found = citations(f"see {WORD} #12 and the {WORD}'s target; done {ITEM}")
    assert found == [f"{WORD} #12", f"{WORD}'s", ITEM]
    assert citations("verl#3987 and TRL#6797, huggingface/trl#1234") == []
    assert citations("POST: issue a token; ApiToken.issue(user); issues with the cache") == []


def test_no_file_cites_the_tracker():
    found = []
    for path in scanned_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for hit in citations(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {hit!r} in {line.strip()[:120]}")
    assert found == [], (
        "cites the project's tracker; say what the code does instead (another project's issue: owner/repo#N):\n"
        + "\n".join(found)
    )
