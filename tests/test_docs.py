"""The docs cannot drift from the code or from each other:

- every option of ``raftcore node`` is in the configuration reference of docs/operations.md
  (the table is written by this file: ``python tests/test_docs.py`` prints it);
- the example systemd unit, docs/raftcore.service, starts ``raftcore node`` with options the
  parser accepts (parsed only: nothing is started);
- every relative link of docs/*.md and README.md points at a file that exists, and every
  ``#anchor`` at a heading of that page (GitHub's slugs).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
OPERATIONS = DOCS / "operations.md"
UNIT = DOCS / "raftcore.service"

# The logging options' defaults are set by the top-level parser (argparse.SUPPRESS here).
LOGGING_DEFAULTS = {"--verbose": "off", "--log-level": "info", "--log-format": "text"}


def node_parser() -> argparse.ArgumentParser:
    from raftcore.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices["node"]


def node_options() -> set[str]:
    """Every option string of ``raftcore node`` but --help."""
    return {
        s
        for action in node_parser()._actions
        if not isinstance(action, argparse._HelpAction)
        for s in action.option_strings
    }


# What an option left unset means, where the parser's default is None and the node decides.
UNSET = {
    "--listen": "none (its --voters entry)",
    "--advertised": "none (--listen)",
    "--metrics-port": "none (not served)",
    "--metrics-host": "none (the listen host)",
    "--ssl-client-auth": "none (required on SSL, requested on SASL_SSL)",
}


def _default(action: argparse.Action) -> str:
    long = max(action.option_strings, key=len)
    if long in LOGGING_DEFAULTS:
        return LOGGING_DEFAULTS[long]
    if action.required:
        return "required"
    if isinstance(action, argparse._StoreTrueAction):
        return "off"
    if action.default is None:
        return UNSET.get(long, "none")
    value = action.default
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        if long.endswith(("-bytes", "-size", "-per-second")) and value >= 1 << 20:
            unit = "GiB" if value >= 1 << 30 else "MiB"
            return f"{value} ({value / (1 << (30 if unit == 'GiB' else 20)):g} {unit})"
        if long.endswith("-ms") and value >= 60_000:
            minutes = value / 60_000
            shown = f"{minutes / 60:g} h" if minutes >= 60 else f"{minutes:g} min"
            return f"{value} ({shown})"
    return str(value)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def node_options_table() -> str:
    """The configuration reference: one table per option group of ``raftcore node``."""
    parser = node_parser()
    out = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        title = "general" if group.title == "options" else group.title
        out.append(f"**{title[0].upper()}{title[1:]}**\n")
        out.append("| option | default | meaning |\n|---|---|---|")
        for action in actions:
            names = ", ".join(f"`{s}`" for s in action.option_strings)
            value = ""
            if action.choices:
                value = f" `{'|'.join(map(str, action.choices))}`"
            elif action.nargs != 0:
                plain = "N" if isinstance(action.default, int) else action.dest.upper()
                value = f" `{action.metavar or plain}`"
            out.append(
                f"| {names}{value.replace('|', chr(92) + '|')} | {_cell(_default(action))} "
                f"| {_cell(action.help or '')} |"
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def documented_options(text: str) -> set[str]:
    """The options in the first column of the tables of a page."""
    found: set[str] = set()
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| option"):
            first = line.split(" | ")[0]
            found.update(re.findall(r"`(-{1,2}[a-z][a-z0-9-]*)", first))
    return found


def test_every_option_of_raftcore_node_is_in_the_configuration_reference():
    missing = node_options() - documented_options(OPERATIONS.read_text())
    assert not missing, (
        f"options of `raftcore node` missing from docs/operations.md: {sorted(missing)} "
        "(python tests/test_docs.py prints the table)"
    )


def documented_defaults(text: str) -> dict[str, str]:
    """option -> the default column of its row in a page's tables."""
    found = {}
    for line in text.splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) >= 3:
            for name in re.findall(r"`(-{1,2}[a-z][a-z0-9-]*)", cells[0]):
                found[name] = cells[1].strip()
    return found


def test_the_configuration_reference_states_the_parsers_defaults():
    """A default changed in the parser shows here."""
    documented = documented_defaults(OPERATIONS.read_text())
    stale = []
    for action in node_parser()._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        default = _cell(_default(action))
        for name in action.option_strings:
            cell = documented.get(name)
            if cell is not None and cell.split(" (")[0] != default.split(" (")[0]:
                stale.append(f"{name}: documented {cell!r}, the parser's {default!r}")
    assert not stale, "defaults in docs/operations.md that differ from the parser:\n" + "\n".join(
        stale
    )


def test_every_metric_the_operators_guide_names_is_one_a_node_serves():
    """The alerts of docs/operations.md name metrics of docs/metrics.md (whose list a test in
    tests/test_metrics.py holds to a node's scrape)."""
    served = set(re.findall(r"^\| `(raftcore_[a-z_]+)`", (DOCS / "metrics.md").read_text(), re.M))
    named = set(
        re.findall(r"\b(raftcore_[a-z_]+?)(?:_bucket|_sum|_count)?\b", OPERATIONS.read_text())
    )
    assert served and not named - served, sorted(named - served)


# ---- the systemd unit -------------------------------------------------------------------------


def unit_settings(text: str) -> dict[str, str]:
    """``Key=value`` lines of a systemd unit, continuation lines (a trailing backslash) joined."""
    joined = re.sub(r"\\\n", " ", text)
    settings = {}
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            k, _, v = line.partition("=")
            settings[k.strip()] = v.strip()
    return settings


def test_the_example_systemd_unit_runs_raftcore_node_with_options_the_parser_accepts():
    from raftcore.cli import build_parser

    settings = unit_settings(UNIT.read_text())
    assert settings.get("Type") == "simple"
    assert settings.get("Restart") == "on-failure"  # exit 1 after a failure: start again
    assert settings.get("RestartPreventExitStatus") == "2"  # a bad command line: do not
    assert settings.get("User") and settings["User"] != "root"
    assert int(settings["LimitNOFILE"]) >= 1024
    argv = shlex.split(settings["ExecStart"])
    assert Path(argv[0]).name == "raftcore" and argv[1] == "node", argv
    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit as exc:  # argparse has printed why
        pytest.fail(f"docs/raftcore.service: `raftcore node` refuses its options ({exc})")
    assert args.command == "node"
    # more connections than the default 768 need the file limit to match
    assert args.max_connections + 256 <= int(settings["LimitNOFILE"])


# ---- commands --------------------------------------------------------------------------------

COMMAND_PAGES = [DOCS / "getting-started.md", DOCS / "operations.md"]


def documented_commands(page: Path) -> list[tuple[int, list[str]]]:
    """(line, argv) of every ``raftcore`` command in the page's code blocks: a line that
    starts with it (after a ``$`` prompt) or pipes into it, continuation lines joined."""
    found = []
    fenced, pending, start = False, "", 0
    for n, raw in enumerate(page.read_text().splitlines(), 1):
        if FENCE.match(raw):
            fenced = not fenced
            continue
        if not fenced:
            continue
        line = raw
        if pending:
            line, pending = pending + " " + raw.strip(), ""
        else:
            start = n
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1]
            continue
        text = line.strip().removeprefix("$ ")
        lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;<>")
        lexer.whitespace_split = True
        try:
            tokens = [*lexer, "|"]
        except ValueError:  # unbalanced quotes: output or code, unless it runs raftcore
            assert "raftcore " not in text, f"{page.name}:{start}: cannot split {text!r}"
            continue
        words: list[str] = []
        for token in tokens:  # the commands of a pipeline, up to a redirection
            if token and set(token) <= set("|&;<>"):
                if words[:1] == ["raftcore"] and (words[1:2] != ["node"] or "--id" in words):
                    found.append((start, words))
                words = [] if token != ">" else ["(redirected)"]
            elif words[:1] != ["(redirected)"]:
                words.append(token)
    return found


def test_every_raftcore_command_of_the_guides_is_one_the_cli_accepts():
    """Each command line of getting-started.md and operations.md parses (nothing runs)."""
    from raftcore.cli import build_parser

    refused = []
    checked = 0
    for page in COMMAND_PAGES:
        for n, argv in documented_commands(page):
            checked += 1
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    build_parser().parse_args(argv[1:])
            except SystemExit as exc:
                if exc.code != 0:  # 0: --help
                    refused.append(f"{page.relative_to(ROOT)}:{n}: {shlex.join(argv)}")
    assert checked >= 12, checked
    assert not refused, "commands the CLI refuses:\n" + "\n".join(refused)


# ---- links ------------------------------------------------------------------------------------

PAGES = [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks and indented code."""
    out = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup and punctuation dropped, lowercase, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # punctuation (backticks, colons, dots, ...)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on a page, repeats numbered as GitHub does (x, x-1, x-2)."""
    seen: Counter[str] = Counter()
    found = set()
    for _, line in prose_lines(page.read_text()):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(2))
        found.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every inline link outside code."""
    out = []
    for n, line in prose_lines(page.read_text()):
        for m in LINK.finditer(INLINE_CODE.sub("", line)):
            out.append((n, m.group(1)))
    return out


def _relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:


def test_every_relative_link_in_the_docs_points_at_an_existing_file():
    broken = []
    for page in PAGES:
        for n, target in links(page):
            path = target.split("#", 1)[0]
            if _relative(target) and path and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}:{n}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_every_anchor_in_the_docs_names_a_heading_of_its_page():
    broken = []
    for page in PAGES:
        for n, target in links(page):
            if not _relative(target) or "#" not in target:
                continue
            path, anchor = target.split("#", 1)
            dest = (page.parent / path) if path else page
            if dest.suffix != ".md" or not dest.is_file():
                continue  # a source file's line anchor, or a missing file (the test above)
            if anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}:{n}: {target}")
    assert not broken, "links to headings that do not exist:\n" + "\n".join(broken)


def test_the_slugs_follow_githubs_rules():
    assert slug("Watching the quorum: `describe-quorum --watch`") == (
        "watching-the-quorum-describe-quorum---watch"
    )
    assert slug("Snapshots through the node (`raftcore.node.snapshotter`, KIP-630)") == (
        "snapshots-through-the-node-raftcorenodesnapshotter-kip-630"
    )
    assert slug("Certificates: `raftcore certs`") == "certificates-raftcore-certs"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(node_options_table(), end="")
