"""``docs/requirements.md`` defines exactly the requirement IDs the tests name, and points nowhere
outside the repository.

A test names an ID with a ``req`` marker (``@pytest.mark.req(...)``, also applied to a class as
``pytest.mark.req(*NAMES)(Cls)`` with ``NAMES`` a module-level tuple of strings) or with a
docstring line that starts ``req:`` followed by IDs separated by commas. An ID is two capital
letters, a hyphen, an optional capital letter and a number (``[A-Z]{2}-[A-Z]?\\d+``). The page
defines an ID with an entry that starts with the ID in bold at the beginning of a line. Only files
inside the repository are read.
"""

from __future__ import annotations

import ast
import itertools
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
PAGE = ROOT / "docs" / "requirements.md"

ID = r"[A-Z]{2}-[A-Z]?\d+"
AN_ID = re.compile(rf"(?<![A-Za-z0-9-])({ID})(?![0-9])")
#: ``req:`` then one or more IDs separated by commas (a list may wrap onto the next line).
REQ_LINE = re.compile(rf"\breq:\s*({ID}(?:\s*,\s*{ID})*)(?![0-9])")
#: An entry of the page: the ID in bold at the start of a line.
ENTRY = re.compile(rf"^\*\*({ID})\*\*", re.M)
HEADING = re.compile(r"^## (\S+)", re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
OUTSIDE = ("../", "/work/", "shared/spec", "shared/seeds", "shared/tools")


def _string_tuples(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level ``NAME = ("XX-1", ...)`` assignments, for ``req(*NAME)``."""
    found: dict[str, list[str]] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Tuple | ast.List)):
            strings = [e.value for e in node.value.elts
                       if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(strings) == len(node.value.elts):
                found[node.targets[0].id] = strings
    return found


def _is_req(func: ast.expr) -> bool:
    return ((isinstance(func, ast.Attribute) and func.attr == "req")
            or (isinstance(func, ast.Name) and func.id == "req"))


def _marker_ids(path: pathlib.Path, source: str) -> set[str]:
    """The IDs of every ``req(...)`` call in ``source``; an argument that cannot be read as a
    string fails the test rather than being skipped."""
    tree = ast.parse(source, filename=str(path))
    tuples = _string_tuples(tree)
    ids: set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _is_req(node.func)):
            continue
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                ids.add(arg.value)
            elif (isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name)
                  and arg.value.id in tuples):
                ids.update(tuples[arg.value.id])
            else:
                raise AssertionError(
                    f"{path.relative_to(ROOT)}:{node.lineno}: a req marker argument this test "
                    f"cannot read: {ast.unparse(arg)}")
    return ids


def _named_by_tests() -> dict[str, set[str]]:
    """Each ID the tests name, with the files that name it."""
    named: dict[str, set[str]] = {}
    for path in sorted(TESTS.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        ids = _marker_ids(path, source)
        for match in REQ_LINE.finditer(source):
            ids.update(AN_ID.findall(match.group(1)))
        for i in ids:
            named.setdefault(i, set()).add(str(path.relative_to(ROOT)))
    return named


def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_the_markers_carry_well_formed_ids() -> None:
    """Every string in a req marker is one ID, so none is lost to a typo such as ``"TL 4"``."""
    bad = sorted((i, sorted(files)) for i, files in _named_by_tests().items()
                 if not re.fullmatch(ID, i))
    assert not bad, f"malformed requirement IDs in tests: {bad}"


def test_the_page_defines_exactly_the_ids_the_tests_name() -> None:
    """The set of IDs defined on the page equals the set the tests name, each defined once."""
    entries = ENTRY.findall(_page())
    duplicates = sorted({i for i in entries if entries.count(i) > 1})
    assert not duplicates, f"defined more than once in docs/requirements.md: {duplicates}"
    named = _named_by_tests()
    assert named, "no test names a requirement ID"
    undefined = {i: sorted(files) for i, files in sorted(named.items()) if i not in entries}
    unnamed = sorted(set(entries) - set(named))
    assert not undefined, f"named by tests but not defined in docs/requirements.md: {undefined}"
    assert not unnamed, f"defined in docs/requirements.md but named by no test: {unnamed}"


def test_each_entry_sits_in_its_group_and_quotes_its_source() -> None:
    """An entry lies under the ``## XX`` heading of its group and carries a ``> `` quotation
    before the next entry or heading."""
    page = _page()
    marks = sorted([(m.start(), "heading", m.group(1).rstrip(":")) for m in HEADING.finditer(page)]
                   + [(m.start(), "entry", m.group(1)) for m in ENTRY.finditer(page)])
    marks.append((len(page), "end", ""))
    group, misplaced, unquoted = "", [], []
    for (at, kind, name), (following, _, _) in itertools.pairwise(marks):
        if kind == "heading":
            group = name
            continue
        if name[:2] != group:
            misplaced.append(name)
        if not re.search(r"^> \S", page[at:following], re.M):
            unquoted.append(name)
    assert not misplaced, f"entries outside their group's section: {misplaced}"
    assert not unquoted, f"entries without a source quotation: {unquoted}"


def test_the_page_names_no_path_outside_the_repository() -> None:
    """No ``../``, no ``/work/`` and no shared spec folder; every relative link stays inside."""
    page = _page()
    found = [s for s in OUTSIDE if s in page]
    assert not found, f"docs/requirements.md mentions paths outside the repository: {found}"
    for target in LINK.findall(page):
        if re.match(r"[a-z]+:|#", target):
            continue
        resolved = (PAGE.parent / target.split("#")[0]).resolve()
        assert resolved.is_relative_to(ROOT) and resolved.exists(), (
            f"docs/requirements.md links to {target}, which is not a file in the repository")
