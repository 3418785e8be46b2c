"""Count the glue: the code lines of this example that are neither mini-swe-agent's nor
agentturn's (``python -m examples.mini_swe_agent.glue``).

Theory of operation
-------------------
The glue is :mod:`.host` (the effects and the wiring) and the package's ``__init__`` (the
environment defaults set before mini-swe-agent and litellm are imported). The demo
(``__main__``) and this counter are not glue: they play the user and measure. A code line is a
line that holds a token other than a comment, and is not part of a docstring; blank lines,
comment lines and docstrings are not counted, imports are (they are wiring too). The rule is
the one ``examples/openai_host`` counts its glue with, so the numbers compare.
"""

from __future__ import annotations

import ast
import io
import pathlib
import tokenize

__all__ = ["GLUE", "code_lines", "count"]

HERE = pathlib.Path(__file__).resolve().parent
GLUE = (HERE / "__init__.py", HERE / "host.py")
_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
             tokenize.ENCODING, tokenize.ENDMARKER}


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def code_lines(path: pathlib.Path) -> int:
    """The code lines of one Python file (see the module docstring)."""
    source = path.read_text(encoding="utf-8")
    docstrings = _docstring_lines(ast.parse(source))
    lines: set[int] = set()
    for token in tokenize.tokenize(io.BytesIO(source.encode()).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def count() -> int:
    """The glue lines of the example."""
    return sum(code_lines(path) for path in GLUE)


if __name__ == "__main__":
    for path in GLUE:
        print(f"{code_lines(path):4d}  {path.relative_to(HERE.parents[1])}")
    print(f"{count():4d}  glue lines in all")
