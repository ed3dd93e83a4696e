"""The commands the README and docs/ show are real: every ``medbench`` line parses with the command's own
parser (subcommand and options), and every line of the "Evaluate R2MED" section's shell blocks is a
medbench command, an installed executable with that subcommand, or setup.sh."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess

import pytest

from medbench_cli.main import parser
from tests.orchestration.operating_env import ROOT

README = (ROOT / "README.md").read_text()
DOCS = {p.relative_to(ROOT): p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))}
R2MED_DOC = DOCS[next(p for p in DOCS if p.name == "r2med.md")]


def shell_lines(text: str) -> list[str]:
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL):
        for line in block.splitlines():
            line = line.split("  #")[0].split(" # ")[0].strip()
            if line and not line.startswith("#"):
                # a compound line is several commands; each is checked on its own
                out.extend(part.strip() for part in re.split(r"&&|;", line) if part.strip())
    return out


def r2med_section() -> str:
    start = R2MED_DOC.index("## Evaluate R2MED (or any MTEB-format dataset)")
    return R2MED_DOC[start : R2MED_DOC.index("\n## ", start + 10)]


@pytest.mark.parametrize("where", ["README.md", *map(str, DOCS)])
def test_every_medbench_line_parses(where):
    text = README if where == "README.md" else DOCS[next(p for p in DOCS if str(p) == where)]
    lines = [line for line in shell_lines(text) if line.startswith("medbench ") and not re.search(r"[\[|]", line)]
    if where == "README.md":
        assert lines  # the front page shows the command's full synopsis; the docs hold the runnable lines
    for line in lines:
        try:
            parser().parse_args(shlex.split(line)[1:])
        except SystemExit as exc:  # argparse exits on an unknown subcommand or option
            pytest.fail(f"{where}: command does not parse: {line!r} (exit {exc.code})")


def test_the_docs_show_runnable_commands():
    lines = [line for text in [README, *DOCS.values()] for line in shell_lines(text) if line.startswith("medbench ") and not re.search(r"[\[|]", line)]
    assert len(lines) >= 8


def test_every_r2med_section_command_is_real():
    lines = shell_lines(r2med_section())
    assert any(line.startswith("medbench run --tasks r2med_biology") for line in lines)
    for line in lines:
        words = shlex.split(line)
        if words[0] == "medbench":
            parser().parse_args(words[1:])
        elif words[0] == "export":
            assert all(re.fullmatch(r"MEDBENCH_[A-Z_]+=\S+", w) for w in words[1:]), line
        elif words[0] == "source":
            assert (ROOT / words[1]).is_file(), line
        else:
            exe = shutil.which(words[0])
            assert exe, f"{words[0]} is not installed: {line!r}"
            help_ = subprocess.run([exe, words[1], "--help"], capture_output=True, text=True, timeout=60)
            assert help_.returncode == 0, line
            assert all(w.split("=")[0] in help_.stdout for w in words[2:] if w.startswith("--")), line


def test_every_m3retrieve_doc_command_is_real():
    """docs/m3retrieve.md's shell lines: medbench commands parse, hf commands take their options."""
    lines = shell_lines(DOCS[next(p for p in DOCS if p.name == "m3retrieve.md")])
    assert any(line.startswith("medbench run --tasks m3retrieve_cardiology") for line in lines)
    for line in lines:
        words = shlex.split(line)
        if words[0] == "medbench":
            parser().parse_args(words[1:])
        else:
            exe = shutil.which(words[0])
            assert exe, f"{words[0]} is not installed: {line!r}"
            help_ = subprocess.run([exe, words[1], "--help"], capture_output=True, text=True, timeout=60)
            assert help_.returncode == 0, line
            assert all(w.split("=")[0] in help_.stdout for w in words[2:] if w.startswith("--")), line
